"""dpsim.predict.memo: results shared by identity stay alive exactly as long as a cache holds them."""

from __future__ import annotations

from dataclasses import dataclass

from dpsim.predict import memo


@dataclass(frozen=True)
class _Box:
    value: int


_SHARED = _Box(-1)


def _make(i: int) -> _Box:
    return _Box(i)


def _shared(i: int) -> _Box:
    """Every call returns one object: many entries (of two functions) hold it."""
    return _SHARED


def test_evicted_results_are_forgotten_and_shared_ones_kept():
    memo.clear()
    try:
        boxes = [memo.memoized(_make, i) for i in range(3 * memo.MAX_ENTRIES)]
        for i in range(memo.MAX_ENTRIES + 5):
            assert memo.memoized(_shared, i) is _SHARED
        held = {id(v) for c in memo._CACHES.values() for v in c.values()}
        assert set(memo._RETURNED) == held  # nothing evicted is kept alive, nothing held is forgotten
        assert memo._HOLDERS[id(_SHARED)] == memo.MAX_ENTRIES
        # a result passed back in is keyed by identity: the same call hits its entry
        assert memo.memoized(_make, boxes[-1].value) is boxes[-1]
        assert memo.memoized(_shared, boxes[-1]) is _SHARED
    finally:
        memo.clear()
    assert not memo._RETURNED and not memo._HOLDERS
