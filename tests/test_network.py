"""The flow model: max-min fairness and transfers (invariants + golden cases)."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from dpsim.network import Flow, FlowNetwork
from dpsim.network.maxmin import max_min_rates


def test_max_min_golden():
    # Link 0 (cap 10) is shared by flows 0 and 1; link 1 (cap 4) by flows 1 and 2.
    # Link 1 is the bottleneck for flows 1 and 2 (2 each); flow 0 takes the rest of link 0.
    assert max_min_rates([[0], [0, 1], [1]], np.array([10.0, 4.0])).tolist() == [8.0, 2.0, 2.0]


@pytest.mark.parametrize("seed", range(20))
def test_max_min_invariants(seed):
    rng = np.random.default_rng(seed)
    n_links, n_flows = rng.integers(1, 8), rng.integers(1, 12)
    capacity = rng.uniform(1, 100, n_links)
    paths = [sorted(set(rng.choice(n_links, rng.integers(1, n_links + 1)).tolist())) for _ in range(n_flows)]
    rates = max_min_rates(paths, capacity)
    load = np.zeros(n_links)
    for p, r in zip(paths, rates):
        load[p] += r
    # No link over capacity.
    assert np.all(load <= capacity * (1 + 1e-9))
    # Max-min characterisation: every flow crosses a saturated link on which it has
    # the largest rate (so it cannot grow without shrinking a flow that has no more).
    for f, p in enumerate(paths):
        assert any(
            load[l] >= capacity[l] * (1 - 1e-9)
            and rates[f] >= max(rates[g] for g, q in enumerate(paths) if l in q) * (1 - 1e-9)
            for l in p
        ), f"flow {f} is not bottlenecked"


def _line(capacity=10.0, latency=1e-6):
    g = nx.DiGraph()
    for a, b in (("a", "s"), ("s", "b"), ("c", "s"), ("s", "d")):
        for u, v in ((a, b), (b, a)):
            g.add_edge(u, v, capacity_bytes_per_s=capacity, latency_s=latency, link_class="x")
    for v in "abcd":
        g.nodes[v]["kind"] = "gpu"
    g.nodes["s"]["kind"] = "switch"
    return g


def test_single_flow_is_size_over_capacity_plus_latency():
    net = FlowNetwork(_line(capacity=10.0, latency=1e-6))
    res = net.transfer([Flow(src="a", dst="b", size_bytes=100.0)])
    assert res.makespan_s == pytest.approx(10.0 + 2e-6)


def test_sharing_and_resharing_after_completion():
    # a->b and c->b share s->b: both at 5 until the small one ends, then the big one gets 10.
    net = FlowNetwork(_line(capacity=10.0, latency=0.0))
    res = net.transfer([Flow(src="a", dst="b", size_bytes=100.0), Flow(src="c", dst="b", size_bytes=20.0)])
    assert res.finish_times_s.tolist() == pytest.approx([4.0 + 8.0, 4.0])
    # Bytes are conserved on every link, and no link runs over capacity on average.
    assert res.link_bytes[("s", "b")] == 120.0
    assert res.link_bytes[("a", "s")] == 100.0
    assert all(u <= 1 + 1e-9 for u in res.link_utilisation().values())


def test_gpus_do_not_forward_traffic():
    g = _line()
    g.add_edge("a", "b", capacity_bytes_per_s=1.0, latency_s=0.0, link_class="direct")
    g.add_edge("b", "d", capacity_bytes_per_s=1.0, latency_s=0.0, link_class="direct")
    net = FlowNetwork(g)
    # a->b->d would be 2 hops but b is a GPU: the route goes through the switch.
    assert net.route("a", "d") == (("a", "s"), ("s", "d"))


def test_no_route_raises():
    g = _line()
    g.add_node("lonely", kind="gpu")
    with pytest.raises(nx.NetworkXNoPath):
        FlowNetwork(g).route("a", "lonely")


@pytest.mark.parametrize("seed", range(10))
def test_weighted_flows_equal_their_copies(seed):
    # An entry of weight w gets exactly the rate each of its w identical copies gets, bit for bit.
    from dpsim.network.maxmin import max_min_sparse

    rng = np.random.default_rng(seed)
    n_links, n_flows = int(rng.integers(2, 30)), int(rng.integers(1, 40))
    capacity = rng.choice([10.0, 25.0, 40.0, 100.0 / 3], n_links)
    paths = [sorted(set(rng.choice(n_links, rng.integers(1, 5)).tolist())) for _ in range(n_flows)]
    weight = rng.integers(1, 6, n_flows)
    flow_of = np.repeat(np.arange(n_flows), [len(p) for p in paths])
    link_of = np.array([link for p in paths for link in p])
    copies = [p for p, w in zip(paths, weight) for _ in range(w)]
    want = max_min_rates(copies, capacity)
    got = max_min_sparse(flow_of, link_of, capacity, n_flows, weight.astype(float))
    np.testing.assert_array_equal(np.repeat(got, weight), want)


def _rounds_over_every_link(paths, capacity, weight):
    """Progressive filling in plain Python, every round over every link (the arithmetic of
    ``max_min_sparse``: whole-number user counts, each link's left capacity lowered by its frozen
    users times the level)."""
    left = [float(c) for c in capacity]
    rate = [math.inf] * len(paths)
    rising = set(range(len(paths)))
    while rising:
        users = [0] * len(capacity)
        for f in rising:
            for link in paths[f]:
                users[link] += int(weight[f])
        share = [max(c, 0.0) / u if u else math.inf for c, u in zip(left, users)]
        fair = min(share)
        full = {link for link, x in enumerate(share) if x <= fair * (1 + 1e-9) + 1e-300}
        frozen = {f for f in rising if full & set(paths[f])}
        gone = [0] * len(capacity)
        for f in frozen:
            rate[f] = fair
            for link in paths[f]:
                gone[link] += int(weight[f])
        left = [c - g * fair for c, g in zip(left, gone)]
        rising -= frozen
    return rate


@pytest.mark.parametrize("seed", range(12))
def test_renumbered_links_give_the_rates_of_rounds_over_every_link(seed):
    # Many links (most left behind after the first rounds, so the solver renumbers them, some never
    # crossed), capacities with ties, weighted or not: the rates equal those of rounds over every
    # link, bit for bit.
    from dpsim.network.maxmin import max_min_sparse

    rng = np.random.default_rng(seed)
    n_links, n_flows = int(rng.integers(50, 400)), int(rng.integers(5, 300))
    capacity = rng.choice([10.0, 25.0, 40.0, 100.0 / 3, 7.5], n_links) * rng.choice([1.0, 1e9])
    paths = [sorted(set(rng.choice(n_links, rng.integers(1, 6)).tolist())) for _ in range(n_flows)]
    flow_of = np.repeat(np.arange(n_flows), [len(p) for p in paths])
    link_of = np.array([link for p in paths for link in p])
    weight = rng.integers(1, 9, n_flows).astype(float) if seed % 2 else None
    order = rng.permutation(len(flow_of)) if seed % 3 == 0 else np.arange(len(flow_of))
    got = max_min_sparse(flow_of[order], link_of[order], capacity, n_flows, weight)
    want = _rounds_over_every_link(paths, capacity, np.ones(n_flows) if weight is None else weight)
    np.testing.assert_array_equal(got, want)
    assert np.isfinite(got).all()
