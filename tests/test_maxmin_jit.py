"""The compiled max-min (dpsim/network/maxmin_jit.py) gives numpy's rates bit for bit (where numba is installed)."""

from __future__ import annotations

import numpy as np
import pytest

from dpsim.network.maxmin import max_min_sparse

pytest.importorskip("numba")


def _case(rng: np.random.Generator, k: int) -> tuple:
    n_links, n_flows = int(rng.integers(1, 40)), int(rng.integers(1, 80))
    # Few distinct capacities and weights make ties (links saturating at one level together) common.
    capacity = rng.choice([1.0, 2.0, 3.0, 7.5, 48.5e9], n_links) if k % 2 else rng.uniform(1, 100, n_links)
    flow_of, link_of = [], []
    for f in range(n_flows):
        links = sorted(set(rng.choice(n_links, int(rng.integers(1, min(n_links, 6) + 1))).tolist()))
        flow_of += [f] * len(links)
        link_of += links
    flow_of, link_of = np.array(flow_of), np.array(link_of)
    if k % 3 == 0:  # incidences in no particular order
        order = rng.permutation(len(flow_of))
        flow_of, link_of = flow_of[order], link_of[order]
    return flow_of, link_of, capacity, n_flows, rng.integers(1, 8, n_flows).astype(float)


# 300 random problems a seed: the fast lane (-m "not slow") runs two seeds, the slow lane all four.
@pytest.mark.parametrize("seed", [0, 1, *(pytest.param(s, marks=pytest.mark.slow) for s in (2, 3))])
def test_compiled_max_min_is_numpys_bit_for_bit(seed):
    from dpsim.network.maxmin_jit import compiled

    fast = compiled()
    assert fast is not None
    rng = np.random.default_rng(seed)
    for k in range(300):
        flow_of, link_of, capacity, n_flows, weight = _case(rng, k)
        want = max_min_sparse(flow_of, link_of, capacity, n_flows, weight)
        got = fast(flow_of, link_of, capacity, n_flows, weight)
        assert np.array_equal(got, want), (seed, k)
        assert got.tobytes() == want.tobytes()


def test_a_contended_mix_is_the_same_with_either_solver(monkeypatch):
    """Three jobs sharing a 2:1 fat tree's uplinks, every step simulated: the same results, to the bit."""
    from pathlib import Path

    import dpsim.network.maxmin_jit as jit
    from dpsim.mix import mix_from_dict, simulate_mix

    topology = Path(__file__).parent / "data" / "mix" / "fat-tree-2to1.yaml"
    jobs = [{"name": "a", "model": "gpt2-medium", "gpus": 8, "nodes": [0, 2, 4, 6], "steps": 30},
            {"name": "b", "model": "gpt2", "gpus": 4, "nodes": [1, 3], "start": 0.02, "steps": 40},
            {"name": "c", "model": "gpt2-medium", "gpus": 4, "nodes": [5, 7], "start": 0.05, "steps": 25}]

    def run():
        spec = mix_from_dict({"cluster": {"topology": str(topology), "gpus": 16}, "jobs": jobs})
        return simulate_mix(spec, sample_steps=None)

    fast = run()
    assert fast.evaluations > 0  # groups were solved (not only the no-solve shortcuts)
    monkeypatch.setattr(jit, "compiled", lambda: None)
    assert run().to_dict() == fast.to_dict()


@pytest.mark.parametrize("seed", range(4))
def test_the_compiled_group_solve_is_numpys_bit_for_bit(seed):
    """Groups of jobs of different sizes on random servers of the 3-tier fat tree (in some, jobs frozen
    whole by their own links in the first round; in others, every job through the rounds): the pooled
    compiled solve gives numpy's speeds, binding links, shared links' load and contested jobs."""
    import random
    from pathlib import Path

    from dpsim.mix import mix_from_dict
    from dpsim.mix.simulate import MixSimulation

    rng = random.Random(seed)
    top = Path(__file__).parents[1] / "topologies" / "examples" / "fat-tree-3tier.yaml"
    models = ["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"]
    jobs = [{"name": f"j{k}", "model": rng.choice(models), "gpus": rng.choice([64, 128, 256]), "steps": 5}
            for k in range(10)]
    fast = MixSimulation(mix_from_dict({"cluster": {"topology": str(top), "gpus": 4096}, "jobs": jobs}))
    slow = MixSimulation(fast.spec)
    slow._pool = None
    assert fast._pool is not None
    servers = list(range(512))
    rng.shuffle(servers)
    placed, at = [], 0
    for j in fast.spec.jobs:
        placed.append(servers[at:at + j.gpus // 8])
        at += j.gpus // 8
    traffic = [fast.traffic(j, s) for j, s in zip(fast.spec.jobs, placed)]
    for size in (2, 2, 2, 3, 3, 4, 5, 6, 8, 10):
        group = rng.sample(traffic, size)
        got, want = fast.solve(group), slow.solve(group)
        assert got[0].tobytes() == want[0].tobytes() and got[1] == want[1]
        assert got[2].tobytes() == want[2].tobytes() and got[3].tolist() == want[3].tolist()
    assert fast.evaluations >= 4  # contended groups were solved (not only the fits-alone shortcut)
