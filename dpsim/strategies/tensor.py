"""Megatron-style tensor parallelism (``--tp``): every transformer block's linears split over t GPUs.

What a tensor-parallel rank holds, computes and communicates, layer by layer, following
Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter Language Models Using
Model Parallelism" (Sec. 3, Fig. 3) and Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models" (arXiv:2205.05198, Sec. 4.2 and Fig. 5):

- **Blocks.** In each attention and MLP sub-block the first linears (QKV; the MLP's up /
  gate projections) are *column-parallel* (output features split, attention heads
  split) and the last one (the attention output projection; the MLP's down projection)
  is *row-parallel* (input features split). A sub-block's FLOPs divide by t; its
  norms (and the row-parallel bias) are replicated. Without sequence parallelism a
  sub-block all-reduces its ``b x s x h`` output in forward (the operator Megatron calls
  *g*) and its input gradient in backward (*f*). With sequence parallelism
  (``--sequence-parallel``) the norms and dropouts run on ``s/t`` of the sequence: the
  forward all-reduce becomes an all-gather before the column-parallel linear and a
  reduce-scatter after the row-parallel one; backward runs their conjugates (a
  reduce-scatter and an all-gather) and all-gathers the saved ``s/t`` input once more
  for the column-parallel weight gradient.
- **Embedding and head.** The word embedding is *vocab-parallel* (rows split; its forward
  all-reduces, or reduce-scatters with sequence parallelism, the embedded sequence); the
  LM head is column-parallel over the vocabulary with Megatron's vocab-parallel cross
  entropy (three all-reduces of ``b x s`` fp32 values: max, sum of exponentials,
  target logit; ``megatron/core/tensor_parallel/cross_entropy.py``), its input gradient
  all-reduced (reduce-scattered with sequence parallelism) in backward, its input
  all-gathered in forward with sequence parallelism.
- **Overlap** (``--tp-comm-overlap``): ``off`` (every collective blocks the compute
  stream: Megatron-LM 2021, ``megatron/mpu/mappings.py``); ``backward`` (Megatron's
  default since 2022: a column-parallel linear's input-gradient all-reduce or
  reduce-scatter runs while the same linear's weight-gradient GEMM computes, and the
  sequence-parallel re-gather of its input while its input-gradient GEMM computes:
  ``LinearWithGradAccumulationAndAsyncCommunication`` in
  ``megatron/core/tensor_parallel/layers.py``); ``full`` (TransformerEngine userbuffers,
  Megatron's ``--tp-comm-overlap``: every collective is split into t chunks pipelined with
  the GEMM it feeds or follows, so only one chunk, or what the GEMM cannot cover, stays
  exposed); ``async`` (PyTorch's asynchronous tensor parallelism as torchtitan runs it,
  ``enable_async_tensor_parallel``: :func:`async_tp_exposed`).

Which linear is which is read from the layer's parameters in run order: the last 2-D
weight of a sub-block is the row-parallel one, the others column-parallel (true of
every catalog family: GPT-2, Llama, BERT, ViT). A block layer's kind comes from its name
(``attn``/``self_attn``/``attention``/``self_attention`` or ``mlp``/``ffn``).

Activations per sample (Korthikanti et al. 2022, Sec. 4.1-4.2.2 and Table 2): a
sub-block keeps ``5·s·h`` bytes that tensor parallelism does not split (norm input,
the first linear's input, dropout mask: the ``10·s·h`` per layer of Table 2) and the
rest split by t; sequence parallelism splits everything by t; selective recomputation
drops the attention core (``5·a·s²``); full recomputation keeps only each block's
``2·s·h`` input (split by t with sequence parallelism, as Megatron's
``--distribute-saved-activations`` does). A catalog block layer gives ``2·s·h`` as its
``input_bytes_per_sample`` and the attention core as what exceeds ``13·s·h``.

Not modelled: vocabulary padding to a multiple of ``128 x t``
(``--make-vocab-size-divisible-by``); 1-D parameters (norms, biases) are counted as
replicated though column-parallel biases are split; element-wise work without
sequence parallelism is divided by t with the layer's FLOPs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from dpsim.engine.simulate import comm_rate
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.hardware import GpuSpec
from dpsim.workload.fp8 import fp8_expert_weight_numel, fp8_grouped_experts, fp8_weight_numel
from dpsim.workload.layers import routed_activation_bytes
from dpsim.workload.precision import saved_extra_bytes
from dpsim.workload.roofline import shape_efficiency
from dpsim.workload.spec import AttentionOp, LayerSpec, ModelSpec, ParamSpec, is_expert_param, is_mtp_unit

TP_COMM_OVERLAP: dict[str, str] = {
    "off": "every tensor-parallel collective blocks compute (Megatron-LM 2021)",
    "backward": "input-gradient reductions overlap the weight-gradient GEMM (Megatron default)",
    "full": "collectives chunked and pipelined with their GEMMs (TransformerEngine --tp-comm-overlap)",
    "async": "all-gathers and reduce-scatters decomposed into peer copies pipelined with GEMM chunks "
             "(PyTorch async TP, torchtitan; needs --sequence-parallel and NVSwitch)",
}
"""``--tp-comm-overlap`` choices."""

ATTENTION_NAMES = ("attn", "self_attn", "attention", "self_attention")
"""Last module-path component of an attention sub-block (GPT-2, Llama, BERT, ViT)."""
MLP_NAMES = ("mlp", "ffn")
"""Last module-path component of an MLP sub-block."""

CROSS_ENTROPY_ALL_REDUCES = 3
"""Vocab-parallel cross entropy: all-reduce of the logit max, of the sum of exponentials
and of the target logits, each ``b x s`` fp32 values
(``megatron/core/tensor_parallel/cross_entropy.py``, ``_VocabParallelCrossEntropy``)."""

_UNSPLIT_ACTIVATION_SH = 5.0
"""Bytes per ``s·h`` of a sub-block that tensor parallelism does not split (Korthikanti et
al. 2022, Sec. 4.2.1: ``10sbh`` per layer = 5 per sub-block: norm input 2, first linear's
input 2, dropout mask 1)."""
_ATTENTION_LINEAR_ACTIVATION_SH = 13.0
"""An attention sub-block's activation bytes per ``s·h`` besides the ``5as²`` core (11 + 2
for its norm; Korthikanti et al. 2022, Sec. 4.1)."""


@frozen_dataclass
class TpLayer:
    """One layer as a tensor-parallel rank sees it (sizes for one sample, unsharded unless said)."""

    index: int
    """Index of the layer in the model."""
    name: str
    """Layer name."""
    role: str
    """``embedding`` (vocab-parallel), ``block`` (an attention or MLP sub-block), ``head``
    (the LM head), ``root`` (other layers: replicated)."""
    kind: str
    """``attention``, ``mlp`` or ``other``."""
    unit: str | None
    """The block it belongs to (``None``: root)."""
    col_flops_per_sample: float
    """Forward FLOPs of its column-parallel GEMMs."""
    row_flops_per_sample: float
    """Forward FLOPs of its row-parallel GEMM."""
    core_flops_per_sample: float
    """Forward FLOPs of the attention core (score and context matmuls): what selective
    recomputation recomputes."""
    hidden_bytes_per_sample: float
    """One sample's ``s x h`` hidden state at 2 bytes per element: every tensor-parallel
    collective of the layer moves one of these (per micro-batch sample)."""
    unsplit_activation_bytes_per_sample: float
    """Activation bytes tensor parallelism does not split (sequence parallelism does)."""
    split_activation_bytes_per_sample: float
    """Activation bytes split by t, attention core excluded."""
    core_activation_bytes_per_sample: float
    """The attention core's activation bytes (``5·a·s²``; 0 with flash attention)."""
    input_bytes_per_sample: float
    """Bytes of the layer's input (what full recomputation keeps at a block's start)."""
    numel_per_rank: int
    """Parameters one tensor-parallel rank holds for this layer."""
    split_numel_per_rank: int
    """Of those, the ones split over the ranks (the rest is replicated)."""
    expert_numel_per_rank: int = 0
    """Of those, the routed experts' (split over ``ep x etp`` ranks, not over ``tp``: their
    gradients reduce over the expert-data-parallel group)."""
    routed_bytes_per_sample: float = 0.0
    """An MoE layer's tokens sent to experts, one sample on one rank: ``top_k`` copies of its
    ``s / tp`` hidden states at 2 bytes per element (what each all-to-all moves out of a rank;
    0 for any other layer)."""
    saved_elements: tuple[tuple[float, str], ...] = ()
    """The layer's :attr:`~dpsim.workload.spec.LayerSpec.saved_elements`, unsharded: hidden-sized
    tensors of its norm and first linears' inputs, which tensor parallelism does not split and
    sequence parallelism does (:func:`saved_extra_bytes_per_rank`)."""
    input_byte_class: str = "act"
    """The dtype class of its input (:attr:`~dpsim.workload.spec.LayerSpec.input_byte_class`)."""
    tp_collectives: bool = True
    """The layer runs tensor-parallel collectives (an MoE layer only for its shared experts:
    the routed tokens travel by all-to-all on the sequence-parallel shard)."""


@frozen_dataclass
class TpModel:
    """A model as one rank of a t-way tensor-parallel group holds and runs it."""

    tp: int
    """Tensor-parallel ranks."""
    model: ModelSpec
    """The full model."""
    spec: ModelSpec
    """One rank's shard: split parameters (dim 0), FLOPs divided by t, each op of the
    roofline split as the rank runs it, same layer names."""
    layers: tuple[TpLayer, ...]
    """Per-layer facts, in model order."""
    tied_embedding: bool
    """The LM head reuses the word embedding (GPT-2): with pipeline parallelism the last
    stage keeps a copy and the two copies' gradients are all-reduced every step."""
    embedding_numel_per_rank: int
    """Word-embedding parameters one rank holds (the copy a tied last stage keeps)."""
    sequence_parallel: bool = False
    """The shard's element-wise work is split along the sequence too (:attr:`spec`)."""

    def fp8_weight_numels(self, recipe) -> tuple[tuple[int, int], ...]:
        """Per layer of :attr:`spec`, ``(FP8 weight elements of the rank's shard, of them the routed experts')``
        under the job's FP8 ``recipe`` (:func:`~dpsim.workload.fp8.fp8_weight_numel`,
        :func:`~dpsim.workload.fp8.fp8_expert_weight_numel`; TransformerEngine's run the grouped expert GEMMs in
        FP8, torchao's do not): the one count of a layout's FP8 weights, held (the memory) and gathered
        (predict's program, plan). Counted once per shard and kind of recipe: a plan lays the same shard out
        hundreds of times, and each count walks the layer's ops (DeepSeek-V3: ~55,000 counts, 8 % of a
        16,384-GPU plan)."""
        key = fp8_grouped_experts(recipe)
        memo = self.__dict__.setdefault("_fp8_weight_numels", {})
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = tuple(
                (min(tl.numel_per_rank, fp8_weight_numel(layer, recipe)),
                 min(tl.expert_numel_per_rank, fp8_expert_weight_numel(layer, recipe)))
                for tl, layer in zip(self.layers, self.spec.layers))
        return hit

    @property
    def blocks(self) -> tuple[str, ...]:
        """Block (unit) names in forward order."""
        seen: dict[str, None] = {}
        for layer in self.layers:
            if layer.unit is not None:
                seen.setdefault(layer.unit, None)
        return tuple(seen)


def layer_kind(layer: LayerSpec) -> str:
    """``attention``, ``mlp`` or ``other`` from the layer's name (see the module docstring)."""
    last = layer.name.rsplit(".", 1)[-1].lower()
    if last in ATTENTION_NAMES:
        return "attention"
    if last in MLP_NAMES:
        return "mlp"
    return "other"


def check_tp(model: ModelSpec, tp: int) -> None:
    """Refuse a ``--tp`` this model cannot be split by (one line naming the flag)."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"--tp: {tp!r} is not valid; expected an integer >= 1")
    if tp == 1:
        return
    blocks = [l for l in model.layers if l.unit is not None]
    if model.tokens_per_sample is None or not blocks:
        raise ConfigError(f"--tp: {tp} splits transformer blocks, but model {model.name!r} has none "
                          f"(no token sequence or no blocks); use --tp 1")
    odd = [l.name for l in blocks if layer_kind(l) == "other" or l.input_bytes_per_sample <= 0]
    if odd:
        raise ConfigError(f"--tp: {tp} needs attention and MLP sub-blocks, but {model.name!r} has block layer "
                          f"{odd[0]!r}; use --tp 1")
    for l in blocks:
        for p in l.params:
            # Routed experts are split by expert parallelism, the router and the shared experts' gate (a
            # hidden x 1 product, Qwen2-MoE) are replicated.
            if is_expert_param(p) or ".mlp.gate." in p.name or ".mlp.shared_expert_gate." in p.name:
                continue
            if len(p.shape) >= 2 and p.shape[0] % tp:
                raise ConfigError(f"--tp: {tp} does not divide {p.name} (shape {p.shape}) of {model.name!r}; "
                                  f"use a --tp that divides the model's hidden and head dimensions")


def _split_shape(shape: tuple[int, ...], tp: int) -> tuple[int, ...]:
    return (-(-shape[0] // tp),) + tuple(shape[1:])


def _weights(layer: LayerSpec) -> list[ParamSpec]:
    return [p for p in layer.params if len(p.shape) >= 2]


_TP_CACHE: dict[tuple, TpModel] = {}
_TP_CACHE_SIZE = 64
_DENSE_CACHE: dict[tuple, tuple] = {}
"""Per ``(model, tp, sequence parallelism)``: the shard of each layer without routed experts, which
:func:`_tp_model` builds alike for every expert split (a planner's search builds one shard per split,
and DeepSeek-V3's dense layers, sharded op by op, were most of each)."""


@frozen_dataclass
class ExpertSplit:
    """How a rank holds and runs the routed experts of an MoE model (Megatron-Core's expert
    parallelism: ``megatron/core/parallel_state.py``, ``expert_model_parallel_size`` and
    ``expert_tensor_parallel_size``)."""

    ep: int = 1
    """Expert-parallel ranks: each holds ``experts / ep`` of every MoE layer's experts."""
    etp: int = 1
    """Expert-tensor-parallel ranks: each expert's width split over them."""
    load: float = 1.0
    """Rows the busiest rank's experts get over the balanced mean (routing imbalance: the
    rank that paces the step)."""
    activation_load: float = 1.0
    """The routed copies whose activations the busiest rank keeps for backward, over the balanced mean
    (:func:`dpsim.predict.layout.expert_split`: :attr:`load`, but 1 under a uniform router whose capacity
    drops nothing): the rank whose memory is the job's."""


NO_EXPERT_SPLIT = ExpertSplit()
"""Every expert local, balanced routing."""


def tp_model(model: ModelSpec, tp: int, *, sequence_parallel: bool = False,
             experts: ExpertSplit = NO_EXPERT_SPLIT) -> TpModel:
    """``model`` as one rank of ``tp``-way tensor parallelism (see the module docstring), and of
    ``experts`` expert parallelism for a mixture of experts (:func:`_expert_shard`).

    ``sequence_parallel`` changes only the shard's element-wise work (:attr:`TpModel.spec`).
    Cached by the model object (hashing a large model's every parameter would cost more
    than the shard), so a planner's thousands of candidates build each shard once."""
    key = (id(model), tp, bool(sequence_parallel), experts)
    hit = _TP_CACHE.get(key)
    if hit is not None and hit.model is model:
        return hit
    if len(_TP_CACHE) >= _TP_CACHE_SIZE:
        _TP_CACHE.pop(next(iter(_TP_CACHE)))
    result = _TP_CACHE[key] = _tp_model(model, tp, bool(sequence_parallel), experts)
    return result


def _expert_shard(layer: LayerSpec, tp: int, experts: ExpertSplit, top_k: int, memo: dict | None = None) -> dict:
    """An MoE layer as one rank runs it: the router replicated (each rank routes its own
    ``s / tp`` tokens: Megatron-Core requires sequence parallelism with tensor parallelism in
    MoE models, ``megatron/training/arguments.py``), the shared experts split like a dense
    MLP, the routed experts' stacked weights split ``experts / ep`` and their width ``/ etp``.
    Its ops: token-wise work on ``s / tp`` tokens; each grouped GEMM over the rank's
    ``experts / ep`` local experts with ``(s / tp)·top_k·ep·etp / experts`` rows each (the
    tokens of the whole expert-parallel group routed to them, gathered over ``etp``) times
    ``experts.load`` on the busiest rank, ``n`` or ``k`` of the expert width ``/ etp``. ``memo``: a dict
    kept for one ``tp`` and ``experts``, holding the sharded ops of layers whose ops are equal (a model's
    MoE layers repeat theirs)."""
    ep, etp = experts.ep, experts.etp
    weights = _weights(layer)
    routed = [p for p in layer.params if is_expert_param(p)]
    shared = [p for p in weights if "shared_experts" in p.name]
    params = tuple(ParamSpec(name=p.name, shape=(-(-p.shape[0] // ep), -(-p.shape[1] // etp)) + tuple(p.shape[2:]),
                             dtype=p.dtype) if is_expert_param(p)
                   else ParamSpec(name=p.name, shape=_split_shape(p.shape, tp), dtype=p.dtype) if p in shared
                   else p for p in layer.params)
    n_experts = routed[0].shape[0] if routed else 1
    key = (layer.ops, n_experts)
    known = None
    if memo is not None:
        # By the ops' identity first (hashing every op of every MoE layer cost more than the shard); the entry
        # keeps the tuple, so that its id is not reused while the memo lives.
        held = memo.get((id(layer.ops), n_experts))
        known = held[1] if held is not None and held[0] is layer.ops else memo.get(key)
    ops = [] if known is None else list(known)
    for op in (layer.ops if known is None else ()):
        if _is_matmul(op) and op.name.startswith("experts."):
            rows = max(1, round(op.m / tp * ep * etp * experts.load))
            width = {"n": max(1, -(-op.n // etp))} if op.name.endswith("gate_up") else {"k": max(1, -(-op.k // etp))}
            ops.append(dataclasses.replace(op, m=rows, batch=max(1, -(-n_experts // ep)), **width))
        elif _is_matmul(op) and op.name.startswith("shared_experts."):
            row = op.name.endswith("down_proj")
            ops.append(dataclasses.replace(op, k=max(1, op.k // tp)) if row else
                       dataclasses.replace(op, n=max(1, -(-op.n // tp))))
        elif _is_matmul(op):  # the router, on the rank's tokens
            ops.append(dataclasses.replace(op, m=max(1, -(-op.m // tp))))
        elif hasattr(op, "elements"):
            scale = experts.load if op.name.startswith("experts.") else 1.0
            ops.append(dataclasses.replace(op, elements=op.elements * scale / tp))
        else:
            ops.append(op)
    if memo is not None:
        if known is None:
            known = memo[key] = tuple(ops)
        memo[(id(layer.ops), n_experts)] = (layer.ops, known)
        # The memo's own tuple: the layers alike then share their ops (one object), which the layer-time
        # memo (:func:`~dpsim.workload.compute.layer_times`) finds by identity.
        ops = known
    else:
        ops = tuple(ops)
    tokens = tokens_of(layer)
    col = sum(2.0 * tokens * p.numel for p in shared[:-1])
    row = 2.0 * tokens * shared[-1].numel if shared else 0.0
    return {"params": params, "ops": ops, "shared": shared, "col": col, "row": row,
            # top_k copies of the rank's s / tp hidden states (input_bytes_per_sample is 2·s·h).
            "routed_bytes": top_k * layer.input_bytes_per_sample / tp,
            "expert_numel": sum(p.numel for p in params if is_expert_param(p))}


def _routed_activation_bytes(layer: LayerSpec, model: ModelSpec) -> float:
    """Of ``layer``'s kept bytes per sample (an MoE layer of ``model``), those kept per routed copy
    (:func:`~dpsim.workload.layers.routed_activation_bytes`), in the count the layer carries (Megatron-Core's
    when :func:`~dpsim.workload.layers.with_megatron_activations` set it); 0 for a layer without dpsim's
    permutation op (a traced module's), whose kept bytes are then left as they are."""
    ops = {getattr(op, "name", ""): op for op in layer.ops}
    permute, router = ops.get("experts.permute"), ops.get("router")
    if permute is None or router is None or model.moe is None or not router.k:
        return 0.0
    top_k = model.moe.top_k
    tokens = permute.elements / router.k / top_k  # the permutation streams tokens x top_k copies of hidden
    megatron = (layer.megatron_activation_bytes_per_sample is not None
                and layer.activation_bytes_per_sample == layer.megatron_activation_bytes_per_sample)
    return routed_activation_bytes(tokens, router.k, top_k=top_k, expert_ffn=model.moe.expert_ffn, megatron=megatron)


def tokens_of(layer: LayerSpec) -> int:
    """Tokens of one sample a block layer runs on (its first matmul's rows)."""
    return next((op.m for op in layer.ops if _is_matmul(op)), 0)


def _tp_model(model: ModelSpec, tp: int, sequence_parallel: bool, experts: ExpertSplit = NO_EXPERT_SPLIT) -> TpModel:
    check_tp(model, tp)
    block_idx = [i for i, l in enumerate(model.layers) if l.unit is not None]
    first_block = block_idx[0] if block_idx else len(model.layers)
    last_block = block_idx[-1] if block_idx else -1
    hidden = model.layers[first_block].input_bytes_per_sample if block_idx else 0.0
    tokens = model.tokens_per_sample or 0
    out_layers: list[TpLayer] = []
    spec_layers: list[LayerSpec] = []
    tied = False
    emb_numel = 0
    dense_key = (id(model), tp, sequence_parallel)
    held = _DENSE_CACHE.get(dense_key)
    if held is None or held[0] is not model:
        if len(_DENSE_CACHE) >= _TP_CACHE_SIZE:
            _DENSE_CACHE.pop(next(iter(_DENSE_CACHE)))
        held = _DENSE_CACHE[dense_key] = (model, {})
    dense = held[1]
    expert_ops: dict = {}
    for i, layer in enumerate(model.layers):
        has_experts = any(is_expert_param(p) for p in layer.params)
        hit = None if has_experts else dense.get(i)
        if hit is not None:
            tp_layer, spec_layer, emb_after, tied_after = hit
            out_layers.append(tp_layer)
            spec_layers.append(spec_layer)
            emb_numel = emb_after if emb_after is not None else emb_numel
            tied = tied_after if tied_after is not None else tied
            continue
        weights = _weights(layer)
        if layer.unit is not None:
            role = "block"
        elif i < first_block and weights and emb_numel == 0:
            role = "embedding"
        elif i > last_block and layer.name == "lm_head":
            role = "head"
        else:
            role = "root"
        kind = layer_kind(layer) if role == "block" else "other"
        split_names: set[str] = set()
        col = row = core = 0.0
        if role == "block":
            split_names = {p.name for p in weights}
            row_w = weights[-1] if weights else None
            col = sum(2.0 * tokens * p.numel for p in weights[:-1])
            row = 2.0 * tokens * row_w.numel if row_w is not None else 0.0
            core = max(0.0, layer.forward_flops_per_sample - col - row) if kind == "attention" else 0.0
        elif role == "embedding":
            table = max(weights, key=lambda p: p.shape[0])
            split_names = {table.name}
            emb_numel = -(-table.shape[0] // tp) * math.prod(table.shape[1:])
        elif role == "head":
            split_names = {p.name for p in weights}
            tied = not weights and layer.forward_flops_per_sample > 0
        moe = _expert_shard(layer, tp, experts, model.moe.top_k if model.moe else 1, memo=expert_ops) \
            if has_experts else None
        if moe is not None:
            split_names = {p.name for p in moe["shared"]}
            col, row = moe["col"], moe["row"]
            params = moe["params"]
        else:
            params = tuple(ParamSpec(name=p.name, shape=_split_shape(p.shape, tp) if p.name in split_names
                                     else p.shape, dtype=p.dtype) for p in layer.params)
        numel = sum(p.numel for p in params)
        split_numel = sum(p.numel for p in params if p.name in split_names)
        act = layer.activation_bytes_per_sample
        if role == "block":
            sh = layer.input_bytes_per_sample / 2.0
            unsplit = min(act, _UNSPLIT_ACTIVATION_SH * sh)
            # Fused attention keeps no score matrices: nothing of it is the 5as² core that selective
            # recomputation drops (what exceeds 13sh there is grouped or wider q/k/v, or q/k norms).
            fused = any(isinstance(op, AttentionOp) and op.fused for op in layer.ops)
            core_act = max(0.0, act - _ATTENTION_LINEAR_ACTIVATION_SH * sh) if kind == "attention" and not fused \
                else 0.0
            split = act - unsplit - core_act
        elif role == "head":
            # Final norm and projection inputs (2 x 2sh) are not split; the fp32 logits are.
            unsplit = min(act, 2.0 * hidden)
            split, core_act = act - unsplit, 0.0
        elif role == "embedding":
            unsplit, split, core_act = act, 0.0, 0.0
        else:
            unsplit, split, core_act = act, 0.0, 0.0
        if moe is not None and experts.activation_load != 1.0:
            # The busiest rank keeps the activations of the copies dispatched to it: its routing load
            # times the balanced ones, split over tp as the routed rows are.
            split += (experts.activation_load - 1.0) * _routed_activation_bytes(layer, model)
        divisor = tp if role in ("block", "embedding", "head") else 1
        out_layers.append(TpLayer(
            index=i, name=layer.name, role=role, kind=kind, unit=layer.unit,
            col_flops_per_sample=col, row_flops_per_sample=row, core_flops_per_sample=core,
            hidden_bytes_per_sample=layer.input_bytes_per_sample if role == "block" else hidden,
            unsplit_activation_bytes_per_sample=unsplit, split_activation_bytes_per_sample=split,
            core_activation_bytes_per_sample=core_act, input_bytes_per_sample=layer.input_bytes_per_sample,
            numel_per_rank=numel, split_numel_per_rank=split_numel,
            expert_numel_per_rank=moe["expert_numel"] if moe else 0,
            routed_bytes_per_sample=moe["routed_bytes"] if moe else 0.0,
            saved_elements=layer.saved_elements, input_byte_class=layer.input_byte_class,
            tp_collectives=not moe or bool(moe["shared"])))
        changes = {"params": params, "forward_flops_per_sample": layer.forward_flops_per_sample / divisor,
                       "activation_bytes_per_sample": unsplit + (split + core_act) / tp}
        if moe is not None:
            # The busiest rank's experts run load x the balanced mean of the active FLOPs.
            changes["ops"] = moe["ops"]
        elif tp > 1 and getattr(layer, "ops", None):
            changes["ops"] = _shard_ops(layer, role, tp, hidden / 2.0, sequence_parallel)
        spec_layers.append(dataclasses.replace(layer, **changes))
        if not has_experts:
            dense[i] = (out_layers[-1], spec_layers[-1], emb_numel if role == "embedding" else None,
                        tied if role == "head" else None)
    spec = ModelSpec(name=model.name if tp == 1 else f"{model.name} (tp {tp} shard)", layers=tuple(spec_layers),
                     registration_order=model.registration_order, grad_ready_order=model.grad_ready_order,
                     tokens_per_sample=model.tokens_per_sample, source=model.source, moe=model.moe)
    # A multi-token prediction module looks its tokens up in the main model's embedding, on the
    # last stage: that stage keeps a copy whose gradient is all-reduced with the first stage's, as
    # a tied embedding's (Megatron-Core ties "the embedding of the mtp processing stage",
    # core.transformer.multi_token_prediction.tie_word_embeddings_state_dict; DualPipe holds both
    # on one rank, arXiv:2412.19437 Sec. 3.2.3, and the callers skip the copy there).
    tied = tied or any(is_mtp_unit(l.unit) for l in model.layers)
    return TpModel(tp=tp, model=model, spec=spec, layers=tuple(out_layers), tied_embedding=tied,
                   embedding_numel_per_rank=emb_numel, sequence_parallel=sequence_parallel)


def _is_matmul(op) -> bool:
    return all(hasattr(op, a) for a in ("m", "n", "k"))


def _shard_ops(layer: LayerSpec, role: str, tp: int, hidden_elements: float, sequence_parallel: bool) -> tuple:
    """The layer's ops as a tensor-parallel rank runs them (:func:`_shard_op`): in a block, the
    weight matmuls (``batch`` 1) are column-parallel up to the last, which is row-parallel,
    and element-wise work between the first and the last runs on the split dimension."""
    ops = list(layer.ops)
    weights = [i for i, op in enumerate(ops) if _is_matmul(op) and getattr(op, "batch", 1) == 1]
    first, last = (weights[0], weights[-1]) if weights else (-1, -1)
    return tuple(_shard_op(op, role, tp, hidden_elements, sequence_parallel, last_matmul=i == last,
                           between=first < i < last) for i, op in enumerate(ops))


def _shard_op(op, role: str, tp: int, hidden_elements: float, sequence_parallel: bool, *, last_matmul: bool,
              between: bool = False):
    """One op of a layer's forward as a tensor-parallel rank runs it (the roofline's op
    descriptions, :mod:`dpsim.workload.roofline`): attention keeps ``heads / t`` (a batched
    per-head matmul ``batch / t``); a column-parallel matmul ``n / t`` (the LM head's
    vocabulary too), the row-parallel one (the block's last) ``k / t``; element-wise work on
    the split dimension (between a block's first and last matmul: activations, attention
    scores, merged heads; anything larger than the hidden state: logits, column biases)
    ``elements / t``, and over the ``s x h`` hidden state only with sequence parallelism; a
    vocab-parallel embedding's weight-gradient traffic ``/ t``."""
    if hasattr(op, "heads"):
        return dataclasses.replace(op, heads=max(1, op.heads // tp))
    if _is_matmul(op):
        if getattr(op, "batch", 1) > 1:
            return dataclasses.replace(op, batch=max(1, op.batch // tp))
        if role == "block":
            return dataclasses.replace(op, k=max(1, op.k // tp)) if last_matmul else \
                dataclasses.replace(op, n=max(1, -(-op.n // tp)))
        if role == "head":
            return dataclasses.replace(op, n=max(1, -(-op.n // tp)))
        return op
    if hasattr(op, "elements"):
        changes = {}
        if role in ("block", "head"):
            hidden = hidden_elements > 0 and abs(op.elements - hidden_elements) <= 0.5
            if sequence_parallel or between or not hidden:
                changes["elements"] = op.elements / tp
        if role in ("embedding", "head", "block") and getattr(op, "fixed_elements", 0.0):
            changes["fixed_elements"] = op.fixed_elements / tp
        return dataclasses.replace(op, **changes) if changes else op
    return op


# ------------------------------------------------------------------ activations


def layer_activation_bytes(layer: TpLayer, tp: int, *, sequence_parallel: bool, recompute: str) -> float:
    """Bytes one sample keeps for backward on one tensor-parallel rank, recomputation aside
    for ``full`` (whose stored input :func:`block_input_bytes` gives). ``recompute``:
    ``off`` or ``selective`` (drops the attention core)."""
    core = 0.0 if recompute == "selective" else layer.core_activation_bytes_per_sample
    if layer.role == "root":
        return layer.unsplit_activation_bytes_per_sample
    unsplit = layer.unsplit_activation_bytes_per_sample
    return (unsplit / tp if sequence_parallel else unsplit) + (layer.split_activation_bytes_per_sample + core) / tp


def saved_extra_bytes_per_rank(layer: TpLayer, tp: int, *, sequence_parallel: bool, precision) -> float:
    """What the layer's stored dtypes add on one rank under ``precision``
    (:func:`~dpsim.workload.precision.saved_extra_bytes`), in bytes: a block's saved elements are
    replicated over the tensor-parallel ranks and split by t with sequence parallelism."""
    extra = saved_extra_bytes(layer.saved_elements, precision)
    return extra / tp if sequence_parallel and layer.role != "root" else extra


def block_input_bytes(layer: TpLayer, tp: int, *, sequence_parallel: bool) -> float:
    """What full recomputation keeps of a block: its first layer's input (split by t with
    sequence parallelism)."""
    return layer.input_bytes_per_sample / (tp if sequence_parallel else 1)


# ------------------------------------------------------------------ communication


@frozen_dataclass
class TpComm:
    """Tensor-parallel communication of one layer for one micro-batch, in seconds."""

    forward_s: float = 0.0
    """Collective time in forward (all of it, hidden or not)."""
    forward_exposed_s: float = 0.0
    """Of which the compute stream waits for."""
    backward_s: float = 0.0
    """Collective time in backward."""
    backward_exposed_s: float = 0.0
    """Of which the compute stream waits for."""
    forward_ops: tuple[tuple[str, float], ...] = ()
    """``(collective, bytes)`` of the forward, in order."""
    backward_ops: tuple[tuple[str, float], ...] = ()
    """``(collective, bytes)`` of the backward, in order."""
    forward_compute_s: float = 0.0
    """Compute-stream work the overlap mode adds in forward besides the collectives (``async``:
    the GEMMs' loss from running in chunks, the local copy and reduction kernels)."""
    backward_compute_s: float = 0.0
    """The same in backward."""


def layer_tp_comm(layer: TpLayer, forward_s: float, micro_batch: int, tp: int, *, sequence_parallel: bool,
                  overlap: str, cost: Callable[[str, float], float], tokens_per_sample: int,
                  act_element_bytes: int = 2, comm_slowdown: float = 0.0,
                  local_copy_s: Callable[[float], float] | None = None,
                  chunk_loss: tuple[float, float] = (0.0, 0.0)) -> TpComm:
    """Tensor-parallel communication of one layer and what of it the compute stream waits for.

    ``forward_s`` is the layer's forward time on one rank (micro-batch included); GEMM
    shares come from the layer's FLOPs. ``cost(op, bytes)`` is the ``tp`` communicator's
    collective time. ``comm_slowdown`` (a calibration's measured one): a collective hidden
    under a GEMM progresses ``1 + comm_slowdown`` times slower while the GEMM runs
    (:func:`~dpsim.engine.simulate.comm_rate`, the engines' rule), so a GEMM covers
    ``1 / (1 + comm_slowdown)`` of its time's worth of collective and more is exposed.
    A collective that blocks the compute stream (``--tp-comm-overlap off``, the all-gather
    conjugate, the head's loss all-reduces) runs beside no compute: it is not slowed.

    ``async`` (a block with sequence parallelism; :func:`async_tp_exposed`) moves its chunks with
    copy engines, which take no SMs, so ``comm_slowdown`` does not apply to it; it needs
    ``local_copy_s(bytes)`` (a memory-bound kernel streaming ``bytes``) and ``chunk_loss`` (the
    column- and row-parallel GEMMs' extra time in chunks, :func:`chunked_gemm_loss`).
    """
    if tp == 1 or layer.role == "root" or not layer.tp_collectives:
        return TpComm()
    fwd_ops, bwd_ops = layer_tp_ops(layer, micro_batch, sequence_parallel=sequence_parallel,
                                    tokens_per_sample=tokens_per_sample, act_element_bytes=act_element_bytes)
    fwd_t = [cost(op, size) for op, size in fwd_ops]
    bwd_t = [cost(op, size) for op, size in bwd_ops]
    flops = layer.col_flops_per_sample + layer.row_flops_per_sample + layer.core_flops_per_sample
    share = (lambda f: forward_s * f / flops) if flops > 0 else (lambda f: 0.0)
    # The collective time each GEMM can hide (the whole GEMM without a comm_slowdown).
    pace = comm_rate(comm_slowdown, True)
    col_s, row_s = share(layer.col_flops_per_sample) * pace, share(layer.row_flops_per_sample) * pace
    fwd_exposed, bwd_exposed = sum(fwd_t), sum(bwd_t)
    if layer.role == "block" and overlap == "async" and sequence_parallel:
        assert local_copy_s is not None, "async tensor parallelism needs the local copy's cost"
        col_g, row_g = share(layer.col_flops_per_sample), share(layer.row_flops_per_sample)
        ag, rs = fwd_t
        size = fwd_ops[0][1]
        # Each all-gather first copies the rank's own shard into its symmetric buffer (read and
        # write of size / tp); each reduce-scatter sums the tp partials it received (reads size,
        # writes size / tp).
        gather_local, reduce_local = local_copy_s(2.0 * size / tp), local_copy_s(size * (1.0 + 1.0 / tp))
        col_loss, row_loss = chunk_loss
        fwd_exposed = async_tp_exposed(ag, col_g, tp) + async_tp_exposed(rs, row_g, tp)
        # Backward: the gathered output gradient feeds the row-parallel input-gradient GEMM, the
        # column-parallel input gradient is reduce-scattered, the re-gathered input feeds the
        # weight-gradient GEMM (chunked along its reduction, so no loss of shape).
        bwd_exposed = async_tp_exposed(bwd_t[0], row_g, tp) + async_tp_exposed(bwd_t[1], col_g, tp) \
            + async_tp_exposed(bwd_t[2], col_g, tp)
        extra = col_loss * col_g + row_loss * row_g
        return TpComm(forward_s=sum(fwd_t), forward_exposed_s=fwd_exposed, backward_s=sum(bwd_t),
                      backward_exposed_s=bwd_exposed, forward_ops=tuple(fwd_ops), backward_ops=tuple(bwd_ops),
                      forward_compute_s=gather_local + reduce_local + extra,
                      backward_compute_s=2.0 * gather_local + reduce_local + extra)
    if layer.role == "block" and overlap != "off":
        if sequence_parallel:
            ag_conj, rs_conj, regather = bwd_t
            # The input-gradient reduce-scatter hides behind the weight-gradient GEMM, the
            # re-gather of the saved input behind the input-gradient GEMM (each ~ the
            # column-parallel linears' forward time); the all-gather conjugate blocks.
            bwd_exposed = ag_conj + max(0.0, rs_conj - col_s) + max(0.0, regather - col_s)
        else:
            bwd_exposed = max(0.0, bwd_t[0] - col_s)
        if overlap == "full":
            # Userbuffers split each collective into tp chunks pipelined with its GEMM:
            # one chunk is always exposed, the rest when the GEMM is shorter.
            if sequence_parallel:
                ag, rs = fwd_t
                fwd_exposed = _chunked(ag, col_s, tp) + _chunked(rs, row_s, tp)
                bwd_exposed = _chunked(bwd_t[0], row_s, tp) + _chunked(bwd_t[1], col_s, tp) \
                    + _chunked(bwd_t[2], col_s, tp)
            else:
                fwd_exposed = _chunked(fwd_t[0], row_s, tp)
                bwd_exposed = _chunked(bwd_t[0], col_s, tp)
    return TpComm(forward_s=sum(fwd_t), forward_exposed_s=fwd_exposed, backward_s=sum(bwd_t),
                  backward_exposed_s=bwd_exposed, forward_ops=tuple(fwd_ops), backward_ops=tuple(bwd_ops))


def _chunked(comm_s: float, gemm_s: float, tp: int) -> float:
    return comm_s / tp + max(0.0, comm_s * (tp - 1) / tp - gemm_s)


def async_tp_exposed(comm_s: float, gemm_s: float, tp: int) -> float:
    """What the compute stream waits for of one collective that PyTorch's asynchronous tensor
    parallelism decomposes with its GEMM (``fused_all_gather_matmul``,
    ``fused_matmul_reduce_scatter`` in ``torch/distributed/_symmetric_memory``, which
    torchtitan's ``enable_async_tensor_parallel`` turns on through Inductor's
    ``_micro_pipeline_tp`` pass).

    The GEMM runs in ``tp`` row chunks, one per rank's shard; the ``tp - 1`` remote shards move
    as peer-to-peer copies (``Tensor.copy_`` from a peer's symmetric buffer: the copy engines)
    that run one at a time (``_pipelined_multi_all_gather_and_consume``: "cp from different
    streams cannot overlap"). The all-gather's GEMM starts on the local shard, which needs no
    copy; the reduce-scatter computes the chunks for the peers first and its own last, beside
    the last copy. Both are a two-stage flow shop of ``tp`` GEMM chunks of ``gemm_s / tp`` and
    ``tp - 1`` copies of ``comm_s / (tp - 1)``: it ends at ``max(gemm_s, gemm_s / tp + comm_s)``,
    so ``max(0, comm_s - gemm_s (tp - 1) / tp)`` is exposed, all of it with ``tp = 1``.
    ``comm_s`` is the whole collective's time on the ``tp`` communicator: the copies move the
    same ``(tp - 1) / tp`` of the tensor over the same NVLink.

    The design: "[Distributed w/ TorchTitan] Introducing Async Tensor Parallelism in PyTorch"
    (discuss.pytorch.org/t/209487); torchtitan added it as an option effective only with
    ``torch.compile`` (pytorch/torchtitan pull request 429, traces of Llama-3-70B at tp 8). A
    published end-to-end gain: Llama-3-70B on 128 H100s, FSDP 16 x TP 8, full recomputation,
    598 to 673 tokens/s per GPU in bf16, +12.5 % (pytorch/torchtitan issue 1185)."""
    return max(0.0, comm_s - gemm_s * (tp - 1) / tp)


ASYNC_TP_CONCURRENT_CHUNKS = 2
"""GEMM chunks in flight at once: the decomposition alternates two streams so that one
chunk's GEMM runs beside the next, "greatly reducing quantization inefficiency"
(``torch/distributed/_symmetric_memory/__init__.py``, ``_pipelined_multi_all_gather_and_consume``)."""


def chunked_gemm_loss(layer: LayerSpec, tp: int, micro_batch: int, gpu: GpuSpec) -> tuple[float, float]:
    """Extra time, as a fraction, of a tensor-parallel block's column- and row-parallel GEMMs
    when asynchronous tensor parallelism runs each in ``tp`` chunks of ``m / tp`` rows, two at a
    time (:data:`ASYNC_TP_CONCURRENT_CHUNKS`): the ratio of the whole GEMM's tile and wave
    efficiency to the chunks' (:func:`~dpsim.workload.roofline.shape_efficiency`), weighted by
    FLOPs. ``layer`` is the shard's layer (:attr:`TpModel.spec`); an MoE layer's routed experts
    are not chunked."""
    weights = [op for op in layer.ops if _is_matmul(op) and getattr(op, "batch", 1) == 1
               and getattr(op, "kind", "linear") == "linear"
               and not op.name.startswith("experts.")]
    if tp == 1 or not weights:
        return 0.0, 0.0

    def loss(ops) -> float:
        flops = sum(op.m * op.n * op.k for op in ops)
        if flops <= 0:
            return 0.0
        total = 0.0
        for op in ops:
            m = op.m * micro_batch
            whole = shape_efficiency(m, op.n, op.k, 1, gpu)
            chunk = shape_efficiency(-(-m // tp), op.n, op.k, min(tp, ASYNC_TP_CONCURRENT_CHUNKS), gpu)
            total += op.m * op.n * op.k * max(0.0, whole / chunk - 1.0)
        return total / flops

    return loss(weights[:-1]), loss(weights[-1:])


def layer_tp_ops(layer: TpLayer, micro_batch: int, *, sequence_parallel: bool, tokens_per_sample: int,
                 act_element_bytes: int = 2) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """The forward and backward collectives of one layer for one micro-batch, ``(op, bytes)``
    in order (see the module docstring); ``act_element_bytes``: the activation dtype's size."""
    s = layer.hidden_bytes_per_sample * micro_batch * act_element_bytes / 2.0
    if layer.role == "block":
        if sequence_parallel:
            return ([("all_gather", s), ("reduce_scatter", s)],
                    [("all_gather", s), ("reduce_scatter", s), ("all_gather", s)])
        return [("all_reduce", s)], [("all_reduce", s)]
    if layer.role == "embedding":
        return [("reduce_scatter" if sequence_parallel else "all_reduce", s)], []
    if layer.role == "head":
        loss = [("all_reduce", 4.0 * tokens_per_sample * micro_batch)] * CROSS_ENTROPY_ALL_REDUCES
        fwd = ([("all_gather", s)] if sequence_parallel else []) + loss
        return fwd, [("reduce_scatter" if sequence_parallel else "all_reduce", s)]
    return [], []
