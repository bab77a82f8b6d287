"""VALIDATION.md is written by several scripts: each replaces only its own ``## `` section."""

from __future__ import annotations

from pathlib import Path

TITLE = "# Validation: dpsim against real DDP training"
APPENDIX = "\n## Appendix: run history\n"
"""Past runs' write-ups, kept at the end of the file: a new section goes before them."""


def replace_section(path: Path, heading: str, body: str) -> None:
    """Put ``heading`` + ``body`` in place of the section that starts with ``heading`` (up to the
    next ``## `` heading), or add it before the appendix (at the end without one); the rest of
    the file is kept. Written atomically."""
    text = path.read_text() if path.exists() else TITLE + "\n"
    section = f"{heading}\n\n{body.strip()}\n"
    if heading in text:
        head, _, rest = text.partition(heading)
        tail = rest.split("\n## ", 1)
        text = head + section + ("\n## " + tail[1] if len(tail) > 1 else "")
    elif APPENDIX in text:
        head, _, appendix = text.partition(APPENDIX)
        text = head.rstrip("\n") + "\n\n" + section + APPENDIX + appendix
    else:
        text = text.rstrip("\n") + "\n\n" + section
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
