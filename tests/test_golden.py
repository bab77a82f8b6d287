"""Frozen ``--json`` outputs of every preset x strategy x a few models, tensor x pipeline layouts,
a plan search and report pages (tests/golden/).

A change that moves any number must be intended: regenerate the files with
``python tests/golden/regenerate.py`` and say in the commit which cases moved and why.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))

from cases import FAMILIES  # noqa: E402
from run import differences, load_golden, run_case  # noqa: E402


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_outputs_equal_the_frozen_ones(family):
    frozen = load_golden(family)
    cases = FAMILIES[family]()
    assert sorted(frozen) == sorted(cases), "cases.py and the golden file list different cases: regenerate"
    moved = {}
    for name, argv in cases.items():
        assert frozen[name]["argv"] == argv, f"{name}: argv changed; regenerate"
        diff = differences(frozen[name]["output"], run_case(argv))
        if diff:
            moved[name] = diff[:5] + ([f"... {len(diff) - 5} more"] if len(diff) > 5 else [])
    assert not moved, "golden outputs moved:\n" + "\n".join(f"{k}: {v}" for k, v in moved.items())
