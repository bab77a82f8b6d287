"""Collective models: closed forms, invariants over every algorithm, and swappable networks.

Every collective is costed by the NCCL model (:class:`~dpsim.collectives.nccl.NcclCollectives`)
on the network interface; the ring's closed form, the latency model and the bandwidth
bounds are checked on it, and the same model runs unchanged on a graph-searching
:class:`~dpsim.network.FlowNetwork` of the whole cluster.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest
from conftest import variant

from dpsim.collectives.algorithms import ALGORITHMS, Cluster
from dpsim.collectives.algorithms.verify import check, pair_bytes, plan_pair_bytes
from dpsim.collectives.links import link_report
from dpsim.collectives.nccl import NcclCollectives
from dpsim.collectives.nccl_tuning import (
    ALGORITHM_NAMES,
    BASE_LATENCY_US,
    NCCL_DEFAULT_ALGORITHMS,
    PROTOCOLS,
    NcclTuning,
    nvls_available,
)
from dpsim.collectives.ops import OPS, bus_factor, ring_steps
from dpsim.collectives.selection import protocol_enabled
from dpsim.errors import ConfigError
from dpsim.network import FlowNetwork
from dpsim.network.model import run_transfer
from dpsim.network.tiers import TierNetwork
from dpsim.topology.cluster import Topology
from dpsim.topology.load import load_preset, preset_names
from dpsim.topology.spec import NvlinkDomainSpec, TierSpec
from dpsim.units import GB, US, MiB

SIZES = [8, 4096, 1 * MiB, 64 * MiB, 1 << 30]

REPO = Path(__file__).resolve().parents[1]


def _ring(topo: Topology, **kw) -> NcclCollectives:
    # NCCL's own ring/Simple model: no fitted per-call overhead or bandwidth ramp (NcclTuning()),
    # so the closed forms below are NCCL's formulas exactly.
    kw.setdefault("tuning", NcclTuning())
    return NcclCollectives(topo, algorithms=("ring",), protocols=("Simple",), **kw)


@pytest.mark.parametrize("n", [2, 3, 8, 16, 72])
@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather"])
@pytest.mark.parametrize("size", SIZES)
def test_homogeneous_ring_matches_closed_form(n, op, size):
    # One node of n GPUs on a switch: every hop has latency a and bandwidth B, and NCCL's
    # ring/Simple latency is baseLat + steps x a (src/graph/tuning.cc), so
    # T = baseLat + 2(N-1) a + 2(N-1)/N S/B for an all-reduce.
    spec = variant("nvlink", node__gpus_per_node=n, fabric=None)
    a = spec.node.gpu_link_latency_s
    B = spec.node.gpu_link_bandwidth_bytes_per_s * spec.node.gpu_link_efficiency
    steps = ring_steps(op, n)
    r = _ring(Topology(spec=spec, n_gpus=n)).time(op, size)
    assert r.latency_s == pytest.approx(BASE_LATENCY_US["ring"][2] * US + steps * a, rel=1e-9)
    assert r.time_s - r.latency_s == pytest.approx(steps / n * size / B, rel=1e-9)
    assert r.transfer_bus_bandwidth_bytes_per_s == pytest.approx(B, rel=1e-9)


def _small_cluster_cases():
    return [
        ("ethernet", 32, {}),
        ("infiniband", 48, {"fabric__nodes_per_leaf": 2}),  # 3 leaf groups
        ("infiniband", 64, {"fabric__nodes_per_leaf": 2, "fabric__oversubscription": 8.0}),
        ("ethernet", 64, {"fabric__nodes_per_leaf": 3, "fabric__oversubscription": 3.0}),
        ("pcie", 24, {}),
        ("nvlink", 40, {"fabric__nodes_per_leaf": 2}),
        ("aws-p5", 16, {}),
    ]


@pytest.mark.parametrize("name,n,changes", _small_cluster_cases())
def test_network_models_are_interchangeable(name, n, changes):
    """The NCCL model gives the same costs on the arithmetic router and on a graph search of
    the whole cluster: the collectives see the network only through its interface."""
    topo = Topology(spec=variant(name, **changes), n_gpus=n)
    by_formula = NcclCollectives(topo)
    by_search = NcclCollectives(topo, network=FlowNetwork(topo.graph))
    for op in OPS:
        for size in (4096, 8 * MiB, 1 << 30):
            a, b = by_formula.time(op, size), by_search.time(op, size)
            assert (a.algorithm, a.protocol) == (b.algorithm, b.protocol)
            assert b.time_s == pytest.approx(a.time_s, rel=1e-9)
    # Per-link bytes agree link by link (names included), and so do the report's groups.
    ops = [("all_reduce", 64 * MiB), ("all_gather", 8 * MiB)]
    assert _named_link_bytes(by_formula, ops) == pytest.approx(_named_link_bytes(by_search, ops))
    ra, rb = link_report(by_formula, ops, 1.0, top=1000), link_report(by_search, ops, 1.0, top=1000)
    groups = lambda r: sorted((u.link_class, round(u.bytes), u.links) for u in r.top)
    assert groups(ra) == groups(rb)


def _named_link_bytes(model, ops) -> dict:
    """Bytes on every used link, by graph edge, of the plans NCCL's choice runs for ``ops``."""
    total = np.zeros(model.network.n_links)
    for op, size in ops:
        c = model.choose(op, size)
        scale = model.facts.nic_scale(model.costs.message_bytes(c.algorithm, c.protocol, op, size))
        total += model.plan_cost(c.algorithm, op, scale).link_bytes_per_byte * size
    return {model.network.link_name(int(i)): float(total[i]) for i in np.flatnonzero(total)}


@pytest.mark.parametrize("name,n,changes", _small_cluster_cases())
@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather"])
def test_ring_schedule_step_by_step_on_the_whole_graph(name, n, changes, op):
    """The ring's explicit schedule run step by step on the whole graph (flows re-shared as
    they finish): links within capacity, every rank sends bus_factor x S, and the time is
    the ring plan's bandwidth term."""
    topo = Topology(spec=variant(name, **changes), n_gpus=n)
    cluster = Cluster.of(topo, nvls=False)
    net = FlowNetwork(topo.graph)
    size = 64 * MiB
    schedule = ALGORITHMS["ring"].schedule(op, cluster)
    chunk = size * schedule.steps[0][0].chunk_fraction
    total, sent = 0.0, {}
    for step in schedule.steps:
        src = np.array([x.src for x in step])
        dst = np.array([x.dst for x in step])
        sizes = np.array([x.fraction * size for x in step])
        loads = net.loads(src, dst)  # routed once: the transfer and its latencies read the same loads
        res = run_transfer(net, loads, sizes)
        assert all(u <= 1 + 1e-9 for u in res.link_utilisation().values())
        total += float(np.max(res.finish_times_s - loads.latencies_s))
        for x in step:
            sent[x.src] = sent.get(x.src, 0.0) + x.fraction * size
    assert chunk > 0
    for v in sent.values():
        assert v == pytest.approx(bus_factor(op, n) * size)
    model = _ring(topo, network=net)
    assert model.plan_cost("ring", op).seconds_per_byte * size == pytest.approx(total, rel=1e-9)


@pytest.mark.parametrize("name", preset_names())
def test_more_bandwidth_is_never_slower(name):
    base = variant(name)
    faster_nic = variant(name, fabric__nic_bandwidth_bytes_per_s=base.fabric.nic_bandwidth_bytes_per_s * 2)
    faster_gpu = variant(name, node__gpu_link_bandwidth_bytes_per_s=base.node.gpu_link_bandwidth_bytes_per_s * 2)
    for n in (8, 16, 256):
        t0 = NcclCollectives(Topology(spec=base, n_gpus=n)).time("all_reduce", 1 << 28).time_s
        for spec in (faster_nic, faster_gpu):
            assert NcclCollectives(Topology(spec=spec, n_gpus=n)).time("all_reduce", 1 << 28).time_s <= t0


def test_one_nic_per_node_bounds_ethernet_ring():
    # 100 GbE at the preset's efficiency is the whole ring's bottleneck across nodes.
    spec = variant("ethernet")
    model = _ring(Topology(spec=spec, n_gpus=64))
    nic = spec.fabric.nic_bandwidth_bytes_per_s * spec.fabric.nic_efficiency
    r = model.time("all_reduce", 1 << 30)
    assert r.transfer_bus_bandwidth_bytes_per_s == pytest.approx(nic, rel=1e-6)
    assert link_report(model, [("all_reduce", 1 << 30)], r.time_s).bottleneck_class == "ethernet"
    # NCCL's default sockets: 2 connections x 1 socket x 4.4 GB/s (topologies/ethernet.yaml).
    assert nic == pytest.approx(2 * 4.4e9)


def test_single_rank_and_empty_message_cost_nothing():
    model = NcclCollectives(Topology(spec=variant("nvlink"), n_gpus=1))
    assert model.time("all_reduce", 1 << 20).time_s == 0.0
    model = NcclCollectives(Topology(spec=variant("nvlink"), n_gpus=8))
    assert model.time("all_reduce", 0).time_s == 0.0


@pytest.mark.parametrize("size", [-1, float("nan"), float("inf")])
def test_bad_sizes_and_ops_are_one_line_errors(size):
    model = NcclCollectives(Topology(spec=variant("nvlink"), n_gpus=8))
    with pytest.raises(ConfigError, match="size"):
        model.time("all_reduce", size)
    with pytest.raises(ConfigError, match="--op: 'gather'"):
        model.time("gather", 8)


def test_nvlink_node_ring_busbw_is_nccl_effective_rate():
    # 8 H100 on NVSwitch: a large ring all-reduce's busbw approaches 450 GB/s x 0.822 = 370 GB/s
    # (hardware.csv H012), less the latency term.
    r = _ring(Topology(spec=variant("nvlink"), n_gpus=8)).time("all_reduce", 1 << 30)
    assert 350 * GB < r.busbw_bytes_per_s < 370 * GB


def test_ring_latency_counts_inter_node_hops_as_nccl_does():
    # NCCL (src/graph/tuning.cc): (nsteps - nInterSteps) x intra + nInterSteps x inter hops,
    # nInterSteps = 2 (nNodes - 1) for an all-reduce, plus baseLat, times 1.4 on multi-node
    # ring/Simple all-reduces (the "plateau").
    spec = variant("infiniband")
    topo = Topology(spec=spec, n_gpus=32)  # 4 nodes
    model = _ring(topo)
    r = model.time("all_reduce", 8)
    intra, inter = model.costs.hop_latencies_s("ring", "Simple")
    steps, inter_steps = 2 * 31, 2 * (4 - 1)
    expected = (BASE_LATENCY_US["ring"][2] * US + (steps - inter_steps) * intra + inter_steps * inter) * 1.4
    assert spec.launch_overhead_s is None and model.costs.call_overhead_s == 0.0  # untuned: NCCL's latency alone
    assert r.latency_s == pytest.approx(expected)
    assert r.inter_hop_latency_s == inter and r.intra_hop_latency_s == intra
    assert r.latency_s > 100 * US


# ----------------------------------------------------------------------------- every algorithm
# The same invariants for ring, tree, NVLS, NVLS tree, hierarchical and halving-doubling:
# each algorithm's explicit schedule computes the collective (symbolically), its compact
# plan moves exactly the schedule's bytes, no link runs over capacity, no algorithm beats
# its own link-load bound or a rank's ingress bound, and more bandwidth is never slower.

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


def _cluster_of(p) -> str:
    _, _, name, op = p.values
    return p.id[:-len(f"-{name}-{op}")]


def _fast_lane_cases(cases) -> set[str]:
    """Ids of a cover of ``cases`` for the fast lane: every cluster with every algorithm it runs, the
    operation turning from cluster to cluster, then any (algorithm, operation) left out added once."""
    ops_of: dict[tuple, list] = {}
    for p in cases:
        ops_of.setdefault((_cluster_of(p), p.values[2]), []).append(p)
    clusters = list(dict.fromkeys(_cluster_of(p) for p in cases))
    chosen = {ps[clusters.index(key[0]) % len(ps)].id for key, ps in ops_of.items()}
    covered = {(p.values[2], p.values[3]) for p in cases if p.id in chosen}
    for p in cases:
        if (p.values[2], p.values[3]) not in covered:
            chosen.add(p.id)
            covered.add((p.values[2], p.values[3]))
    return chosen


FAST_ALGO_IDS = _fast_lane_cases(ALGO_CASES)
# The per-case invariants below hold for every cluster x algorithm x operation; the fast lane
# (-m "not slow") checks the cover above (a third of the product), CI the whole product.
LANED_ALGO_CASES = [pytest.param(*p.values, id=p.id, marks=() if p.id in FAST_ALGO_IDS else pytest.mark.slow)
                    for p in ALGO_CASES]


def test_every_algorithm_is_exercised():
    names = {p.values[2] for p in ALGO_CASES}
    assert names == set(ALGORITHMS)
    # The flags parse names without loading the algorithms: the two lists must agree.
    assert ALGORITHM_NAMES == tuple(ALGORITHMS)
    assert set(NCCL_DEFAULT_ALGORITHMS) < set(ALGORITHM_NAMES)


def test_the_fast_lane_runs_every_algorithm_on_every_cluster_and_every_operation():
    fast = [p for p in ALGO_CASES if p.id in FAST_ALGO_IDS]
    assert {(_cluster_of(p), p.values[2]) for p in fast} == {(_cluster_of(p), p.values[2]) for p in ALGO_CASES}
    assert {p.values[2:] for p in fast} == {p.values[2:] for p in ALGO_CASES}
    assert len(fast) < len(ALGO_CASES) / 2


# Step by step on the two largest clusters takes seconds a case: the fast lane (-m "not slow") keeps the
# rest of the cover.
SCHEDULE_CASES = [pytest.param(*p.values, id=p.id, marks=pytest.mark.slow
                               if p.id.startswith(("ib-5nodes-3leaves-", "3tier-8nodes-"))
                               or p.id not in FAST_ALGO_IDS else ())
                  for p in ALGO_CASES]


@pytest.mark.parametrize("topo, cluster, name, op", SCHEDULE_CASES)
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


@pytest.mark.parametrize("topo, cluster, name, op", LANED_ALGO_CASES)
def test_no_link_over_capacity(topo, cluster, name, op):
    net = TierNetwork(topo)
    for phase in ALGORITHMS[name].plan(op, cluster).phases:
        loads = net.loads(phase.src, phase.dst)
        used = np.bincount(loads.link_of, weights=loads.rates_bytes_per_s[loads.flow_of], minlength=net.n_links)
        assert np.all(used <= net.capacity_bytes_per_s * (1 + 1e-9))
    # Over a whole collective, every link's bytes fit in the collective's duration.
    model = NcclCollectives(topo, algorithms=(name,))
    for size in (1 << 20, 1 << 28):
        choice = model.choose(op, size)
        pc = model.plan_cost(name, op, model.facts.nic_scale(model.costs.message_bytes(name, choice.protocol, op, size))
                             if topo.n_nodes > 1 else 1.0)
        assert np.all(pc.link_bytes_per_byte * size <= net.capacity_bytes_per_s * choice.time_s * (1 + 1e-9))


def _ingress_bound_s(topo, op, size):
    """Every rank must receive this much whatever the algorithm, through its own links."""
    n = topo.n_gpus
    need = {"all_reduce": (n - 1) / n * size, "all_gather": (n - 1) / n * size,
            "reduce_scatter": (n - 1) / n * size / n, "broadcast": size}[op]
    g = topo.graph
    rank1 = "n0.gpu1"  # rank 1 (rank 0 is a broadcast's root)
    ingress = sum(d["capacity_bytes_per_s"] for _, _, d in g.in_edges(rank1, data=True))
    return need / ingress


@pytest.mark.parametrize("topo, cluster, name, op", LANED_ALGO_CASES)
def test_never_faster_than_its_bandwidth_bound(topo, cluster, name, op):
    model = NcclCollectives(topo, algorithms=(name,))
    for protocol in PROTOCOLS:
        if not protocol_enabled(model.facts, name, protocol):
            continue
        pc = model.plan_cost(name, op)
        for size in (1 << 10, 1 << 20, 1 << 30):
            t = model.cost(name, protocol, op, size).time_s
            assert t >= float(np.max(pc.link_bytes_per_byte * size / model.plans.capacity_bytes_per_s)) * (1 - 1e-9)
            assert t >= _ingress_bound_s(topo, op, size) * (1 - 1e-9)


@pytest.mark.parametrize("topo, cluster, name, op", LANED_ALGO_CASES)
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
        assert all(b >= a * (1 - 1e-12) for a, b in itertools.pairwise(times)), op


# ----------------------------------------------------------------------------- golden cases

def _latency(model, algorithm, protocol="Simple"):
    pc = model.plan_cost(algorithm, "all_reduce")
    return model.costs.latency_s(pc.plan, protocol)


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
    # DESIGN.md: NVLS reaches about 1.3x the ring's busbw on H100/H200 NVSwitch servers. At
    # 16 GiB: NVLS has no ramp (its chunk steps are its mid-size cost) and the ring's Simple ramp
    # (64 MiB half-size) still takes 6 % there, 11 % at 4 GiB.
    topo = Topology(spec=variant("nvlink"), n_gpus=8)
    nvls = NcclCollectives(topo, algorithms=("nvls",)).time("all_reduce", 16 << 30)
    ring = NcclCollectives(topo, algorithms=("ring",), protocols=("Simple",)).time("all_reduce", 16 << 30)
    assert 1.2 < nvls.busbw_bytes_per_s / ring.busbw_bytes_per_s < 1.45


def test_halving_doubling_takes_log2_steps_each_way():
    topo = Topology(spec=variant("infiniband"), n_gpus=64)
    plan = ALGORITHMS["halving_doubling"].plan("all_reduce", Cluster.of(topo))
    assert len(plan.phases) == 2 * 6
    assert [p.fraction[0] for p in plan.phases[:6]] == [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64]
    assert plan.intra_hops == 2 * 3 and plan.inter_hops == 2 * 3      # distances 1, 2, 4 stay in a server


def test_nccl_picks_low_latency_protocols_for_small_and_simple_for_large_messages():
    # NCCL's own estimate (NcclTuning(): no fitted ramp, which slows Simple a few % even at
    # 1 GiB and can tip the model's pick to LL128 there).
    model = NcclCollectives(Topology(spec=variant("infiniband"), n_gpus=64), tuning=NcclTuning())
    small, large = model.time("all_reduce", 4096), model.time("all_reduce", 1 << 30)
    assert small.protocol in ("LL", "LL128") and large.protocol == "Simple"
    ring_only = NcclCollectives(Topology(spec=variant("infiniband"), n_gpus=64), algorithms=("ring",),
                                protocols=("Simple",), tuning=NcclTuning())
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


def test_nvls_channels_and_chunks_follow_ncclnvlstuning():
    # src/transport/nvls.cc@5067397: Hopper 16 channels; Blackwell 24 in one server, 32 across
    # servers unless its per-NIC-rate table says otherwise; NVLS-tree chunks at most 128 KiB,
    # 64 KiB from four Hopper servers or with a NIC behind each B200's PCIe switch.
    from dpsim.collectives.nccl_tuning import nvls_tree_chunk_bytes, nvls_tuning
    from dpsim.units import KiB

    def got(*args):
        t = nvls_tuning(*args)
        return t.channels, t.chunk_bytes // KiB, t.tree_max_chunk_bytes // KiB

    assert got("hopper", 1, 50.0, 8, True) == got("hopper", 2, 50.0, 8, True) == (16, 128, 128)
    assert got("hopper", 4, 50.0, 8, True) == (16, 128, 64)
    assert got("blackwell", 1, 50.0, 8, True) == (24, 128, 128)
    assert got("blackwell", 2, 50.0, 8, True) == (32, 128, 64)   # p6-b200: 400 Gb/s EFA per GPU
    assert got("blackwell", 2, 50.0, 8, False) == (32, 128, 128)
    assert got("blackwell", 2, 50.0, 4, True) == (32, 256, 256)
    assert got("blackwell", 4, 50.0, 8, True) == (24, 128, 64)
    assert got("blackwell", 4, 100.0, 8, True) == (24, 256, 256)
    assert got("blackwell", 4, 25.0, 8, True) == (32, 128, 64)    # below the table: defaults
    # calcCollChunking: ops = 16 x 8 on Hopper; 128 KiB from 4 x ops x 128 KiB = 64 MiB, 64 KiB
    # down to ops x 64 KiB = 8 MiB, 32 KiB below (never more than size / ops).
    hopper = nvls_tuning("hopper", 2, 50.0, 8, True)
    assert nvls_tree_chunk_bytes(hopper, 8, 64 * 2**20) == 128 * KiB
    assert nvls_tree_chunk_bytes(hopper, 8, 64 * 2**20 - 1) == 64 * KiB
    assert nvls_tree_chunk_bytes(hopper, 8, 8 * 2**20 - 1) == 32 * KiB
    assert nvls_tree_chunk_bytes(hopper, 8, 2**20) == 2**20 / 128


def test_a_b200_server_runs_24_nvls_channels_and_two_servers_32():
    from dpsim.topology.load import load_topology_file

    def channels(system: str, gpus: int) -> int:
        spec = load_topology_file(REPO / "validation" / "systems" / f"{system}.yaml")
        return NcclCollectives(Topology.from_spec(spec, gpus)).facts.nvls.channels

    assert channels("p6-b200-node", 8) == 24
    assert channels("p6-b200-x2", 16) == 32
    assert channels("h200-node", 8) == 16


def test_a_tree_channel_across_nics_moves_at_most_ncclS_per_channel_bound():
    # Two 8x A100 servers with 4 HDR NICs each (NVIDIA/nccl-tests#152): NCCL bounds a tree channel
    # at perChMaxTreeBw (23.6 GB/s of bus bandwidth on two Ampere servers), one channel per NIC
    # port, so the tree's 4 x 23.6 loses to the ring's NIC-bound 4 x 24 and NCCL runs the ring.
    from dpsim.topology.load import load_topology_file

    spec = load_topology_file(REPO / "validation" / "systems" / "a100-hdr4-x2.yaml")
    model = NcclCollectives(Topology(spec=spec, n_gpus=16), tuning=NcclTuning())
    tree = model.cost("tree", "Simple", "all_reduce", 1 << 30)
    assert (1 << 30) / tree.time_s * 2 <= 4 * 23.6 * GB * 1.0001
    assert model.time("all_reduce", 1 << 30).algorithm == "ring"
    # Inside one server there is no NIC to bind a channel to: no bound.
    one = NcclCollectives(Topology(spec=spec, n_gpus=8), algorithms=("tree",), tuning=NcclTuning())
    assert (1 << 30) / one.time("all_reduce", 1 << 30).time_s * 2 > 4 * 23.6 * GB


def test_an_ll128_channel_across_nics_moves_at_most_ncclS_per_channel_bound():
    # Two and four XE9680 servers with 8 NDR NICs each (NVIDIA/nccl-tests#309, NCCL 2.26.2): NCCL
    # (since v2.19.3) bounds a ring's LL128 bus bandwidth at nChannels x perChMaxRingLL128Bw
    # (36.7 GB/s on Hopper) and a tree's at nChannels x perChMaxTreeLL128Bw (36.7 on two
    # servers), one channel per NIC port; Simple keeps the NICs' rate.
    from dpsim.topology.load import load_topology_file

    spec = load_topology_file(REPO / "validation" / "systems" / "hgx-h100-ndr-x2.yaml")
    size = 256 * MiB
    for n in (16, 32):
        model = NcclCollectives(Topology(spec=spec, n_gpus=n), tuning=NcclTuning())
        assert model.facts.ports_per_nic == 1
        bus = {p: bus_factor("all_reduce", n) * size / model.cost("ring", p, "all_reduce", size).time_s
               for p in ("LL128", "Simple")}
        assert bus["LL128"] <= 8 * 36.7 * GB * 1.0001
        assert bus["Simple"] > 8 * 36.7 * GB  # the NICs' 8 x 48.5 GB/s, not the LL128 bound
    two = NcclCollectives(Topology(spec=spec, n_gpus=16), tuning=NcclTuning())
    assert 2 * size / two.cost("tree", "LL128", "all_reduce", size).time_s <= 8 * 36.7 * GB * 1.0001
    # Inside one server no NIC binds a channel: NCCL's intra-server channel count is not modelled,
    # so no bound (H100's 18 NVLinks reach more than 8 x 36.7 GB/s of LL128 bus bandwidth).
    one = NcclCollectives(Topology(spec=spec, n_gpus=8), tuning=NcclTuning())
    assert bus_factor("all_reduce", 8) * size / one.cost("ring", "LL128", "all_reduce", size).time_s > 8 * 36.7 * GB


@pytest.mark.parametrize("system", ["hgx-h100-ndr-x2", "a100-hdr4-x2", "aws-p5-x2", "p6-b200-x4", "dgx-a100-node"])
def test_no_ring_or_tree_all_reduce_beats_the_bytes_each_gpu_must_send(system):
    """Invariant of every ring and tree option, every protocol (the per-channel bounds only lower
    bandwidth): an all-reduce sends 2(N-1)/N x S out of each GPU, so it takes at least that over the
    GPU's fastest way out (its NVLink, or its PCIe link where that is faster). NVLS is exempt: the
    switch reduces, so a GPU sends S (NVIDIA/nccl-tests#212, S. Jeaugey: with NVLink SHARP the bus
    bandwidth is not the bandwidth on the wire)."""
    from dpsim.topology.load import load_topology_file

    spec = load_topology_file(REPO / "validation" / "systems" / f"{system}.yaml")
    n = 2 * spec.node.gpus_per_node if spec.fabric is not None else spec.node.gpus_per_node
    model = NcclCollectives(Topology(spec=spec, n_gpus=n), tuning=NcclTuning())
    out_rate = max(spec.node.gpu_link_bandwidth_bytes_per_s, spec.node.pcie_bandwidth_bytes_per_s)
    seen = set()
    for size in (1 * MiB, 32 * MiB, 1 << 30):
        floor = 2 * (n - 1) / n * size / out_rate
        for algorithm, protocol in model.candidates("all_reduce"):
            if algorithm not in ("ring", "tree"):
                continue
            seen.add((algorithm, protocol))
            assert model.cost(algorithm, protocol, "all_reduce", size).time_s >= floor, (algorithm, protocol, size)
    assert ("ring", "Simple") in seen
