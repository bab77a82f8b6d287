"""``--moe-a2a-overlap``: the expert-parallel all-to-alls of a paired forward and backward hide under
each other's compute (Megatron-Core's ``--overlap-moe-expert-parallel-comm``)."""

from __future__ import annotations

import dataclasses

import pytest

from dpsim.errors import ConfigError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict
from dpsim.strategies.layout import ChunkWork, LayerWork, Layout
from dpsim.strategies.pipeline import (
    a2a_overlap_cut,
    a2a_pairs,
    dualpipe_pairs,
    in_flight,
    peak_in_flight,
    schedule_slots,
    warmup_forwards,
)


def _mixtral(**kw):
    base = dict(gpus=64, tp=1, pp=4, ep=8, model="mixtral-8x7b", link="infiniband", gpu="h100", micro_batch=1,
                global_batch=256, precision="bf16-params", strategy="zero1", steps=1,
                schedule="1f1b-interleaved", virtual_stages=2)
    base.update(kw)
    return PredictConfig(**base)


def _stage0_bounds(pred):
    """Stage 0's compute without its all-to-alls, and its all-to-alls, over the step."""
    s0 = pred.layout.stages[0]
    comm = pred.layout.ep_comm_s
    return (s0.forward_s + s0.backward_s) * pred.config.micro_batches - comm, comm


CASES = [dict(), dict(overlap_slowdown=0.0), dict(overlap_slowdown=0.5), dict(pp=1, schedule="1f1b", virtual_stages=1),
         dict(pp=1, schedule="1f1b", virtual_stages=1, recompute="full"), dict(recompute="moe")]


@pytest.mark.parametrize("kw", CASES, ids=[str(i) for i in range(len(CASES))])
def test_overlap_never_slows_the_step_nor_beats_compute_or_comm(kw):
    """Bounded by the non-overlapped step above, and below by the busiest stage's compute and its
    all-to-alls (neither can hide the other more than whole); the all-to-alls' bytes unchanged."""
    off, on = predict(_mixtral(**kw)), predict(_mixtral(**kw, moe_a2a_overlap=True))
    assert on.step_time_s < off.step_time_s
    compute, comm = _stage0_bounds(off)
    assert on.step_time_s >= max(compute, comm) > 0
    assert on.layout.ep_comm_s == off.layout.ep_comm_s
    assert on.to_dict()["comm_bytes_by_op"] == off.to_dict()["comm_bytes_by_op"]


def test_no_steady_state_no_overlap():
    """With as many micro-batches as stages the interleaved schedule is all warm-up and cool-down:
    nothing is paired, every all-to-all stays exposed."""
    kw = dict(global_batch=64)
    assert predict(_mixtral(**kw, moe_a2a_overlap=True)).step_time_s == predict(_mixtral(**kw)).step_time_s


@pytest.mark.parametrize("p,v,m", [(4, 2, 16), (8, 4, 16), (4, 3, 8), (4, 2, 4)])
def test_pairs_are_the_interleaved_steady_state(p, v, m):
    """One more warm-up forward than Megatron's count (Megatron-Core's own with the overlap), so that
    each steady-state iteration pairs a forward and a backward of different micro-batches; the
    in-flight count in closed form stays the slots' peak."""
    layout = Layout(pp=p, virtual_stages=v, schedule="1f1b-interleaved", micro_batches=m, ep=2, moe_a2a_overlap=True)
    for s in range(p):
        slots = schedule_slots("1f1b-interleaved", p, v, m, s, 1)
        pairs = a2a_pairs(layout, slots, s)
        assert len(pairs) == m * v - warmup_forwards(p, v, m, s, 1)
        for f, b in pairs:
            assert slots[f][0] == "F" and slots[b][0] == "B" and slots[f][2] != slots[b][2]
        assert in_flight("1f1b-interleaved", p, v, m, s, 1) == peak_in_flight(slots, v)


def test_without_stages_each_backward_pairs_with_the_next_forward():
    layout = Layout(micro_batches=5, ep=2, moe_a2a_overlap=True)
    slots = schedule_slots("1f1b", 1, 1, 5, 0)
    assert [(slots[f][2], slots[b][2]) for f, b in a2a_pairs(layout, slots, 0)] == [(1, 0), (2, 1), (3, 2), (4, 3)]
    assert a2a_pairs(dataclasses.replace(layout, moe_a2a_overlap=False), slots, 0) == []


def _layer(i, f=0.0, b=0.0, af=0.0, ab=0.0, unit="block 0"):
    return LayerWork(index=i, forward_s=f, backward_s=b, ep_forward_s=af, ep_comm_s=af + ab, compute_forward_s=0.0,
                     compute_backward_s=0.0, recompute_s=0.0, tp_comm_s=0.0, tp_exposed_s=0.0, grad_numel=0, unit=unit)


def _blocks(n, attn=(1.0, 2.0), mlp=(1.5, 3.0), a2a=(1.0, 1.0), first=0):
    """``n`` MoE decoder blocks: an attention layer, then an MoE layer with its all-to-alls."""
    out = []
    for k in range(first, first + n):
        out += [_layer(2 * k, f=attn[0], b=attn[1], unit=f"block {k}"),
                _layer(2 * k + 1, f=mlp[0] + a2a[0], b=mlp[1] + a2a[1], af=a2a[0], ab=a2a[1], unit=f"block {k}")]
    return tuple(out)


@pytest.mark.parametrize("attn,mlp,a2a,k", [((1.0, 2.0), (1.5, 3.0), (1.0, 1.0), 0.0),
                                            ((0.2, 0.4), (0.3, 0.6), (2.0, 2.0), 0.0),
                                            ((1.0, 2.0), (0.1, 0.2), (1.0, 1.2), 0.2),
                                            ((1.0, 2.0), (1.0, 2.0), (0.0, 0.0), 0.1)])
def test_cut_keeps_the_pair_above_its_compute_and_its_comm(attn, mlp, a2a, k):
    """Each all-to-all hides only under its phase's compute: the pair stays above its compute and
    its communication, at most the non-overlapped pair, and by hand for the combined 1F1B's four
    phases."""
    (af_, ab_), (mf, mb), (cf, cb) = attn, mlp, a2a
    layers = (_layer(0, f=af_, b=ab_), _layer(1, f=mf + cf, b=mb + cb, af=cf, ab=cb))
    chunk = ChunkWork(stage=0, chunk=0, layers=layers)
    cut_f, cut_b = a2a_overlap_cut(chunk, chunk, k)
    pair = chunk.forward_s + chunk.backward_s - cut_f - cut_b
    compute, comm = af_ + ab_ + mf + mb, cf + cb
    assert max(compute, comm) - 1e-12 <= pair <= compute + comm
    assert cut_f == pytest.approx((min(cf / 2, mb) + min(cf / 2, ab_)) * (1 - k))
    assert cut_b == pytest.approx((min(cb / 2, af_) + min(cb / 2, mf)) * (1 - k))


def test_pairs_block_by_block_and_leaves_the_longer_chunks_rest_exposed():
    """Megatron-Core pairs the forward's block i with the backward's block n_b - 1 - i; the blocks of
    the longer chunk left over run alone, their all-to-alls exposed and their compute hiding nothing."""
    three = ChunkWork(stage=0, chunk=0, layers=_blocks(3))
    two = ChunkWork(stage=0, chunk=1, layers=_blocks(2, first=3))
    one_f, one_b = a2a_overlap_cut(ChunkWork(stage=0, chunk=0, layers=_blocks(1)),
                                   ChunkWork(stage=0, chunk=0, layers=_blocks(1)), 0.1)
    assert one_f > 0 and one_b > 0
    assert a2a_overlap_cut(three, two, 0.1) == pytest.approx((2 * one_f, 2 * one_b))
    assert a2a_overlap_cut(two, three, 0.1) == pytest.approx((2 * one_f, 2 * one_b))
    assert a2a_overlap_cut(three, three, 0.1) == pytest.approx((3 * one_f, 3 * one_b))
    # Summed over the chunks instead, the third block's all-to-alls would hide under the two backward
    # blocks' slack (each MLP and attention phase outlasts its half all-to-all three times over).
    summed_f = (min(3 * 1.0 / 2, 2 * 3.0) + min(3 * 1.0 / 2, 2 * 2.0)) * 0.9
    assert a2a_overlap_cut(three, two, 0.1)[0] == pytest.approx(summed_f * 2 / 3)


def test_blocks_pair_with_their_own_phases_not_the_chunks():
    """A block whose MLP is short exposes its all-to-all even when another block's MLP has room: the
    phases are a block pair's, not the chunk's sums."""
    short = _blocks(1, mlp=(0.1, 0.2), a2a=(1.0, 1.0))
    long = _blocks(1, mlp=(3.0, 6.0), a2a=(1.0, 1.0), first=1)
    chunk = ChunkWork(stage=0, chunk=0, layers=short + long)
    cut_f, cut_b = a2a_overlap_cut(chunk, chunk, 0.0)
    # Forward block 0 pairs with backward block 1 (long MLP), forward block 1 with backward block 0.
    assert cut_f == pytest.approx((0.5 + 0.5) + (min(0.5, 0.2) + 0.5))
    assert cut_b == pytest.approx((0.5 + min(0.5, 3.0)) + (0.5 + min(0.5, 0.1)))


def test_embedding_and_head_hide_nothing():
    """The embedding and the output head run before and after the paired blocks (Megatron-Core's
    pre- and post-process): however long, they cover no all-to-all."""
    blocks = _blocks(2, attn=(0.1, 0.2), mlp=(0.1, 0.2), a2a=(1.0, 1.0))
    bare = ChunkWork(stage=0, chunk=0, layers=blocks)
    ends = ChunkWork(stage=0, chunk=0, layers=(_layer(-1, f=5.0, b=10.0, unit=None), *blocks,
                                               _layer(99, f=5.0, b=10.0, unit=None)))
    assert a2a_overlap_cut(ends, ends, 0.1) == a2a_overlap_cut(bare, bare, 0.1)


def test_memory_holds_one_more_chunk_only_with_stages():
    """Without stages the paired forward keeps layer by layer what the backward frees: no change."""
    kw = dict(pp=1, schedule="1f1b", virtual_stages=1, recompute="full")
    off, on = predict(_mixtral(**kw)), predict(_mixtral(**kw, moe_a2a_overlap=True))
    assert on.layout.stages[0].memory == off.layout.stages[0].memory
    # With pipeline stages the one more warm-up forward holds one more micro-batch of a chunk.
    off, on = predict(_mixtral()), predict(_mixtral(moe_a2a_overlap=True))
    for a, b in zip(off.layout.stages, on.layout.stages):
        assert sum(b.memory.in_flight) == sum(a.memory.in_flight) + 1
        assert b.memory.breakdown.activations_bytes > a.memory.breakdown.activations_bytes


@pytest.mark.parametrize("kw,needle", [
    (dict(ep=1), "--moe-a2a-overlap: hides the expert-parallel all-to-alls, and --ep is 1"),
    (dict(schedule="1f1b", virtual_stages=1), "--moe-a2a-overlap: with --pp 4 a forward and a backward run paired"),
    (dict(model="llama-2-7b", ep=1, pp=1, schedule="1f1b", virtual_stages=1, tp=2),
     "--moe-a2a-overlap: hides the expert-parallel all-to-alls"),
])
def test_refused_in_one_line(kw, needle):
    with pytest.raises(ConfigError) as err:
        predict(_mixtral(**kw, moe_a2a_overlap=True))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_dense_model_refused():
    with pytest.raises(ConfigError, match="is dense"):
        predict(PredictConfig(model="llama-2-7b", gpus=8, link="infiniband", pp=2, schedule="1f1b-interleaved",
                              virtual_stages=2, ep=2, tp=1, global_batch=16, moe_a2a_overlap=True))


def test_plan_estimate_and_candidates_carry_the_overlap():
    """The planner applies the job's flag where it can, its estimate drops as predict's step does,
    and the command it prints runs the same layout."""
    from dpsim.plan.planner import Candidate, Planner
    base = PredictConfig(model="mixtral-8x7b", link="infiniband", gpu="h100", precision="bf16-params")
    kw = dict(gpus=64, tp=1, pp=4, dp=16, ep=8, strategy="zero1", micro_batch=1, global_batch=256, recompute="off",
              schedule="1f1b-interleaved", virtual_stages=2, sequence_parallel=False)
    off, on = Candidate(**kw), Candidate(**kw, moe_a2a_overlap=True)
    planner = Planner(base)
    e_off, e_on = planner.estimate(off, global_batch=256), planner.estimate(on, global_batch=256)
    p_off, p_on = predict(off.config(base)), predict(on.config(base))
    assert on.config(base).parallelism.moe_a2a_overlap and "--moe-a2a-overlap" in on.flags()
    assert e_on.step_time_s < e_off.step_time_s and p_on.step_time_s < p_off.step_time_s
    # The estimate's saving is the simulated one within the estimate's own error.
    assert (e_off.step_time_s - e_on.step_time_s) == pytest.approx(p_off.step_time_s - p_on.step_time_s, rel=0.25)
    cands, _ = Planner(base, moe_a2a_overlap=True).candidates(64, tps=[1], pps=[1, 4], eps=[1, 8],
                                                              micro_batches=[1], strategies=["zero1"],
                                                              recomputes=["off"], global_batch=256)
    assert any(c.schedule == "dualpipe" for c in cands)  # the default pair gains DualPipe for an MoE with ep > 1
    for c in cands:
        assert c.moe_a2a_overlap == (c.ep > 1 and (c.pp == 1 or c.schedule in ("1f1b-interleaved", "dualpipe")))
        assert c.config(base).parallelism.moe_a2a_overlap == c.moe_a2a_overlap


def test_plan_estimate_of_dualpipe_carries_the_overlap():
    """DualPipe's F&B pairs a forward of one direction's chunk with a backward of the other's: the
    estimate's saving is the simulated one within the estimate's own error, as the interleaved one's."""
    from dpsim.plan.planner import Candidate, Planner
    # A layout that fits (DualPipe holds two chunks' weights): plan's best for this job.
    base = PredictConfig(model="qwen3-30b-a3b", link="infiniband", gpu="h100")
    kw = dict(gpus=16, tp=2, pp=2, dp=4, ep=8, strategy="zero1", micro_batch=4, global_batch=64, recompute="full",
              schedule="dualpipe", virtual_stages=1, sequence_parallel=True)
    off, on = Candidate(**kw), Candidate(**kw, moe_a2a_overlap=True)
    planner = Planner(base)
    e_off, e_on = planner.estimate(off, global_batch=64), planner.estimate(on, global_batch=64)
    p_off, p_on = predict(off.config(base)), predict(on.config(base))
    assert "--moe-a2a-overlap" in on.flags()
    assert e_on.step_time_s < e_off.step_time_s and p_on.step_time_s < p_off.step_time_s
    assert (e_off.step_time_s - e_on.step_time_s) == pytest.approx(p_off.step_time_s - p_on.step_time_s, rel=0.25)


@pytest.mark.parametrize("p,m", [(4, 8), (4, 16), (8, 16), (16, 40)])
def test_dualpipe_pairs_are_its_overlapped_f_and_b(p, m):
    """With DualPipe the all-to-alls hide in the schedule's own F&B pairs (DeepSeek-V3 report, Sec.
    3.2.1): a forward of one direction and the backward of the other right after it, the same pairs
    the runtime overlaps (:func:`dualpipe_pairs`); the warm-up's and the drain's chunks run alone."""
    layout = Layout(pp=p, schedule="dualpipe", micro_batches=m, ep=2, moe_a2a_overlap=True)
    for s in range(p):
        slots = schedule_slots("dualpipe", p, 1, m, s)
        pairs = a2a_pairs(layout, slots, s)
        assert {slots[f][1:]: slots[b][1:] for f, b in pairs} == dualpipe_pairs(p, m, s)
        for f, b in pairs:
            assert slots[f][0] == "F" and slots[b][0] == "B" and slots[f][1] != slots[b][1]
        assert 0 < len(pairs) < m
        assert a2a_pairs(dataclasses.replace(layout, moe_a2a_overlap=False), slots, s) == []


@pytest.mark.parametrize("kw", [dict(), dict(recompute="megatron"), dict(global_batch=512)])
def test_dualpipe_overlap_never_slows_the_step_nor_beats_compute_or_comm(kw):
    """DualPipe with the overlap: faster than without, never below the busiest stage's compute nor its
    all-to-alls, the same bytes sent; its memory unchanged (the pairs were already in flight)."""
    cfg = dict(schedule="dualpipe", virtual_stages=1, **kw)
    off, on = predict(_mixtral(**cfg)), predict(_mixtral(**cfg, moe_a2a_overlap=True))
    assert on.step_time_s < off.step_time_s
    # A DualPipe stage's forward_s and backward_s cover its two chunks, each run for half the micro-batches.
    s0, comm = off.layout.stages[0], off.layout.ep_comm_s
    compute = (s0.forward_s + s0.backward_s) * off.config.micro_batches / 2 - comm
    assert on.step_time_s >= max(compute, comm) > 0
    assert on.to_dict()["comm_bytes_by_op"] == off.to_dict()["comm_bytes_by_op"]
    for a, b in zip(off.layout.stages, on.layout.stages):
        assert a.memory == b.memory
