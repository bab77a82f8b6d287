"""HSDP (``--strategy fsdp-hybrid``) under tensor and pipeline parallelism, as torchtitan runs it
(``dp_replicate x dp_shard x cp x tp x pp``, ``ParallelDims`` in torchtitan/distributed/parallel_dims.py
@0119de156de5): fsdp within shard groups of ``--zero-group`` data-parallel ranks, each gradient shard then
all-reduced across the groups."""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import memory_for_config, predict

JOB = dict(model="llama-3-8b", link="infiniband", precision="bf16-mixed", tp=4, micro_batch=1, steps=1)


def _config(pp: int, dp: int, strategy: str, zero_group: int | None = None, micro_batches: int = 4) -> PredictConfig:
    return PredictConfig(**JOB, pp=pp, gpus=4 * pp * dp, global_batch=dp * micro_batches, strategy=strategy,
                         zero_group=zero_group)


@pytest.mark.parametrize("pp", [1, 2])
def test_hsdp_memory_is_fsdp_memory_on_its_shard_group(pp):
    # An independent count: a rank of 8-rank shard groups among 32 replicas holds what a rank of fsdp over 8
    # replicas holds (the same shard of weights, gradients and optimizer state, the same micro-batches in flight).
    hsdp = memory_for_config(_config(pp, 32, "fsdp-hybrid", 8))[0]
    fsdp = memory_for_config(_config(pp, 8, "fsdp"))[0]
    for part in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "comm_buffers_bytes"):
        assert getattr(hsdp, part) == getattr(fsdp, part), part
    assert hsdp.shard_group_size == 8
    # And less state than a node-free replica (ddp-like zero1 shards only the optimizer over all 32).
    assert hsdp.optimizer_bytes == pytest.approx(4 * memory_for_config(_config(pp, 32, "fsdp"))[0].optimizer_bytes,
                                                 rel=1e-3)


@pytest.mark.parametrize("pp", [1, 2])
def test_hsdp_reduces_every_gradient_byte_once_and_each_shard_across_replicas(pp):
    fsdp = predict(_config(pp, 32, "fsdp"))
    hsdp = predict(_config(pp, 32, "fsdp-hybrid", 8))
    # The same buckets reduce-scattered (on the shard group instead of all 32), each followed by the
    # all-reduce of its shard, 1/8 of its bytes (rounded up per bucket), across the 4 replica groups.
    assert hsdp.n_buckets == 2 * fsdp.n_buckets
    extra = hsdp.gradient_bytes - fsdp.gradient_bytes
    assert fsdp.gradient_bytes / 8 <= extra <= fsdp.gradient_bytes / 8 + fsdp.n_buckets * 2


def test_one_shard_group_of_every_replica_is_fsdp():
    a = predict(_config(2, 16, "fsdp-hybrid", 16))
    b = predict(_config(2, 16, "fsdp"))
    assert a.step_time_s == b.step_time_s and a.memory.total_bytes == b.memory.total_bytes


@pytest.mark.parametrize("changes, needle", [
    (dict(zero_group=None), "^--zero-group: --strategy fsdp-hybrid with --tp 4 --pp 2 needs its shard group"),
    (dict(zero_group=3), "^--zero-group: 3 does not divide the 32 data-parallel ranks"),
    (dict(offload="optimizer"), "^--offload: optimizer"),
])
def test_hsdp_layout_refuses_what_it_does_not_model(changes, needle):
    fields = {**JOB, "pp": 2, "gpus": 4 * 2 * 32, "global_batch": 128, "strategy": "fsdp-hybrid", "zero_group": 8,
              **changes}
    with pytest.raises(ConfigError, match=needle):
        predict(PredictConfig(**fields))


def test_hsdp_shard_group_must_tile_the_servers():
    # tp 2 on 8-GPU servers: 4 data-parallel ranks a server; a group of 6 neither divides nor fills them.
    cfg = PredictConfig(**{**JOB, "tp": 2}, pp=1, gpus=96, global_batch=96, strategy="fsdp-hybrid", zero_group=6)
    with pytest.raises(ConfigError, match="^--zero-group: 6 neither divides nor is a multiple of the 4 data-parallel"):
        predict(cfg)


# Context parallelism: torchtitan folds the cp ranks into the shard dimension (dp_shard_cp), so a shard group is
# --zero-group data-parallel ranks with their cp ranks (tp apart, cp faster than dp in the rank order).
LONG = dict(model="llama-2-7b", link="infiniband", precision="bf16-mixed", seq_len=16384, tp=4, cp=2,
            micro_batch=1, steps=1)


def _cp(dp: int, strategy: str, zero_group: int | None = None, **kw) -> PredictConfig:
    return PredictConfig(**{**LONG, **kw}, gpus=4 * 2 * dp, global_batch=4 * dp, strategy=strategy,
                         zero_group=zero_group)


def test_hsdp_with_context_parallelism_shards_over_its_groups_context_ranks_too():
    # An independent count: HSDP with 4-rank shard groups among 16 replicas holds what fsdp over 4 replicas does
    # (each with its 2 context-parallel ranks: the state split 8 ways either way).
    hsdp = memory_for_config(_cp(16, "fsdp-hybrid", 4))[0]
    fsdp = memory_for_config(_cp(4, "fsdp"))[0]
    for part in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "comm_buffers_bytes"):
        assert getattr(hsdp, part) == getattr(fsdp, part), part
    assert hsdp.shard_group_size == fsdp.shard_group_size == 8


def test_hsdp_with_context_parallelism_reduces_each_shard_across_the_replicas():
    fsdp, hsdp = predict(_cp(16, "fsdp")), predict(_cp(16, "fsdp-hybrid", 4))
    # The buckets reduce-scattered on the 8-rank shard groups, each then all-reduced as 1/8 of its bytes across
    # the 4 replica groups.
    assert hsdp.n_buckets == 2 * fsdp.n_buckets
    extra = hsdp.gradient_bytes - fsdp.gradient_bytes
    assert fsdp.gradient_bytes / 8 <= extra <= fsdp.gradient_bytes / 8 + fsdp.n_buckets * 2
    # One shard group of every replica is fsdp.
    one = predict(_cp(16, "fsdp-hybrid", 16))
    assert one.step_time_s == fsdp.step_time_s and one.memory.total_bytes == fsdp.memory.total_bytes


def test_hsdp_communicators_with_context_parallelism():
    from dpsim.collectives.groups import LayoutShape, layout_communicators
    from dpsim.topology.cluster import Topology
    from dpsim.topology.load import load_preset

    job = Topology(spec=load_preset("infiniband"), n_gpus=128)
    comms = layout_communicators(job, LayoutShape(tp=4, pp=1, dp=16, cp=2, zero_group=4))
    # Shard group: 4 dp x 2 cp ranks, 4 apart (2 a server of 8): 4 servers. Replica group: 4 ranks, 32 apart.
    assert (comms["zero"].topology.n_gpus, comms["zero"].topology.n_nodes) == (8, 4)
    assert (comms["zrep"].topology.n_gpus, comms["zrep"].topology.n_nodes) == (4, 4)
    assert comms["dp"].topology.n_gpus == 32


def test_hsdp_with_context_parallelism_tiles_the_servers_by_its_context_ranks():
    # tp 2 x cp 2 on 8-GPU servers: 2 data-parallel ranks a server; a group of 3 neither divides nor fills them.
    with pytest.raises(ConfigError, match="^--zero-group: 3 neither divides nor is a multiple of the 2 data-parallel"):
        predict(_cp(12, "fsdp-hybrid", 3, tp=2))
