"""Ring collectives: the closed form, invariants over every op, and fast path = full graph."""

from __future__ import annotations

import pytest

from dpsim.collectives import OPS, RingCollectives, bus_factor, ring_orders, ring_pairs, ring_schedule
from dpsim.network import FlowNetwork
from dpsim.topology import Topology, preset_names
from dpsim.units import GB, MiB, US

from conftest import variant

SIZES = [8, 4096, 1 * MiB, 64 * MiB, 1 << 30]


@pytest.mark.parametrize("n", [2, 3, 8, 16, 72])
@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather"])
@pytest.mark.parametrize("size", SIZES)
def test_homogeneous_ring_matches_closed_form(n, op, size):
    # One node of n GPUs on a switch: every hop has latency a and bandwidth B.
    spec = variant("nvlink", node__gpus_per_node=n, collective_base_latency_s=0.0, fabric=None)
    a = spec.node.gpu_link_latency_s
    B = spec.node.gpu_link_bandwidth_bytes_per_s * spec.node.gpu_link_efficiency
    steps = 2 * (n - 1) if op == "all_reduce" else n - 1
    expected = steps * a + steps / n * size / B
    got = RingCollectives(Topology(spec=spec, n_gpus=n)).time(op, size).time_s
    assert got == pytest.approx(expected, rel=1e-3)


def _topologies():
    cases = []
    for name in preset_names():
        for n in (8, 16, 64, 1024, 65536):
            cases.append((name, n, variant(name)))
    # An oversubscribed 4:1 leaf/spine with small leaves, so rings cross the spine.
    cases.append(("ib-oversub", 256, variant("infiniband", fabric__nodes_per_leaf=4, fabric__oversubscription=4.0)))
    return cases


@pytest.mark.parametrize("name,n,spec", _topologies(), ids=lambda x: str(x) if not hasattr(x, "node") else "")
@pytest.mark.parametrize("op", OPS)
def test_ring_never_beats_its_bandwidth_bound(name, n, spec, op):
    # Per rank, a ring moves at least factor * S through a link of rate B (the busbw bound).
    model = RingCollectives(Topology(spec=spec, n_gpus=n))
    B = model.profile.bandwidth_bytes_per_s
    for size in SIZES:
        r = model.time(op, size)
        assert r.time_s >= bus_factor(op, n) * size / B * (1 - 1e-12)
        assert r.busbw_bytes_per_s <= B * (1 + 1e-9)
        assert r.algbw_bytes_per_s == pytest.approx(size / r.time_s)


def _small_cluster_cases():
    return [
        ("ethernet", 32, {}),
        ("infiniband", 48, {"fabric__nodes_per_leaf": 2}),  # 3 leaf groups
        ("infiniband", 64, {"fabric__nodes_per_leaf": 2, "fabric__oversubscription": 8.0}),
        ("ethernet", 64, {"fabric__nodes_per_leaf": 3, "fabric__oversubscription": 3.0}),
        ("pcie", 24, {}),
        ("nvlink", 40, {"fabric__nodes_per_leaf": 2}),
    ]


@pytest.mark.parametrize("name,n,changes", _small_cluster_cases())
def test_representative_slice_equals_full_cluster(name, n, changes):
    """The ring step found on the small slice equals the one on the whole graph."""
    topo = Topology(spec=variant(name, **changes), n_gpus=n)
    fast = RingCollectives(topo).profile
    full = FlowNetwork(topo.graph).rates(ring_pairs(ring_orders(topo)))
    assert fast.flow_rate_bytes_per_s == pytest.approx(float(full.rates_bytes_per_s.min()), rel=1e-9)
    assert topo.representative.n_gpus <= topo.n_gpus


@pytest.mark.parametrize("name,n,changes", _small_cluster_cases())
@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather"])
def test_explicit_schedule_on_full_graph(name, n, changes, op):
    """Step by step on the whole graph: bytes conserved, links within capacity, same time."""
    spec = variant(name, collective_base_latency_s=0.0, **changes)
    spec = variant_zero_latency(spec)
    topo = Topology(spec=spec, n_gpus=n)
    rings = ring_orders(topo)
    size = 64 * MiB
    net = FlowNetwork(topo.graph)
    total = 0.0
    sent: dict[str, float] = {}
    schedule = ring_schedule(op, size, rings)
    # Ring steps are identical: simulate one, and check that they are.
    assert all(step == schedule[0] for step in schedule)
    res = net.transfer(schedule[0])
    assert all(u <= 1 + 1e-9 for u in res.link_utilisation().values())
    for flows in schedule:
        total += res.makespan_s
        for f in flows:
            sent[f.src] = sent.get(f.src, 0.0) + f.size_bytes
    # Every rank sends exactly bus_factor * S bytes (nccl-tests' busbw definition).
    assert set(sent) == set(topo.gpu_ids())
    for v in sent.values():
        assert v == pytest.approx(bus_factor(op, n) * size)
    assert RingCollectives(topo).time(op, size).time_s == pytest.approx(total, rel=1e-9)


def variant_zero_latency(spec):
    import dataclasses
    node = dataclasses.replace(spec.node, gpu_link_latency_s=0.0)
    fabric = dataclasses.replace(spec.fabric, nic_latency_s=0.0) if spec.fabric else None
    return dataclasses.replace(spec, node=node, fabric=fabric)


@pytest.mark.parametrize("name", preset_names())
def test_more_bandwidth_is_never_slower(name):
    base = variant(name)
    faster_nic = variant(name, fabric__nic_bandwidth_bytes_per_s=base.fabric.nic_bandwidth_bytes_per_s * 2)
    faster_gpu = variant(name, node__gpu_link_bandwidth_bytes_per_s=base.node.gpu_link_bandwidth_bytes_per_s * 2)
    for n in (8, 16, 256):
        t0 = RingCollectives(Topology(spec=base, n_gpus=n)).time("all_reduce", 1 << 28).time_s
        for spec in (faster_nic, faster_gpu):
            assert RingCollectives(Topology(spec=spec, n_gpus=n)).time("all_reduce", 1 << 28).time_s <= t0


def test_one_nic_per_node_bounds_ethernet_ring():
    # 100 GbE at the preset's efficiency is the whole ring's bottleneck across nodes.
    spec = variant("ethernet")
    model = RingCollectives(Topology(spec=spec, n_gpus=64))
    nic = spec.fabric.nic_bandwidth_bytes_per_s * spec.fabric.nic_efficiency
    assert model.profile.bandwidth_bytes_per_s == pytest.approx(nic)
    assert {c for _, _, c in model.profile.bottleneck_links} == {"ethernet"}
    assert nic == pytest.approx(100e9 / 8 * 0.4)


def test_single_rank_and_empty_message_cost_nothing():
    model = RingCollectives(Topology(spec=variant("nvlink"), n_gpus=1))
    assert model.time("all_reduce", 1 << 20).time_s == 0.0
    model = RingCollectives(Topology(spec=variant("nvlink"), n_gpus=8))
    assert model.time("all_reduce", 0).time_s == 0.0


def test_nvlink_node_busbw_is_ncc_effective_rate():
    # 8 H100 on NVSwitch: large all-reduce busbw approaches 450 GB/s x 0.822 = 370 GB/s
    # (hardware.csv H012), less the latency term.
    r = RingCollectives(Topology(spec=variant("nvlink"), n_gpus=8)).time("all_reduce", 1 << 30)
    assert 350 * GB < r.busbw_bytes_per_s < 370 * GB


def test_latency_term_counts_inter_node_hops_once_per_lap():
    spec = variant("infiniband")
    topo = Topology(spec=spec, n_gpus=32)  # 4 nodes
    r = RingCollectives(topo).time("all_reduce", 8)
    n, nodes = 32, 4
    lap = (n - nodes) * spec.node.gpu_link_latency_s + nodes * spec.fabric.nic_latency_s
    expected = spec.collective_base_latency_s + lap * 2 * (n - 1) / n
    assert r.latency_s == pytest.approx(expected)
    assert r.latency_s > 100 * US
