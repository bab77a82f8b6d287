"""``--only ROW[,ROW...]`` of the accuracy scripts: the ids given, checked against a rows file."""

from __future__ import annotations


def only_ids(text: str, all_rows: list[dict], source: str) -> list[str]:
    """``--only``'s row ids, in the order given (spaces around each dropped, repeats once); :class:`ValueError`
    naming the ids ``source`` (the rows file's name) has not, with the id as it spells one given in another
    case, or a list naming none. A bad id printed "no such row" and exited 0, or ran a table over no row."""
    known = {r["id"] for r in all_rows}
    ids = list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    if not ids:
        raise ValueError(f"--only: {text!r} names no row id; give ROW[,ROW...] (e.g. {min(known)})")
    missing = [x for x in ids if x not in known]
    if missing:
        spelled = {k.upper(): k for k in known}
        hints = [f"{x} (did you mean {spelled[x.upper()]}?)" if x.upper() in spelled else x for x in missing]
        raise ValueError(f"--only: {', '.join(hints)} {'is not a row' if len(missing) == 1 else 'are not rows'} "
                         f"of {source} ({len(known)} rows, ids like {min(known)}); give ids it has")
    return ids
