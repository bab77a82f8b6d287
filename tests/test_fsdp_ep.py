"""Sharded data parallelism with expert parallelism lowers the routed experts as its framework runs them, one path
for every sharded strategy, with or without pipeline stages. torchtitan's apply_fsdp wraps
``transformer_block.moe.experts`` in a ``fully_shard`` of its own on the expert mesh ``if
transformer_block.moe_enabled and ep_degree > 1`` (models/llama4/infra/parallelize.py@05a6cb3895a5), that mesh's
shard dimension being the expert-data-parallel ranks, ``dp_shard x cp / ep`` (``dp_shard_mod_ep``/``efsdp``,
distributed/parallel_dims.py@0119de156de5): plain ``fsdp`` gathers and reduce-scatters the experts on ``edp``, the
dense parameters on ``dp``; HSDP on ``ezero``/``ezrep`` beside ``zero``/``zrep``; with ep 1 the experts are in their
block's unit, gathered and reduced with the dense parameters (HSDP's shard group and replica all-reduce)."""

from __future__ import annotations

import pytest

from dpsim.predict.config import PredictConfig
from dpsim.predict.run import memory_for_config, predict
from expert_layouts import DENSE, DENSE_BLOCK, EXPERT, MIXTRAL, bytes_by_group, program


def _config(*, gpus: int = 64, pp: int = 1, ep: int = 8, strategy: str = "fsdp", global_batch: int = 128,
            **kw) -> PredictConfig:
    return PredictConfig(**{**MIXTRAL, **kw}, gpus=gpus, pp=pp, ep=ep, strategy=strategy, global_batch=global_batch)


@pytest.mark.parametrize("pp, ep", [(1, 8), (1, 4), (2, 4), (2, 8)])
def test_fsdp_bytes_per_collective_group(monkeypatch, pp, ep):
    # The dense parameters on dp, the rank's own experts on edp: each group carries exactly its kind's bytes
    # (bf16 weights and gradients), the two adding up to every parameter the rank holds, nothing elsewhere.
    dp = 64 // pp
    _, plan = program(monkeypatch, _config(pp=pp, ep=ep))
    got = bytes_by_group(plan)
    stage_blocks = 32 // pp
    experts = stage_blocks * 8 // ep * EXPERT
    dense = stage_blocks * DENSE_BLOCK + 131_072_000 + (131_072_000 + 4096 if pp == 1 else 0)
    micro_batches = 128 // dp
    rounds = micro_batches if pp == 1 else 1
    gathers = 2 * micro_batches if pp == 1 else 1
    assert got == {("dp", "reduce_scatter"): rounds * 2 * dense, ("edp", "reduce_scatter"): rounds * 2 * experts,
                   ("dp", "all_gather"): gathers * 2 * dense, ("edp", "all_gather"): gathers * 2 * experts}


@pytest.mark.parametrize("dp, cp, tp, ep, want", [(64, 1, 1, 8, 8), (64, 1, 1, 4, 16), (16, 2, 1, 8, 4),
                                                  (16, 1, 2, 8, 4)])
def test_expert_gather_group_is_dp_cp_over_ep(dp, cp, tp, ep, want):
    # fsdp's experts gather on edp: dp x cp / ep ranks (x tp / etp), ep x etp apart.
    from dpsim.collectives.groups import LayoutShape, layout_communicators
    from dpsim.strategies.layout import Layout
    from dpsim.topology.cluster import Topology
    from dpsim.topology.load import load_preset

    assert Layout(dp=dp, cp=cp, tp=tp, ep=ep, strategy="fsdp").expert_shard_group == tp * dp * cp // ep == want
    job = Topology(spec=load_preset("infiniband"), n_gpus=tp * dp * cp)
    comms = layout_communicators(job, LayoutShape(tp=tp, pp=1, dp=dp, cp=cp, ep=ep))
    assert comms["edp"].topology.n_gpus == want
    assert comms["dp"].topology.n_gpus == dp * cp


def test_fsdp_program_gathers_experts_on_edp_only(monkeypatch):
    # The command of issue 28's HSDP note: every expert collective on edp (8 ranks, one a server), not on dp (64).
    result, plan = program(monkeypatch, _config())
    groups = {op.group for op in plan.program.comms if "experts" in op.name}
    assert groups == {"edp"}
    assert result.layout.layout.expert_shard_group == 8


def test_fsdp_memory_per_rank_is_the_hand_count():
    # 64 ranks, ep 8: the dense state over 64 ranks (ceil(1,605,636,096 / 64) = 25,088,064), the rank's one expert
    # of each of 32 blocks over the 64 / 8 = 8 ranks holding it (32 x 176,160,768 / 8 = 704,643,072).
    m = memory_for_config(_config())[0]
    shard = -(-DENSE // 64) + 32 * EXPERT // 8
    assert shard == 25_088_064 + 704_643_072 == 729_731_136
    assert m.weights_bytes == 2 * shard == 1_459_462_272
    assert m.gradients_bytes == 2 * shard
    assert m.optimizer_bytes == 12 * shard == 8_756_773_632
    # Resharded after forward: the block and its experts gathered (torchtitan prefetches the next block with its
    # experts), current and prefetched, and the unsharded gradient: (41,984,000 + 176,160,768) x (2 + 2 + 2).
    assert m.comm_buffers_bytes == (DENSE_BLOCK + EXPERT) * 6 == 1_308_868_608
    assert m.shard_group_size == 64


def test_one_expert_shard_per_rank_gathers_no_experts(monkeypatch):
    # ep = dp = 8 on 8 GPUs: every rank holds its one expert of each block whole (expert shard group 1). Nothing
    # of the experts is gathered or reduce-scattered; the dense parameters are, on dp.
    result, plan = program(monkeypatch, _config(gpus=8, global_batch=16))
    assert result.layout.layout.expert_shard_group == 1
    got = bytes_by_group(plan)
    assert got == {("dp", "all_gather"): 2 * 2 * 2 * DENSE, ("dp", "reduce_scatter"): 2 * 2 * DENSE}
    assert not [op for op in plan.program.comms if "experts" in op.name]
    m = memory_for_config(_config(gpus=8, global_batch=16))[0]
    # Dense over 8 (ceil(1,605,636,096 / 8) = 200,704,512), the 32 experts whole (5,637,144,576); the working set
    # the largest unit gathered, now the output layer with the final norm (131,076,096), not a block.
    shard = -(-DENSE // 8) + 32 * EXPERT
    assert shard == 200_704_512 + 5_637_144_576
    assert m.weights_bytes == 2 * shard == 11_675_698_176
    assert m.comm_buffers_bytes == (131_072_000 + 4096) * 6 == 786_456_576


def test_hsdp_one_expert_shard_per_rank_only_all_reduces_them(monkeypatch):
    # HSDP, shard groups of 8 = ep: the experts are whole within a shard group, so only their replica all-reduce.
    _, plan = program(monkeypatch, _config(gpus=16, strategy="fsdp-hybrid", zero_group=8, global_batch=32))
    got = bytes_by_group(plan)
    assert not [k for k in got if k[0] in ("ezero", "edp", "dp")]
    assert got["ezrep", "all_reduce"] == 2 * 2 * 32 * EXPERT  # two micro-batches, bf16, whole
    assert got["zero", "all_gather"] == 2 * 2 * 2 * DENSE


@pytest.mark.parametrize("pp", [1, 2])
def test_hsdp_ep_one_reduces_experts_like_dense(monkeypatch, pp):
    # tp 2 with ep 1 (etp 1: each tensor-parallel rank holds its experts whole): the experts shard over the
    # tp x shard = 8 ranks of the shard group and their gradient shards all-reduce across the dp / 4 replicas
    # (32 / 4 = 8 without stages, 16 / 4 = 4 with two), as the dense parameters do; nothing on the whole edp group.
    result, plan = program(monkeypatch, _config(tp=2, sequence_parallel=True, pp=pp, ep=1, etp=1, zero_group=4,
                                                 strategy="fsdp-hybrid", global_batch=64))
    lay = result.layout.layout
    replicas = 64 // (2 * pp) // 4
    assert (lay.expert_shard_group, lay.expert_replicas, lay.replicas) == (8, replicas, replicas)
    got = bytes_by_group(plan)
    assert not [k for k in got if k[0] in ("edp", "dp")]
    assert {k[0] for k in got} >= {"zero", "zrep", "ezero", "ezrep"}
    m = memory_for_config(_config(tp=2, sequence_parallel=True, pp=pp, ep=1, zero_group=4, strategy="fsdp-hybrid",
                                  global_batch=64))[0]
    # Stage 0's experts (32 / pp blocks x 8 experts, whole on each tp rank) over 8 ranks.
    assert m.optimizer_bytes >= 12 * (32 // pp) * 8 * EXPERT // 8


def test_hsdp_ep_one_with_tp_split_experts_is_one_set_of_buckets(monkeypatch):
    # etp = tp = 2, ep 1: the experts are split as the dense linears and sit in their block's unit (torchtitan's
    # ep 1): every parameter in one set of buckets on zero, all-reduced on zrep, no expert group at all.
    result, plan = program(monkeypatch, _config(tp=2, etp=2, sequence_parallel=True, pp=2, ep=1, zero_group=4,
                                                 strategy="fsdp-hybrid", global_batch=64))
    assert not result.layout.layout.experts_apart
    assert {op.group for op in plan.program.comms if op.kind != "p2p"} <= {"zero", "zrep", "pp", "emb", "tp"}
    assert not [op for op in plan.program.comms if "experts" in op.name]


def test_plan_estimates_fsdp_with_ep_within_its_bound():
    from dpsim.plan.planner import ESTIMATE_BOUND, Planner
    from dpsim.predict.resolve import resolve

    base = resolve(PredictConfig(**{k: v for k, v in MIXTRAL.items() if k != "recompute"})).config
    planner = Planner(base)
    cands, _ = planner.candidates(64, global_batch=128, tps=[1], pps=[1, 2], eps=[8], micro_batches=[1],
                                  recomputes=["full"], strategies=["fsdp"], schedules=["1f1b"])
    assert sorted((c.pp, c.ep) for c in cands) == [(1, 8), (2, 8)]
    for c in cands:
        e = planner.estimate(c, global_batch=128)
        pred = predict(c.config(base))
        assert pred.memory.total_bytes == e.memory_bytes
        assert ESTIMATE_BOUND[0] <= e.step_time_s / pred.step_time_s <= ESTIMATE_BOUND[1], c.flags()
