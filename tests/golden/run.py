"""Run golden cases in-process and compare them with the frozen files.

``python tests/golden/regenerate.py`` rewrites the files; ``tests/test_golden.py``
compares. Both go through :func:`run_case`, the CLI exactly as a user runs it.

What is not a function of the inputs is taken out here, never in the product: from
``report``'s HTML the inlined plotly.js, the installed dpsim version and plotly's layout
template (:func:`report_contents`). (``plan --json`` printed its own run time, ``wall_s`` and
``verification.seconds``, taken out here until fuzz13 took them out of its output.)
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import math
import re
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

VOLATILE_KEYS: dict[str, tuple[str, ...]] = {}
"""Command -> keys of its ``--json`` (dotted: nested) that measure the run, not the prediction (none now)."""


def run_case(argv: list[str]) -> dict:
    """The JSON a CLI invocation prints (run from the repository root), less :data:`VOLATILE_KEYS`.

    ``report`` writes HTML: its case gives no ``-o``; the file goes to a temporary folder
    and :func:`report_contents` reads it back.
    """
    if argv[0] == "report":
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "report.html"
            _run([*argv, "-o", str(path)])
            return report_contents(path.read_text(encoding="utf-8"))
    return without_volatile(argv[0], json.loads(_run(argv)))


def without_volatile(command: str, output: dict) -> dict:
    """``output`` (a command's ``--json``) less its :data:`VOLATILE_KEYS`, in place; returned."""
    for key in VOLATILE_KEYS.get(command, ()):
        *parents, last = key.split(".")
        holder = output
        for part in parents:
            holder = holder.get(part, {})
        holder.pop(last, None)
    return output


def _run(argv: list[str]) -> str:
    """What ``dpsim ARGV`` prints on stdout; an error if it fails."""
    import os

    from dpsim.cli import main

    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    finally:
        os.chdir(cwd)
    if code != 0:
        raise RuntimeError(f"dpsim {' '.join(argv)} exited {code}: {err.getvalue().strip()}")
    return out.getvalue()


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def report_contents(page: str) -> dict:
    """What a ``dpsim report`` page shows: title, cards, tables, each figure's data and the raw prediction."""
    page = re.sub(r'<script type="text/javascript">.*?</script>', "", page, count=1, flags=re.S)  # plotly.js
    sub = _text(re.search(r'<div class="sub">(.*?)</div>', page, re.S).group(1))
    out: dict = {
        "title": _text(re.search(r"<h1>(.*?)</h1>", page, re.S).group(1)),
        "sub": re.sub(r"dpsim [^,]+, a discrete-event", "dpsim VERSION, a discrete-event", sub),
        "cards": [[_text(k), _text(v)] for v, k in re.findall(
            r'<div class="card"><div class="v[^"]*">(.*?)</div><div class="k">(.*?)</div></div>', page, re.S)],
        "tables": [],
        "figures": {},
    }
    for table in re.findall(r"<table.*?</table>", page, re.S):
        caption = re.search(r"<caption>(.*?)</caption>", table, re.S)
        rows = [[_text(c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
                for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)]
        out["tables"].append({"caption": _text(caption.group(1)) if caption else None, "rows": rows})
    decoder = json.JSONDecoder()
    for match in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*', page):
        data, end = decoder.raw_decode(page, match.end())
        layout, _ = decoder.raw_decode(page, re.match(r",\s*", page[end:]).end() + end)
        layout.pop("template", None)  # plotly's default theme, not dpsim's
        out["figures"][match.group(1)] = {"data": data, "layout": layout}
    raw = re.search(r"<pre>(.*?)</pre>", page, re.S).group(1)
    out["prediction"] = json.loads(html.unescape(raw))
    return out


def golden_path(family: str) -> Path:
    return HERE / f"{family}.json"


def load_golden(family: str) -> dict:
    return json.loads(golden_path(family).read_text())


def differences(expected, actual, path: str = "", rel_tol: float = 0.0) -> list[str]:
    """Every place where ``actual`` differs from ``expected`` (``rel_tol`` for floats)."""
    out: list[str] = []
    if isinstance(expected, dict) and isinstance(actual, dict):
        for k in sorted(set(expected) | set(actual), key=str):
            if k not in actual:
                out.append(f"{path}.{k}: missing")
            elif k not in expected:
                out.append(f"{path}.{k}: new")
            else:
                out += differences(expected[k], actual[k], f"{path}.{k}", rel_tol)
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: {len(expected)} items -> {len(actual)}"]
        for i, (a, b) in enumerate(zip(expected, actual)):
            out += differences(a, b, f"{path}[{i}]", rel_tol)
        return out
    if isinstance(expected, float) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        if expected == actual or math.isclose(expected, actual, rel_tol=rel_tol, abs_tol=0.0):
            return []
        return [f"{path}: {expected!r} -> {actual!r}"]
    if expected != actual:
        return [f"{path}: {expected!r} -> {actual!r}"]
    return []
