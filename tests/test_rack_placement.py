"""``--rack-placement aligned|contiguous``: a job's groups on multi-server NVLink domains (gb200-nvl72's racks).

``aligned`` (the default) is every group's copies in segments inside one domain, as before; ``contiguous`` fills
the racks in rank order and costs each group as its copy that straddles the domains worst
(:func:`dpsim.collectives.groups.rank_order_split`)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from dpsim.cli.app import app
from dpsim.collectives.groups import LayoutShape, communicators, layout_communicators, rank_order_split
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


def test_plan_refuses_contiguous_on_its_base():
    from dpsim.plan.planner import plan_layouts

    base = PredictConfig(**BASE, gpus=80, rack_placement="contiguous")
    with pytest.raises(ConfigError, match="--rack-placement: 'contiguous' on the base config is not used by plan"):
        plan_layouts(base, gpus=[80], global_batch=40)
