"""Which golden outputs moved, and where: ``python tests/golden/diff.py [IGNORE_REGEX] [--family F]``.

Prints one line per moved case (the first differences and their count). Run it before
regenerating: every difference listed must be one your change intends (and your commit
message must name them); ``IGNORE_REGEX`` hides paths you already accounted for, e.g.
``'^\\.ring\\.'``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import FAMILIES  # noqa: E402
from run import differences, load_golden, run_case  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("ignore", nargs="?", help="regex of difference paths to hide")
    ap.add_argument("--family", action="append", choices=sorted(FAMILIES))
    args = ap.parse_args()
    ignore = re.compile(args.ignore) if args.ignore else None
    moved = 0
    for family in args.family or list(FAMILIES):
        frozen = load_golden(family)
        for name, argv in FAMILIES[family]().items():
            diff = differences(frozen[name]["output"], run_case(argv)) if name in frozen else ["(new case)"]
            if ignore:
                diff = [d for d in diff if not ignore.search(d)]
            if diff:
                moved += 1
                print(f"{family} {name}: {len(diff)} difference(s): {diff[:4]}")
    print(f"{moved} case(s) moved")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
