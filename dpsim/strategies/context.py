"""Context parallelism (``--cp``): one sequence split over ``cp`` GPUs, attention across them.

Megatron-Core's context parallelism (``--context-parallel-size``, attention by
TransformerEngine's ``DotProductAttention`` with ``cp_comm_type``; ``transformer_engine/pytorch/
attention/dot_product_attention/context_parallel.py``) gives every rank of a ``cp`` group
``s/cp`` tokens of each sample. Everything but attention is token-wise, so a rank runs every
other op, keeps every activation and moves every tensor-parallel collective on ``s/cp``
tokens; the weights are replicated over the group and their gradients reduced over the
``dp x cp`` ranks (Megatron's data-parallel group "with context parallel",
``megatron/core/parallel_state.py``). A ``cp`` group runs one sequence, so samples per step
count the data-parallel replicas only.

**Attention** needs every key for its queries; ``--cp-comm`` chooses how:

- ``p2p`` (ring attention: Liu et al. 2023, "Ring Attention with Blockwise Transformers",
  arXiv:2310.01889; TE's ``AttnFuncWithCPAndKVP2P``): ``cp`` steps, each computing the
  attention of the local queries with the KV block in hand while the block is passed to
  the next rank on the ring, ``cp - 1`` transfers; the backward passes KV and the
  accumulated dKV the same way. What a step's attention does not cover is exposed.
- ``all-gather`` (TE's ``AttnFuncWithCPAndKVAllGather``, whose docstring says "KV all-gather
  between CP ranks is exposed"): KV all-gathered before the attention, re-gathered in the
  backward, and dKV reduce-scattered; nothing overlaps. The whole KV is held during the layer.
- ``a2a`` (DeepSpeed-Ulysses: Jacobs et al. 2023, arXiv:2309.14509; TE's
  ``AttnFuncWithCPAndQKVOA2A``): an all-to-all turns the sequence-split Q, K, V into
  head-split ones over the whole sequence, another returns the output (and their conjugates
  in backward); heads must divide by ``tp x cp``.

**Causal load balancing** (``--cp-balance``, on by default as in Megatron and TE): the sequence
is cut into ``2·cp`` chunks and rank ``i`` holds chunks ``i`` and ``2·cp - 1 - i`` (TE's
``get_seq_chunk_ids_for_reordering``; "zigzag" in ring-flash-attention; Brandon et al. 2023,
"Striped Attention", arXiv:2311.09431, stripe the tokens for the same purpose), so every rank
computes ``1/cp`` of the causal scores. Without it rank ``i`` holds the ``i``-th contiguous
``s/cp`` tokens and computes ``(2i + 1) / cp²`` of the causal half-square; the ring's steps
wait for the last rank, ``(2·cp - 1) / cp`` times the balanced share.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.strategies.tensor import TpComm, TpLayer
from dpsim.wording import count
from dpsim.workload.spec import AttentionOp, LayerSpec, MatmulOp, MemoryOp, ModelSpec

CP_COMM: dict[str, str] = {
    "p2p": "ring attention: KV blocks passed around the cp ranks, overlapped with each block's attention",
    "all-gather": "KV all-gathered before attention, dKV reduce-scattered in backward (exposed)",
    "a2a": "DeepSpeed-Ulysses: all-to-alls turn sequence-split Q, K, V into head-split ones and back",
}
"""``--cp-comm`` choices (Megatron's ``--cp-comm-type`` names)."""

FUSED_ATTENTION_BACKWARD_RATIO = 2.5
"""Attention backward over its forward, as the roofline charges a fused kernel
(:data:`dpsim.workload.roofline.FUSED_ATTENTION_BACKWARD_FLOPS`)."""


@frozen_dataclass
class ContextParallel:
    """How a sequence is split over a context-parallel group."""

    cp: int = 1
    """Context-parallel ranks."""
    comm: str = "p2p"
    """A key of :data:`CP_COMM`."""
    balanced: bool = True
    """Causal load balancing (``2·cp`` chunks, rank ``i`` holding ``i`` and ``2·cp - 1 - i``)."""

    def __post_init__(self) -> None:
        assert isinstance(self.cp, int) and self.cp >= 1 and self.comm in CP_COMM, (self.cp, self.comm)

    @property
    def chunks(self) -> int:
        """Pieces the sequence is cut into: ``2·cp`` balanced, ``cp`` otherwise (a2a: ``cp``)."""
        return 2 * self.cp if self.balanced and self.comm != "a2a" else self.cp

    def causal_share(self) -> float:
        """Of one rank's queries x every key, the share its causal mask leaves to the busiest rank:
        ``1/2`` balanced (``1/cp`` of the half-square), ``(2·cp - 1) / (2·cp)`` for the last rank
        without balancing."""
        if self.balanced or self.cp == 1:
            return 0.5
        return (2 * self.cp - 1) / (2 * self.cp)


def check_context(model: ModelSpec, ctx: ContextParallel, tp: int) -> None:
    """Refuse a split the model's sequence or heads do not allow (one line naming the flag)."""
    if ctx.cp == 1:
        return
    seq = model.tokens_per_sample
    if not seq:
        raise ConfigError(f"--cp: {ctx.cp} splits a sequence, but {model.name} has no sequence length; use --cp 1")
    if seq % ctx.chunks:
        how = (f"2 x cp = {ctx.chunks} chunks (causal load balancing)" if ctx.chunks == 2 * ctx.cp
               else f"{ctx.chunks} chunks")
        raise ConfigError(f"--cp: {ctx.cp} cuts {model.name}'s {seq}-token sequence into {how}, which do not "
                          f"divide it; choose a --cp (or --seq-len) so that they do")
    for layer in model.layers:
        for op in layer.ops:
            if isinstance(op, MatmulOp) and op.m % ctx.cp:
                # Not a token-wise op (BERT's pooler reads the [CLS] token alone): its rows cannot be
                # cut over the context-parallel ranks (cp_shard's assertion was the user's traceback).
                raise ConfigError(f"--cp: {ctx.cp} cuts every op of {model.name} along its sequence, but layer "
                                  f"{layer.name!r} computes on {count(op.m, 'token')} per sample, which {ctx.cp} ranks "
                                  f"cannot share; use --cp 1")
            if isinstance(op, AttentionOp):
                if not op.fused:
                    raise ConfigError(f"--cp: {ctx.cp} runs flash attention blockwise; {model.name} uses eager "
                                      f"attention, so use --flash-attention or --cp 1")
                if op.window and ctx.comm != "a2a":
                    # A ring or all-gather rank's keys outside its queries' windows: which chunks a
                    # window reaches, and the load balance over them, are not modelled; a2a keeps every
                    # token of the row on each rank (heads split) and so keeps the window's share.
                    raise ConfigError(f"--cp: {ctx.cp} with --cp-comm {ctx.comm} and {model.name}'s sliding window of "
                                      f"{op.window} tokens is not modelled; allowed: --cp-comm a2a, or --cp 1")
                if op.causal and op.causal_share != 0.5 and ctx.comm != "a2a":
                    # Packed samples (dpsim.workload.layers.with_packed_samples): which samples a rank's
                    # chunk holds, and so its share of their triangles, depends on the packing; a2a keeps
                    # every token of the row on each rank and so keeps the share.
                    raise ConfigError(f"--cp: {ctx.cp} with --cp-comm {ctx.comm} splits a row of packed samples "
                                      f"along its tokens, which is not modelled; use --cp-comm a2a or --cp 1")
                if ctx.comm == "a2a" and op.heads % (tp * ctx.cp):
                    raise ConfigError(f"--cp-comm: a2a scatters {model.name}'s {op.heads} attention heads over --tp "
                                      f"{tp} x --cp {ctx.cp} = {tp * ctx.cp} ranks, which does not divide them; choose "
                                      f"--cp-comm p2p or all-gather, or a --cp that divides them")


_CACHE: dict[tuple, tuple[ModelSpec, ModelSpec]] = {}


def cp_shard(model: ModelSpec, ctx: ContextParallel) -> ModelSpec:
    """``model`` as one rank of a context-parallel group runs one sample: every token-wise op and
    activation on ``s/cp`` tokens; attention on the rank's queries against the whole sequence's
    keys (``p2p``, ``all-gather``) or on ``heads/cp`` heads over the whole sequence (``a2a``),
    the busiest rank's share of the causal scores. ``cp = 1``: ``model`` itself. Cached by the
    model object, as :func:`~dpsim.strategies.tensor.tp_model` is."""
    if ctx.cp == 1:
        return model
    key = (id(model), ctx)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    if len(_CACHE) >= 16:
        _CACHE.pop(next(iter(_CACHE)))
    cp = ctx.cp
    seq = model.tokens_per_sample
    assert seq and seq % cp == 0, (seq, cp)
    layers = []
    for layer in model.layers:
        ops, core, new_core = [], 0.0, 0.0
        for op in layer.ops:
            if isinstance(op, MatmulOp):
                assert op.m % cp == 0, (layer.name, op.m, cp)
                ops.append(dataclasses.replace(op, m=op.m // cp))
            elif isinstance(op, MemoryOp):
                ops.append(dataclasses.replace(op, elements=op.elements / cp))
            else:
                if ctx.comm == "a2a":
                    new = dataclasses.replace(op, heads=op.heads // cp)
                else:
                    new = dataclasses.replace(op, seq=op.seq // cp, kv_seq=op.seq, causal_share=ctx.causal_share())
                core += op.flops_per_sample
                # The full-square convention of forward_flops_per_sample, on the busiest rank.
                new_core += new.flops_per_sample * (new.causal_share / 0.5 if new.causal else 1.0)
                ops.append(new)
        flops = (layer.forward_flops_per_sample - core) / cp + new_core
        layers.append(dataclasses.replace(
            layer, ops=tuple(ops), forward_flops_per_sample=flops,
            activation_bytes_per_sample=layer.activation_bytes_per_sample / cp,
            saved_elements=tuple((n / cp, c) for n, c in layer.saved_elements),
            compiled_saved_elements=None if layer.compiled_saved_elements is None
            else tuple((n / cp, c) for n, c in layer.compiled_saved_elements),
            input_bytes_per_sample=layer.input_bytes_per_sample / cp))
    out = dataclasses.replace(model, name=f"{model.name} (cp {cp} rank)", layers=tuple(layers),
                              tokens_per_sample=seq // cp)
    _CACHE[key] = (model, out)
    return out


def _attention_op(layer: LayerSpec) -> AttentionOp | None:
    return next((op for op in layer.ops if isinstance(op, AttentionOp)), None)


def kv_bytes_per_token(layer: LayerSpec, hidden: int, tp: int, act_element_bytes: int) -> float:
    """Bytes of one token's keys and values on one tensor-parallel rank, from the unsharded
    ``layer``: its column-parallel projections' outputs beyond the queries (``2 x kv_heads x
    head_dim``; a fused QKV's ``2·h``) over ``tp``; ``0`` for a layer without attention."""
    op = _attention_op(layer)
    if op is None:
        return 0.0
    weights = [p for p in layer.params if len(p.shape) == 2]
    columns = sum(p.numel for p in weights[:-1]) / hidden  # Q, K and V outputs
    return max(0.0, columns - op.heads * op.head_dim) / tp * act_element_bytes


def ulysses_kv_repeat(kv_token_bytes: float, head_dim: int, cp: int, act_element_bytes: int = 2) -> int:
    """How many times Ulysses must repeat each key/value head before its all-to-all: the all-to-all
    scatters a tensor's head dimension evenly over the ``cp`` ranks (XTuner's ``_all_to_all``
    ``tensor_split``s ``scatter_dim`` into ``sp`` pieces and receives each into a buffer shaped as the
    first, so the pieces must be equal: InternLM/xtuner ``xtuner/parallel/sequence/communications.py``;
    its ``pre_process_for_sequence_parallel_attn`` asserts the query heads divide by ``sp``,
    ``attention.py``), so ``k`` grouped key/value heads on a tensor-parallel rank (``kv_token_bytes
    / (2 x head_dim x act_element_bytes)``) must become a multiple of ``cp``: the smallest is ``k x
    cp / gcd(k, cp)`` heads, a repeat of ``cp / gcd(k, cp)``. 1 wherever ``cp`` divides ``k`` (every
    multi-head model, and grouped ones with ``cp <= k`` dividing it). Each rank then holds
    ``k x r / cp`` of them, each query group reading its own; the attention's FLOPs (per query head)
    do not change. XTuner repeats further, to every query head, whatever ``cp`` is
    (``repeat_kv(key_states, self.num_key_value_groups)`` ahead of its ``sequence_parallel_wrapper``,
    ``xtuner/model/modules/dispatch/llama.py``); the minimum is what every Ulysses must send."""
    if cp <= 1 or head_dim <= 0 or kv_token_bytes <= 0:
        return 1
    k = max(1, round(kv_token_bytes / (2 * head_dim * act_element_bytes)))
    return cp // math.gcd(k, cp)


def layer_cp_comm(layer: TpLayer, spec_layer: LayerSpec, full_layer: LayerSpec, forward_s: float, *,
                  ctx: ContextParallel, micro_batch: int, tokens_per_rank: int, hidden: int, tp: int,
                  cost: Callable[[str, float], float], act_element_bytes: int = 2) -> TpComm:
    """The context-parallel communication of one layer for one micro-batch on one rank.

    ``spec_layer`` is the rank's shard of the layer (its attention op), ``full_layer`` the
    unsharded one (its parameters), ``forward_s`` the layer's forward time on the rank,
    ``cost(op, bytes)`` the ``cp`` communicator's collective time (``broadcast``: one
    neighbour transfer of the ring; ``all_to_all``: Ulysses' exchange of S bytes per rank). The
    attention core's time (its share of the layer's FLOPs; backward
    :data:`FUSED_ATTENTION_BACKWARD_RATIO` times it) hides ring transfers.
    """
    op = _attention_op(spec_layer)
    if ctx.cp == 1 or op is None:
        return TpComm()
    cp = ctx.cp
    kv_token = kv_bytes_per_token(full_layer, hidden, tp, act_element_bytes)
    block = kv_token * tokens_per_rank * micro_batch  # one rank's K and V
    flops = layer.col_flops_per_sample + layer.row_flops_per_sample + layer.core_flops_per_sample
    core_f = forward_s * layer.core_flops_per_sample / flops if flops > 0 else 0.0
    core_b = core_f * FUSED_ATTENTION_BACKWARD_RATIO
    if ctx.comm == "p2p":
        # cp blocks computed, the cp - 1 transfers each beside one block.
        step_f, step_b = cost("broadcast", block), cost("broadcast", 2 * block)  # backward: KV and dKV
        fwd = (cp - 1) * step_f
        bwd = (cp - 1) * step_b
        fwd_exp = (cp - 1) * max(0.0, step_f - core_f / cp)
        bwd_exp = (cp - 1) * max(0.0, step_b - core_b / cp)
        return TpComm(forward_s=fwd, forward_exposed_s=fwd_exp, backward_s=bwd, backward_exposed_s=bwd_exp,
                      forward_ops=(("broadcast", block),) * (cp - 1),
                      backward_ops=(("broadcast", 2 * block),) * (cp - 1))
    if ctx.comm == "all-gather":
        gathered = block * cp
        f_ops = (("all_gather", gathered),)
        b_ops = (("all_gather", gathered), ("reduce_scatter", gathered))
    else:
        # Ulysses: Q, K, V in, O out (forward); dO in, dQ, dK, dV out (backward), each an
        # all-to-all of the rank's s/cp tokens of those tensors.
        q_token = op.heads * cp * op.head_dim * act_element_bytes  # before the scatter: all the rank's heads
        # Grouped key/value heads fewer than (or not divisible by) cp are repeated to be scattered.
        kv_sent = kv_token * ulysses_kv_repeat(kv_token, op.head_dim, cp, act_element_bytes)
        qkv = (q_token + kv_sent) * tokens_per_rank * micro_batch
        o = q_token * tokens_per_rank * micro_batch
        # Each an all-to-all on the cp communicator (``cost("all_to_all", S)``: S bytes per rank,
        # spread over the group, :func:`dpsim.collectives.all_to_all.uniform_all_to_all_cost`).
        f_ops = (("all_to_all", qkv), ("all_to_all", o))
        b_ops = (("all_to_all", o), ("all_to_all", qkv))
    fwd = sum(cost(o_, s) for o_, s in f_ops)
    bwd = sum(cost(o_, s) for o_, s in b_ops)
    return TpComm(forward_s=fwd, forward_exposed_s=fwd, backward_s=bwd, backward_exposed_s=bwd,
                  forward_ops=f_ops, backward_ops=b_ops)


def cp_buffer_bytes(model: ModelSpec, ctx: ContextParallel, *, tp: int, micro_batch: int, tokens_per_rank: int,
                    act_element_bytes: int = 2) -> float:
    """Transient bytes a rank holds for the attention layer that runs: ``p2p`` two KV blocks in
    flight (the one computed on and the one received; TE double-buffers them), ``all-gather`` the
    gathered KV of the whole sequence, ``a2a`` the head-split Q, K, V and output."""
    if ctx.cp == 1:
        return 0.0
    hidden = model_hidden(model)
    per_token = max((kv_bytes_per_token(layer, hidden, tp, act_element_bytes) for layer in model.layers),
                    default=0.0)
    block = per_token * tokens_per_rank * micro_batch
    if ctx.comm == "p2p":
        return 2.0 * block
    if ctx.comm == "all-gather":
        return block * ctx.cp
    op = next((o for layer in model.layers for o in layer.ops if isinstance(o, AttentionOp)), None)
    q = op.heads / tp * op.head_dim * act_element_bytes * tokens_per_rank * micro_batch if op else 0.0
    # Key/value heads repeated to be scattered (ulysses_kv_repeat) are held repeated.
    repeat = ulysses_kv_repeat(per_token, op.head_dim, ctx.cp, act_element_bytes) if op else 1
    return 2.0 * q + block * repeat


def model_hidden(model: ModelSpec) -> int:
    """The hidden size: a block's input per token (2 bytes per element)."""
    first = next((layer for layer in model.layers if layer.unit is not None), None)
    if first is None or not model.tokens_per_sample:
        return 1
    return max(1, round(first.input_bytes_per_sample / 2.0 / model.tokens_per_sample))
