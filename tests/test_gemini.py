"""Colossal-AI Gemini (``--strategy zero3 --zero-impl gemini``, dpsim/strategies/gemini.py).

The counts are made by hand from hpcaitech/ColossalAI@0b00def88's chunk search and hook rules and from
Llama-2-7B's parameter tensors (the catalog's: per decoder layer q, k, v, o of 16,777,216 elements, gate,
up, down of 45,088,768, two norms of 4,096; embedding and head of 131,072,000; a final norm of 4,096),
registered as transformers' LlamaForCausalLM registers them (attention, MLP, then both norms of a layer),
not with the module's own search or replay.
"""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict
from dpsim.strategies.gemini import gemini_chunk_size, gemini_plan, registration_order
from dpsim.workload.catalog import get_model

ATTN, MLP, NORM, EMBED = 16_777_216, 45_088_768, 4_096, 131_072_000
CHUNK = 45_101_056
"""The chunk search's pick for Llama-2-7B on 32 ranks, by hand: the embedding and head lie more than three
standard deviations above the mean and leave the search; the search starts at the largest remaining
tensor (an MLP matrix, 45,088,768 = 44,032 x 1024) and keeps the size with the least empty tail space.
Below 45,101,056 the final norm cannot join the last layer's down projection and two norms
(45,088,768 + 3 x 4,096 = 45,101,056 = 44,044 x 1024) and opens a nearly empty chunk of its own; at it
every layer fills five chunks ([q, k], [v, o], [gate], [up], [down, both norms]) and the waste is least.
A multiple of 32, so no rounding for the ranks."""
N_CHUNKS = 1 + 32 * 5 + 1  # the embedding, five per layer (the final norm shares the last), the head
PADDED = 2 * EMBED + 160 * CHUNK


def _model():
    return get_model("llama-2-7b", seq_len=4096, dtype="bfloat16")


def _recompute_blocks(model):
    """Full checkpointing per decoder layer: dpsim's two layers of each block (attention, MLP)."""
    names = [layer.name for layer in model.layers]
    return {i + 1: (i, i + 1) for i in range(len(names)) if names[i].endswith(".self_attn")}


def _job(gpus=32, **kw) -> PredictConfig:
    kw = {"link": "infiniband", "model": "llama-2-7b", "micro_batch": 1, "strategy": "zero3",
          "precision": "bf16-params", "zero_impl": "gemini", "steps": 1, **kw}
    return PredictConfig(gpus=gpus, **kw)


def test_registration_puts_each_layers_norms_last():
    names = [p.name for p in registration_order(_model())]
    assert names[:10] == ["model.embed_tokens.weight"] + [f"model.layers.0.{n}.weight" for n in (
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
        "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm")]
    assert names[-2:] == ["model.norm.weight", "lm_head.weight"]
    assert sorted(names) == sorted(p.name for p in _model().params)


def test_the_chunk_search_picks_the_hand_derived_size():
    numels = [p.numel for p in registration_order(_model())]
    assert gemini_chunk_size(numels, 32) == (CHUNK, False)
    # A model under min_chunk_size_m x 2^20 elements is one chunk kept gathered.
    assert gemini_chunk_size([1000, 2000], 8) == (3000, True)


def test_chunks_hold_every_parameter_once_in_registration_order():
    model = _model()
    plan = gemini_plan(model, 32, {})
    assert len(plan.chunks) == N_CHUNKS and plan.chunk_size == CHUNK
    assert [n for c in plan.chunks for n in c.params] == [p.name for p in registration_order(model)]
    assert plan.chunks[1].params == ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight")
    assert plan.chunks[-2].params[-1] == "model.norm.weight"
    assert plan.padded_numel == PADDED and plan.shard_numel * 32 == PADDED


def test_gathers_follow_the_hooks_by_hand():
    """Per decoder layer, forward runs input norm [down+norms chunk], q k [chunk A], v o [B], post norm [the
    norms' chunk again], gate [C], up [D], down [the norms' chunk a third time]: seven gathers, the norms'
    chunk freed each time another chunk's operation runs. The recomputation repeats them; backward then
    gathers D, C, B and A again (the norms' chunk holds the down gradient, so it stays gathered until its
    last gradient, the input norm's, is in). Exceptions: the embedding and the head are gathered once each
    in forward; the final norm's backward gathers the last layer's norms' chunk, which then stays gathered
    through that layer's recomputation (three gathers fewer); the embedding's backward gathers it again."""
    model = _model()
    events = gemini_plan(model, 32, _recompute_blocks(model)).schedule.events
    count = lambda phase, op: sum(1 for e in events if e.phase == phase and e.op == op)  # noqa: E731
    assert count("forward", "all_gather") == 1 + 32 * 7 + 1
    assert count("recompute", "all_gather") == 32 * 7 - 3
    assert count("backward", "all_gather") == 1 + 32 * 4 + 1
    scattered = [e.chunk for e in events if e.op == "reduce_scatter"]
    assert sorted(scattered) == list(range(N_CHUNKS))  # every chunk once, when its last gradient is in
    # Without recomputation nothing is re-run: the same forward, and backward re-gathers what forward freed.
    plain = gemini_plan(model, 32, {}).schedule.events
    assert sum(1 for e in plain if e.phase == "recompute") == 0
    assert sum(1 for e in plain if e.op == "reduce_scatter") == N_CHUNKS


def test_step_bytes_and_memory_are_the_hand_counts():
    p = predict(_job(activation_checkpointing=True))
    by_op = {}
    for c in p.program.comms:
        by_op[c.op] = by_op.get(c.op, 0.0) + c.size_bytes
    gathers = {"embed": 2, "head": 1}
    chunk_gathers = (1 + 32 * 7 + 1) + (32 * 7 - 3) + (1 + 32 * 4 + 1) - sum(gathers.values())
    assert by_op["all_gather"] == 2 * (3 * EMBED + chunk_gathers * CHUNK)
    assert by_op["reduce_scatter"] == 2 * PADDED
    shard = PADDED // 32
    m = p.memory
    assert m.weights_bytes == 2 * shard  # the 16-bit shard, parameters then gradients
    assert m.gradients_bytes == 0
    assert m.optimizer_bytes == 12 * shard  # fp32 master and two moments
    assert m.comm_buffers_bytes == 2 * EMBED  # the head's chunk alone at its gather: the largest at once


def test_every_collective_blocks_the_compute_stream():
    """Nothing is prefetched or overlapped: the collectives' time is all exposed."""
    p = predict(_job(activation_checkpointing=True))
    assert p.exposed_comm_s == pytest.approx(p.comm_s, rel=1e-6)
    deepspeed = predict(_job(activation_checkpointing=True, zero_impl="deepspeed"))
    assert p.step_time_s > deepspeed.step_time_s


@pytest.mark.parametrize("kw, expected", [
    (dict(strategy="fsdp"), "--zero-impl: gemini applies to --strategy zero3, not fsdp"),
    (dict(zero_group=8), "--zero-group: 8 does not apply to --zero-impl gemini"),
    (dict(grad_accum=2), "--grad-accum: 2 is not supported with --zero-impl gemini"),
    (dict(tp=2), "--zero-impl: gemini is modelled for data parallelism alone"),
    (dict(offload="optimizer"), "--offload: optimizer does not combine with --zero-impl gemini"),
    (dict(precision="amp-bf16"), "--precision: amp-bf16 is not what --zero-impl gemini runs"),
])
def test_what_gemini_does_not_run_is_refused_in_one_line(kw, expected):
    with pytest.raises(ConfigError) as err:
        predict(_job(**kw))
    assert expected in str(err.value) and "\n" not in str(err.value)


# A prediction each: the fast lane (-m "not slow") keeps the smallest and the largest count.
@pytest.mark.parametrize("gpus", [8, pytest.param(16, marks=pytest.mark.slow), 64])
def test_bytes_are_conserved_across_rank_counts(gpus):
    """Each chunk is reduce-scattered once, at its full size (padding included), whatever the ranks; every
    rank keeps 1/N of it; a gathered chunk is the whole chunk."""
    p = predict(_job(gpus, activation_checkpointing=True))
    plan = gemini_plan(_model(), gpus, {})
    assert plan.padded_numel % gpus == 0 and plan.shard_numel * gpus == plan.padded_numel
    scattered = sum(c.size_bytes for c in p.program.comms if c.op == "reduce_scatter")
    assert scattered == 2 * plan.padded_numel
    sizes = {c.numel * 2 for c in plan.chunks}
    assert {c.size_bytes for c in p.program.comms if c.op == "all_gather"} <= sizes
    assert p.memory.optimizer_bytes == 12 * plan.shard_numel
