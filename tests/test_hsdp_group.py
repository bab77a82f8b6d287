"""HSDP's shard group (``--strategy fsdp-hybrid --zero-group N``, dpsim/strategies/registry.py GROUP_STRATEGIES).

The memory counts are made by hand from Llama-2-7B's parameter tensors (the catalog's: a transformer
block of 4 x 16,777,216 attention projections, 3 x 45,088,768 MLP matrices and 2 x 4,096 norm weights
= 202,383,360; the root unit's two 131,072,000-element embedding matrices and the final 4,096 norm =
262,148,096; 6,738,415,616 in all), not with dpsim's wrapping or sharding code.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from dpsim.errors import ConfigError
from dpsim.network.degrade import parse_degradation
from dpsim.plan.job import _checkpoint_shard_group
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict

BLOCK = 202_383_360
"""Elements of one Llama-2-7B block (an FSDP unit under the default --fsdp-unit block)."""
ROOT = 262_148_096
"""Elements of its root unit (embedding, output head, final norm)."""
PSI = 32 * BLOCK + ROOT
ADAMW_BYTES = 12
"""fp32 master, first and second moments per sharded element (bf16 parameters)."""


def _job(gpus: int, group: int | None, *, strategy: str = "fsdp-hybrid", **kw) -> PredictConfig:
    return PredictConfig(gpus=gpus, link=kw.pop("link", "infiniband"), model="llama-2-7b", micro_batch=1,
                         strategy=strategy, precision="bf16-params", zero_group=group, steps=1, **kw)


def _without_group(d: dict) -> dict:
    """A prediction's JSON less the echo of its own configuration (which names the flag given)."""
    d = dict(d)
    d.pop("config", None)
    d.pop("provenance", None)
    return d


@pytest.mark.parametrize("link, gpus", [("infiniband", 32), ("infiniband", 16), ("aws-p4de", 32), ("ethernet", 16)])
def test_a_node_sized_group_is_todays_default_exactly(link, gpus):
    default, node = predict(_job(gpus, None, link=link)), predict(_job(gpus, 8, link=link))
    assert node.step_time_s == default.step_time_s
    assert node.program.comms == default.program.comms
    assert _without_group(node.to_dict()) == _without_group(default.to_dict())


def test_a_group_of_every_rank_is_full_shard():
    """One replica: no all-reduce, and FSDP FULL_SHARD's bytes, memory and step."""
    full, hybrid = predict(_job(32, None, strategy="fsdp")), predict(_job(32, 32))
    assert hybrid.program.comms and "all_reduce" not in {c.op for c in hybrid.program.comms}
    by_op = lambda p: {op: sum(c.size_bytes for c in p.program.comms if c.op == op)  # noqa: E731
                       for op in {c.op for c in p.program.comms}}
    assert by_op(hybrid) == by_op(full)
    assert dataclasses.replace(hybrid.memory, strategy="fsdp") == full.memory
    assert hybrid.step_time_s == pytest.approx(full.step_time_s, rel=1e-9)


@pytest.mark.parametrize("group", [4, 8, 16, 32])
def test_bytes_are_conserved_across_group_sizes(group):
    """The gathers and reduce-scatters move the whole (padded) model whatever the group; each
    reduce-scatter's shard, 1/N of it, is what the replicas all-reduce."""
    p = predict(_job(32, group))
    comms = p.program.comms
    gathered = sum(c.size_bytes for c in comms if c.op == "all_gather")
    scattered = sum(c.size_bytes for c in comms if c.op == "reduce_scatter")
    reduced = sum(c.size_bytes for c in comms if c.op == "all_reduce")
    ref = predict(_job(32, None))
    assert gathered == sum(c.size_bytes for c in ref.program.comms if c.op == "all_gather")
    assert scattered == sum(c.size_bytes for c in ref.program.comms if c.op == "reduce_scatter")
    assert reduced * group == (scattered if group < 32 else 0)
    assert {c.group for c in comms if c.op in ("all_gather", "reduce_scatter")} == {"intra"}
    assert {c.group for c in comms if c.op == "all_reduce"} <= {"inter"}


@pytest.mark.parametrize("group", [4, 16, 64])
def test_memory_per_rank_is_the_shard_of_n_ranks(group):
    """bf16 parameters under FSDP mixed precision: the fp32 master and two moments (12 B) and the fp32
    gradient shard (4 B) of each unit's 1/N (FSDP1 pads a unit to a multiple of N: none here)."""
    p = predict(_job(128, group))
    shard = 32 * -(-BLOCK // group) + -(-ROOT // group)
    assert shard * group == PSI
    assert p.memory.optimizer_bytes == ADAMW_BYTES * shard
    assert p.memory.gradients_bytes == 4 * shard
    assert p.memory.shard_group_size == group


def test_a_cross_node_group_reaches_the_nics_and_fits_seventy_b():
    """The expressibility sweep's J11 (validation/large_model_runs.md): Llama-3-70B HSDP on 128 H100
    does not fit with one-node shards; shard degree 64 does."""
    kw = dict(gpus=128, link="infiniband", model="llama-3-70b", micro_batch=1, global_batch=128,
              strategy="fsdp-hybrid", precision="bf16-params", recompute="full", steps=1)
    node, wide = predict(PredictConfig(**kw)), predict(PredictConfig(**kw, zero_group=64))
    assert not node.memory.fits and wide.memory.fits
    d = wide.to_dict()
    assert d["memory"]["shard_group_size"] == 64
    assert json.loads(json.dumps(d))["config"]["zero_group"] == 64


@pytest.mark.parametrize("gpus, group, strategy, expected", [
    (32, 3, "fsdp-hybrid", "--zero-group: 3 does not divide the 32 data-parallel ranks"),
    (32, 64, "fsdp-hybrid", "--zero-group: 64 does not divide the 32 data-parallel ranks"),
    (48, 12, "fsdp-hybrid", "--zero-group: 12 neither divides nor is a multiple of the 8 GPUs per node"),
    (32, 0, "fsdp-hybrid", "--zero-group: 0 is not valid"),
    (32, -8, "fsdp-hybrid", "--zero-group: -8 is not valid"),
    (32, 16, "fsdp", "--zero-group: 16 applies to --strategy fsdp-hybrid (ranks per shard group), zero3"),
    (32, 16, "zero2", "not --strategy zero2; leave it out"),
    (32, 16, "ddp", "not --strategy ddp; leave it out"),
])
def test_bad_groups_are_refused_in_one_line(gpus, group, strategy, expected):
    with pytest.raises(ConfigError) as err:
        predict(_job(gpus, group, strategy=strategy))
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_one_named_link_maps_onto_the_cross_node_shard_groups_holding_it():
    """A 16-rank shard group spans two servers: NIC 3 of node 1 is in one shard group's copy and one
    replica group's, which then pace the step (communicator_degradations)."""
    healthy = predict(_job(32, 16)).step_time_s
    slow_nic = predict(_job(32, 16), degradations=(parse_degradation("node1.nic3:25%"),)).step_time_s
    whole_class = predict(_job(32, 16), degradations=(parse_degradation("infiniband:25%"),)).step_time_s
    assert healthy < slow_nic <= whole_class
    assert predict(_job(32, 16), degradations=(parse_degradation("node1.nic3:100%"),)).step_time_s == healthy
    with pytest.raises(ConfigError, match=r"^--degrade: 'node4.nic0:50%' names node 4, but there are 4 nodes"):
        predict(_job(32, 16), degradations=(parse_degradation("node4.nic0:50%"),))


def test_goodput_checkpoints_the_shard_group():
    """One shard group holds the whole optimizer state, so it is what writes a checkpoint."""
    assert _checkpoint_shard_group(_job(128, 64), "fsdp-hybrid", 128, 8) == 64
    assert _checkpoint_shard_group(_job(128, None), "fsdp-hybrid", 128, 8) == 8


def test_sweep_takes_the_group_as_an_axis():
    """Like the other strategy options (--axis zero_impl=..., fsdp_version=...)."""
    from dpsim.plan.sweep import sweep

    df = sweep(gpus=32, link="infiniband", model="llama-2-7b", micro_batch=1, strategy="fsdp-hybrid",
               precision="bf16-params", steps=1, zero_group=[8, 16, 32])
    assert list(df["zero_group"]) == [8, 16, 32]
    assert list(df["step_time_s"]) == [predict(_job(32, g)).step_time_s for g in (8, 16, 32)]


@pytest.mark.parametrize("link", ["infiniband", "aws-p4de"])
def test_the_groups_as_clusters(link):
    """A shard group of N consecutive ranks (whole servers above one), a replica group of one rank per
    shard group with its server's NIC share; the node-sized group is the default's pair exactly."""
    from dpsim.collectives.groups import communicators
    from dpsim.predict.run import resolve_topology

    job = resolve_topology(_job(64, None, link=link))
    gpn, fabric = job.gpus_per_node, job.spec.fabric
    assert communicators(job, gpn) == communicators(job)
    wide = communicators(job, 32)
    assert (wide["intra"].topology.n_gpus, wide["intra"].topology.n_nodes, wide["intra"].concurrent) == (32, 4, 1)
    inter = wide["inter"].topology
    assert (inter.n_gpus, inter.n_nodes, wide["inter"].concurrent) == (2, 2, gpn)
    assert inter.spec.fabric.nic_bandwidth_bytes_per_s * inter.spec.fabric.nics_per_node == pytest.approx(
        fabric.nic_bandwidth_bytes_per_s * fabric.nics_per_node / gpn)
    narrow = communicators(job, 2)
    assert (narrow["intra"].topology.n_gpus, narrow["intra"].topology.n_nodes) == (2, 1)
    inter = narrow["inter"].topology
    # 32 replicas: 4 GPUs (local ranks j, j+2, j+4, j+6) in each of the 8 servers, 2 such groups per server.
    assert (inter.n_gpus, inter.n_nodes, inter.gpus_per_node, narrow["inter"].concurrent) == (32, 8, 4, 2)
    assert inter.spec.fabric.nic_bandwidth_bytes_per_s * inter.spec.fabric.nics_per_node == pytest.approx(
        fabric.nic_bandwidth_bytes_per_s * fabric.nics_per_node / 2)


def test_advice_widens_the_shard_group_before_leaving_hsdp():
    """J11 at one-node shards does not fit: the smallest whole-server group that fits (32: 64.8 GiB of
    75.7, 16 does not) is advised, and with it the job fits."""
    kw = dict(gpus=128, link="infiniband", model="llama-3-70b", micro_batch=1, global_batch=128,
              strategy="fsdp-hybrid", precision="bf16-params", recompute="full", steps=1)
    advice = predict(PredictConfig(**kw)).fit
    assert advice.zero_group == 32 and advice.strategy is None and advice.to_dict()["zero_group"] == 32
    assert "use --zero-group 32" in advice.message
    assert not predict(PredictConfig(**kw, zero_group=16)).memory.fits
    assert predict(PredictConfig(**kw, zero_group=32)).memory.fits
