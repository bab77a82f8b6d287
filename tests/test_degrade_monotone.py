"""A degraded link never makes a collective faster.

Costing a phase whose flows move different bytes with one fixed max-min share (every flow at its
first rate to the end) broke this: throttling one flow freed capacity for the largest one, and the
phase got shorter (``--degrade nvlink-domain:10%`` on nvl72-ib at 288 GPUs made NVLS + tree 29 %
faster). Phases now re-share as flows finish (:func:`~dpsim.network.maxmin.progressive_finish`).
Held here on every algorithm x protocol x op that can run, on the presets and examples with an
NVLink domain or links shared by flows inside and between servers, and on a few without: every
link class degraded to several fractions, and single named links.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import variant

from dpsim.collectives.nccl import NcclCollectives
from dpsim.errors import DpsimError
from dpsim.network.degrade import parse_degradation
from dpsim.network.maxmin import max_min_sparse, progressive_finish
from dpsim.topology.cluster import Topology
from dpsim.topology.load import load_preset, load_topology_file
from dpsim.topology.spec import NvlinkDomainSpec

NVL72 = "topologies/examples/nvl72-ib.yaml"
SIZES = (1e4, 1e6, 3e7, 2e9)


def _domains():
    return variant("infiniband", node__gpus_per_node=4, fabric__nics_per_node=2, fabric__nodes_per_leaf=2,
                   nvlink_domain=NvlinkDomainSpec(nodes=2, gpu_link_bandwidth_bytes_per_s=900e9, efficiency=0.8,
                                                  latency_s=3.4e-6))


def _root():
    return __import__("pathlib").Path(__file__).resolve().parents[1]


def _clusters(fast: bool):
    nvl = load_topology_file(_root() / NVL72)
    gb = load_preset("gb200-nvl72")
    if fast:
        return [("nvl72-ib-288", Topology(spec=nvl, n_gpus=288), {}, ("nvlink-domain:10%", "nvlink:50%")),
                ("dgx-a100-16", Topology(spec=load_preset("dgx-a100"), n_gpus=16), {}, ("nvlink:60%", "node0.gpu0:30%"))]
    out = [(f"gb200-nvl72-{n}", Topology.from_spec(gb, n), {}, None) for n in (8, 144, 148, 288)]
    out += [(f"nvl72-ib-{n}", Topology(spec=nvl, n_gpus=n), {}, None) for n in (72, 144, 288)]
    out += [(f"domains-{n}", Topology(spec=_domains(), n_gpus=n), {}, None) for n in (28, 52)]
    out += [("domains-2-jobs", Topology(spec=_domains(), n_gpus=16), {"jobs": 2, "placement": "interleaved"}, None)]
    out += [("fat-tree-3tier", Topology(spec=load_topology_file(_root() / "topologies/examples/fat-tree-3tier.yaml"),
                                        n_gpus=64), {}, None)]
    for name in ("dgx-a100", "dgx-b200", "aws-p5", "aws-p4de", "nvlink", "pcie", "infiniband", "ethernet"):
        spec = load_preset(name)
        out += [(f"{name}-{n}", Topology(spec=spec, n_gpus=n), {}, None)
                for n in (2 * spec.node.gpus_per_node, 5 * spec.node.gpus_per_node)]
    return out


def _check(topo, kw, degradations):
    healthy = NcclCollectives(topo, **kw)
    if degradations is None:
        degradations = [f"{c}:{p}%" for c in healthy.network.link_classes for p in (1, 10, 50, 90, 99.9)]
        degradations += ["node0.gpu0:10%", "node1.gpu3:50%", "node0.nic0:10%"]
    checked = 0
    for d in degradations:
        try:
            slow = NcclCollectives(topo, degradations=[parse_degradation(d)], **kw)
        except DpsimError:
            continue  # a link this cluster has not (a NIC on one NVLink domain, a GPU past the server's)
        for op in ("all_reduce", "reduce_scatter", "all_gather"):
            for algorithm, protocol in healthy.candidates(op):
                for size in SIZES:
                    a = healthy.cost(algorithm, protocol, op, size).time_s
                    b = slow.cost(algorithm, protocol, op, size).time_s
                    assert b >= a * (1 - 1e-12), (d, op, algorithm, protocol, size, a, b)
                    checked += 1
    assert checked


@pytest.mark.parametrize("cid, topo, kw, degradations", [pytest.param(*c, id=c[0]) for c in _clusters(True)])
def test_a_degraded_link_never_makes_a_collective_faster(cid, topo, kw, degradations):
    _check(topo, kw, degradations)


@pytest.mark.slow
@pytest.mark.parametrize("cid, topo, kw, degradations", [pytest.param(*c, id=c[0]) for c in _clusters(False)])
def test_a_degraded_link_never_makes_a_collective_faster_anywhere(cid, topo, kw, degradations):
    _check(topo, kw, degradations)


def test_the_nvl72_ib_step_is_no_faster_with_a_degraded_domain():
    """The fuzzed case: nvl72-ib at 288 GPUs, NVLS + tree and tree, every NVLink-domain link at 10 %."""
    topo = Topology(spec=load_topology_file(_root() / NVL72), n_gpus=288)
    for algorithm in ("nvls_tree", "tree"):
        healthy = NcclCollectives(topo, algorithms=(algorithm,))
        slow = NcclCollectives(topo, algorithms=(algorithm,), degradations=[parse_degradation("nvlink-domain:10%")])
        for size in (2.5e7, 1e8, 1e9):
            assert slow.time("all_reduce", size).time_s >= healthy.time("all_reduce", size).time_s


def test_flows_re_share_as_they_finish():
    """Two flows on one link of 10 B/s, 10 and 30 bytes: 5 B/s each until the small one finishes
    at 2 s, then 10 B/s for the 20 bytes left: 4 s (a fixed share said 6 s); a third flow alone on
    another link keeps its rate and finishes at size / rate exactly."""
    flow_of, link_of = np.array([0, 1, 2]), np.array([0, 0, 1])
    cap = np.array([10.0, 3.0])

    def rates_of(alive):
        out = np.full(3, np.inf)
        keep = alive[flow_of]
        idx = np.flatnonzero(alive)
        remap = np.full(3, -1)
        remap[idx] = np.arange(len(idx))
        out[idx] = max_min_sparse(remap[flow_of[keep]], link_of[keep], cap, len(idx))
        return out

    finish = progressive_finish(np.array([10.0, 30.0, 7.0]), rates_of)
    assert finish.tolist() == [2.0, 4.0, 7.0 / 3.0]


@pytest.mark.parametrize("cid", ["nvl72-ib-288", "gb200-nvl72-144"])
def test_nvls_tree_in_server_part_is_charged_to_a_degraded_domain(cid):
    """NVLS + tree's NVLS part reduces in the NVLink domain's switches (an NVL72 tray has none of its own), so a
    degraded domain slows it too, sharing the tray's link into the domain with the tree's flows. Before, it stayed
    on the GPU links and ran faster degraded than healthy (nvl72-ib, 288 GPUs, ``nvlink-domain:10%``: the in-server
    part 2.61 against 3.04 ps per byte, its pipeline rate the healthy 106.6 GB/s)."""
    from dpsim.collectives.plan_cost import SYMMETRIC, WHOLE_CLUSTER, PlanEvaluator

    topo = (Topology(spec=load_topology_file(_root() / NVL72), n_gpus=288) if cid.startswith("nvl72-ib")
            else Topology.from_spec(load_preset("gb200-nvl72"), 144))
    nvls_weight = 1 / 0.74  # NCCL's nvlsEfficiency on Blackwell (nvls.py)
    before = PlanEvaluator(topo, nvls_weight=nvls_weight).plan_cost("nvls_tree", "all_reduce")
    for pct in (90, 50, 10, 1):
        named = (parse_degradation(f"nvlink-domain:{pct}%"),)
        cost = PlanEvaluator(topo, nvls_weight=nvls_weight, degradations=named).plan_cost("nvls_tree", "all_reduce")
        whole = PlanEvaluator(topo, nvls_weight=nvls_weight, degradations=named,
                              symmetric=False).plan_cost("nvls_tree", "all_reduce")
        assert (cost.path, whole.path) == (SYMMETRIC, WHOLE_CLUSTER)
        # Both paths charge the tier alike, to the last bit.
        assert (cost.seconds_per_byte, cost.phase_seconds_per_byte, cost.r_intra, cost.r_inter, cost.inter_bound) == (
            whole.seconds_per_byte, whole.phase_seconds_per_byte, whole.r_intra, whole.r_inter, whole.inter_bound)
        (_, t_in, t_out), = cost.phase_seconds_per_byte
        (_, b_in, b_out), = before.phase_seconds_per_byte
        # Never faster than the next milder degradation (healthy first), part by part.
        assert t_in > b_in and t_out >= b_out and cost.seconds_per_byte >= before.seconds_per_byte, pct
        assert cost.r_intra <= before.r_intra and cost.r_inter <= before.r_inter, pct
        # The bound names the side that binds: the in-server part once it is the slower.
        assert cost.inter_bound == (t_out > t_in)
        before = cost
    assert not cost.inter_bound  # at 1 % the domain's link holds back the NVLS part most
