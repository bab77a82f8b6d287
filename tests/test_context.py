"""Context parallelism (``predict --cp``): the rank's share of the work, the ring's bytes, memory
per rank against a hand count, balancing, placement of the groups and the one-line errors.

Golden cases: tests/golden/cases.py ``layout_cases`` (``cp-*``).
"""

from __future__ import annotations

import typing

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.predict.config import PredictConfig
from dpsim.predict.layout import layout_memory
from dpsim.predict.run import load_model, predict
from dpsim.strategies.context import CP_COMM, ContextParallel, cp_shard, layer_cp_comm, model_hidden, ulysses_kv_repeat
from dpsim.strategies.tensor import tp_model
from dpsim.workload.catalog import get_model
from dpsim.workload.precision import get_precision
from dpsim.workload.spec import AttentionOp, MatmulOp

BF16 = get_precision("bf16-mixed")
SEQ = 32768
# Llama-2-7B (meta-llama/Llama-2-7b-hf config.json): 32 heads of 128, no grouped KV, hidden 4096.
HEADS, HEAD_DIM, HIDDEN = 32, 128, 4096


def _llama(seq: int = SEQ):
    return get_model("llama-2-7b", seq_len=seq, flash_attention=True)


def _cfg(**kw) -> PredictConfig:
    base = dict(gpus=8, link="aws-p5", model="llama-2-7b", seq_len=SEQ, micro_batch=1, strategy="zero1",
                recompute="full", steps=1)
    base.update(kw)
    return PredictConfig(**base)


def test_cp_comm_choices_are_the_registry():
    from dpsim.predict import config as cfg

    assert typing.get_args(cfg.CpComm) == tuple(CP_COMM)


def test_cp_1_is_the_model_itself():
    model = _llama()
    assert cp_shard(model, ContextParallel()) is model


def _causal_blocks(rank: int, cp: int, balanced: bool) -> float:
    """Independent count: causal (query chunk, key chunk) pairs a rank computes, in units of one
    chunk x chunk square (the diagonal one half-computed)."""
    if balanced:
        chunks = (rank, 2 * cp - 1 - rank)
    else:
        chunks = (rank,)
    return sum(q + 0.5 for q in chunks)  # q whole chunks before it, half of its own


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_balanced_attention_flops_are_equal_and_sum_to_the_total(cp):
    model = _llama()
    shard = cp_shard(model, ContextParallel(cp=cp))
    full_op = next(op for layer in model.layers for op in layer.ops if isinstance(op, AttentionOp))
    rank_op = next(op for layer in shard.layers for op in layer.ops if isinstance(op, AttentionOp))
    total = full_op.flops_per_sample * full_op.causal_share  # the causal half
    per_rank = rank_op.flops_per_sample * rank_op.causal_share
    chunk = (SEQ / (2 * cp)) ** 2 * 4 * HEADS * HEAD_DIM  # one chunk x chunk square's FLOPs
    counts = [_causal_blocks(r, cp, True) * chunk for r in range(cp)]
    assert max(counts) == pytest.approx(min(counts))
    assert sum(counts) == pytest.approx(total)
    assert per_rank == pytest.approx(counts[0]) == pytest.approx(total / cp)


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_unbalanced_split_is_paced_by_the_last_rank(cp):
    model = _llama()
    shard = cp_shard(model, ContextParallel(cp=cp, balanced=False))
    rank_op = next(op for layer in shard.layers for op in layer.ops if isinstance(op, AttentionOp))
    chunk = (SEQ / cp) ** 2 * 4 * HEADS * HEAD_DIM
    counts = [_causal_blocks(r, cp, False) * chunk for r in range(cp)]
    assert rank_op.flops_per_sample * rank_op.causal_share == pytest.approx(max(counts))
    assert max(counts) / (sum(counts) / cp) == pytest.approx((2 * cp - 1) / cp)


def test_token_wise_work_is_split_by_cp():
    model, cp = _llama(), 4
    shard = cp_shard(model, ContextParallel(cp=cp))
    assert shard.tokens_per_sample == SEQ // cp
    assert shard.param_count == model.param_count  # weights replicated over the group
    for a, b in zip(model.layers, shard.layers):
        assert b.activation_bytes_per_sample == pytest.approx(a.activation_bytes_per_sample / cp)
        for oa, ob in zip(a.ops, b.ops):
            if isinstance(oa, MatmulOp):
                assert ob.flops_per_sample == pytest.approx(oa.flops_per_sample / cp)
    # Every FLOP of the balanced rank is 1/cp of the model's (attention included).
    assert sum(l.forward_flops_per_sample for l in shard.layers) == pytest.approx(
        sum(l.forward_flops_per_sample for l in model.layers) / cp)


@pytest.mark.parametrize("cp", [2, 8])
def test_the_ring_moves_cp_minus_1_kv_blocks_each_way(cp):
    model = _llama()
    ctx = ContextParallel(cp=cp)
    tpm = tp_model(cp_shard(model, ctx), 1)
    attn = next(i for i, l in enumerate(tpm.layers) if l.kind == "attention")
    sent = []
    comm = layer_cp_comm(tpm.layers[attn], tpm.spec.layers[attn], model.layers[attn], 1.0, ctx=ctx, micro_batch=2,
                         tokens_per_rank=SEQ // cp, hidden=HIDDEN, tp=1,
                         cost=lambda op, size: sent.append((op, size)) or 0.0)
    block = 2 * HEADS * HEAD_DIM * 2 * (SEQ // cp) * 2  # K and V, bf16, s/cp tokens, 2 samples
    assert comm.forward_ops == (("broadcast", block),) * (cp - 1)
    assert comm.backward_ops == (("broadcast", 2 * block),) * (cp - 1)  # KV and dKV
    assert sum(s for _, s in comm.forward_ops) == (cp - 1) * block


def test_a_slow_ring_is_exposed_beyond_the_attention():
    model = _llama()
    ctx = ContextParallel(cp=4)
    tpm = tp_model(cp_shard(model, ctx), 1)
    attn = next(i for i, l in enumerate(tpm.layers) if l.kind == "attention")
    args = dict(ctx=ctx, micro_batch=1, tokens_per_rank=SEQ // 4, hidden=HIDDEN, tp=1)
    fast = layer_cp_comm(tpm.layers[attn], tpm.spec.layers[attn], model.layers[attn], 1.0,
                         cost=lambda op, size: 1e-6, **args)
    slow = layer_cp_comm(tpm.layers[attn], tpm.spec.layers[attn], model.layers[attn], 1.0,
                         cost=lambda op, size: 10.0, **args)
    assert fast.forward_exposed_s == 0.0 and fast.backward_exposed_s == 0.0
    assert 0 < slow.forward_exposed_s < slow.forward_s == 3 * 10.0


def test_memory_per_rank_equals_a_hand_count():
    cp, gpu = 8, get_gpu("h100")
    model = load_model(_cfg(cp=cp))
    (stage,) = layout_memory(_cfg(cp=cp), model, gpu, BF16)
    m = stage.breakdown
    n = model.param_count
    # bf16 weights and gradients, fp32 master + Adam moments (12 bytes) over dp x cp = 8.
    assert m.weights_bytes == 2 * n and m.gradients_bytes == 2 * n
    assert m.optimizer_bytes == -(-n // cp) * 12
    # p2p: two K+V blocks of s/cp tokens in flight.
    assert m.comm_buffers_bytes == 2 * (2 * HEADS * HEAD_DIM * 2 * SEQ // cp)
    # Activations: those of one rank's s/cp tokens, what a model of that sequence keeps (full
    # recomputation: every block's input plus one block's working set).
    short = get_model("llama-2-7b", seq_len=SEQ // cp, flash_attention=True)
    (ref,) = layout_memory(_cfg(cp=1, tp=2, gpus=2, seq_len=SEQ // cp), short, gpu, BF16)
    (ref_cp,) = layout_memory(_cfg(cp=cp, tp=2, gpus=2 * cp), model, gpu, BF16)
    assert ref_cp.breakdown.activations_bytes == pytest.approx(ref.breakdown.activations_bytes, rel=1e-9)


def test_step_on_a_fast_fabric_is_the_compute_over_cp():
    p1 = predict(_cfg(gpus=8, cp=8, link="nvlink"))
    assert p1.layout.cp_exposed_s == 0.0  # the ring hides behind the attention blocks
    assert p1.samples_per_s * SEQ == pytest.approx(p1.tokens_per_s)  # one sequence per cp group
    ratio = p1.step_time_s / (p1.compute_s / 8)
    assert 1.0 <= ratio <= 1.2, ratio  # smaller GEMMs and the embedding's fixed work per rank


def test_balancing_shortens_the_step():
    balanced = predict(_cfg(cp=8))
    off = predict(_cfg(cp=8, cp_balance=False))
    assert off.step_time_s > 1.2 * balanced.step_time_s


def test_all_gather_exposes_what_the_ring_hides():
    ring = predict(_cfg(gpus=16, cp=8))
    gather = predict(_cfg(gpus=16, cp=8, cp_comm="all-gather"))
    assert ring.layout.cp_exposed_s == 0.0 < gather.layout.cp_exposed_s == pytest.approx(gather.layout.cp_comm_s)
    assert gather.memory.comm_buffers_bytes == 4 * ring.memory.comm_buffers_bytes  # cp blocks vs two


def test_gradients_are_reduced_over_dp_times_cp():
    from dpsim.collectives.groups import LayoutShape, layout_communicators
    from dpsim.predict.run import resolve_topology

    cfg = _cfg(gpus=32, tp=2, cp=4)
    comms = layout_communicators(resolve_topology(cfg), LayoutShape(tp=2, pp=1, dp=4, cp=4))
    assert comms["dp"].topology.n_gpus == 16  # the dp-cp group: every tp-th GPU
    assert comms["cp"].topology.n_gpus == 4
    assert predict(cfg).layout.layout.grad_group == 16


@pytest.mark.parametrize("kw, flag", [
    (dict(gpus=24, cp=3), "--cp: --tp 1 x --cp 3"),
    (dict(cp=8, seq_len=4104), "--cp: 8 cuts"),
    (dict(cp=8, cp_comm="a2a", model="transformer:hidden=1536,layers=2,heads=12,ffn=4096,vocab=32000,seq=4096",
          seq_len=None), "--cp-comm: a2a scatters"),
    (dict(cp_comm="all-gather"), "--cp-comm: 'all-gather' applies only"),
    (dict(cp_balance=False), "--no-cp-balance: applies only"),
    (dict(gpus=16, cp=4, dp=3), "--dp: 3 with --tp 1 --cp 4"),
    # BERT's pooler computes on the [CLS] token alone: cp_shard's assertion was an AssertionError traceback.
    (dict(model="bert-base", cp=2, seq_len=None), "--cp: 2 cuts every op of bert-base along its sequence, but "
                                                  "layer 'pooler' computes on 1 token per sample"),
])
def test_bad_input_is_one_line(kw, flag):
    with pytest.raises(ConfigError) as err:
        predict(_cfg(**kw))
    assert str(err.value).startswith(flag) and "\n" not in str(err.value)


# Llama-2-70B (meta-llama/Llama-2-70b-hf config.json): 64 query heads, 8 key/value heads of 128.
KV_70B, HEADS_70B = 8, 64


def _a2a_bytes(model_name: str, cp: int, seq: int = SEQ):
    model = get_model(model_name, seq_len=seq, flash_attention=True)
    ctx = ContextParallel(cp=cp, comm="a2a")
    tpm = tp_model(cp_shard(model, ctx), 1)
    attn = next(i for i, l in enumerate(tpm.layers) if l.kind == "attention")
    comm = layer_cp_comm(tpm.layers[attn], tpm.spec.layers[attn], model.layers[attn], 1.0, ctx=ctx, micro_batch=1,
                         tokens_per_rank=seq // cp, hidden=model_hidden(model), tp=1, cost=lambda op, size: 0.0)
    return comm


@pytest.mark.parametrize("cp, repeat", [(1, 1), (2, 1), (4, 1), (8, 1), (16, 2), (32, 4), (64, 8)])
def test_ulysses_repeats_grouped_kv_heads_only_when_cp_exceeds_them(cp, repeat):
    kv_token = 2 * KV_70B * HEAD_DIM * 2  # K and V of one token, bf16
    assert ulysses_kv_repeat(kv_token, HEAD_DIM, cp) == repeat
    assert ulysses_kv_repeat(2 * 32 * HEAD_DIM * 2, HEAD_DIM, cp) == (1 if cp <= 32 else cp // 32)  # multi-head 7B


@pytest.mark.parametrize("cp", [8, 16, 64])
def test_ulysses_bytes_are_conserved_and_repeating_never_sends_less(cp):
    comm = _a2a_bytes("llama-2-70b", cp)
    (op_f, qkv), (_, o) = comm.forward_ops
    assert op_f == "all_to_all"
    # What leaves a rank is what arrives: the conjugate all-to-alls of backward move the same bytes.
    assert comm.backward_ops == (("all_to_all", o), ("all_to_all", qkv))
    tokens = SEQ // cp
    q = HEADS_70B * HEAD_DIM * 2 * tokens
    kv = 2 * KV_70B * HEAD_DIM * 2 * tokens
    assert o == q
    assert qkv == q + kv * max(1, cp // KV_70B)
    # After the scatter each rank holds the whole sequence of (repeated) kv heads / cp: the same bytes.
    kv_heads_after = KV_70B * max(1, cp // KV_70B) / cp
    assert kv * max(1, cp // KV_70B) == pytest.approx(2 * kv_heads_after * HEAD_DIM * 2 * SEQ)
