"""Rewrite the golden files from the current code: ``python tests/golden/regenerate.py [family ...]``.

Only after a change whose effect on the numbers is intended and explained in its commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import FAMILIES  # noqa: E402
from run import golden_path, run_case  # noqa: E402


def main(families: list[str]) -> None:
    for family in families or list(FAMILIES):
        cases = FAMILIES[family]()
        frozen = {name: {"argv": argv, "output": run_case(argv)} for name, argv in cases.items()}
        golden_path(family).write_text(json.dumps(frozen, indent=1, sort_keys=True) + "\n")
        print(f"{family}: {len(frozen)} cases -> {golden_path(family).name}")


if __name__ == "__main__":
    main(sys.argv[1:])
