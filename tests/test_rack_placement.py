"""``--rack-placement aligned|contiguous``: a job's groups on multi-server NVLink domains (gb200-nvl72's racks).

``aligned`` (the default) is every group's copies in segments inside one domain, as before; ``contiguous`` fills
the racks in rank order and costs each group as its copy that straddles the domains worst
(:func:`dpsim.collectives.groups.rank_order_split`)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from dpsim.cli.app import app, main
from dpsim.collectives.algorithms import ALGORITHMS
from dpsim.collectives.algorithms.base import Cluster, dtree_parents
from dpsim.collectives.all_to_all import P2P_NET_CHUNK_BYTES, uniform_all_to_all_cost
from dpsim.collectives.groups import (
    LayoutShape,
    communicators,
    layout_communicators,
    rank_order_split,
    rank_order_splits,
)
from dpsim.network.graph_network import FlowNetwork
from dpsim.network.tiers import TierNetwork
from dpsim.errors import ConfigError
from dpsim.predict.config import PredictConfig
from dpsim.collectives.nccl import NcclCollectives
from dpsim.predict.run import build_collectives, predict
from dpsim.topology.cluster import Topology
from dpsim.topology.load import load_cluster_spec
from dpsim.topology.server import with_gpus_per_node

BASE = dict(model="llama-3-8b", seq_len=1024, link="gb200-nvl72", micro_batch=1)
TRAY = 4  # GB200 GPUs per compute tray (gb200-nvl72's servers)


def _job(gpus: int) -> Topology:
    return Topology(spec=load_cluster_spec(None, "gb200-nvl72"), n_gpus=gpus)


def _step(**kw) -> float:
    return predict(PredictConfig(**BASE, **kw)).step_time_s


def test_default_output_is_the_same_bytes_as_aligned_given():
    runner = CliRunner()
    args = ["predict", "--model", "llama-3-8b", "--seq-len", "1024", "--link", "gb200-nvl72", "--gpus", "80",
            "--tp", "4", "--pp", "2", "--global-batch", "40", "--micro-batch", "1", "--json"]
    plain = runner.invoke(app, args)
    aligned = runner.invoke(app, [*args, "--rack-placement", "aligned"])
    assert plain.exit_code == 0, plain.output
    assert aligned.output == plain.output
    assert "rack_placement" not in json.loads(plain.output)["config"]


@pytest.mark.parametrize("job", [
    dict(gpus=80, tp=4, pp=2, global_batch=40),  # a 10-tray stage: dp on 8 + 2 trays
    dict(gpus=100, strategy="fsdp-hybrid", zero_group=20),  # 5-tray shard groups: one on 3 + 2 trays
    dict(gpus=112, tp=8, pp=2, global_batch=28),  # a 14-tray stage: stage 1 on 4 + 10 trays
])
def test_contiguous_never_faster_than_aligned(job):
    aligned, contiguous = _step(**job), _step(**job, rack_placement="contiguous")
    assert contiguous >= aligned
    assert contiguous > aligned  # every case above has a straddling group


def test_whole_domains_give_the_same_step_both_ways():
    # 144 GPUs = two racks; tp 4 x dp 18 = 72 GPUs a stage, one rack each: no group straddles.
    job = dict(gpus=144, tp=4, pp=2, global_batch=36)
    assert _step(**job, rack_placement="contiguous") == _step(**job)
    shape = LayoutShape(tp=4, pp=2, dp=18)
    topo = _job(144)
    assert layout_communicators(topo, shape, contiguous=True) == layout_communicators(topo, shape)


def test_one_straddling_group_by_hand():
    # tp 4 x pp 2 on 80 GB200 (20 trays, racks of 18): stage 0 is trays 0-9, stage 1 trays 10-19. A data-parallel
    # group is one GPU of each of its stage's 10 trays; stage 1's is on trays 10-17 (rack 0) and 18-19 (rack 1).
    job = _job(80)
    aligned = layout_communicators(job, LayoutShape(tp=4, pp=2, dp=10))["dp"].topology
    assert (aligned.n_gpus, aligned.n_nodes, aligned.spec.nvlink_domain.nodes) == (10, 10, 18)  # one rack
    dp = layout_communicators(job, LayoutShape(tp=4, pp=2, dp=10), contiguous=True)["dp"].topology
    assert (dp.n_gpus, dp.n_nodes, dp.spec.nvlink_domain.nodes) == (10, 10, 8)  # 8 + 2 trays
    assert dp == rank_order_split(job, aligned, 4, 10)
    # The tensor-parallel groups (one tray each) and the world (the job itself) sit the same either way.
    comms = layout_communicators(job, LayoutShape(tp=4, pp=2, dp=10), contiguous=True)
    assert comms["tp"] == layout_communicators(job, LayoutShape(tp=4, pp=2, dp=10))["tp"]
    # HSDP with 5-tray shard groups on 100 GPUs (25 trays): the group on trays 15-19 is 3 + 2; the replica
    # group (trays 0, 5, 10, 15, 20) is 4 + 1.
    job = _job(100)
    comms = communicators(job, 20, contiguous=True)
    intra, inter = comms["intra"].topology, comms["inter"].topology
    assert (intra.n_nodes, intra.spec.nvlink_domain.nodes) == (5, 3)
    assert (inter.n_nodes, inter.spec.nvlink_domain.nodes) == (5, 4)
    # The costed all-reduce is the one of a group built by hand on 8 + 2 trays.
    cfg = dict(gpus=80, tp=4, pp=2, global_batch=40)
    shape, job, size = LayoutShape(tp=4, pp=2, dp=10), _job(80), 64e6
    gc = build_collectives(PredictConfig(**BASE, **cfg, rack_placement="contiguous"), job, layout=shape)
    # One GPU on each of 10 trays with a quarter of its tray's NICs (the tray's 4 groups share them), racks of
    # 8 trays: 8 + 2.
    fabric = job.spec.fabric
    one_gpu = dataclasses.replace(job.spec, node=with_gpus_per_node(job.spec.node, 1),
                                  fabric=dataclasses.replace(fabric, nics_per_node=fabric.nics_per_node // TRAY),
                                  nvlink_domain=dataclasses.replace(job.spec.nvlink_domain, nodes=8))
    hand = NcclCollectives(Topology(spec=one_gpu, n_gpus=10), job=job)
    costed = gc.group("dp").time("all_reduce", size).time_s
    assert costed == hand.time("all_reduce", size).time_s
    aligned = build_collectives(PredictConfig(**BASE, **cfg), job, layout=shape).group("dp")
    assert costed > aligned.time("all_reduce", size).time_s


@pytest.mark.parametrize(("job", "says"), [
    (dict(gpus=16, link="infiniband", tp=2, pp=2, global_batch=8), "no NVLink domain of several servers"),
    (dict(gpus=72, tp=2, pp=2, global_batch=36), "fit in one NVLink domain of 18 servers"),
    (dict(gpus=100, strategy="fsdp"), "no group smaller than itself"),
])
def test_refused_where_it_changes_nothing(job, says):
    with pytest.raises(ConfigError, match="--rack-placement: 'contiguous'") as err:
        predict(PredictConfig(**{**BASE, **job, "rack_placement": "contiguous"}))
    assert says in str(err.value)
    assert "\n" not in str(err.value)


def test_an_unknown_value_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="rack.placement") as err:
        PredictConfig(**BASE, gpus=80, rack_placement="segments")
    assert "aligned" in str(err.value) and "contiguous" in str(err.value)


# ---------------------------------------------------------------------------- exact pieces over three or more racks
# A group of 8 trays (one GPU each: tp 4 on 4-GPU trays) on racks of 3 trays: tp 4 x pp 3 x dp 8 on 96 GPUs, 24 trays.
# Stage 0 is trays 0-7 (3 + 3 + 2), stage 1 trays 8-15 (1 + 3 + 3 + 1), stage 2 trays 16-23 (2 + 3 + 3).
SPLITS = {(3, 3, 2): 0, (1, 3, 3, 1): 8, (2, 3, 3): 16}  # pieces -> the stage's first tray
N = 8


def _racks_of_3() -> Topology:
    spec = load_cluster_spec(None, "gb200-nvl72")
    spec = dataclasses.replace(spec, nvlink_domain=dataclasses.replace(spec.nvlink_domain, nodes=3))
    return Topology(spec=spec, n_gpus=TRAY * 24)


def _pieces(topo: Topology) -> tuple[int, ...]:
    dom = topo.spec.nvlink_domain
    return tuple(int(c) for c in np.unique(dom.domain_of(np.arange(topo.n_nodes)), return_counts=True)[1])


def _dp_racks_of_3():
    job = _racks_of_3()
    return job, layout_communicators(job, LayoutShape(tp=4, pp=3, dp=N), contiguous=True)["dp"]


def test_every_split_over_three_or_more_racks_is_kept_at_its_real_piece_sizes():
    job, dp = _dp_racks_of_3()
    splits = [dp.topology, *dp.copies]
    assert sorted(_pieces(t) for t in splits) == sorted(SPLITS)
    assert _pieces(dp.topology) == (1, 3, 3, 1)  # worst first: most pieces, then the smallest piece
    assert splits == list(rank_order_splits(job, layout_communicators(job, LayoutShape(tp=4, pp=3, dp=N))["dp"].topology,
                                            4, N))
    # Three pieces of one size and a shorter last one are uniform domains, as a design file would say them.
    uniform = next(t for t in splits if _pieces(t) == (3, 3, 2)).spec.nvlink_domain
    assert (uniform.nodes, uniform.pieces) == (3, ())
    assert dp.topology.spec.nvlink_domain.pieces == (1, 3, 3, 1)


def _brute_force_s_per_byte(job: Topology, split: Topology, first_tray: int, concurrent: int, algorithm: str,
                            op: str) -> float:
    """The plan of ``algorithm`` on the group, its ranks placed by hand on the job's own trays (rank r on tray
    ``first_tray + r``, GPU j of it for copy j), every concurrent copy at once, routed flow by flow on the
    job's whole network and max-min shared: seconds per byte of S, phase by phase."""
    cluster = Cluster.of(split)
    plan = ALGORITHMS[algorithm].plan(op, cluster)
    net = TierNetwork(job)
    gpn = job.spec.node.gpus_per_node
    trays = first_tray + np.arange(split.n_nodes)
    total = 0.0
    for ph in plan.phases:
        src = np.concatenate([trays[ph.src // cluster.stride] * gpn + j for j in range(concurrent)])
        dst = np.concatenate([trays[ph.dst // cluster.stride] * gpn + j for j in range(concurrent)])
        size = np.tile(ph.fraction, concurrent)
        total += ph.repeat * float((size / net.loads(src, dst).rates_bytes_per_s).max())
    return total


def _nic_bytes_per_s(job: Topology) -> float:
    fabric = job.spec.fabric
    return fabric.nic_bandwidth_bytes_per_s * fabric.nic_efficiency


def _crossing_tree_edges(pieces: tuple[int, ...]) -> int:
    """Most tree edges one server has to servers of other pieces, over both trees of NCCL's double binary
    tree (each edge carries the tree's half of S out of the server once, up or down)."""
    rack = np.repeat(np.arange(len(pieces)), pieces)
    most = np.zeros(N, dtype=int)
    for parent in dtree_parents(N):
        child = np.flatnonzero(parent >= 0)
        crossing = rack[child] != rack[parent[child]]
        np.add.at(most, child[crossing], 1)  # the child's edge up
        np.add.at(most, parent[child][crossing], 1)  # the parent's edge down
    return int(most.max())


@pytest.mark.parametrize("pieces", sorted(SPLITS))
@pytest.mark.parametrize(("algorithm", "op", "steps"), [("ring", "all_reduce", 2 * (N - 1)),
                                                        ("ring", "all_gather", N - 1),
                                                        ("ring", "reduce_scatter", N - 1),
                                                        ("tree", "all_reduce", None)])
def test_each_split_costs_what_its_pieces_make_the_busiest_nic_carry(pieces, algorithm, op, steps):
    job, dp = _dp_racks_of_3()
    split = next(t for t in (dp.topology, *dp.copies) if _pieces(t) == pieces)
    costed = NcclCollectives(split).plan_cost(algorithm, op).seconds_per_byte
    # Against a brute-force flow simulation of the same placement on the job's own network.
    assert costed == pytest.approx(_brute_force_s_per_byte(job, split, SPLITS[pieces], dp.concurrent, algorithm, op),
                                   rel=1e-12)
    # From first principles: every flow between two pieces leaves by its server's NIC (the group's one NIC per
    # tray), which carries the most of them; the NVLink domain is 37x faster.
    nic = _nic_bytes_per_s(job)
    if algorithm == "ring":
        # Each of a ring's steps moves S/N on every edge; an edge between pieces is the only one on its source's
        # NIC out and its destination's NIC in, whatever the pieces' sizes (more pieces: more such edges, each on
        # other servers).
        assert costed == pytest.approx(steps / N / nic, rel=1e-12)
    else:
        # Both trees stream at once, each with half of S on every edge, both ways: the busiest NIC carries half of S
        # per tree edge of its server that leaves its piece.
        assert costed == pytest.approx(_crossing_tree_edges(pieces) * 0.5 / nic, rel=1e-12)


def test_the_slowest_copy_depends_on_the_collective():
    job, dp = _dp_racks_of_3()
    assert [_crossing_tree_edges(p) for p in sorted(SPLITS)] == [2, 3, 3]  # 1+3+3+1 is the tree's lightest
    size = 256e6
    gc = build_collectives(PredictConfig(**{**BASE, "gpus": 96}, tp=4, pp=3, global_batch=24,
                                         rack_placement="contiguous"), job, layout=LayoutShape(tp=4, pp=3, dp=N))
    model = gc.group("dp")
    per_copy = {_pieces(t): NcclCollectives(t).cost("tree", "Simple", "all_reduce", size).time_s
                for t in (dp.topology, *dp.copies)}
    assert per_copy[(3, 3, 2)] > per_copy[(1, 3, 3, 1)]  # the worst-placed copy is not the tree's slowest
    assert model.time("all_reduce", size).time_s == max(m.time("all_reduce", size).time_s for m in model.models)
    # The flat all-to-all loads the smallest piece's NICs most: (N - smallest) / N of each rank's bytes.
    for t in (dp.topology, *dp.copies):
        one = dataclasses.replace(dp, topology=t, copies=())
        a2a = uniform_all_to_all_cost(one, size)
        scale = NcclCollectives(t).facts.nic_scale(P2P_NET_CHUNK_BYTES)
        assert a2a.bottleneck == "infiniband"
        assert a2a.transfer_s == pytest.approx((N - min(_pieces(t))) / N * size / (_nic_bytes_per_s(job) * scale),
                                               rel=1e-12)
    slowest = uniform_all_to_all_cost(dp, size)
    assert slowest == uniform_all_to_all_cost(dataclasses.replace(dp, copies=()), size)  # 1+3+3+1's
    # ...and as the job's own network carries it: every pair of ranks of each concurrent copy, flow by flow.
    net = TierNetwork(job)
    gpn, first = job.spec.node.gpus_per_node, SPLITS[(1, 3, 3, 1)]
    a, b = np.meshgrid(np.arange(N), np.arange(N), indexing="ij")
    off = a != b
    src = np.concatenate([(first + a[off]) * gpn + j for j in range(dp.concurrent)])
    dst = np.concatenate([(first + b[off]) * gpn + j for j in range(dp.concurrent)])
    carried = net.loads(src, dst).link_bytes(np.full(len(src), size / N))
    cap = net.capacity_bytes_per_s.copy()
    cap[net.nic_links()] *= NcclCollectives(dp.topology).facts.nic_scale(P2P_NET_CHUNK_BYTES)
    assert slowest.transfer_s == pytest.approx(float((carried / cap).max()), rel=1e-12)


def test_pieces_route_as_the_graph_does():
    # The network's arithmetic against a breadth-first search on the graph of the same pieces.
    _, dp = _dp_racks_of_3()
    topo = dp.topology
    net = TierNetwork(topo)
    graph = FlowNetwork(topo.graph)
    src, dst = np.meshgrid(np.arange(N), np.arange(N), indexing="ij")
    off = src != dst
    assert np.allclose(net.loads(src[off], dst[off]).rates_bytes_per_s,
                       graph.loads(src[off], dst[off]).rates_bytes_per_s)
    assert not topo.single_nvlink_domain and topo.crosses_nics
    # The first piece is the one a cluster of its first servers sits in: one tray of 1 + 3 + 3 + 1.
    assert dataclasses.replace(topo, n_gpus=1).single_nvlink_domain
    assert not dataclasses.replace(topo, n_gpus=2).single_nvlink_domain


# ---------------------------------------------------------------------------- plan, sweep, memory
PLAN_SEARCH = dict(gpus=[80], global_batch=40, tps=[4], pps=[2], strategies=["ddp"], micro_batches=[1],
                   recomputes=["off"], schedules=["1f1b"], sequence_parallel=False, verify=1)


def test_plan_ranks_its_layouts_under_contiguous_placement():
    from dpsim.plan.planner import plan_layouts

    aligned = plan_layouts(PredictConfig(**BASE, gpus=80), **PLAN_SEARCH)
    contiguous = plan_layouts(PredictConfig(**BASE, gpus=80, rack_placement="contiguous"), **PLAN_SEARCH)
    a, c = aligned.ranked[0], contiguous.ranked[0]
    assert a.candidate == c.candidate  # tp 4 x pp 2 x dp 10: stage 1's data-parallel group on 8 + 2 trays
    assert c.step_time_s > a.step_time_s  # the closed form costs the straddling group...
    # ...and the simulated layout is predict's own under the flag, the command saying it.
    assert c.verified.step_time_s == _step(gpus=80, tp=4, pp=2, global_batch=40, rack_placement="contiguous")
    assert c.verified.step_time_s > a.verified.step_time_s
    assert "--rack-placement contiguous" in c.candidate.command(contiguous_base := PredictConfig(
        **BASE, gpus=80, rack_placement="contiguous"))
    assert "--rack-placement" not in a.candidate.command(PredictConfig(**BASE, gpus=80))
    assert c.candidate.config(contiguous_base).cluster.rack_placement == "contiguous"


def test_plan_costs_data_parallelism_alone_aligned_under_contiguous():
    from dpsim.plan.planner import plan_layouts

    search = dict(PLAN_SEARCH, tps=[1], pps=[1], strategies=["zero1", "fsdp-hybrid"], global_batch=80, verify=0)
    base = PredictConfig(**BASE, gpus=80, rack_placement="contiguous")
    found = plan_layouts(base, **search)
    alone = [e for e in found.ranked if e.candidate.zero_group is None]
    assert alone and all(e.candidate.config(base).cluster.rack_placement == "aligned" for e in alone)
    assert all("--rack-placement" not in e.candidate.command(base) for e in alone)  # predict would refuse it
    same = {e.candidate: e.step_time_s for e in plan_layouts(PredictConfig(**BASE, gpus=80), **search).ranked}
    assert all(e.step_time_s == same[e.candidate] for e in alone)


@pytest.mark.parametrize(("base", "search", "says"), [
    (dict(gpus=72), dict(gpus=[72], global_batch=36), "72 GPUs fit in one NVLink domain of 18 servers"),
    (dict(gpus=72), dict(gpus=[36, 72], global_batch=36), "--gpus 36,72 all fit in one NVLink domain"),
    (dict(gpus=16, link="infiniband"), dict(gpus=[16], global_batch=16), "no NVLink domain of several servers"),
    (dict(gpus=80), dict(gpus=[80], global_batch=80, tps=[1], pps=[1], strategies=["ddp", "zero1"]),
     "every searched layout is data parallelism alone"),
])
def test_plan_refuses_contiguous_where_it_changes_nothing(base, search, says):
    from dpsim.plan.planner import plan_layouts

    with pytest.raises(ConfigError, match="--rack-placement: 'contiguous' changes nothing here") as err:
        plan_layouts(PredictConfig(**{**BASE, **base, "rack_placement": "contiguous"}), **search)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_sweep_passes_the_placement_to_each_point():
    args = ["sweep", "--model", "llama-3-8b", "--seq-len", "1024", "--link", "gb200-nvl72", "--gpus", "80",
            "--micro-batch", "1", "--axis", "tp=4", "--axis", "pp=2", "--axis", "global_batch=40",
            "--rack-placement", "aligned,contiguous", "--json"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    rows = {r["rack_placement"]: r["step_time_s"] for r in json.loads(out.output)["rows"]}
    assert rows == {"aligned": _step(gpus=80, tp=4, pp=2, global_batch=40),
                    "contiguous": _step(gpus=80, tp=4, pp=2, global_batch=40, rack_placement="contiguous")}


def test_memory_ignores_the_placement_but_refuses_what_predict_refuses(capsys):
    runner = CliRunner()
    args = ["memory", "--model", "llama-3-8b", "--seq-len", "1024", "--link", "gb200-nvl72", "--micro-batch", "1",
            "--tp", "4", "--pp", "2", "--json"]
    plain = runner.invoke(app, [*args, "--gpus", "80"])
    contiguous = runner.invoke(app, [*args, "--gpus", "80", "--rack-placement", "contiguous"])
    assert plain.exit_code == 0 and contiguous.exit_code == 0, contiguous.output
    assert contiguous.output == plain.output  # memory does not depend on the placement
    assert main([*args, "--gpus", "72", "--rack-placement", "contiguous"]) == 2
    refused = capsys.readouterr().err
    assert main(["predict", *args[1:], "--gpus", "72", "--global-batch", "36", "--rack-placement", "contiguous"]) == 2
    assert refused == capsys.readouterr().err  # predict's own line
    assert len(refused.splitlines()) == 1 and refused.startswith("dpsim: error: --rack-placement: 'contiguous'")
    assert "72 GPUs fit in one NVLink domain" in refused


@pytest.mark.parametrize("command", [
    ["plan", "--gpus", "80", "--global-batch", "40"], ["sweep", "--gpus", "80"], ["memory", "--gpus", "80"],
    ["predict", "--gpus", "80"]])
def test_an_unknown_value_is_one_line_in_every_command(command, capsys):
    assert main([*command, "--model", "llama-3-8b", "--link", "gb200-nvl72", "--rack-placement", "segments"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["dpsim: error: --rack-placement: 'segments' is not known; choose one of aligned, "
                                "contiguous"]


def test_the_link_report_is_the_slowest_copys():
    # Stage 1's data-parallel group is on 8 + 2 trays, stage 0's on 10 of one rack: the report names the NICs.
    pred = predict(PredictConfig(**BASE, gpus=80, tp=4, pp=2, global_batch=40, rack_placement="contiguous"))
    assert pred.links is not None
    assert {u.link_class for u in pred.links.bottleneck} == {"infiniband"}
    aligned = predict(PredictConfig(**BASE, gpus=80, tp=4, pp=2, global_batch=40))
    assert "infiniband" not in {u.link_class for u in aligned.links.bottleneck}


@pytest.mark.parametrize(("algorithm", "op"), [("ring", "all_reduce"), ("ring", "all_gather"),
                                               ("tree", "all_reduce"), ("nvls_tree", "all_reduce")])
def test_pieces_cost_the_same_by_symmetry_as_flow_by_flow(algorithm, op):
    # Two GPUs per tray (tp 2): flows inside the trays share the NVLink links with those between them.
    job = _racks_of_3()
    dp = layout_communicators(job, LayoutShape(tp=2, pp=3, dp=16), contiguous=True)["dp"]
    assert {_pieces(t) for t in (dp.topology, *dp.copies)} == set(SPLITS)
    for t in (dp.topology, *dp.copies):
        fast, whole = NcclCollectives(t).plan_cost(algorithm, op), NcclCollectives(t, symmetric=False).plan_cost(
            algorithm, op)
        assert fast.path == "symmetric"
        assert fast.seconds_per_byte == pytest.approx(whole.seconds_per_byte, rel=1e-12)
        assert fast.r_inter == pytest.approx(whole.r_inter, rel=1e-12)
