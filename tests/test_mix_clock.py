"""The mix's clock (dpsim/mix/clock.py) and its grown groups give the job-by-job loop's numbers, bit for bit."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dpsim.mix import mix_from_dict, simulate_mix
from dpsim.mix.clock import _advance_numpy, _next_end_numpy

TOPOLOGY = Path(__file__).resolve().parents[1] / "topologies" / "examples" / "fat-tree-3tier.yaml"


def _phases(seed: int, n: int = 40):
    rng = np.random.default_rng(seed)
    left = rng.random(n) * rng.choice([1e-3, 1.0, 1e9], n)
    rate = np.where(rng.random(n) < 0.4, 1.0, rng.random(n) * 1e10)
    rate[rng.random(n) < 0.3] = 0.0  # solo, stopped or gone
    left[: n // 4] = left[n // 4: n // 2]  # phases that end at once
    rate[: n // 4] = rate[n // 4: n // 2]
    rank = rng.permutation(n).astype(np.int64)
    return left, rate, rank


def _one_by_one(left, rate, rank, now):
    """The loop's own scan: the first end in rank order of the moving jobs."""
    best, who = math.inf, None
    for i in sorted(range(len(left)), key=lambda j: rank[j]):
        if rate[i] > 0:
            end = now + (float(left[i]) if rate[i] == 1.0 else float(left[i]) / float(rate[i]))
            if end < best:
                best, who = end, i
    return best, who


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [40, 200])  # without numba: a Python scan up to 64 jobs, numpy's passes past it
def test_next_end_and_advance_are_the_job_by_job_loop_s(seed, n):
    from dpsim.mix.clock import _kernels

    left, rate, rank = _phases(seed, n)
    now = 1234.5678
    want_t, want_at = _one_by_one(left, rate, rank, now)
    passes = [(_next_end_numpy, _advance_numpy)]
    if _kernels() is not None:
        passes.append(_kernels()[:2])
    for next_end, advance in passes:
        t, at = next_end(left.copy(), rate, rank, now)
        assert (t, at) == (want_t, want_at)
        moved, contended, on_entry = left.copy(), np.zeros(len(left)), np.full(len(left), 0.25)
        adds = rate > 1.0
        advance(moved, rate, 0.125, contended, adds, on_entry, adds)
        for i in range(len(left)):
            expect = float(left[i]) - 0.125 if rate[i] == 1.0 else (
                float(left[i]) - 0.125 * float(rate[i]) if rate[i] > 0 else float(left[i]))
            assert moved[i] == expect
        assert np.array_equal(contended, np.where(adds, 0.125, 0.0))
        assert np.array_equal(on_entry, np.where(adds, 0.375, 0.25))


def test_groups_grown_on_bit_sets_are_the_set_grown_ones(monkeypatch):
    """Past 64 running jobs a group is grown on bit sets: forced on a small contended mix (and the compiled
    clock off), every number is the one of sets and the compiled clock."""
    import dpsim.mix.simulate as sim
    import dpsim.network.maxmin_jit as jit

    jobs = [{"name": f"j{j}", "gpus": 16, "model": ("gpt2-medium", "gpt2-large")[j % 2], "placement": "spread",
             "start": f"{3 * j}s", **({"steps": 200} if j % 3 == 0 else {})} for j in range(10)]
    spec = mix_from_dict({"cluster": {"topology": str(TOPOLOGY), "gpus": 16384}, "horizon": "3min", "jobs": jobs})
    sets = simulate_mix(spec, sample_steps=5)
    assert sets.evaluations > 0 and max(j.slowdown for j in sets.jobs) > 1  # contended: groups solved
    monkeypatch.setattr(sim, "_SET_COMPONENTS", -1)
    assert simulate_mix(spec, sample_steps=5).to_dict() == sets.to_dict()
    monkeypatch.setattr(jit, "compiled", lambda: None)
    assert simulate_mix(spec, sample_steps=5).to_dict() == sets.to_dict()
