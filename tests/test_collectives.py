"""Ring collectives: the closed form, invariants over every op, and fast path = full graph."""

from __future__ import annotations

import pytest
from conftest import variant

from dpsim.collectives.flat_ring import (
    RingCollectives,
    ring_orders,
    ring_pairs,
    ring_schedule,
)
from dpsim.collectives.ops import OPS, bus_factor
from dpsim.network import FlowNetwork
from dpsim.topology.cluster import Topology
from dpsim.topology.load import preset_names
from dpsim.units import GB, US, MiB

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


# ----------------------------------------------------------------------------- every algorithm
# The same invariants for ring, tree, NVLS, NVLS tree, hierarchical and halving-doubling:
# each algorithm's explicit schedule computes the collective (symbolically), its compact
# plan moves exactly the schedule's bytes, no link runs over capacity, no algorithm beats
# its own link-load bound or a rank's ingress bound, and more bandwidth is never slower.

import dataclasses  # noqa: E402

import numpy as np  # noqa: E402

from dpsim.collectives.algorithms import ALGORITHMS, Cluster  # noqa: E402
from dpsim.collectives.algorithms.verify import check, pair_bytes, plan_pair_bytes  # noqa: E402
from dpsim.collectives.nccl import NcclCollectives
from dpsim.collectives.nccl_tuning import PROTOCOLS, nvls_available
from dpsim.errors import ConfigError  # noqa: E402
from dpsim.network.tiers import TierNetwork  # noqa: E402
from dpsim.topology.load import load_preset
from dpsim.topology.spec import NvlinkDomainSpec, TierSpec


def _algo_clusters():
    three_tier = variant("infiniband", node__gpus_per_node=4, fabric__nics_per_node=4, fabric__nodes_per_leaf=2,
                         fabric__oversubscription=2.0,
                         fabric__tiers=(TierSpec(group_size=2, oversubscription=4.0),))
    mixed = variant("infiniband", node__gpus_per_node=4, fabric__nics_per_node=2, fabric__nodes_per_leaf=2,
                    nvlink_domain=NvlinkDomainSpec(nodes=2, gpu_link_bandwidth_bytes_per_s=900e9,
                                                   efficiency=0.8, latency_s=3.4e-6))
    return [
        ("h100-1node", variant("nvlink"), 8),
        ("h100-partial-node", variant("nvlink"), 5),
        ("ib-2nodes", variant("infiniband"), 16),
        ("ib-5nodes-3leaves", variant("infiniband", fabric__nodes_per_leaf=2), 40),
        ("eth-4nodes-1nic", variant("ethernet"), 32),
        ("pcie-3nodes", variant("pcie"), 24),
        ("3tier-8nodes", three_tier, 32),
        ("nvl-domains+ib", mixed, 24),
        ("nvlink-fabric-3nodes", variant("nvlink"), 24),
        ("p5-bundled-nics", load_preset("aws-p5"), 16),
        ("p4de-shared-nics", load_preset("aws-p4de"), 16),
    ]


def _algo_cases():
    cases = []
    for cid, spec, n in _algo_clusters():
        topo = Topology(spec=spec, n_gpus=n)
        cluster = Cluster.of(topo, nvls=nvls_available(spec))
        for name, algo in ALGORITHMS.items():
            for op in OPS:
                if algo.supports(op, cluster):
                    cases.append(pytest.param(topo, cluster, name, op, id=f"{cid}-{name}-{op}"))
    return cases


ALGO_CASES = _algo_cases()


def test_every_algorithm_is_exercised():
    names = {p.values[2] for p in ALGO_CASES}
    assert names == set(ALGORITHMS)


@pytest.mark.parametrize("topo, cluster, name, op", ALGO_CASES)
def test_schedule_computes_the_collective_and_plan_moves_its_bytes(topo, cluster, name, op):
    algo = ALGORITHMS[name]
    try:
        schedule = algo.schedule(op, cluster)
    except NotImplementedError:
        pytest.skip("NVLS across an NVLink switch tier has no explicit schedule")
    ranks = [int(cluster.rank_index(r)) for r in range(cluster.n_ranks)]
    check(schedule, op, ranks)  # every rank ends with the right data, each contribution once
    by_schedule, by_plan = pair_bytes(schedule), plan_pair_bytes(algo.plan(op, cluster))
    assert by_schedule.keys() == by_plan.keys()
    for pair, b in by_schedule.items():
        assert by_plan[pair] == pytest.approx(b, rel=1e-9), pair
    # Bytes conserved per rank: what each rank sends (and receives) is the same in both.
    for r in ranks:
        assert sum(b for (s, _), b in by_plan.items() if s == r) == pytest.approx(
            sum(b for (s, _), b in by_schedule.items() if s == r))
        assert sum(b for (_, d), b in by_plan.items() if d == r) == pytest.approx(
            sum(b for (_, d), b in by_schedule.items() if d == r))


@pytest.mark.parametrize("topo, cluster, name, op", ALGO_CASES)
def test_no_link_over_capacity(topo, cluster, name, op):
    net = TierNetwork(topo)
    for phase in ALGORITHMS[name].plan(op, cluster).phases:
        loads = net.loads(phase.src, phase.dst)
        used = np.bincount(loads.link_of, weights=loads.rates_bytes_per_s[loads.flow_of], minlength=net.n_links)
        assert np.all(used <= net.capacity * (1 + 1e-9))
    # Over a whole collective, every link's bytes fit in the collective's duration.
    model = NcclCollectives(topo, algorithms=(name,))
    for size in (1 << 20, 1 << 28):
        choice = model.choose(op, size)
        pc = model.plan_cost(name, op, model.nic_scale(model.message_bytes(name, choice.protocol, op, size))
                             if topo.n_nodes > 1 else 1.0)
        assert np.all(pc.link_bytes_per_byte * size <= net.capacity * choice.time_s * (1 + 1e-9))


def _ingress_bound_s(topo, op, size):
    """Every rank must receive this much whatever the algorithm, through its own links."""
    n = topo.n_gpus
    need = {"all_reduce": (n - 1) / n * size, "all_gather": (n - 1) / n * size,
            "reduce_scatter": (n - 1) / n * size / n, "broadcast": size}[op]
    net = TierNetwork(topo)
    ingress = net.capacity[net._offset["gpu_down"] + 1]  # rank 1 (rank 0 is a broadcast's root)
    if "pcie_gpu" in net._offset:
        ingress += net.capacity[net._offset["pcie_gpu"] + 1]
    return need / ingress


@pytest.mark.parametrize("topo, cluster, name, op", ALGO_CASES)
def test_never_faster_than_its_bandwidth_bound(topo, cluster, name, op):
    model = NcclCollectives(topo, algorithms=(name,))
    for protocol in PROTOCOLS:
        if not model._protocol_enabled(name, protocol):
            continue
        pc = model.plan_cost(name, op)
        for size in (1 << 10, 1 << 20, 1 << 30):
            t = model.cost(name, protocol, op, size).time_s
            assert t >= float(np.max(pc.link_bytes_per_byte * size / model.network.capacity)) * (1 - 1e-9)
            assert t >= _ingress_bound_s(topo, op, size) * (1 - 1e-9)


@pytest.mark.parametrize("topo, cluster, name, op", ALGO_CASES)
def test_more_bandwidth_is_never_slower_for_any_algorithm(topo, cluster, name, op):
    spec = topo.spec
    faster = [dataclasses.replace(spec, node=dataclasses.replace(
        spec.node, gpu_link_bandwidth_bytes_per_s=2 * spec.node.gpu_link_bandwidth_bytes_per_s))]
    if spec.fabric is not None:
        faster.append(dataclasses.replace(spec, fabric=dataclasses.replace(
            spec.fabric, nic_bandwidth_bytes_per_s=2 * spec.fabric.nic_bandwidth_bytes_per_s)))
    base = NcclCollectives(topo, algorithms=(name,))
    for other in faster:
        quick = NcclCollectives(Topology(spec=other, n_gpus=topo.n_gpus), algorithms=(name,))
        for size in (1 << 16, 1 << 24, 1 << 30):
            assert quick.time(op, size).time_s <= base.time(op, size).time_s * (1 + 1e-12)


@pytest.mark.parametrize("name", preset_names())
@pytest.mark.parametrize("n", [8, 16, 128])
def test_nccl_choice_is_monotone_in_size(name, n):
    model = NcclCollectives(Topology.from_spec(load_preset(name), n))
    for op in OPS:
        times = [model.time(op, 2 ** k).time_s for k in range(3, 35)]
        assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:])), op


# ----------------------------------------------------------------------------- golden cases

def _latency(model, algorithm, protocol="Simple"):
    pc = model.plan_cost(algorithm, "all_reduce")
    return model._latency_s(pc.plan, protocol)


def test_tree_latency_grows_with_log2_of_servers_ring_linearly():
    spec = variant("infiniband")
    tree, ring = [], []
    for nodes in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        model = NcclCollectives(Topology(spec=spec, n_gpus=8 * nodes))
        tree.append(_latency(model, "tree"))
        ring.append(_latency(model, "ring"))
    steps = np.diff(tree)
    # Each doubling of the servers adds one tree level: 2 NET hops (NCCL: 2 log2(nNodes) interLat).
    inter = 14.0 * US * spec.fabric.nic_latency_s / (14.0 * US)
    assert np.allclose(steps, 2 * inter)
    assert tree[-1] < 500 * US < ring[-1] / 100          # 1024 servers: ~log vs ~linear
    assert ring[-1] / ring[-2] == pytest.approx(2.0, rel=0.01)


def test_hierarchical_is_intra_rs_plus_inter_ar_plus_intra_ag():
    spec = variant("infiniband")          # 8 NICs: one rail per GPU
    g, nodes = 8, 4
    hier = NcclCollectives(Topology(spec=spec, n_gpus=g * nodes), algorithms=("hierarchical",))
    one_node = NcclCollectives(Topology(spec=spec, n_gpus=g), algorithms=("ring",))
    rail = NcclCollectives(Topology.from_spec(spec, nodes, gpus_per_node=1), algorithms=("ring",))
    rs = one_node.plan_cost("ring", "reduce_scatter").seconds_per_byte
    ag = one_node.plan_cost("ring", "all_gather").seconds_per_byte
    ar = rail.plan_cost("ring", "all_reduce").seconds_per_byte / g   # each rail all-reduces S/g
    assert hier.plan_cost("hierarchical", "all_reduce").seconds_per_byte == pytest.approx(rs + ar + ag, rel=1e-9)
    plan = hier.plan_cost("hierarchical", "all_reduce").plan
    assert (plan.intra_hops, plan.inter_hops) == (2 * (g - 1), 2 * (nodes - 1))


def test_two_server_tree_sends_s_per_server_where_the_ring_sends_2_n_minus_1_over_n():
    topo = Topology(spec=variant("infiniband"), n_gpus=16)
    model = NcclCollectives(topo)
    net = model.network
    egress = slice(net._offset["nic_leaf"], net._offset["nic_leaf"] + 8)   # server 0's NICs, outwards
    assert model.plan_cost("tree", "all_reduce").link_bytes_per_byte[egress].sum() == pytest.approx(1.0)
    assert model.plan_cost("ring", "all_reduce").link_bytes_per_byte[egress].sum() == pytest.approx(2 * 15 / 16)


def test_nvls_beats_the_ring_by_about_a_third_on_h100():
    # DESIGN.md: NVLS reaches about 1.3x the ring's busbw on H100/H200 NVSwitch servers.
    topo = Topology(spec=variant("nvlink"), n_gpus=8)
    nvls = NcclCollectives(topo, algorithms=("nvls",)).time("all_reduce", 4 << 30)
    ring = NcclCollectives(topo, algorithms=("ring",), protocols=("Simple",)).time("all_reduce", 4 << 30)
    assert 1.2 < nvls.busbw_bytes_per_s / ring.busbw_bytes_per_s < 1.45


def test_halving_doubling_takes_log2_steps_each_way():
    topo = Topology(spec=variant("infiniband"), n_gpus=64)
    plan = NcclCollectives(topo, algorithms=("halving_doubling",)).plan_cost("halving_doubling", "all_reduce").plan
    assert len(plan.phases) == 2 * 6
    assert [p.fraction[0] for p in plan.phases[:6]] == [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64]
    assert plan.intra_hops == 2 * 3 and plan.inter_hops == 2 * 3      # distances 1, 2, 4 stay in a server


def test_nccl_picks_low_latency_protocols_for_small_and_simple_for_large_messages():
    model = NcclCollectives(Topology(spec=variant("infiniband"), n_gpus=64))
    small, large = model.time("all_reduce", 4096), model.time("all_reduce", 1 << 30)
    assert small.protocol in ("LL", "LL128") and large.protocol == "Simple"
    ring_only = NcclCollectives(Topology(spec=variant("infiniband"), n_gpus=64), algorithms=("ring",),
                                protocols=("Simple",))
    assert ring_only.time("all_reduce", 4096).algorithm == "ring"
    assert ring_only.time("all_reduce", 4096).time_s > small.time_s


def test_algo_and_proto_overrides_parse_like_nccl():
    from dpsim.collectives.nccl_tuning import parse_algorithms, parse_protocols

    assert parse_algorithms(None) is None
    assert parse_algorithms("Ring,TREE") == ("ring", "tree")
    assert parse_algorithms("^nvls") == ("ring", "tree", "nvls_tree")
    assert parse_algorithms("hd") == ("halving_doubling",)
    assert parse_protocols("^LL") == ("LL128", "Simple")
    with pytest.raises(ConfigError, match=r"--algo: 'rings' is not known"):
        parse_algorithms("rings")
    with pytest.raises(ConfigError, match="--proto"):
        parse_protocols("LL256")


def test_forcing_an_algorithm_that_cannot_run_is_a_one_line_error():
    model = NcclCollectives(Topology(spec=variant("pcie"), n_gpus=16), algorithms=("nvls",))
    with pytest.raises(ConfigError, match="nvls needs NVSwitch") as err:
        model.time("all_reduce", 1 << 20)
    assert "\n" not in str(err.value)
    hd = NcclCollectives(Topology(spec=variant("infiniband"), n_gpus=24), algorithms=("halving_doubling",))
    assert hd.time("all_reduce", 1 << 20).time_s > 0           # folds the 8 extra ranks
    with pytest.raises(ConfigError, match="power-of-two"):
        hd.time("reduce_scatter", 1 << 20)
