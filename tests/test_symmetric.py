"""Collectives costed by symmetry equal the whole-cluster evaluation, at a cost that does not grow.

:mod:`dpsim.collectives.symmetric` writes every algorithm's plan as what one server does plus
server-level patterns; :meth:`~dpsim.network.tiers.TierNetwork.symmetric_loads` counts them on
every link family; :class:`~dpsim.collectives.nccl.NcclCollectives` costs them without a
max-min over the flows between servers. These tests hold the three to the whole-cluster
evaluation (every flow routed and max-min shared) on every preset and example topology and
on the variants the other tests use (oversubscribed leaves, three tiers, NVLink domains,
bundled and shared NICs, several jobs packed or interleaved, degraded link classes), at
sizes where the whole cluster is still cheap: plan by plan (time per byte, slowest rates,
what binds, per-link bytes), call by call (algorithm, protocol, time) and in the link report
(per-class links, maximum and mean utilisation, the busiest groups).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import variant

from dpsim.collectives.algorithms import ALGORITHMS, Cluster
from dpsim.collectives.links import link_report
from dpsim.collectives.nccl import NcclCollectives
from dpsim.collectives.plan_cost import SYMMETRIC, WHOLE_CLUSTER
from dpsim.collectives.nccl_tuning import nvls_available
from dpsim.collectives.ops import OPS
from dpsim.collectives.symmetric import flow_multiset, symmetric_plan
from dpsim.network import FlowNetwork
from dpsim.network.degrade import LinkDegradation
from dpsim.network.maxmin import Reshare, max_min_routes, max_min_sparse, progressive_finish
from dpsim.network.model import CrossingFlows, ServerFlows
from dpsim.network.tiers import TierNetwork
from dpsim.topology.cluster import Topology
from dpsim.topology.load import load_preset, load_topology_file, preset_names
from dpsim.topology.server import HUB_KINDS
from dpsim.topology.spec import NvlinkDomainSpec, TierSpec
from dpsim.units import GiB, MiB

FAT_TREE = "topologies/examples/fat-tree-3tier.yaml"
NVL72 = "topologies/examples/nvl72-ib.yaml"


def _three_tier():
    return variant("infiniband", node__gpus_per_node=4, fabric__nics_per_node=4, fabric__nodes_per_leaf=3,
                   fabric__oversubscription=6.0,
                   fabric__tiers=(TierSpec(group_size=3, oversubscription=5.0), TierSpec(group_size=2,
                                                                                         oversubscription=2.0)))


def _domains():
    return variant("infiniband", node__gpus_per_node=4, fabric__nics_per_node=2, fabric__nodes_per_leaf=2,
                   nvlink_domain=NvlinkDomainSpec(nodes=2, gpu_link_bandwidth_bytes_per_s=900e9, efficiency=0.8,
                                                  latency_s=3.4e-6))


def _cases():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = []
    for name in preset_names():
        for n in (8, 16, 64, 256, 1024):
            out.append((f"{name}-{n}", Topology.from_spec(load_preset(name), n), {}))
    fat, nvl = load_topology_file(root / FAT_TREE), load_topology_file(root / NVL72)
    for n in (16, 144, 1024, 2048):
        out.append((f"fat-tree-{n}", Topology(spec=fat, n_gpus=n), {}))
    for n in (8, 144, 1024):
        out.append((f"nvl72-{n}", Topology(spec=nvl, n_gpus=n), {}))
    ib2 = variant("infiniband", fabric__nodes_per_leaf=2)
    out += [
        ("oversubscribed-leaves", Topology(spec=variant("infiniband", fabric__nodes_per_leaf=4,
                                                        fabric__oversubscription=16.0), n_gpus=8 * 13), {}),
        ("3-tiers-odd-groups", Topology(spec=_three_tier(), n_gpus=4 * 37), {}),
        ("nvlink-domains+ib", Topology(spec=_domains(), n_gpus=4 * 7), {}),
        ("nvlink-fabric-3-nodes", Topology(spec=variant("nvlink"), n_gpus=24), {}),
        ("ethernet-3-per-leaf", Topology(spec=variant("ethernet", fabric__nodes_per_leaf=3,
                                                      fabric__oversubscription=3.0), n_gpus=8 * 7), {}),
        ("4-gpus-per-node", Topology.from_spec(load_preset("infiniband"), 4 * 11, gpus_per_node=4), {}),
        ("1-gpu-per-node", Topology.from_spec(load_preset("infiniband"), 9, gpus_per_node=1), {}),
        ("2-jobs-packed", Topology(spec=ib2, n_gpus=32), {"jobs": 2}),
        ("3-jobs-interleaved", Topology(spec=variant("infiniband", fabric__nodes_per_leaf=2,
                                                     fabric__oversubscription=4.0), n_gpus=24),
         {"jobs": 3, "placement": "interleaved"}),
        ("2-jobs-interleaved-ethernet", Topology(spec=variant("ethernet", fabric__nodes_per_leaf=3), n_gpus=40),
         {"jobs": 2, "placement": "interleaved"}),
        ("degraded-class", Topology(spec=ib2, n_gpus=48),
         {"degradations": (LinkDegradation(link="infiniband", capacity_fraction=0.5),
                           LinkDegradation(link="leaf-spine", capacity_fraction=0.25))}),
        ("nic-message-overhead", Topology(spec=load_preset("aws-p5"), n_gpus=64), {}),
    ]
    # Servers that are not NVSwitch, and NICs without GPUDirect (data staged in host memory).
    systems = root / "validation" / "systems"
    mesh = load_topology_file(systems / "v100-tcp-x4.yaml")  # DGX-1 cube mesh, 2 sockets, TCP sockets
    out += [(f"cube-mesh-tcp-{n}", Topology(spec=mesh, n_gpus=n), {}) for n in (8, 32, 40)]
    out += [("xgmi-mi300x", Topology(spec=load_topology_file(systems / "mi300x-node.yaml"), n_gpus=8), {}),
            ("nvlink-bridge", Topology(spec=load_topology_file(systems / "h100-pcie-bridge.yaml"), n_gpus=2), {})]
    out += [(f"pcie-tree-roce-host-{n}", Topology(spec=_pcie_tree_roce_host(), n_gpus=n), {}) for n in (8, 24)]
    return out


def _pcie_tree_roce_host():
    # 8 GPUs behind 4 PCIe switches under 2 sockets, 2 RoCE NICs without GPUDirect RDMA.
    from dpsim.topology.load import spec_from_dict

    return spec_from_dict({
        "name": "pcie-tree-roce-host", "gpu": "a100",
        "node": {"gpus_per_node": 8, "interconnect": "pcie-tree", "gpu_link_gbyte_per_s": 31.5,
                 "gpu_link_efficiency": 0.8, "gpu_link_latency_us": 5.7, "pcie_gbyte_per_s": 31.5,
                 "pcie_switches": 4, "sockets": 2, "inter_socket_gbyte_per_s": 40.0},
        "fabric": {"kind": "ethernet", "nic": "100gbe-roce", "nics_per_node": 2, "transport": "roce-host",
                   "nodes_per_leaf": 2},
    })


CASES = _cases()


def _close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def _same_array(actual, expected, *, rel: float | None = None, abs: float = 0.0) -> bool:
    """``actual == pytest.approx(expected, rel=rel, abs=abs)`` for arrays, in numpy: the same shape, and each
    element equal or within ``max(rel x |expected|, abs)`` (``rel`` None: ``abs`` alone, as approx takes it;
    an infinite expected element only by equality; NaN never). pytest's approx builds an object an element
    and took a third of this file's CPU (8.8 -> 6.2 s, one process)."""
    actual, expected = np.asarray(actual, dtype=float), np.asarray(expected, dtype=float)
    if actual.shape != expected.shape:
        return False
    with np.errstate(invalid="ignore"):  # inf - inf, 0 x inf: held to equality below
        tolerance = np.maximum((rel or 0.0) * np.abs(expected), abs)
        within = np.isfinite(expected) & (np.abs(actual - expected) <= tolerance)
    return bool(np.all((actual == expected) | within))


# ----------------------------------------------------------------------------- plans


def _plan_clusters():
    import test_collectives

    return test_collectives._algo_clusters() + [
        ("ib-12-nodes", variant("infiniband"), 96),
        ("ib-3-nodes", variant("infiniband"), 24),
        ("p4de-5-nodes", load_preset("aws-p4de"), 40),
        ("ethernet-7-nodes", variant("ethernet"), 56),
        ("1-gpu-per-node", Topology.from_spec(load_preset("infiniband"), 6, gpus_per_node=1).spec, 6),
        ("domains", _domains(), 4 * 7),
    ]


def _plan_cases():
    out = []
    for cid, spec, n in _plan_clusters():
        topo = Topology(spec=spec, n_gpus=n)
        cluster = Cluster.of(topo, nvls=nvls_available(spec))
        for name, algo in ALGORITHMS.items():
            for op in OPS:
                if algo.supports(op, cluster):
                    out.append(pytest.param(cluster, name, op, id=f"{cid}-{name}-{op}"))
    return out


@pytest.mark.parametrize("cluster, name, op", _plan_cases())
def test_symmetric_plan_is_the_algorithms_plan_flow_for_flow(cluster, name, op):
    sp = symmetric_plan(name, op, cluster)
    full = ALGORITHMS[name].plan(op, cluster)
    if sp is None:
        # Only these have no symmetric form: a broadcast chain (starts mid-server), halving-doubling
        # off powers of two, and a partial server.
        assert (op == "broadcast" or name == "halving_doubling" or cluster.gpus_per_node < cluster.stride)
        return
    phases = sp.expand(cluster)
    assert len(phases) == len(full.phases)
    for mine, theirs in zip(phases, full.phases):
        assert mine.repeat == theirs.repeat
        assert flow_multiset(mine) == flow_multiset(theirs)
    for f in ("intra_hops", "inter_hops", "channels", "pipeline_intra", "pipeline_inter"):
        assert getattr(sp.plan, f) == getattr(full, f), f
    assert sp.max_fraction == max(float(p.fraction.max()) for p in full.phases)
    if full.nvls_flows is not None:
        nvls = np.concatenate([np.tile(ph.server_nvls, cluster.n_nodes) for ph in sp.phases])
        assert nvls.sum() == full.nvls_flows.sum()


def test_every_default_algorithm_has_a_symmetric_form_on_every_preset():
    for name in preset_names():
        cluster = Cluster.of(Topology.from_spec(load_preset(name), 1024), nvls=nvls_available(load_preset(name)))
        for algo in ("ring", "tree", "nvls", "nvls_tree"):
            for op in ("all_reduce", "reduce_scatter", "all_gather"):
                if ALGORITHMS[algo].supports(op, cluster):
                    assert symmetric_plan(algo, op, cluster) is not None, (name, algo, op)


# ----------------------------------------------------------------------------- the network's counts


def _networks():
    fat = load_topology_file(__import__("pathlib").Path(__file__).resolve().parents[1] / FAT_TREE)
    return [
        Topology(spec=variant("infiniband", fabric__nodes_per_leaf=3), n_gpus=8 * 10),
        Topology(spec=_three_tier(), n_gpus=4 * 37),
        Topology(spec=_domains(), n_gpus=4 * 7),
        Topology(spec=variant("nvlink"), n_gpus=8 * 5),
        Topology(spec=load_preset("aws-p5"), n_gpus=8 * 6),
        Topology(spec=load_preset("aws-p4de"), n_gpus=8 * 6),
        Topology(spec=variant("ethernet", fabric__nodes_per_leaf=2), n_gpus=8 * 9),
        Topology(spec=fat, n_gpus=8 * 40),
        Topology(spec=load_topology_file(__import__("pathlib").Path(__file__).resolve().parents[1] / "validation"
                                         / "systems" / "v100-tcp-x4.yaml"), n_gpus=8 * 5),
        Topology(spec=_pcie_tree_roce_host(), n_gpus=8 * 5),
    ]


@pytest.mark.parametrize("topo", _networks(), ids=lambda t: f"{t.spec.name}-{t.n_gpus}")
def test_symmetric_counts_equal_routed_flows(topo):
    """Random server-level patterns on random lanes, and random flows inside every server
    (switch endpoints included), counted by symmetry and routed flow by flow: the same load
    on every link."""
    net = TierNetwork(topo)
    rng = np.random.default_rng(topo.n_gpus)
    n, g = topo.n_nodes, topo.spec.node.gpus_per_node
    for _ in range(3):
        server, groups = _random_phase(topo, rng, weighted=True)
        s_loc, d_loc, k = server.src, server.dst, len(server.src)
        counted = net.symmetric_loads(server=server, crossing=groups).dense(net.families(), net.n_links)
        routed = np.zeros(net.n_links)
        for x in groups:
            src = np.repeat(x.src_server, len(x.src_local)) * g + np.tile(x.src_local, len(x.src_server))
            dst = np.repeat(x.dst_server, len(x.dst_local)) * g + np.tile(x.dst_local, len(x.dst_server))
            routed += net.loads(src, dst).link_bytes(np.full(len(src), x.weight))
        nodes = np.repeat(np.arange(n), k)
        place = lambda local: np.where(np.tile(local, n) < 0, -1 - nodes, nodes * g + np.tile(local, n))  # noqa: E731
        routed += net.loads(place(s_loc), place(d_loc)).link_bytes(np.tile(server.weight, n))
        assert _same_array(counted, routed, rel=1e-12, abs=1e-12)


def _random_phase(topo, rng, *, weighted: bool = False):
    """Random flows inside every server (switch endpoints included) and random server-level patterns
    (with random weights if ``weighted``, else every flow one byte)."""
    n, g = topo.n_nodes, topo.spec.node.gpus_per_node
    groups = []
    for _ in range(3):
        m, q = int(rng.integers(1, 3 * n)), int(rng.integers(1, g + 1))
        a = rng.integers(0, n, m)
        b = (a + rng.integers(1, n, m)) % n
        groups.append(CrossingFlows(src_server=a, dst_server=b, src_local=rng.integers(0, g, q),
                                    dst_local=rng.integers(0, g, q),
                                    weight=float(rng.integers(1, 4)) if weighted else 1.0))
    k = int(rng.integers(1, 2 * g))
    s_loc, d_loc = rng.integers(-1, g, k), rng.integers(0, g, k)
    s_loc = np.where(s_loc == d_loc, -1, s_loc)
    if topo.spec.node.interconnect not in HUB_KINDS:
        s_loc = np.where(s_loc < 0, (d_loc + 1) % g, s_loc)
    return ServerFlows(src=s_loc, dst=d_loc, weight=rng.random(k) if weighted else 1.0), groups


def _block_endpoints(routes, topo, server, groups):
    """Every flow of every block of ``routes`` as (source, destination) endpoints, block by block, row-major
    (flows inside servers: every flow of ``server``, though the block has a column per distinct route)."""
    g = topo.spec.node.gpus_per_node
    place = lambda local, node: np.where(local < 0, -1 - node, node * g + local)  # noqa: E731
    src, dst = [], []
    for blk in routes.blocks:
        rows, cols = blk.shape
        if blk.kind == "server":
            k = len(server.src)
            node = np.repeat(np.arange(rows), k)
            src.append(place(np.tile(server.src, rows), node))
            dst.append(place(np.tile(server.dst, rows), node))
        else:
            x = groups[blk.pattern]
            src.append(np.repeat(x.src_server[blk.edges], cols) * g + np.tile(x.src_local, rows))
            dst.append(np.repeat(x.dst_server[blk.edges], cols) * g + np.tile(x.dst_local, rows))
    return np.concatenate(src), np.concatenate(dst)


def _per_flow(blk, values):
    """A block's per-column values for every flow of its rows (flows inside servers: each flow of
    the :class:`ServerFlows`, from its route's column)."""
    return values[:, blk.flow_column] if blk.flow_column is not None else values


def _dense(counts, net):
    out = np.zeros(net.n_links)
    for name, d in counts.items():
        fam = net.families()[name]
        out[fam.offset:fam.offset + len(d)] += d
    return out


@pytest.mark.parametrize("topo", _networks(), ids=lambda t: f"{t.spec.name}-{t.n_gpus}")
def test_symmetric_routes_are_the_routed_flows(topo):
    """Flows routed by symmetry in blocks (:meth:`~dpsim.network.tiers.TierNetwork.symmetric_routes`)
    cross the links that :meth:`~dpsim.network.tiers.TierNetwork.routes` gives them: the same
    flows on every link, for every subset of flows, and the same flows crossing marked links."""
    net = TierNetwork(topo)
    rng = np.random.default_rng(7 + topo.n_gpus)
    for _ in range(2):
        server, groups = _random_phase(topo, rng)
        routes = net.symmetric_routes(server=server, crossing=groups)
        src, dst = _block_endpoints(routes, topo, server, groups)
        assert len(src) == topo.n_nodes * len(server.src) + sum(len(x.src_server) * len(x.src_local) for x in groups)
        flow_of, link_of = net.routes(src, dst)
        # The same counts as symmetric_loads, for all flows and for random subsets of random rows.
        everything = [np.ones(b.shape, bool) for b in routes.blocks]
        every_row = [np.arange(b.shape[0]) for b in routes.blocks]
        assert _same_array(_dense(routes.count(everything, every_row), net),
                           np.bincount(link_of, minlength=net.n_links), abs=0)
        assert _same_array(_dense(routes.count(everything, every_row), net),
                           net.symmetric_loads(server=server, crossing=groups).dense(net.families(), net.n_links), abs=0)
        rows = [np.sort(rng.choice(b.shape[0], int(rng.integers(0, b.shape[0] + 1)), replace=False))
                for b in routes.blocks]
        which = [rng.random((len(r), b.shape[1])) < 0.5 for r, b in zip(rows, routes.blocks)]
        chosen, start = np.zeros(len(src), bool), 0
        for r, w, b in zip(rows, which, routes.blocks):
            per = _per_flow(b, w)
            chosen[start + (r[:, None] * per.shape[1] + np.arange(per.shape[1]))[per]] = True
            start += b.shape[0] * (len(b.flow_column) if b.flow_column is not None else b.shape[1])
        assert _same_array(_dense(routes.count(which, rows), net),
                           np.bincount(link_of[chosen[flow_of]], minlength=net.n_links), abs=0)
        # Flows crossing a marked link.
        for density in (0.001, 0.05, 0.5):
            marked = rng.random(net.n_links) < density
            expect = np.bincount(flow_of, weights=marked[link_of], minlength=len(src)) > 0
            by_family = {name: marked[f.offset:f.offset + f.units * f.lanes] for name, f in net.families().items()}
            start = 0
            for r, h, b in zip(rows, routes.crossed(by_family, rows), routes.blocks):
                per = _per_flow(b, h)
                assert np.array_equal(per, expect[start + (r[:, None] * per.shape[1] + np.arange(per.shape[1]))])
                start += b.shape[0] * per.shape[1]


@pytest.mark.parametrize("topo", _networks(), ids=lambda t: f"{t.spec.name}-{t.n_gpus}")
def test_max_min_over_blocks_is_max_min_over_flows_bit_for_bit(topo):
    """Progressive filling over blocks of servers and pattern edges gives every flow the rate
    that progressive filling over the routed flows does, to the last bit (random capacities per
    family); asked for the slowest flows of groups only, the first frozen ones are those."""
    net = TierNetwork(topo)
    rng = np.random.default_rng(11 + topo.n_gpus)
    for _ in range(2):
        server, groups = _random_phase(topo, rng)
        # Repeated flows inside a server: one column of the block stands for several.
        server = ServerFlows(src=np.tile(server.src, 2)[:len(server.src) + 2],
                             dst=np.tile(server.dst, 2)[:len(server.src) + 2], weight=1.0)
        routes = net.symmetric_routes(server=server, crossing=groups)
        caps = {name: f.capacity_bytes_per_s * float(rng.choice([1.0, 0.5, rng.random()]))
                for name, f in net.families().items()}
        capacity = np.zeros(net.n_links)
        for name, f in net.families().items():
            capacity[f.offset:f.offset + f.units * f.lanes] = caps[name]
        src, dst = _block_endpoints(routes, topo, server, groups)
        flow_of, link_of = net.routes(src, dst)
        expect = max_min_sparse(flow_of, link_of, capacity, len(src))
        rates = max_min_routes(routes, caps)
        got = np.concatenate([_per_flow(b, r).ravel() for b, r in zip(routes.blocks, rates)])
        assert np.array_equal(got, expect)
        # The slowest flow of each column of each block (columns as groups).
        labels = [np.arange(b.shape[1]) + 1000 * k for k, b in enumerate(routes.blocks)]
        start = 0
        for r, b in zip(max_min_routes(routes, caps, labels), routes.blocks):
            r = _per_flow(b, r)
            full = expect[start:start + r.size].reshape(r.shape)
            if r.size:
                assert np.array_equal(r.min(axis=0), full.min(axis=0))
                assert np.all((r == full) | np.isinf(r))
            start += r.size


def _tree_clusters():
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    nvl = load_topology_file(root / NVL72)
    mesh = load_topology_file(root / "validation" / "systems" / "v100-tcp-x4.yaml")
    gb = load_preset("gb200-nvl72")
    return ([(f"gb200-nvl72-{n}", Topology.from_spec(gb, n)) for n in (8, 144, 148, 360, 576)]
            + [(f"nvl72-ib-{n}", Topology(spec=nvl, n_gpus=n)) for n in (144, 216)]
            + [(f"domains-{n}", Topology(spec=_domains(), n_gpus=n)) for n in (4 * 7, 4 * 13, 4 * 29)]
            + [("nvlink-fabric-5-nodes", Topology(spec=variant("nvlink"), n_gpus=40))]
            + [(f"cube-mesh-tcp-{n}", Topology(spec=mesh, n_gpus=n)) for n in (32, 40, 64)])


# The whole cluster of 360 GPUs and more takes about a second a case: the slow lane keeps them.
@pytest.mark.parametrize("cid, topo", [pytest.param(c, t, id=c, marks=pytest.mark.slow if t.n_gpus >= 200 else ())
                                       for c, t in _tree_clusters()])
def test_trees_on_shared_server_links_are_symmetric_and_exact(cid, topo):
    """Where flows between servers share the GPU's links with flows inside servers (NVLink domains
    and switch tiers, PCIe trees), the double binary tree and NVLS + tree are costed by symmetry,
    with a max-min over blocks where needed, equal to the whole cluster's to the last bit."""
    from dpsim.collectives.plan_cost import PlanEvaluator

    for nvls_weight in (1.25,):  # NVLS flows cost more than the others: sizes differ on shared links
        fast = PlanEvaluator(topo, nvls_weight=nvls_weight)
        slow = PlanEvaluator(topo, nvls_weight=nvls_weight, symmetric=False)
        for algorithm in ("tree", "nvls_tree"):
            if not ALGORITHMS[algorithm].supports("all_reduce", fast.cluster):
                continue
            for scale in (1.0, 0.7):
                a, b = fast.plan_cost(algorithm, "all_reduce", scale), slow.plan_cost(algorithm, "all_reduce", scale)
                assert a.path == SYMMETRIC and b.path == WHOLE_CLUSTER
                assert (a.seconds_per_byte, a.inter_bound, a.r_intra, a.r_inter) == (
                    b.seconds_per_byte, b.inter_bound, b.r_intra, b.r_inter), (algorithm, scale)
                assert _same_array(a.link_bytes_per_byte, b.link_bytes_per_byte, rel=1e-12, abs=1e-15)


# ----------------------------------------------------------------------------- the same answers


# The whole cluster at 256 GPUs and more takes a second or more a case: the fast lane (-m "not slow") keeps the
# smaller ones (every preset and variant still runs at 8 to 144 GPUs). Every preset fits 64 GPUs under one
# leaf, so its 16 and 64 GPUs differ only in the server count (2 or 8): the fast lane runs each preset on one
# server and on one of the two, both counts on four presets or more (aws-p5 on 64 GPUs runs anyway as
# nic-message-overhead); a preset not named here runs on both.
_FAST_MULTI_NODE = {"aws-p4de": 16, "aws-p5": 16, "dgx-a100": 16, "pcie": 16,
                    "dgx-b200": 64, "ethernet": 64, "gb200-nvl72": 64, "infiniband": 64, "nvlink": 64}
_PRESET_MULTI_NODE_SLOW = {f"{name}-{80 - n}" for name, n in _FAST_MULTI_NODE.items()}
SCALE_MARKED = [pytest.param(*c, id=c[0], marks=pytest.mark.slow
                             if c[1].n_gpus >= 256 or c[0] in _PRESET_MULTI_NODE_SLOW else ()) for c in CASES]


@pytest.mark.parametrize("cid, topo, kw", SCALE_MARKED)
def test_symmetric_evaluation_equals_the_whole_cluster(cid, topo, kw):
    fast = NcclCollectives(topo, **kw)
    slow = NcclCollectives(topo, symmetric=False, **kw)
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        for algorithm, _ in fast.candidates(op):
            for scale in (1.0, 0.7):
                a, b = fast.plan_cost(algorithm, op, scale), slow.plan_cost(algorithm, op, scale)
                assert b.path == WHOLE_CLUSTER
                assert a.inter_bound == b.inter_bound, (algorithm, op)
                assert _close(a.seconds_per_byte, b.seconds_per_byte), (algorithm, op)
                assert _close(a.max_fraction, b.max_fraction)
                if b.plan.pipeline_intra or b.plan.pipeline_inter:
                    assert _close(a.r_intra, b.r_intra) and _close(a.r_inter, b.r_inter), (algorithm, op)
                for f in ("intra_hops", "inter_hops", "channels", "pipeline_intra", "pipeline_inter"):
                    assert getattr(a.plan, f) == getattr(b.plan, f)
                assert _same_array(a.link_bytes_per_byte, b.link_bytes_per_byte, rel=1e-9, abs=1e-15)
        for size in (8, 4096, 1 * MiB, 64 * MiB, GiB):
            x, y = fast.time(op, size), slow.time(op, size)
            assert (x.algorithm, x.protocol) == (y.algorithm, y.protocol), (op, size)
            assert _close(x.time_s, y.time_s), (op, size)
    ops = [("all_reduce", 64 * MiB), ("all_gather", 8 * MiB), ("reduce_scatter", 3 * MiB), ("all_reduce", 4096)]
    ra, rb = link_report(fast, ops, 1.0), link_report(slow, ops, 1.0)
    assert set(ra.by_class) == set(rb.by_class)
    for cls, d in rb.by_class.items():
        assert ra.by_class[cls]["links"] == d["links"]
        assert _close(ra.by_class[cls]["max_utilisation"], d["max_utilisation"])
        assert _close(ra.by_class[cls]["mean_utilisation"], d["mean_utilisation"])
    assert ra.bottleneck_count == rb.bottleneck_count
    assert [(u.link, u.links) for u in ra.top] == [(u.link, u.links) for u in rb.top]
    assert all(_close(u.bytes, v.bytes) for u, v in zip(ra.top, rb.top))
    # Every candidate plan has a symmetric form and the fast model used it (NVLink domains and PCIe
    # trees included: their trees by a max-min over blocks of servers, :func:`max_min_routes`).
    plans = {(a, op) for op in ("all_reduce", "reduce_scatter", "all_gather") for a, _ in fast.candidates(op)}
    assert fast.evaluation_of(plans) == SYMMETRIC, fast.evaluation_of(plans)
    assert ra.evaluation == SYMMETRIC
    assert rb.evaluation.startswith(WHOLE_CLUSTER)


# ----------------------------------------------------------------------------- which path ran


def test_the_path_that_ran_is_reported():
    big = NcclCollectives(Topology(spec=load_preset("infiniband"), n_gpus=65536))
    assert big.time("all_reduce", GiB).time_s > 0
    assert big.evaluation_of([(a, "all_reduce") for a, _ in big.candidates("all_reduce")]) == SYMMETRIC
    topo = Topology(spec=load_preset("infiniband"), n_gpus=32)
    graph = NcclCollectives(topo, network=FlowNetwork(topo.graph))
    graph.time("all_reduce", MiB)
    assert graph.evaluation.startswith(WHOLE_CLUSTER) and "graph" in graph.evaluation
    named = NcclCollectives(topo, degradations=(LinkDegradation(link="node1.nic0", capacity_fraction=0.5),))
    named.time("all_reduce", MiB)
    assert named.evaluation.startswith(WHOLE_CLUSTER) and "--degrade" in named.evaluation
    part = NcclCollectives(Topology(spec=load_preset("infiniband"), n_gpus=5))
    part.time("all_reduce", MiB)
    assert "partial server" in part.evaluation
    bcast = NcclCollectives(topo)
    bcast.time("broadcast", MiB)
    assert "ring/broadcast" in bcast.evaluation


def test_predict_json_says_how_links_were_evaluated(capsys):
    import json

    from dpsim.cli import main

    assert main(["predict", "--gpus", "262144", "--link", "infiniband", "--json"]) == 0
    links = json.loads(capsys.readouterr()[0])["links"]
    assert links["evaluation"] == SYMMETRIC
    assert links["by_class"]["infiniband"]["links"] == 2 * 262144   # every NIC cable, both directions
    assert sum(u["links"] for u in links["bottleneck"]) <= links["bottleneck_count"]
    assert main(["predict", "--gpus", "32", "--link", "infiniband", "--degrade", "node1.nic0:50%", "--json"]) == 0
    links = json.loads(capsys.readouterr()[0])["links"]
    assert links["evaluation"].startswith(WHOLE_CLUSTER)


def test_a_degraded_link_is_listed_on_its_own():
    topo = Topology(spec=load_preset("infiniband"), n_gpus=64)
    model = NcclCollectives(topo, algorithms=("ring",), degradations=(
        LinkDegradation(link="node3.nic2", capacity_fraction=0.5),))
    report = link_report(model, [("all_reduce", GiB)], 1.0)
    slow = [u for u in report.top if u.capacity_bytes_per_s < 48.5e9]   # both directions of that one cable
    assert [(u.link, u.links) for u in slow] == [(("n3.nic2", "leaf0.2"), 2)]
    healthy = [u for u in report.top if u.link_class == "infiniband" and u.capacity_bytes_per_s == 48.5e9]
    assert sum(u.links for u in healthy) == 2 * 8 * 8 - 2


def test_symmetric_evaluation_lists_no_link_of_a_huge_cluster():
    """At 262,144 GPUs the network's per-link arrays (millions of links) are never built, and
    every link family is stored as a handful of classes."""
    from dpsim.predict import PredictConfig, predict

    p = predict(PredictConfig(gpus=262144, link="infiniband"))
    world = p.collectives.world
    assert world.evaluation == SYMMETRIC
    assert "capacity_bytes_per_s" not in vars(world.network) and "capacity_scale" not in vars(world.plans)
    for (algorithm, op, _), pc in world.plans.costs.items():
        assert all(len(f.count) <= 64 for f in pc.loads.families.values()), (algorithm, op)
    assert p.links.by_class["nvlink"]["links"] == 2 * 262144


def _reshared(routes, caps, size):
    """:func:`progressive_finish` driven by :class:`Reshare`, every re-share checked against a whole
    :func:`max_min_routes` over the flows alive; the finish times and how many re-shares were replayed."""
    reshare = Reshare(routes, caps)
    shapes = [b.shape for b in routes.blocks]
    cuts = np.cumsum([0] + [r * c for r, c in shapes])

    def rates_of(alive):
        got = reshare.rates(alive)
        masks = [alive[cuts[k]:cuts[k + 1]].reshape(shapes[k]) for k in range(len(shapes))]
        whole = np.concatenate([r.ravel() for r in max_min_routes(routes, caps, alive=masks)])
        assert np.array_equal(got, whole)  # inf (flows gone) included
        return got

    return progressive_finish(size, rates_of), reshare.replayed


def _reshare_networks():
    """The networks of :func:`_networks` and the NVL72 example; the fast lane keeps three small ones
    (an NVLink domain, whose flows between servers share the GPU links, a PCIe host, Ethernet)."""
    fast = {"infiniband-28", "v100-tcp-x4-40", "ethernet-72"}
    nets = _networks() + [Topology(spec=load_topology_file(__import__("pathlib").Path(__file__).resolve().parents[1]
                                                           / NVL72), n_gpus=72 * 2)]
    return [pytest.param(t, id=f"{t.spec.name}-{t.n_gpus}",
                         marks=() if f"{t.spec.name}-{t.n_gpus}" in fast else pytest.mark.slow) for t in nets]


@pytest.mark.parametrize("topo", _reshare_networks())
def test_reshare_near_finished_flows_is_the_whole_max_min_bit_for_bit(topo):
    """Flows of random sizes finishing and re-sharing: every re-share replayed on the links near the
    flows that finished (or run whole where the replay cannot vouch for it) gives the rates of a
    max-min over every flow left, to the last bit, on symmetric phases (every server alike), random
    server-level patterns, and with one link degraded (which no symmetry covers)."""
    net = TierNetwork(topo)
    rng = np.random.default_rng(5 + topo.n_gpus)
    replayed = 0
    for trial in range(3):
        server, groups = _random_phase(topo, rng)
        if trial == 0:
            # A symmetric phase: every server one ring edge on every lane.
            n, g = topo.n_nodes, topo.spec.node.gpus_per_node
            groups = [CrossingFlows(src_server=np.arange(n), dst_server=(np.arange(n) + 1) % n,
                                    src_local=np.arange(g), dst_local=np.arange(g))] if n > 1 else []
        routes = net.symmetric_routes(server=server, crossing=groups)
        caps = {name: f.capacity_bytes_per_s for name, f in net.families().items()}
        if trial == 2:
            used = [name for name, f in net.families().items() if f.units * f.lanes > 1]
            name = used[int(rng.integers(len(used)))]
            f = net.families()[name]
            per_link = np.full(f.units * f.lanes, caps[name])
            per_link[int(rng.integers(len(per_link)))] *= 0.3
            caps[name] = per_link
        n_flows = sum(b.shape[0] * b.shape[1] for b in routes.blocks)
        size = rng.choice([1.0, 2.0], n_flows)
        finish, k = _reshared(routes, caps, size)
        assert np.all(np.isfinite(finish))
        replayed += k
    assert replayed > 0
