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

from cases import FAMILIES, MODELS, PRESETS, STRATEGIES  # noqa: E402
from run import differences, load_golden, run_case  # noqa: E402

# predict's preset x strategy x model product is 147 of the family's cases and most of its time. The
# fast lane (-m "not slow") runs a Latin square of it: every preset with every strategy once, the
# model turning with both, so each preset, strategy and model (and each pair of them) is still
# compared; the slow part compares the other two thirds (CI runs both).
_SQUARE = {f"{link}/{strategy}/{MODELS[(i + j) % len(MODELS)][0]}"
           for i, link in enumerate(PRESETS) for j, strategy in enumerate(STRATEGIES)}


def _product_rest(name: str) -> bool:
    return name.count("/") == 2 and not name.startswith("extra/") and name not in _SQUARE


PARTS = [pytest.param(family, None, id=family) for family in sorted(FAMILIES)] + [
    pytest.param("predict", _product_rest, id="predict-rest-of-product", marks=pytest.mark.slow)]


@pytest.mark.parametrize("family, part", PARTS)
def test_outputs_equal_the_frozen_ones(family, part):
    frozen = load_golden(family)
    cases = FAMILIES[family]()
    assert sorted(frozen) == sorted(cases), "cases.py and the golden file list different cases: regenerate"
    if family == "predict":
        assert len(_SQUARE) == len(PRESETS) * len(STRATEGIES) and _SQUARE <= set(cases)
        part = part or (lambda name: not _product_rest(name))
    moved = {}
    for name, argv in cases.items():
        if part is not None and not part(name):
            continue
        assert frozen[name]["argv"] == argv, f"{name}: argv changed; regenerate"
        diff = differences(frozen[name]["output"], run_case(argv))
        if diff:
            moved[name] = diff[:5] + ([f"... {len(diff) - 5} more"] if len(diff) > 5 else [])
    assert not moved, "golden outputs moved:\n" + "\n".join(f"{k}: {v}" for k, v in moved.items())
