"""HSDP (``--strategy fsdp-hybrid --zero-group``) with expert parallelism, as torchtitan runs it: ep carved out of
each shard group (``dp_shard x cp``), the routed experts sharded over the rest of it (``dp_shard_in_ep = dp_shard *
cp // ep``) and replicated across the replica groups like the dense parameters (ParallelDims.build_mesh,
torchtitan/distributed/parallel_dims.py@0119de156de5; apply_fsdp's ``edp_mesh``, torchtitan/models/llama4/infra/
parallelize.py@05a6cb3895a5). Dense gradients reduce-scatter on ``zero`` and all-reduce on ``zrep``; the experts'
on ``ezero`` and ``ezrep``."""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import memory_for_config, predict
from expert_layouts import DENSE, DENSE_BLOCK, EXPERT, MIXTRAL, bytes_by_group, program


def _config(*, gpus: int = 64, pp: int = 1, ep: int = 8, strategy: str = "fsdp-hybrid", zero_group: int | None = 16,
            global_batch: int = 128, **kw) -> PredictConfig:
    return PredictConfig(**{**MIXTRAL, **kw}, gpus=gpus, pp=pp, ep=ep, strategy=strategy, zero_group=zero_group,
                         global_batch=global_batch)


def test_the_issue_command_runs():
    # dpsim predict --model mixtral-8x7b --gpus 64 --link infiniband --strategy fsdp-hybrid --zero-group 16 --ep 8
    r = predict(PredictConfig(model="mixtral-8x7b", gpus=64, link="infiniband", strategy="fsdp-hybrid",
                              zero_group=16, ep=8, steps=1))
    assert r.step_time_s > 0 and r.layout is not None
    assert r.layout.layout.expert_shard_group == 2 and r.layout.layout.expert_replicas == 4


def test_memory_per_rank_is_the_hand_count():
    # 64 ranks, ep 8, shard groups of 16: the dense state over 16 ranks, each rank's one expert per block over the
    # 16 / 8 = 2 expert-data-parallel ranks of its shard group. bf16 weights and gradients, 12 bytes of Adam state.
    m = memory_for_config(_config())[0]
    shard = -(-DENSE // 16) + 32 * EXPERT // 2
    assert shard == 100_352_256 + 2_818_572_288
    assert m.weights_bytes == 2 * shard == 5_837_849_088
    assert m.gradients_bytes == 2 * shard
    assert m.optimizer_bytes == 12 * shard == 35_027_094_528
    # Resharded after forward (no pipeline): the largest unit, a block (its dense part and the rank's one expert),
    # gathered twice (current, prefetched) and its unsharded gradient.
    assert m.comm_buffers_bytes == (DENSE_BLOCK + EXPERT) * (2 + 2 + 2) == 1_308_868_608
    assert m.shard_group_size == 16


@pytest.mark.parametrize("pp", [1, 2])
def test_one_replica_is_fsdp_with_ep_exactly(pp):
    dp = 64 // pp
    hsdp, fsdp = predict(_config(pp=pp, zero_group=dp)), predict(_config(pp=pp, strategy="fsdp", zero_group=None))
    assert hsdp.step_time_s == fsdp.step_time_s
    assert hsdp.memory.total_bytes == fsdp.memory.total_bytes
    assert (hsdp.n_buckets, hsdp.gradient_bytes) == (fsdp.n_buckets, fsdp.gradient_bytes)


@pytest.mark.parametrize("pp", [1, 2])
def test_ep_one_shards_experts_within_the_shard_group(pp):
    # tp 2 with sequence parallelism, ep 1 (etp 1 given: its default is tp with ep 1), shard groups of 4 data-parallel
    # ranks. Before fsdpep the experts
    # kept their whole expert-data-parallel group (tp x dp = 64 or 32 ranks): 2.9252 s / 26.65 GB (pp 1) and
    # 1.2348 s / 104.78 GB (pp 2). Now they shard over the tp x 4 = 8 ranks of the shard group and all-reduce across
    # its replicas, as HSDP does the dense parameters (tests/test_fsdp_ep.py): 8x the expert state per rank.
    r = predict(_config(tp=2, sequence_parallel=True, pp=pp, ep=1, etp=1, zero_group=4, global_batch=64))
    # Step times at the multi-GPU compute efficiency 0.95 (dpsim/workload/compute.py; 2.4058 / 1.4069 s at 1) and the
    # H100's sustained matmul rate (dpsim.hardware.GH100_SUSTAINED_TFLOPS; 2.4116 / 1.4569 s at the burst 794.5),
    # with NCCL's per-channel LL128 limit on rings across NICs (2026-12-07; 2.4111 / 1.4804 s before it).
    want = {1: (2.417010846630816, 105574105088.0, 206954582016),
            2: (1.4809026744490845, 130145021952.0, 51738640384)}[pp]
    assert (r.step_time_s, r.memory.total_bytes, r.gradient_bytes) == want


@pytest.mark.parametrize("pp, zero_group, ep", [(1, 16, 8), (2, 8, 4), (2, 8, 8)])
def test_bytes_are_conserved_per_collective_group(monkeypatch, pp, zero_group, ep):
    dp = 64 // pp
    result, plan = program(monkeypatch, _config(pp=pp, zero_group=zero_group, ep=ep))
    lay = result.layout.layout
    eshard, replicas = zero_group // ep, dp // zero_group
    assert (lay.expert_shard_group, lay.expert_replicas, lay.replicas) == (eshard, replicas, replicas)
    got = bytes_by_group(plan)
    stage_blocks = 32 // pp
    experts = stage_blocks * 8 // ep * EXPERT  # the routed experts stage 0 holds on a rank
    dense = stage_blocks * DENSE_BLOCK + 131_072_000 + (131_072_000 + 4096 if pp == 1 else 0)
    micro_batches = 128 // dp
    rounds = micro_batches if pp == 1 else 1  # resharded: every micro-batch reduce-scatters (bf16 gradients)
    assert got["zero", "reduce_scatter"] == rounds * 2 * dense
    # An expert shard group of one rank (ep = the shard group) holds its experts whole: nothing on ezero.
    assert got.get(("ezero", "reduce_scatter"), 0) == (rounds * 2 * experts if eshard > 1 else 0)
    gathers = 2 * micro_batches if pp == 1 else 1  # forward and backward of each micro-batch, or once a step
    assert got["zero", "all_gather"] == gathers * 2 * dense
    assert got.get(("ezero", "all_gather"), 0) == (gathers * 2 * experts if eshard > 1 else 0)
    # Each reduce-scatter's shard all-reduced across the replicas: 1/shard of its bytes, rounded up per bucket.
    rs = [(op, s) for op, s in zip(plan.program.comms, plan.program.comm_stages) if 0 in s]
    n_rs = {g: sum(1 for op, _ in rs if op.group == g and op.op == "reduce_scatter") for g in ("zero", "ezero")}
    assert 2 * dense / zero_group <= got["zrep", "all_reduce"] / rounds <= 2 * dense / zero_group + 2 * n_rs["zero"]
    n_ar = sum(1 for op, _ in rs if op.group == "ezrep")
    assert 2 * experts / eshard <= got["ezrep", "all_reduce"] / rounds <= 2 * experts / eshard + 2 * n_ar
    assert n_ar == n_rs["ezero"] or (eshard == 1 and n_rs["ezero"] == 0 < n_ar)
    assert sum(1 for op, _ in rs if op.group == "zrep") == n_rs["zero"]
    # Nothing left on the groups of plain fsdp.
    assert not [k for k in got if k[0] in ("dp", "edp")]


def test_all_to_alls_are_those_of_fsdp_with_ep(monkeypatch):
    # The expert-parallel all-to-alls do not depend on how the replicas shard the state: the same bytes per
    # token on the same ep group, so the same time per layer.
    hsdp, fsdp = predict(_config(pp=2, zero_group=8, ep=8)), predict(_config(pp=2, strategy="fsdp", zero_group=None,
                                                                             ep=8))
    assert hsdp.layout.ep_comm_s == fsdp.layout.ep_comm_s > 0


def test_groups_are_placed_on_the_fabric():
    from dpsim.collectives.groups import LayoutShape, layout_communicators
    from dpsim.topology.cluster import Topology
    from dpsim.topology.load import load_preset

    job = Topology(spec=load_preset("infiniband"), n_gpus=128)
    comms = layout_communicators(job, LayoutShape(tp=1, pp=1, dp=128, ep=8, zero_group=32))
    # Shard group: 32 consecutive ranks, 4 servers. Expert shard group: 32 / 8 = 4 ranks 8 apart, one a server
    # (the 4 servers of the shard group). Replica groups, dense and expert: 4 ranks 32 apart, 4 servers.
    n = {k: (comms[k].topology.n_gpus, comms[k].topology.n_nodes) for k in ("zero", "zrep", "ezero", "ezrep", "ep")}
    assert n == {"zero": (32, 4), "zrep": (4, 4), "ezero": (4, 4), "ezrep": (4, 4), "ep": (8, 1)}
    # No expert groups of their own without ep.
    assert "ezero" not in layout_communicators(job, LayoutShape(tp=1, pp=1, dp=128, zero_group=32))


@pytest.mark.parametrize("changes, needle", [
    (dict(ep=16, zero_group=8), r"^--ep: 16 does not divide the HSDP shard group the experts are carved from, "
                                r"--zero-group 8 x --cp 1 = 8 ranks; choose --ep among 1, 2, 4, 8, or a --zero-group"),
    (dict(ep=8, zero_group=2, tp=2, sequence_parallel=True),
     r"^--ep: 8 does not divide the HSDP shard group the experts are carved from, --zero-group 2 x --cp 1 x --tp 2 "
     r"= 4 ranks; choose --ep among 1, 2, 4,"),
])
def test_ep_must_divide_the_shard_group(changes, needle):
    with pytest.raises(ConfigError, match=needle):
        predict(_config(**changes))


def test_plan_searches_hsdp_with_ep_within_its_bound():
    from dpsim.plan.planner import ESTIMATE_BOUND, Planner
    from dpsim.predict.resolve import resolve

    base = resolve(PredictConfig(**{k: v for k, v in MIXTRAL.items() if k != "recompute"})).config
    planner = Planner(base)
    cands, _ = planner.candidates(64, global_batch=128, tps=[1], pps=[1, 2], eps=[4, 8], micro_batches=[1],
                                  recomputes=["full"], strategies=["fsdp-hybrid"], schedules=["1f1b"])
    # Whole-server shard groups below the data-parallel ranks, each one ep divides (8-GPU servers).
    assert sorted((c.pp, c.ep, c.zero_group) for c in cands) == [
        (1, 4, 8), (1, 4, 16), (1, 4, 32), (1, 8, 8), (1, 8, 16), (1, 8, 32),
        (2, 4, 8), (2, 4, 16), (2, 8, 8), (2, 8, 16)]
    checked = 0
    for c in cands:
        e = planner.estimate(c, global_batch=128)
        pred = predict(c.config(base))
        assert pred.memory.total_bytes == e.memory_bytes
        if e.fits:  # the closed form plays both kinds' shard-group and replica collectives as predict's program
            assert ESTIMATE_BOUND[0] <= e.step_time_s / pred.step_time_s <= ESTIMATE_BOUND[1], c.flags()
            checked += 1
    assert checked >= 8
    # A shard group ep does not divide is not searched (ep 16 over groups of 8, 16 and 32: only 16 and 32).
    assert planner.strategy_variants(64, dp=64, cp=1, pp=1, ep=16, etp=1, sharded=True,
                                     strategies=["fsdp-hybrid"]) == [("fsdp-hybrid", 16), ("fsdp-hybrid", 32)]
