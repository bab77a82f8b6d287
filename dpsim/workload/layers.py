"""Building blocks of the catalog's architectures: parameters registered as torch registers them,
layers with their FLOPs and activation bytes, and the activation formulas they cite.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Sequence

from dpsim.errors import ConfigError, DpsimWarning, WorkloadError
from dpsim.frozen import frozen_dataclass
from dpsim.workload.host_timeline import call_marker, sync_marker
from dpsim.workload.spec import AttentionOp, LayerSpec, MatmulOp, MemoryOp, ModelSpec, OpSpec, ParamSpec

ACTIVATION_ELEMENT_BYTES = 2
"""Activations are estimated for bf16/fp16 training (2 bytes per element)."""


# --------------------------------------------------------------------------- helpers


def attention_matmul_flops(seq_len: int, attn_dim: int) -> float:
    """FLOPs of ``QKᵀ`` and ``softmax(·)V`` for one layer and sample: ``2·2·seq²·attn_dim``.

    Full square (not halved for causal masks); ``attn_dim`` is heads × head size.
    """
    return 4.0 * seq_len * seq_len * attn_dim


def window_causal_share(seq_len: int, window: int) -> float:
    """The share of the ``seq x seq`` scores a causal sliding window of ``window`` tokens computes, in
    the convention that a full causal mask computes half (``causal_share`` 0.5).

    Query ``i`` attends to keys ``max(0, i - window + 1) .. i``: ``min(i + 1, window)`` scores, so the
    window keeps ``w(w+1)/2 + (s - w)·w`` of the ``s(s+1)/2`` causal pairs (all of them once
    ``window >= seq``). FlashAttention's kernels skip the key blocks outside the window as they skip
    those above the diagonal: under ``Is_local`` a query block's loop starts at ``n_block_min =
    (m_block·kBlockM - window_size_left) / kBlockN`` (Dao-AILab/flash-attention@c1f0be2f7a69
    ``csrc/flash_attn/src/flash_fwd_kernel.h``, ``compute_attn_1rowblock``; ``window_size`` since
    flash-attn 2.3; transformers 5.25.0 passes ``(sliding_window - 1, sliding_window - 1)``,
    ``modeling_flash_attention_utils.py``, and its mask keeps ``kv_idx > q_idx - sliding_window``,
    ``masking_utils.sliding_window_overlay``: ``window`` keys, the query's own included), so the work
    and the loop each query block runs shrink by the same ratio. The partial blocks at the window's
    edge (one per query block, as on the diagonal) are not counted."""
    s, w = int(seq_len), int(window)
    if not w or w >= s:
        return 0.5
    pairs = w * (w + 1) / 2.0 + float(s - w) * w
    return 0.5 * pairs / (s * (s + 1) / 2.0)


def korthikanti_block_activation_bytes(
    seq_len: int, hidden: int, heads: int, *, flash_attention: bool = False, resid_dropout: bool = True,
    attn_dropout: bool = True,
) -> tuple[float, float]:
    """Bytes one transformer block keeps for backward (b = 1), as (attention, MLP) halves.

    Korthikanti et al. 2022, Sec. 4.1: ``s·h·(34 + 5·a·s/h)`` per layer in 16-bit
    activations, i.e. attention ``11sh + 5as²`` plus LayerNorm ``2sh`` and MLP ``19sh``
    plus LayerNorm ``2sh``. ``flash_attention`` drops the ``5as²`` term (the fused kernel
    keeps only the softmax statistics, ``a·s`` fp32 values, not counted); without residual
    dropout the two ``sh`` masks (1 byte each) go; without attention dropout its ``as²`` mask
    and its output go (``V`` is multiplied by the softmax output, already kept): ``2as²`` stay.
    """
    sh = float(seq_len) * hidden
    mask = 0.0 if resid_dropout else 1.0
    scores = 0.0 if flash_attention else (5.0 if attn_dropout else 2.0) * heads * seq_len * seq_len
    attention = (13.0 - mask) * sh + scores
    mlp = (21.0 - mask) * sh
    return attention, mlp


def llama_block_activation_bytes(seq_len: int, hidden: int, q_dim: int, kv_dim: int, inter: int, heads: int,
                                 *, flash_attention: bool = False, layernorm: bool = False,
                                 gated: bool = True) -> tuple[float, float]:
    """Bytes a Llama decoder block keeps for backward (b = 1, 2 bytes per element), as
    (attention, MLP) halves, as PyTorch autograd saves them for HF's eager modules: each
    eager RMSNorm its input and normalised input (``2sh``), the projections their (shared)
    input (``sh``), fused attention rotated q and k, v and its output (plus the ``a·s``
    softmax statistics, not counted), eager attention also the softmax output (``as²``,
    which the product with ``v`` reuses; Llama has no attention dropout); the MLP the gate projection (silu's input),
    silu's output and the up projection (the product's operands) and the product (the down
    projection's input): ``4·s·inter``.

    ``layernorm``: a fused LayerNorm keeps its input only (its output is the projections' input,
    and its per-row mean and rstd are not counted), ``sh`` less per half than the eager RMSNorm's
    two tensors. ``gated=False``: a two-matrix MLP ``down(act(up(x)))`` keeps the activation's
    saved tensor (GELU's input; ReLU's output, which squared ReLU's ``pow`` also saves as its
    input) and the down projection's input: ``2·s·inter``."""
    sh = float(seq_len) * hidden
    e = ACTIVATION_ELEMENT_BYTES
    norm = 2 * sh if layernorm else 3 * sh
    attention = e * (norm + 2.0 * seq_len * (q_dim + kv_dim))
    if not flash_attention:
        attention += e * float(heads) * seq_len * seq_len
    mlp = e * (norm + (4.0 if gated else 2.0) * seq_len * inter)
    return attention, mlp


MEGATRON_LM_COMMIT = "NVIDIA/Megatron-LM@d98e8a64ddf3"
"""The Megatron-LM source the Megatron-Core activation counts below were read from (August 2026)."""

SOFTMAX_STAT_BYTES = 4
"""Fused attention keeps one fp32 log-sum-exp per query row and head for its backward
(FlashAttention-2, Dao 2023, Algorithm 1: "Write L to HBM")."""


def megatron_block_activation_bytes(seq_len: int, hidden: int, q_dim: int, kv_dim: int, inter: int, heads: int,
                                    *, flash_attention: bool = True, qk_norm: bool = False, gated: bool = True
                                    ) -> tuple[float, float]:
    """Bytes a Llama-shaped block keeps for backward under Megatron-Core with TransformerEngine
    (b = 1, 16-bit activations, no dropout), as (attention, MLP) halves: Korthikanti et al. 2022
    (arXiv:2205.05198, Sec. 4.1)'s accounting, tensor by tensor, with grouped-query heads and a
    gated MLP as Megatron-Core runs them (``MEGATRON_LM_COMMIT``):

    - each sub-block's norm input and its first linear's input: ``2sh + 2sh`` (Korthikanti's LayerNorm
      ``2sbh`` and QKV / first-MLP-linear ``2sbh``); TE's ``LayerNormLinear`` keeps both, its backward
      reading ``inputmat`` in ``rmsnorm_bwd`` and ``ln_out`` in the weight-gradient GEMM
      (NVIDIA/TransformerEngine@3ec878759cc6 ``transformer_engine/pytorch/module/layernorm_linear.py``);
    - attention: the query ``2·s·q``, the key and the value at the key-value heads' width
      ``2·s·kv`` each, the output ``2·s·q`` (the projection's input), and the ``a·s`` fp32
      softmax statistics. TransformerEngine's attention takes the grouped heads as they are
      (``megatron/core/extensions/transformer_engine.py`` line 2092, ``num_gqa_groups`` =
      ``num_query_groups``); only the unfused local attention repeats them to the query heads
      (``megatron/core/transformer/dot_product_attention.py`` lines 169-174, ``repeat_interleave``),
      which ``flash_attention=False`` counts, with its ``2·a·s²`` softmax output (the ``5as²`` of
      Korthikanti less the dropout's mask and output);
    - ``qk_norm`` (``--qk-layernorm``): the query and key norms keep their inputs, ``2·s·(q + kv)``;
    - MLP: the gated first linear's output ``2·s·2·inter``, which the fused bias-SwiGLU keeps as its
      only activation (``megatron/core/fusions/fused_bias_swiglu.py`` line 184, ``save_for_backward(
      input_for_backward, bias)``; Megatron-LM turns the fusion on with ``--swiglu``:
      ``megatron/training/argument_utils.py`` line 317, ``--no-bias-swiglu-fusion`` to turn it off), and
      the second linear's input ``2·s·inter``: ``3·s·inter`` elements where an eager SwiGLU keeps
      ``4·s·inter`` (:func:`llama_block_activation_bytes`). A squared-ReLU MLP of width ``f`` built as a
      gated one of ``2f/3`` keeps the same ``2f``: the ReLU's output and its square. ``gated=False``
      counts a two-matrix MLP of ``inter`` so: ``2·s·inter`` (the first linear's output, or the ReLU's
      output its square reads, and the second linear's input).

    Not counted: dropout masks (the Llama-family configurations train without dropout: e.g.
    ``--attention-dropout 0.0 --hidden-dropout 0.0``, yanring/Megatron-MoE-ModelZoo
    ``model_configs/benchmarking/Qwen3-235B-A22B.yaml``)."""
    sh = float(seq_len) * hidden
    e = ACTIVATION_ELEMENT_BYTES
    kv = kv_dim if flash_attention else q_dim
    attention = e * (2.0 * sh + seq_len * (2.0 * q_dim + 2.0 * kv))
    attention += SOFTMAX_STAT_BYTES * float(heads) * seq_len if flash_attention \
        else e * float(heads) * seq_len * seq_len
    if qk_norm:
        attention += e * float(seq_len) * (q_dim + kv_dim)
    mlp = e * (2.0 * sh + (3.0 if gated else 2.0) * seq_len * inter)
    return attention, mlp


MEGATRON_LEGACY_COMMIT = "alibaba/Megatron-LLaMA@25306de84d30"
"""The legacy Megatron-LM source (``megatron/model``, October 2023; Megatron-LM of mid-2023 with Alibaba's
optimizer changes) the legacy count below was read from."""


def megatron_legacy_block_activation_bytes(seq_len: int, hidden: int, q_dim: int, inter: int, heads: int
                                           ) -> tuple[float, float]:
    """Bytes a Llama block keeps for backward under legacy Megatron-LM's ``megatron/model`` with
    ``--use-flash-attn --swiglu --RMSNorm`` and no dropout (b >= 2, 16-bit activations; query, key and value
    heads alike), as (attention, MLP) halves, read tensor by tensor from ``MEGATRON_LEGACY_COMMIT``:

    - each norm is apex's fused one (``megatron/model/fused_layer_norm.py`` calls
      ``FusedRMSNormAffineFunction``, which saves its 16-bit input, the weight and the fp32 per-row
      ``invvar``: NVIDIA/apex@3c53cf81fef0 ``apex/normalization/fused_layer_norm.py``): ``sh``; its output is
      the next linear's input, which the linear keeps (with sequence parallelism its own shard,
      all-gathered again in backward: ``megatron/core/tensor_parallel/layers.py`` lines 220-239,
      ``ctx.save_for_backward(input, weight)`` before the all-gather): ``sh``. An eager RMSNorm keeps a
      normalised copy besides (:func:`llama_block_activation_bytes`); this one does not;
    - rotary (``megatron/model/rotary_pos_embedding.py``: ``t * cos + rotate_half(t) * sin``) keeps only its
      ``cos`` and ``sin`` tables; the rotated query, key and value are copied ``s b -> b s``
      (``megatron/model/transformer.py`` line 657, ``.contiguous()``) and flash-attn 1.x's
      ``flash_attn_unpadded_func`` keeps those three, its output and the fp32 log-sum-exp per row and head:
      ``3·s·q + s·q`` (``q``: the heads' width, ``q_dim``) and ``4·a·s`` bytes;
    - the output is copied back ``b s -> s b`` (line 664, a copy whenever the micro-batch is 2 or more)
      and the row-parallel projection keeps that copy: one ``s·q`` more than Megatron-Core, whose
      attention writes the projection's input in place (:func:`megatron_block_activation_bytes`). At
      micro-batch 1 the rearrangement is a view and this ``s·q`` is not kept: counted anyway (an
      overcount of ``2·s·q`` bytes per block there);
    - SwiGLU is eager Python (``ParallelMLP``, ``F.silu(x[0]) * x[1]`` on the chunks of the first linear's
      output, lines 113-117): the ``2·inter`` output (both halves), SiLU's output and the product (the
      second linear's input): ``4·s·inter``, as the eager count; no bias (``--disable-bias-linear``);
    - dropout at 0 (the launch scripts' ``--attention-dropout 0 --hidden-dropout 0``) keeps no mask:
      ``torch.nn.functional.dropout`` returns its input at ``p = 0`` (pytorch/pytorch
      ``aten/src/ATen/native/Dropout.cpp``, ``_dropout_impl``: ``if (p == 0 || !train ...) return input``).

    Per block with ``q = h``: ``18sh + 8·s·inter`` bytes plus the statistics, where the eager count gives
    ``20sh + 8·s·inter``: the eager RMSNorm's normalised copy (``2sh`` per norm) is not kept, and attention's
    extra output copy takes the place of one of them."""
    sh = float(seq_len) * hidden
    e = ACTIVATION_ELEMENT_BYTES
    attention = e * (2.0 * sh + 5.0 * float(seq_len) * q_dim) + SOFTMAX_STAT_BYTES * float(heads) * seq_len
    mlp = e * (2.0 * sh + 4.0 * float(seq_len) * inter)
    return attention, mlp


def megatron_gpt_block_activation_bytes(seq_len: int, hidden: int, heads: int, *, flash_attention: bool,
                                        resid_dropout: bool = True, attn_dropout: bool = True
                                        ) -> tuple[float, float]:
    """Bytes a GPT block (LayerNorm, multi-head attention, 4h GELU MLP) keeps for backward under
    Megatron-LM / Megatron-Core (b = 1, 16-bit activations), as (attention, MLP) halves.

    Korthikanti et al. 2022 (arXiv:2205.05198, Sec. 4.1) derived ``s·h·(34 + 5·a·s/h)`` from
    Megatron's own GPT block, so this is :func:`korthikanti_block_activation_bytes` tensor for
    tensor: each LayerNorm's input and the following linear's input (TE's ``LayerNormLinear`` keeps
    ``inputmat`` and ``ln_out``, as for the Llama block in :func:`megatron_block_activation_bytes`),
    Q, K, V and the projection's input, the fused bias-GELU's input (``megatron/model/fused_bias_gelu.py``
    saves ``input, bias``) and fc2's input ``8sh`` each, the 1-byte hidden-dropout masks; without
    fused attention the ``5as²`` scores, softmax and attention-dropout mask and output. The one
    addition: with fused attention the ``a·s`` fp32 softmax statistics (:data:`SOFTMAX_STAT_BYTES`),
    which Korthikanti (before FlashAttention) has no term for. Under 16-bit parameters the eager
    count (:func:`korthikanti_block_activation_bytes` in ``build_gpt2``) therefore differs only by
    these statistics (``4as`` bytes against ``13sh``: 0.2 % at h = 2048, a = 16)."""
    attention, mlp = korthikanti_block_activation_bytes(seq_len, hidden, heads, flash_attention=flash_attention,
                                                        resid_dropout=resid_dropout, attn_dropout=attn_dropout)
    if flash_attention:
        attention += SOFTMAX_STAT_BYTES * float(heads) * seq_len
    return attention, mlp


def megatron_moe_activation_bytes(tokens: int, hidden: int, *, experts: int, top_k: int, expert_ffn: int,
                                  shared_ffn: int) -> float:
    """Bytes an MoE layer keeps for backward per sample under Megatron-Core (b = 1, 16-bit
    activations; ``MEGATRON_LM_COMMIT``, the same since Megatron-LM 2659630721, 2025-04-09, "Memory
    efficient token permutation"):

    - the pre-MLP norm's input ``2sh`` and its output ``2sh``, which the router's linear keeps
      (``RouterGatingLinearFunction`` saves its 16-bit input and casts inside,
      ``megatron/core/transformer/moe/moe_utils.py`` line 1382) and the shared experts' first linear
      reads too;
    - the router's fp32 scores ``4·s·experts``;
    - per routed copy (``top_k·s`` of them, all-to-all'd to the experts' ranks): the permuted token
      the experts' first grouped GEMM keeps as its input ``2h``, that GEMM's gated output ``2·2·ffn``
      (the weighted SwiGLU's only activation, ``WeightedSwiGLUFunction`` in
      ``megatron/core/fusions/fused_bias_swiglu.py``) and its output ``2·ffn`` (the second GEMM's
      input), and the probability applied in the activation ``4``. The experts' outputs are not kept:
      the probabilities are applied in the activation, so unpermuting them is a scatter that saves no
      input (``megatron/core/transformer/moe/token_dispatcher.py`` passes no probabilities to
      ``unpermute``);
    - the shared experts as a dense gated MLP with the fused SwiGLU (``SharedExpertMLP`` is an ``MLP``):
      ``2·3·s·shared_ffn``.

    :func:`moe_activation_bytes` is the eager count (an unfused SwiGLU, the expert outputs kept for
    the probability-weighted combine)."""
    e = ACTIVATION_ELEMENT_BYTES
    sh = float(tokens) * hidden
    routed = routed_activation_bytes(tokens, hidden, top_k=top_k, expert_ffn=expert_ffn, megatron=True)
    return e * 2.0 * sh + 4.0 * tokens * experts + routed + e * 3.0 * tokens * shared_ffn


def routed_activation_bytes(tokens: float, hidden: int, *, top_k: int, expert_ffn: int, megatron: bool = False) -> float:
    """Of an MoE layer's kept bytes per sample (:func:`moe_activation_bytes`, or with ``megatron``
    :func:`megatron_moe_activation_bytes`), the part kept per routed copy (``tokens x top_k`` of them at
    balanced routing): what lives on the rank the copy is dispatched to, so the busiest expert-parallel
    rank keeps its routing load times it (:func:`~dpsim.strategies.tensor.tp_model`)."""
    e = ACTIVATION_ELEMENT_BYTES
    if megatron:
        return float(tokens) * top_k * (e * (hidden + 3.0 * expert_ffn) + 4.0)
    sh = float(tokens) * hidden
    return e * (2.0 * top_k * sh + 3.0 * top_k * tokens * expert_ffn)


def with_megatron_activations(model: ModelSpec, count: str = "megatron") -> ModelSpec:
    """``model`` with every layer that has the ``count`` (:data:`ACTIVATION_COUNTS`, not ``eager``) of its
    framework (:data:`_COUNT_FIELDS`: Megatron-Core's
    :attr:`~dpsim.workload.spec.LayerSpec.megatron_activation_bytes_per_sample`, legacy Megatron-LM's
    :attr:`~dpsim.workload.spec.LayerSpec.megatron_legacy_activation_bytes_per_sample`) keeping that many
    bytes for backward, its saved elements all 16-bit (TransformerEngine's and apex's norms keep their 16-bit
    input and Megatron's residual stream is in the parameters' dtype without
    ``--fp32-residual-connection``): what a model trained by Megatron-Core keeps
    (:func:`megatron_block_activation_bytes`, :func:`megatron_moe_activation_bytes`), or legacy Megatron-LM
    (:func:`megatron_legacy_block_activation_bytes`). Other layers are left as they are."""
    field = _COUNT_FIELDS[count]
    return replace(model, layers=tuple(
        layer if getattr(layer, field) is None else
        replace(layer, activation_bytes_per_sample=getattr(layer, field), saved_elements=(),
                compiled_saved_elements=None)
        for layer in model.layers))


ACTIVATION_COUNTS = ("eager", "megatron", "megatron-legacy")
"""Whose count of the activations a layer keeps for backward (``--activations``): ``eager`` (the
Hugging Face modules run eagerly: key and value repeated to the query heads, an unfused SwiGLU, an
eager RMSNorm), ``megatron`` (Megatron-Core with TransformerEngine: :func:`with_megatron_activations`) or
``megatron-legacy`` (legacy Megatron-LM's ``megatron/model`` with flash-attn and apex's fused norms:
:func:`megatron_legacy_block_activation_bytes`)."""

_COUNT_FIELDS = {"megatron": "megatron_activation_bytes_per_sample",
                 "megatron-legacy": "megatron_legacy_activation_bytes_per_sample"}
"""The :class:`~dpsim.workload.spec.LayerSpec` field each count other than ``eager`` reads."""


def has_megatron_count(model: ModelSpec, count: str = "megatron") -> bool:
    """Some layer of ``model`` carries the ``count`` (``megatron``: Megatron-Core's; ``megatron-legacy``:
    legacy Megatron-LM's), so ``--activations`` with it changes the model."""
    field = _COUNT_FIELDS[count]
    return any(getattr(layer, field) is not None for layer in model.layers)


def with_activation_count(model: ModelSpec, count: str) -> ModelSpec:
    """``model`` keeping what ``count`` (:data:`ACTIVATION_COUNTS`) says its framework keeps for
    backward: the one place ``--activations`` is applied, for predict, memory, sweep, goodput and plan
    alike, and for the validation harness's Megatron rows. A model none of whose layers has that count
    (only the Llama-family builder and GPT blocks with a 4h GELU MLP have Megatron-Core's; only
    sequential Llama blocks with flash attention, equal query and key-value heads and a SwiGLU MLP have
    legacy Megatron-LM's) is refused rather than predicted with the eager count under a flag that says
    otherwise."""
    if count == "eager":
        return model
    if count not in _COUNT_FIELDS:
        raise ConfigError(f"--activations: {count!r} is not a count; allowed: {', '.join(ACTIVATION_COUNTS)}")
    if not has_megatron_count(model, count):
        covers = ("a Llama-family decoder (grouped key/value heads, fused SwiGLU and norms) or a GPT block with a "
                  "4h GELU MLP" if count == "megatron" else
                  "a sequential Llama block with flash attention, key/value heads equal to the query heads and a "
                  "SwiGLU MLP")
        raise ConfigError(f"--activations: {count} counts what its framework keeps of {covers}; "
                          f"{model.name} has no layer it covers; leave --activations out (eager)")
    return with_megatron_activations(model, count)


def eager_rms_saved_elements(seq_len: int, hidden: int, readers: int) -> tuple[tuple[float, str], ...]:
    """Of a Llama sub-block's saved activations, those a precision stores apart from the matmuls'
    16-bit outputs (:data:`dpsim.workload.spec.SAVED_CLASSES`): its RMSNorm's input and normalised
    input, in the residual stream's dtype (``stream``; fp32 under autocast, which casts neither
    the residual adds nor the norm's products), and under autocast one 16-bit copy of the norm's
    output per extra projection reading it (``recast``: autocast caches only the casts of leaf
    tensors, the weights). Measured on transformers 5.25's ``LlamaDecoderLayer`` with
    ``saved_tensors_hooks`` (``tests/test_catalog.py``): under autocast 8 + 6 = 14 s·h bytes for
    the attention half's norm and q/k/v inputs, 8 + 4 for the MLP's, where a 2-byte count gives 6.

    Not counted: HF's eager ``LlamaRMSNorm`` upcasts a 16-bit stream (``hidden_states.to(torch.float32)``)
    and saves that fp32 copy, not the 16-bit input (2 more bytes per element of the norm's input
    with 16-bit parameters, measured by the same test); fused norms keep the 16-bit input (TransformerEngine's
    ``RMSNorm``, flash-attn's ``rms_norm``) and so does torch.compile's partitioner, which recomputes
    a cast rather than save its output, so which one a run keeps depends on its norm kernel."""
    sh = float(seq_len) * hidden
    recast = ((float(readers - 1) * sh, "recast"),) if readers > 1 else ()
    return ((2.0 * sh, "stream"),) + recast


def layernorm_saved_elements(seq_len: int, hidden: int, readers: int) -> tuple[tuple[float, str], ...]:
    """:func:`eager_rms_saved_elements` for a fused LayerNorm: its input in the stream's dtype
    (``layer_norm`` runs in fp32 under autocast, as GPT-2's blocks count it) and one 16-bit copy
    of its output per extra projection reading it."""
    sh = float(seq_len) * hidden
    recast = ((float(readers - 1) * sh, "recast"),) if readers > 1 else ()
    return ((sh, "stream"),) + recast


def squared_relu_ops(name: str, elements: float) -> list[MemoryOp]:
    """Squared ReLU, ``relu(x) ** 2`` (HF ``ReLUSquaredActivation``; Megatron-Core's
    ``squared_relu``): the ReLU and the ``pow``, one eager kernel each way each."""
    return [activation_op(f"{name}.relu", elements, "relu"),
            MemoryOp(name=f"{name}.pow", elements=elements, forward=((2, "act"),), backward=((3, "act"),))]


def llama_compiled_saved_elements(seq_len: int, hidden: int, q_dim: int, kv_dim: int, inter: int
                                  ) -> tuple[tuple[tuple[float, str], ...], tuple[tuple[float, str], ...]]:
    """What a Llama block saves for backward under ``torch.compile``, as (attention, MLP) halves of
    ``(elements, class)`` pairs per sample, with fused attention.

    AOTAutograd traces forward and backward as one joint graph and
    ``min_cut_rematerialization_partition`` (torch/_functorch/partitioners.py, torch 2.13.0; the
    partitioner Inductor's ``compile_fx`` uses) picks the cheapest set of forward tensors, by bytes,
    from which backward can run, recomputing fusible pointwise ops (the norms, RoPE, SiLU, the
    products, the residual adds, casts) but never the matmuls or attention it bans from
    recomputation; its ``fx_graph_cse`` first merges autocast's repeated casts of one tensor. Traced
    on transformers 5.25's ``LlamaDecoderLayer`` (``tests/test_compiled_activations.py``), it keeps
    the block's input in the stream's dtype, the 16-bit input of the q/k/v projections, q, k, v and
    the attention output, and the output projection's output (from which, with the input, the MLP's
    residual input is recomputed); in the MLP the 16-bit input of gate and up, their outputs and
    their product: ``4·s·h + 2·s·(q + kv) + 3·s·inter`` elements, where eager mode keeps ``6·s·h +
    2·s·(q + kv) + 4·s·inter`` (the norms' inputs and products, SiLU's output) at its dtypes.
    ``kv_dim``: the keys and values as attention reads them (repeated to the query heads or not, as
    :func:`llama_block_activation_bytes` takes them)."""
    sh = float(seq_len) * hidden
    attention = ((sh, "stream"), (2.0 * sh + 2.0 * seq_len * (q_dim + kv_dim), "act"))
    mlp = ((sh + 3.0 * seq_len * inter, "act"),)
    return attention, mlp


def lm_head_activation_bytes(seq_len: int, hidden: int, vocab: int, *, eager_rms: bool = False) -> float:
    """Final norm + output projection inputs and fp32 logits: ``4sh + 4sv`` (Korthikanti Sec. 4.1);
    an eager RMSNorm keeps its normalised input too (:func:`eager_rms_norm_ops`): ``6sh + 4sv``."""
    return (6.0 if eager_rms else 4.0) * seq_len * hidden + 4.0 * seq_len * vocab


def _hidden_bytes(seq_len: int, hidden: int) -> float:
    """One sample's hidden states at 2 bytes per element: a block's input, what full
    activation checkpointing keeps per block (Korthikanti et al. 2022, Sec. 5: 2sbh)."""
    return float(ACTIVATION_ELEMENT_BYTES * seq_len * hidden)


def _param(name: str, shape: tuple[int, ...], dtype: str) -> ParamSpec:
    return ParamSpec(name=name, shape=tuple(int(d) for d in shape), dtype=dtype)


@frozen_dataclass
class _Module:
    """One torch module's parameters, with the order its backward makes their gradients ready."""

    params: tuple[ParamSpec, ...]
    """In registration order."""
    ready: tuple[str, ...]
    """Names of ``params`` in the order autograd hands over their gradients."""


def _tensor(name: str, shape: tuple[int, ...], dtype: str) -> _Module:
    """A lone parameter: an embedding table, a class token, a position table."""
    return _Module(params=(_param(name, shape, dtype),), ready=(name,))


def _affine(weight: ParamSpec, bias: ParamSpec | None) -> _Module:
    """A matmul plus bias (``F.linear``, ``addmm``): the bias gradient is ready first."""
    if bias is None:
        return _Module(params=(weight,), ready=(weight.name,))
    return _Module(params=(weight, bias), ready=(bias.name, weight.name))


def _linear(prefix: str, out_features: int, in_features: int, dtype: str, bias: bool = True) -> _Module:
    """``torch.nn.Linear``: weight ``(out, in)`` then bias ``(out,)``; bias ready first."""
    return _affine(_param(f"{prefix}.weight", (out_features, in_features), dtype),
                   _param(f"{prefix}.bias", (out_features,), dtype) if bias else None)


def _conv1d_hf(prefix: str, nx: int, nf: int, dtype: str) -> _Module:
    """HuggingFace ``Conv1D`` (GPT-2, ``addmm``): weight ``(in, out)`` then bias ``(out,)``; bias ready first."""
    return _affine(_param(f"{prefix}.weight", (nx, nf), dtype), _param(f"{prefix}.bias", (nf,), dtype))


def _conv2d(prefix: str, shape: tuple[int, ...], dtype: str, bias: bool = False) -> _Module:
    """``torch.nn.Conv2d``: ``convolution_backward`` hands over the weight gradient before the bias."""
    params = (_param(f"{prefix}.weight", shape, dtype),)
    if bias:
        params += (_param(f"{prefix}.bias", (shape[0],), dtype),)
    return _Module(params=params, ready=tuple(p.name for p in params))


def _norm(prefix: str, n: int, dtype: str, bias: bool = True) -> _Module:
    """LayerNorm / BatchNorm affine (weight, bias) or RMSNorm (weight only).

    ``native_layer_norm_backward`` / ``native_batch_norm_backward`` hand over the
    weight gradient before the bias gradient.
    """
    params = (_param(f"{prefix}.weight", (n,), dtype),)
    if bias:
        params += (_param(f"{prefix}.bias", (n,), dtype),)
    return _Module(params=params, ready=tuple(p.name for p in params))


# --------------------------------------------------------------------------- roofline ops
#
# Per-sample ops of each layer for :mod:`dpsim.workload.roofline`. Pass counts are the
# tensors each eager PyTorch kernel reads and writes (one pass = one tensor of the op's
# elements): an element-wise op reads its inputs and writes its output; its backward
# reads the incoming gradient and what it saved, and writes the input gradient.


def linear_ops(name: str, tokens: int, out_features: int, in_features: int, *, bias: bool) -> list[OpSpec]:
    """``nn.Linear`` / HF ``Conv1D`` on ``tokens`` rows: the GEMM (the bias add is fused in
    its epilogue) and, with a bias, its gradient's reduction over the rows (reads dy)."""
    ops: list[OpSpec] = [MatmulOp(name=name, m=tokens, n=out_features, k=in_features)]
    if bias:
        ops.append(MemoryOp(name=f"{name}.bias_grad", elements=float(tokens * out_features), forward=(),
                            backward=((1, "act"),)))
    return ops


def norm_op(name: str, elements: float) -> MemoryOp:
    """LayerNorm (one fused kernel: read x, write y; backward reads dy and x, writes dx) on
    the residual stream's dtype."""
    return MemoryOp(name=name, elements=elements, forward=((2, "stream"),), backward=((3, "stream"),))


def eager_rms_norm_ops(name: str, tokens: int, dim: int) -> list[MemoryOp]:
    """HF's eager ``LlamaRMSNorm`` over ``tokens x dim``, ``weight * (x * rsqrt(mean(x²) + eps))``,
    kernel by kernel on the residual stream's dtype (as :mod:`dpsim.workload.lowering` lowers
    it): ``pow`` (read x, write x²), ``mean`` (read x², write one value per row), ``+ eps`` and
    ``rsqrt`` on the row values, ``x * r`` and ``weight * h`` (read, write). Backward: each
    product's two operand gradients are a kernel each (read the gradient and the other
    operand, write), ``rsqrt``'s reads its output and the gradient, ``mean``'s writes the
    expanded gradient, ``pow``'s reads x and the gradient, and the two gradients reaching x
    (through ``pow`` and through ``x * r``) are summed."""
    e, rows = float(tokens * dim), float(tokens)
    return [MemoryOp(name=f"{name}.pow", elements=e, forward=((2, "stream"),), backward=((3, "stream"),)),
            MemoryOp(name=f"{name}.mean", elements=e, forward=((1 + 1 / dim, "stream"),), backward=((1, "stream"),)),
            MemoryOp(name=f"{name}.eps", elements=rows, forward=((2, "stream"),)),
            MemoryOp(name=f"{name}.rsqrt", elements=rows, forward=((2, "stream"),), backward=((3, "stream"),)),
            MemoryOp(name=f"{name}.grad_sum", elements=e, forward=(), backward=((3, "stream"),)),
            MemoryOp(name=f"{name}.mul", elements=e, forward=((2 + 1 / dim, "stream"),), backward=((6, "stream"),)),
            MemoryOp(name=f"{name}.weight", elements=e, forward=((2 + 1 / tokens, "stream"),),
                     backward=((6, "stream"),))]


def eager_centred_norm_ops(name: str, tokens: int, dim: int) -> list[MemoryOp]:
    """A LayerNorm without a bias run eagerly, kernel by kernel (transformers 5.25.0 ``CohereLayerNorm``:
    ``mean``, ``x - mean``, ``pow``, ``mean``, ``+ eps``, ``rsqrt``, ``x - mean`` again, the products):
    :func:`eager_rms_norm_ops` on the centred input plus the centring, its row mean (read x, write one value
    a row) and its two subtractions (read x and the row values, write). Backward: each subtraction's
    gradient to the mean is a row sum (read the gradient), the mean's an expanded write, and the gradients
    reaching x by three paths are summed (two more adds of read two, write one)."""
    e = float(tokens * dim)
    centring = [MemoryOp(name=f"{name}.center_mean", elements=e, forward=((1 + 1 / dim, "stream"),),
                         backward=((1, "stream"),)),
                MemoryOp(name=f"{name}.center_sub", elements=e, forward=((2 + 1 / dim, "stream"),),
                         backward=((1 + 1 / dim, "stream"),)),
                MemoryOp(name=f"{name}.center_sub2", elements=e, forward=((2 + 1 / dim, "stream"),),
                         backward=((1 + 1 / dim, "stream"),)),
                MemoryOp(name=f"{name}.center_grad_sum", elements=e, forward=(), backward=((6, "stream"),))]
    return [*centring, *eager_rms_norm_ops(name, tokens, dim)]


def fan_out_ops(name: str, elements: float, readers: int) -> list[MemoryOp]:
    """A residual-stream tensor read by ``readers`` matmuls (Llama's q, k and v projections):
    autocast copies it to 16 bits once per matmul (it caches only the casts of weights) and
    casts each gradient back, and autograd sums the ``readers`` gradients (read two, write
    one per extra reader)."""
    ops = [cast_op(f"{name}.cast", elements) for _ in range(readers)]
    return ops + [MemoryOp(name=f"{name}.grad_sum", elements=elements, forward=(), backward=((3, "stream"),))
                  for _ in range(readers - 1)]


def rope_ops(name: str, elements: float) -> list[MemoryOp]:
    """HF's ``apply_rotary_pos_emb`` on one of q, k (``q·cos + rotate_half(q)·sin``) as eager
    kernels: the 16-bit projection times the fp32 ``cos`` table promotes to the stream's dtype;
    ``rotate_half`` negates one half and concatenates; a second product with ``sin``, then the
    sum. Backward: each product's gradient (read the gradient and the table, write) cast back
    to 16 bits, and the gradients of the three readers of q summed twice. The cos/sin tables,
    shared by the batch, are not counted."""
    return [MemoryOp(name=f"{name}.cos", elements=elements, forward=((1, "act"), (1, "stream")),
                     backward=((3, "stream"), (1, "cast"))),
            MemoryOp(name=f"{name}.neg", elements=elements, forward=((1, "act"),)),
            MemoryOp(name=f"{name}.cat", elements=elements, forward=((2, "act"),)),
            MemoryOp(name=f"{name}.sin", elements=elements, forward=((1, "act"), (1, "stream")),
                     backward=((3, "stream"), (1, "cast"))),
            MemoryOp(name=f"{name}.add", elements=elements, forward=((3, "stream"),)),
            MemoryOp(name=f"{name}.grad_sum", elements=elements, forward=(), backward=((3, "act"),)),
            MemoryOp(name=f"{name}.grad_sum", elements=elements, forward=(), backward=((3, "act"),))]


def partial_rotary_ops(name: str, elements: float) -> list[MemoryOp]:
    """What rotating only part of each head adds to :func:`rope_ops` (run on the rotary part alone):
    transformers' ``apply_rotary_pos_emb`` slices q (or k) into its rotary and pass-through parts and
    concatenates the rotated part with the rest (``torch.cat([q_embed, q_pass], dim=-1)``,
    transformers 5.25.0 ``models/gpt_neox/modeling_gpt_neox.py`` lines 130-139; GPT-J's
    ``modeling_gptj.py`` slices ``query[:, :, :, : self.rotary_dim]`` the same way): the concatenation
    reads both parts and writes the whole head in the stream's dtype (the rotated part was promoted);
    backward, each slice's gradient is written into a zeroed tensor of the whole head and the two are
    summed. ``elements``: the whole q (or k)."""
    return [MemoryOp(name=f"{name}.cat_pass", elements=elements, forward=((1, "act"), (2, "stream")),
                     backward=((2, "act"), (3, "act")))]


def cast_op(name: str, elements: float) -> MemoryOp:
    """Autocast's copy of a residual-stream tensor into the 16-bit input of the next matmul,
    and the backward's copy of its gradient back (nothing when the dtypes agree)."""
    return MemoryOp(name=name, elements=elements, forward=((1, "cast"),), backward=((1, "cast"),))


def dropout_op(name: str, elements: float, byte_class: str = "act") -> MemoryOp:
    """Training dropout: read x, write y and a 1-byte mask; backward reads dy and the mask."""
    return MemoryOp(name=name, elements=elements, forward=((2, byte_class), (1, "byte")),
                    backward=((2, byte_class), (1, "byte")))


def residual_ops(name: str, elements: float) -> list[MemoryOp]:
    """``x + branch(x)``: read the stream and the 16-bit branch output, write the stream;
    its backward hands the gradient on, cast to 16 bits for the branch under autocast. The
    gradients reaching ``x`` through the branch and through the skip are summed by autograd
    (read two, write one), a kernel of its own."""
    return [MemoryOp(name=name, elements=elements, forward=((2, "stream"), (1, "act")), backward=((1, "cast"),)),
            MemoryOp(name=f"{name}.grad_sum", elements=elements, forward=(), backward=((3, "stream"),))]


ACTIVATIONS = ("gelu", "relu", "silu", "tanh")
"""Activation functions that are one eager kernel each way (:func:`activation_op`); GPT-2's
``gelu_new`` is :func:`gelu_new_ops`."""


def activation_op(name: str, elements: float, function: str = "gelu") -> MemoryOp:
    """An element-wise activation, one kernel each way: read x, write y; backward reads the
    gradient and x, writes the input gradient."""
    if function not in ACTIVATIONS:
        raise WorkloadError(f"activation {function!r} is not known; allowed: {', '.join(ACTIVATIONS)}")
    return MemoryOp(name=name, elements=elements, forward=((2, "act"),), backward=((3, "act"),), kind=function)


def gelu_new_ops(name: str, elements: float) -> list[MemoryOp]:
    """HF's ``NewGELUActivation`` (GPT-2's default), ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``,
    as its nine eager kernels on the 16-bit matmul output ``x``: ``pow`` is one of autocast's
    fp32 operators, so from it on the chain runs in the stream's dtype. Backward: the products
    with a constant read the gradient and write; ``pow`` and ``tanh`` also read what they saved;
    the final product computes both operands' gradients; the three gradients reaching ``x`` are
    summed twice, and the ones leaving the fp32 chain are cast back to 16 bits. Its output is
    in the stream's dtype, so the next matmul's autocast copies it to 16 bits (and the gradient
    back). It keeps four tensors of ``elements`` for backward (:func:`gelu_new_activation_bytes`)."""
    def op(part: str, forward, backward=()) -> MemoryOp:
        return MemoryOp(name=f"{name}.{part}", elements=elements, forward=forward, backward=backward)

    return [op("half", ((2, "act"),), ((2, "act"),)),
            op("grad_sum", (), ((3, "act"),)),
            op("pow", ((1, "act"), (1, "cast"), (1, "stream")), ((3, "stream"), (1, "cast"))),
            op("coef", ((2, "stream"),), ((2, "stream"),)),
            op("grad_sum", (), ((3, "act"),)),
            op("add", ((1, "act"), (2, "stream")), ((1, "cast"),)),
            op("scale", ((2, "stream"),), ((2, "stream"),)),
            op("tanh", ((2, "stream"),), ((3, "stream"),)),
            op("one_plus", ((2, "stream"),)),
            op("mul", ((1, "act"), (2, "stream")), ((6, "stream"), (1, "cast"))),
            cast_op(f"{name}.cast", elements)]


def gelu_new_activation_bytes(elements: float) -> float:
    """What :func:`gelu_new_ops` keeps beyond a one-kernel GELU's input (2 bytes per element):
    ``tanh``'s output and both operands of the final product, three more tensors."""
    return 3.0 * ACTIVATION_ELEMENT_BYTES * elements


def gated_activation_ops(name: str, elements: float) -> list[MemoryOp]:
    """SwiGLU's ``silu(gate) * up`` over the ``elements`` of one projection: silu (read,
    write; backward reads the gradient and its input, writes) and the product (read two,
    write; backward computes each operand's gradient as a kernel of its own: read the
    gradient and the other operand, write)."""
    return [activation_op(f"{name}.silu", elements, "silu"),
            MemoryOp(name=f"{name}.mul", elements=elements, forward=((3, "act"),), backward=((6, "act"),))]


def embedding_op(name: str, tokens: int, dim: int, table_rows: int, *, add: bool = False) -> MemoryOp:
    """An embedding lookup of ``tokens`` rows of ``dim`` (read the rows, write the output;
    ``add``: summed into the running embedding, one more read). Backward scatters the
    gradient into a dense weight gradient: the whole table is zeroed once per micro-batch
    and read back when autograd accumulates it."""
    return MemoryOp(name=name, elements=float(tokens * dim),
                    forward=((3 if add else 2, "stream"),), backward=((2, "stream"),),
                    fixed_elements=float(table_rows * dim), fixed_backward=((2, "stream"),))


def lm_loss_op(tokens: int, vocab: int) -> MemoryOp:
    """Cross-entropy over the ``tokens x vocab`` logits: autocast (or HF's ``logits.float()``)
    copies them to fp32, ``log_softmax`` reads and writes them; backward writes the
    zero-filled NLL gradient, ``log_softmax_backward`` reads two and writes one, and the
    gradient is cast back to the logits' dtype."""
    return MemoryOp(name="loss", elements=float(tokens * vocab), forward=((1, "upcast"), (2, "f32")),
                    backward=((4, "f32"), (1, "upcast")))


LM_LOSSES = ("eager-fp32-z-loss", "triton-fp32")
"""Eager loss paths over fp32 logits that :func:`with_lm_loss` prices instead of :func:`lm_loss_op`, as
OLMo-core ran them before allenai/OLMo-core@00d34f693 (2024-11-01) moved the fp32 cast into a compiled
loss: the model returns ``self.w_out(h).float()`` (``nn/transformer/model.py`` ``Transformer.forward``
at 8c03ca8a2, 310866e45 and 41400c46f) and the trainer takes ``logits[..., :-1, :].contiguous()`` in
eager mode before its loss function (``train/trainer.py`` ``_model_forward``), outside the compiled
blocks. ``eager-fp32-z-loss`` is its ``cross_entropy_loss`` (``F.cross_entropy`` plus the z-loss's
``logits.logsumexp(-1)``, ``nn/functional/cross_entropy_loss.py``; ``fused_loss`` off, OLMo-1B.py);
``triton-fp32`` its ``fused_cross_entropy_loss``, the Triton kernel adapted from flash-attn
(``olmo_core/triton/cross_entropy_loss.py``: ``fused_loss=True``, OLMo-7B.py / OLMo-13B.py /
Llama-8B.py)."""

_LOGITS_CAST = 1.0
"""``.float()`` on the 16-bit logits: one ``upcast`` pass forward (read 16-bit, write fp32) and one
back (``ToCopyBackward``: read fp32, write 16-bit)."""

_SHIFT_COPY_FORWARD = 2.0
"""``logits[..., :-1, :].contiguous()``: a copy of the fp32 logits (read, write). With one sequence per
micro-batch the slice is already contiguous and nothing is copied."""

_SHIFT_BACKWARD = 3.0
"""``SliceBackward``: ``slice_backward`` zero-fills a tensor of the logits' full shape and copies the
gradient into the slice (write; read, write), whatever the micro-batch."""

_LOSS_F32_PASSES = {
    # F.cross_entropy: _log_softmax (read, write; nll_loss_forward reads one logit per row). The z-loss's
    # logsumexp (pytorch/pytorch@52881c8087c9 aten/src/ATen/native/ReduceOps.cpp logsumexp_out_impl):
    # amax (read), self - maxes (read, write), exp_ in place (read, write), sum (read): 6.
    # Backward: logsumexp's grad * (self - result).exp() (three kernels, read and write each: 6),
    # nll_loss_backward's zero-filled gradient (write: 1), _log_softmax_backward_data (read two, write:
    # 3), and autograd summing the two gradients of the logits (read two, write: 3).
    "eager-fp32-z-loss": (2.0 + 6.0, 6.0 + 1.0 + 3.0 + 3.0),
    # cross_entropy_fwd_kernel reads each row once (online softmax; loss, lse and z-loss per row);
    # cross_entropy_bwd_kernel reads the logits and writes dlogits (inplace_backward=False).
    "triton-fp32": (1.0, 2.0),
}


def lm_loss_passes(impl: str, *, shift_copy: bool) -> tuple[tuple[tuple[float, str], ...], tuple[tuple[float, str], ...]]:
    """(forward, backward) passes over the ``tokens x vocab`` logits of one of :data:`LM_LOSSES`,
    cast and shift included; ``shift_copy``: the shifted slice is copied (more than one sequence per
    micro-batch). The sequence of ATen kernels was read with torch.profiler on the same calls (torch
    2.13, CPU): _to_copy, clone, _log_softmax, nll_loss_forward, amax, sub, exp_, sum forward;
    sub, exp, mul, zero_, _log_softmax_backward_data, add_, zero_ + copy_ (slice_backward), _to_copy
    backward."""
    if impl not in _LOSS_F32_PASSES:
        raise WorkloadError(f"loss implementation {impl!r} is not one of {', '.join(LM_LOSSES)}")
    forward_f32, backward_f32 = _LOSS_F32_PASSES[impl]
    forward_f32 += _SHIFT_COPY_FORWARD if shift_copy else 0.0
    backward_f32 += _SHIFT_BACKWARD
    return (((_LOGITS_CAST, "upcast"), (forward_f32, "f32")),
            ((backward_f32, "f32"), (_LOGITS_CAST, "upcast")))


def with_lm_loss(model: ModelSpec, impl: str, *, shift_copy: bool) -> ModelSpec:
    """``model`` with its LM loss (the op :func:`lm_loss_op` names ``loss``) priced as ``impl`` (one of
    :data:`LM_LOSSES`, :func:`lm_loss_passes`). It stays one :class:`MemoryOp`, so ``--compile`` fuses
    none of its passes: these paths ran eagerly (OLMo-core compiled the blocks alone)."""
    forward, backward = lm_loss_passes(impl, shift_copy=shift_copy)
    found = False
    layers = []
    for layer in model.layers:
        ops = []
        for op in layer.ops:
            if isinstance(op, MemoryOp) and op.name == "loss":
                op, found = replace(op, forward=forward, backward=backward), True
            ops.append(op)
        layers.append(replace(layer, ops=tuple(ops)))
    if not found:
        raise WorkloadError(f"{model.name}: no LM loss to price as {impl!r}")
    return replace(model, layers=tuple(layers))


def attention_ops(tokens: int, heads: int, head_dim: int, *, causal: bool, fused: bool,
                  dropout: bool = False, masked: bool = True, window: int = 0, softcap: bool = False) -> list[OpSpec]:
    """Attention core; eager attention also copies its ``heads x tokens x head_dim`` output
    back into ``tokens x heads·head_dim`` (``transpose(1, 2).contiguous()``), both ways. The
    fused kernels write their output token-major already (``_scaled_dot_product_flash_attention``
    returns a ``batch x tokens x heads x head_dim`` buffer transposed), so there the merge is a view.
    ``window``: a causal sliding window (:func:`window_causal_share`; none when it covers the sequence);
    eager attention still computes and masks the whole square."""
    window = window if causal and window and window < tokens else 0
    ops: list[OpSpec] = [AttentionOp(seq=tokens, heads=heads, head_dim=head_dim, causal=causal, fused=fused,
                                     dropout=dropout and not fused, masked=masked, window=window, softcap=softcap,
                                     causal_share=window_causal_share(tokens, window))]
    if not fused:
        ops.append(MemoryOp(name="merge_heads", elements=float(tokens * heads * head_dim), forward=((2, "act"),),
                            backward=((2, "act"),)))
    return ops


UNPAD_FORWARD_PASSES = 9
"""Tensor passes of llm-foundry's ``attn_impl: flash`` around FlashAttention-2's varlen kernel in a
forward, over ``tokens x heads·head_dim`` 16-bit elements. ``flash_attn_fn`` always unpads (an
all-ones ``key_padding_mask`` when none is given) q, k and v with ``bert_padding.unpad_input`` and
re-pads the output with ``pad_input`` (mosaicml/llm-foundry@5e85bd62d4ec
``llmfoundry/models/layers/attention.py`` lines 270-289 and 367-369, the commit of the H100 large-scale
benchmark sweep); in flash-attn 2.4.2 (Dao-AILab/flash-attention@1a2c3e8c2525, tag v2.4.2,
``flash_attn/bert_padding.py``) each unpad is ``IndexFirstAxis``, one ``torch.gather`` (read and
write: 2 passes each, 6 for q, k, v), and the pad is ``IndexPutFirstAxis``, ``torch.zeros`` then
``output[indices] = values`` (3 passes)."""

UNPAD_BACKWARD_PASSES = 11
"""The same ops' backward: ``IndexPutFirstAxis.backward`` gathers ``grad_output[indices]`` (2
passes) and each ``IndexFirstAxis.backward`` writes ``torch.zeros`` then ``scatter_``s the gradient
into it (3 passes, 9 for q, k, v): flash-attn 2.4.2 ``flash_attn/bert_padding.py`` (as above)."""


def unpad_ops(tokens: int, width: int) -> list[MemoryOp]:
    """llm-foundry's unpad/pad copies around FlashAttention-2's varlen kernel (``attn_impl: flash``)
    for ``tokens`` rows of q, k, v and the output, each ``width`` (heads x head_dim) wide: 16-bit
    copies that move no data a fused kernel needs, costed at the streaming bandwidth. k and v are
    taken at the query's width (llm-foundry unpads them before repeating grouped key/value heads,
    so for grouped-query attention this is an upper bound; MPT's heads are all full). The host
    synchronisations of ``unpad_input`` (``torch.nonzero`` and ``.max().item()``, three per layer)
    are not costed: dpsim does not model the CPU's launch timing."""
    return [MemoryOp(name="attention.unpad", elements=float(tokens * width),
                     forward=((UNPAD_FORWARD_PASSES, "act"),), backward=((UNPAD_BACKWARD_PASSES, "act"),))]


WINDOWLESS_KERNELS = ("triton", "flash1")
"""Fused kernels with no sliding-window argument: HazyResearch's Triton FlashAttention and flash-attn
1.x (``window_size`` arrived in flash-attn 2.3); a windowed model is refused with them."""


def with_attention_kernel(model: ModelSpec, kernel: str) -> ModelSpec:
    """``model`` with every fused attention op run by ``kernel`` (one of
    :data:`~dpsim.workload.spec.ATTENTION_KERNELS`; ``--attention-kernel``), costed in
    :mod:`dpsim.workload.roofline`; eager attention is left as it is."""
    if kernel in WINDOWLESS_KERNELS:
        window = next((op.window for layer in model.layers for op in layer.ops
                       if isinstance(op, AttentionOp) and op.fused and op.window), 0)
        if window:
            raise ConfigError(f"--attention-kernel: {kernel} has no sliding window and {model.name} attends "
                              f"over a window of {window} tokens; allowed: sdpa, flash3, cudnn")
    return replace(model, layers=tuple(
        replace(layer, ops=tuple(replace(op, kernel=kernel) if isinstance(op, AttentionOp) and op.fused else op
                                 for op in layer.ops))
        for layer in model.layers))


def packed_sample_tokens(mean_tokens: float, std_tokens: float) -> float:
    """The sample length whose square, per token, is a dataset's: ``E[L²] / E[L] = (mean² + std²) / mean``.

    Over a packed dataset a row's causal scores are ``Σ L_i² / 2`` for the samples ``L_i`` it holds, and
    summed over every row that is ``E[L²] / E[L]`` per token, however the packer groups the samples: the
    attention of the whole dataset is that of samples of this one length."""
    if not mean_tokens > 0 or not std_tokens >= 0:
        raise ConfigError(f"packed samples: mean {mean_tokens} and standard deviation {std_tokens} tokens per "
                          f"sample; allowed: a mean above 0 and a standard deviation of 0 or more")
    return (mean_tokens * mean_tokens + std_tokens * std_tokens) / mean_tokens


def with_packed_samples(model: ModelSpec, *, mean_tokens: float, std_tokens: float) -> ModelSpec:
    """``model`` training on rows packed with whole samples whose lengths have this mean and standard
    deviation (tokens), each sample attending to itself alone.

    Packing concatenates samples into a row of ``seq`` tokens and hands the kernel their boundaries
    (Megatron-Core's ``PackedSeqParams`` ``cu_seqlens``, run as FlashAttention's variable-length kernel;
    ms-swift's ``--packing``, swift/megatron/train/utils.py ``get_packed_seq_params`` at
    modelscope/ms-swift@1e9e4a0e164e), so each sample gets its own causal triangle: the row costs
    ``Σ L_i² / 2`` scores, not ``seq² / 2``. Each causal fused attention op keeps
    :func:`packed_sample_tokens` / ``seq`` of its causal share (and of its full-square FLOPs in the
    layer's count), and each query block loops over the keys of its own sample, so the kernel's rate
    is taken at that shorter loop (:mod:`dpsim.workload.attention_rates`). Q, K and V are still read
    once for every token of the row. Eager attention is left as it is: it masks the full square
    (a block-diagonal mask) and computes all of it. A mean longer than the row is refused; a spread
    that puts the per-token length past the row is capped at the row (no sample is longer)."""
    length = packed_sample_tokens(mean_tokens, std_tokens)
    seq = model.tokens_per_sample
    if not seq or mean_tokens > seq:
        raise ConfigError(f"packed samples: mean {mean_tokens} tokens per sample; allowed: at most the row "
                          f"of {seq} tokens that {model.name} trains on")
    layers = []
    for layer in model.layers:
        ops: list[OpSpec] = []
        flops = layer.forward_flops_per_sample
        for op in layer.ops:
            if isinstance(op, AttentionOp) and op.window:
                # Which of a sample's keys its window drops depends on where the packer put it.
                raise ConfigError(f"packed samples: {model.name} has sliding-window attention (window "
                                  f"{op.window}), whose share of packed samples is not modelled; allowed: "
                                  f"unpacked rows for a model with a window")
            if isinstance(op, AttentionOp) and op.fused and op.causal:
                share = min(1.0, length / op.seq)
                # The full-square convention of forward_flops_per_sample (context.py's, too).
                flops -= op.flops_per_sample * (1.0 - share)
                op = replace(op, causal_share=op.causal_share * share)
            ops.append(op)
        layers.append(replace(layer, ops=tuple(ops), forward_flops_per_sample=flops))
    return replace(model, layers=tuple(layers))


def with_unpadded_attention(model: ModelSpec) -> ModelSpec:
    """``model`` with :func:`unpad_ops` after every fused attention op: what llm-foundry's
    ``attn_impl: flash`` runs around FlashAttention-2 (see :data:`UNPAD_FORWARD_PASSES`)."""
    layers = []
    for layer in model.layers:
        ops: list[OpSpec] = []
        for op in layer.ops:
            ops.append(op)
            if isinstance(op, AttentionOp) and op.fused:
                ops += unpad_ops(op.seq, op.heads * op.head_dim)
        layers.append(replace(layer, ops=tuple(ops)))
    return replace(model, layers=tuple(layers))


def _layer(name: str, run: Sequence[_Module], *, forward_flops_per_sample: float,
           activation_bytes_per_sample: float, unit: str | None = None,
           input_bytes_per_sample: float = 0.0, ops: Sequence[OpSpec] = (),
           input_byte_class: str = "act", saved_elements: Sequence[tuple[float, str]] = (),
           compiled_saved_elements: Sequence[tuple[float, str]] | None = None,
           megatron_activation_bytes_per_sample: float | None = None,
           megatron_legacy_activation_bytes_per_sample: float | None = None) -> LayerSpec:
    """A layer running the modules ``run`` in this (forward) order.

    It owns their parameters (listed in run order); backward runs the modules in
    reverse, each handing over its gradients in its own order. ``unit`` is the block
    (FSDP wrap / checkpoint unit) it belongs to, ``input_bytes_per_sample`` its input.
    """
    return LayerSpec(
        name=name,
        params=tuple(p for m in run for p in m.params),
        grad_ready_order=tuple(n for m in reversed(run) for n in m.ready),
        forward_flops_per_sample=forward_flops_per_sample,
        activation_bytes_per_sample=activation_bytes_per_sample,
        unit=unit,
        input_bytes_per_sample=input_bytes_per_sample,
        ops=tuple(ops),
        input_byte_class=input_byte_class,
        saved_elements=tuple(saved_elements),
        compiled_saved_elements=None if compiled_saved_elements is None else tuple(compiled_saved_elements),
        megatron_activation_bytes_per_sample=megatron_activation_bytes_per_sample,
        megatron_legacy_activation_bytes_per_sample=megatron_legacy_activation_bytes_per_sample,
    )


def _model(name: str, layers: Sequence[LayerSpec], registered: Sequence[_Module], **fields: object) -> ModelSpec:
    """A model whose ``named_parameters()`` lists the modules ``registered`` in that order.

    ``registration_order`` is stored only where it differs from the layers' concatenation.
    """
    order = tuple(p.name for m in registered for p in m.params)
    in_layers = tuple(p.name for layer in layers for p in layer.params)
    return ModelSpec(name=name, layers=tuple(layers),
                     registration_order=None if order == in_layers else order, **fields)  # type: ignore[arg-type]


def _check_positive_int(value: object, field_name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise WorkloadError(f"{field_name}: {value!r} is not a positive integer")
    return value


def _resolve_seq_len(seq_len: int | None, default: int, model: str, *, max_field: str | None = None,
                     max_value: int | None = None, positions: str = "rotary") -> int:
    """``--seq-len`` for a model whose trained context is ``default`` (its ``max_field``): refused past
    ``max_value`` (a learned table has no row for a later position); past ``default`` with ``positions`` that
    extend (rotary, ALiBi), taken with a :class:`~dpsim.errors.DpsimWarning`: long-context training runs there on
    purpose, but a typo (``--seq-len 40960`` for 4096) reads the same, and was taken in silence."""
    if seq_len is None:
        return default
    seq_len = _check_positive_int(seq_len, "--seq-len")
    if max_value is not None and seq_len > max_value:
        raise WorkloadError(
            f"--seq-len: {seq_len} exceeds {model}'s {max_field} = {max_value} "
            f"(learned position embeddings); use at most {max_value}"
        )
    if seq_len > default:
        warnings.warn(DpsimWarning(
            f"--seq-len: {seq_len:,} is past {model}'s trained context ({max_field or 'max_position_embeddings'} = "
            f"{default:,}); its {positions} positions extend there, as long-context training uses them, but the "
            f"model was not trained on them (predicted as given)"), stacklevel=2)
    return seq_len


# --------------------------------------------------------------------------- builders


def final_softcap_ops(tokens: int, vocab: int) -> list[MemoryOp]:
    """Final-logit soft-capping as transformers' Gemma 2 runs it, ``logits / cap``, ``tanh``, ``* cap``
    over the ``s x V`` logits (``Gemma2ForCausalLM.forward``, ``final_logit_softcapping``), three eager
    kernels each way; tanh keeps its output for backward (:func:`final_softcap_activation_bytes`)."""
    e = float(tokens) * vocab
    return [MemoryOp(name="final_softcap.div", elements=e, forward=((2, "act"),), backward=((2, "act"),)),
            MemoryOp(name="final_softcap.tanh", elements=e, forward=((2, "act"),), backward=((3, "act"),)),
            MemoryOp(name="final_softcap.mul", elements=e, forward=((2, "act"),), backward=((2, "act"),))]


def final_softcap_activation_bytes(tokens: int, vocab: int) -> float:
    """What final-logit soft-capping keeps for backward: tanh's 16-bit output over the logits (the
    divide and multiply by a constant keep nothing)."""
    return ACTIVATION_ELEMENT_BYTES * float(tokens) * vocab


def logit_scale_ops(tokens: int, vocab: int) -> list[MemoryOp]:
    """``logits * logit_scale`` (transformers 5.25.0 ``CohereForCausalLM.forward``): one eager kernel each way
    over the ``s x V`` logits; a product by a constant keeps nothing."""
    e = float(tokens) * vocab
    return [MemoryOp(name="logit_scale", elements=e, forward=((2, "act"),), backward=((2, "act"),))]


def _lm_head_layer(run: Sequence[_Module], s: int, d: int, v: int, *, eager_rms: bool = False,
                   passes: int = 1, softcap: bool = False, logit_scale: bool = False,
                   centred: bool = False) -> LayerSpec:
    """The final norm + LM head of a decoder and its loss: an s x d by d x v matmul per sample,
    then cross-entropy over the s x v logits. ``passes`` > 1: the head shared by multi-token
    prediction modules (DeepSeek-V3, arXiv:2412.19437, Sec. 2.2: one output head for the main
    model and every MTP depth), each pass its own norm, matmul, loss and kept logits on the same
    weights (an MTP depth's own ``shared_head.norm`` is counted as the final norm's work; its
    ``h`` weights are left out)."""
    ops: list[OpSpec] = []
    for k in range(passes):
        norm = (eager_centred_norm_ops("final_norm", s, d) if centred else eager_rms_norm_ops("final_norm", s, d)
                if eager_rms else [norm_op("final_norm", float(s * d))])
        ops += [*norm, cast_op("cast", float(s * d)), MatmulOp(name="lm_head", m=s, n=v, k=d),
                *(logit_scale_ops(s, v) if logit_scale else []),
                *(final_softcap_ops(s, v) if softcap else []), lm_loss_op(s, v)]
    kept = lm_head_activation_bytes(s, d, v, eager_rms=eager_rms) + (final_softcap_activation_bytes(s, v) if softcap
                                                                      else 0.0)
    return _layer("lm_head", run, forward_flops_per_sample=2.0 * s * d * v * passes,
                  activation_bytes_per_sample=kept * passes,
                  ops=ops)


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


# --------------------------------------------------------------------------- mixture of experts


def moe_ops(tokens: int, hidden: int, *, experts: int, top_k: int, expert_ffn: int, shared_ffn: int) -> list[OpSpec]:
    """The routed part of an MoE layer, per sample, as Megatron-Core runs it with grouped GEMMs
    (``megatron/core/transformer/moe``: ``TopKRouter``, ``moe_utils.permute``/``unpermute``,
    ``GroupedMLP``/``TEGroupedMLP``), and the shared experts as one dense gated MLP:

    - the router, a linear ``hidden -> experts`` in fp32 (:data:`~dpsim.workload.spec.MATMUL_KINDS`)
      on an fp32 copy of its input, then softmax and top-k over the fp32 logits;
    - the permutation: the ``tokens x top_k`` routed copies gathered expert by expert (read,
      write), and in backward scattered back;
    - the grouped GEMMs: ``experts`` products of ``tokens·top_k/experts`` rows each (balanced
      routing; :func:`~dpsim.strategies.tensor.tp_model` sets the busiest rank's rows and its
      local experts), the gated activation between them;
    - the unpermutation: the expert outputs weighted by their router probabilities and summed
      back per token (read ``top_k`` copies, write one).

    Small-row GEMMs pay their tile and wave quantisation and their weight traffic through the
    roofline's one matmul model (:func:`~dpsim.workload.roofline.matmul_term`)."""
    routed = float(tokens * top_k)
    rows = max(1, round(tokens * top_k / experts))
    ops: list[OpSpec] = [
        MemoryOp(name="router.upcast", elements=float(tokens * hidden), forward=((1, "upcast"),),
                 backward=((1, "upcast"),)),
        MatmulOp(name="router", m=tokens, n=experts, k=hidden, kind="router"),
        MemoryOp(name="router.softmax_topk", elements=float(tokens * experts), forward=((3, "f32"),),
                 backward=((3, "f32"),)),
        MemoryOp(name="experts.permute", elements=routed * hidden, forward=((2, "act"),), backward=((2, "act"),)),
        MatmulOp(name="experts.gate_up", m=rows, n=2 * expert_ffn, k=hidden, batch=experts),
        *gated_activation_ops("experts.act", routed * expert_ffn),
        MatmulOp(name="experts.down", m=rows, n=hidden, k=expert_ffn, batch=experts),
        MemoryOp(name="experts.unpermute", elements=routed * hidden, forward=((2, "act"),), backward=((2, "act"),)),
    ]
    if shared_ffn:
        ops += [*linear_ops("shared_experts.gate_proj", tokens, shared_ffn, hidden, bias=False),
                *linear_ops("shared_experts.up_proj", tokens, shared_ffn, hidden, bias=False),
                *gated_activation_ops("shared_experts.act", float(tokens * shared_ffn)),
                *linear_ops("shared_experts.down_proj", tokens, hidden, shared_ffn, bias=False)]
    return ops


EAGER_MULTIHOT_FORWARD_OPS = ("zeros_map", "zeros_probs", "valid_mask", "valid_indices", "row_arange",
                              "row_counts", "row_indices", "map_put", "valid_probs", "probs_put", "map_bool")
"""The eager PyTorch ops Megatron-Core's flex (DeepEP) dispatcher runs, every MoE layer forward, to turn
the token indices DeepEP delivers into the local experts' multihot routing map and probabilities when
its fused converter is not reachable: ``_DeepepManager._indices_to_multihot`` (two ``torch.zeros``,
``indices != -1``, ``indices[mask]``, ``torch.arange``, ``mask.sum(dim=1)``, ``repeat_interleave``, an
index assignment of 1, ``probs[mask]``, its index assignment) and ``.bool()`` on the map
(NVIDIA/Megatron-LM@1e057005959b ``megatron/core/transformer/moe/token_dispatcher.py`` lines 839-868
and 885-892). The fused ``fused_indices_to_multihot`` runs only when ``ENABLE_EXPERIMENTAL`` and
``--moe-permute-fusion``; at that commit ``ENABLE_EXPERIMENTAL`` is the constant ``False``
(``megatron/core/config.py`` line 3, imported by value) and no argument sets it: Megatron-LM 6782fe457f
(2025-06-12, "Add --enable-experimental to args") added the flag and the call that reads it. Three of
these ops synchronise the host with the GPU (boolean-mask indexing runs ``nonzero``, which copies its
count to the host, pytorch/pytorch issue 12461; ``repeat_interleave`` without ``output_size`` does the
same, PyTorch docs ``torch.repeat_interleave``), so the GPU cannot run ahead of them: each waits for
its dispatch (:data:`~dpsim.workload.roofline.HOST_OVERHEAD_PER_OP_S`, which their tiny kernels never
exceed). The syncs' own round trip is not charged (no cited measurement)."""

EAGER_MULTIHOT_BACKWARD_OPS = ("probs_put_grad", "valid_probs_zeros", "valid_probs_put")
"""Their backward: the probabilities' index assignment gathers its values' gradient (``grad[rows,
cols]``), and ``probs[mask]``'s gradient is a zero tensor the incoming gradient is put into at the
mask (PyTorch ``tools/autograd/derivatives.yaml``, ``index.Tensor``: ``index_backward`` on
``grad.new_zeros``), an ``index_put_`` with a boolean mask, itself synchronising (pytorch/pytorch pull
156384, description). The map and the indices carry no gradient."""


def eager_multihot_ops(routed: float) -> list[MemoryOp]:
    """:data:`EAGER_MULTIHOT_FORWARD_OPS` and :data:`EAGER_MULTIHOT_BACKWARD_OPS` over ``routed``
    routed copies per sample (the ``tokens x top_k`` indices at balanced routing), one kernel each,
    each reading and writing 8 bytes an element (int64 indices): far under their dispatch time at
    any micro-batch these runs use, so they cost :data:`~dpsim.workload.roofline.HOST_OVERHEAD_PER_OP_S`
    each."""
    fwd = [MemoryOp(name=f"experts.multihot.{n}", elements=routed, forward=((4, "f32"),)) for n in EAGER_MULTIHOT_FORWARD_OPS]
    bwd = [MemoryOp(name=f"experts.multihot.{n}", elements=routed, forward=(), backward=((4, "f32"),))
           for n in EAGER_MULTIHOT_BACKWARD_OPS]
    return fwd + bwd


def with_eager_multihot(model: ModelSpec) -> ModelSpec:
    """``model`` with :func:`eager_multihot_ops` before every MoE layer's permutation: what
    Megatron-Core's flex (DeepEP) dispatcher runs before Megatron-LM 6782fe457f (see
    :data:`EAGER_MULTIHOT_FORWARD_OPS`). Layers without routed experts are left as they are."""
    layers = []
    for layer in model.layers:
        names = [op.name for op in layer.ops]
        if "experts.permute" not in names or any(n.startswith("experts.multihot.") for n in names):
            layers.append(layer)
            continue
        permute = layer.ops[names.index("experts.permute")]
        router = layer.ops[names.index("router")]
        routed = permute.elements / router.k  # experts.permute streams routed copies x hidden
        i = names.index("experts.permute")
        layers.append(replace(layer, ops=layer.ops[:i] + tuple(eager_multihot_ops(routed)) + layer.ops[i:]))
    return replace(model, layers=tuple(layers))


ALLTOALL_SORT_OPS = ("experts.sort_chunks", "experts.unsort_chunks")
"""The second permutation of Megatron-Core's ``alltoall`` token dispatcher (``MoEAlltoAllTokenDispatcher``),
which the flex (DeepEP) dispatcher does not run: after the all-to-all (and the expert-tensor-parallel
all-gather) the received rows arrive grouped by source rank and are sorted by local expert ("Permutation 2:
Sort tokens by local expert", ``sort_chunks_by_idxs``), and before the combine they are put back in source
order ("Unpermutation 2"), whenever a rank holds more than one expert (``num_local_experts > 1``)
(NVIDIA/Megatron-LM core_r0.11.0 ``megatron/core/transformer/moe/token_dispatcher.py`` lines 536-557 and
585-605, main 1e057005959b lines 537-571 and 600-620). Unfused, ``torch.split`` into views and one ``torch.cat`` in the new order (a copy: read and
write every row; its backward, the split's gradient, concatenates back, another copy); with
``--moe-permute-fusion`` TransformerEngine's ``fused_sort_chunks_by_index`` moves the same rows once each
way. Either way a read and a write of every received row, forward and backward."""


def alltoall_sort_ops(routed_elements: float, etp: int = 1) -> list[MemoryOp]:
    """:data:`ALLTOALL_SORT_OPS` over ``routed_elements`` (routed copies x hidden per sample, what
    ``experts.permute`` streams) gathered over ``etp`` expert-tensor ranks: one read and one write of each
    element forward, the same backward."""
    if etp < 1:
        raise ConfigError(f"etp: {etp!r} is not a positive integer")
    return [MemoryOp(name=n, elements=routed_elements * etp, forward=((2, "act"),), backward=((2, "act"),))
            for n in ALLTOALL_SORT_OPS]


def with_alltoall_sort(model: ModelSpec, *, etp: int = 1) -> ModelSpec:
    """``model`` as Megatron-Core's ``alltoall`` dispatcher runs its MoE layers on ranks holding more than one
    expert: :data:`ALLTOALL_SORT_OPS` after ``experts.permute`` (the sort, before the grouped GEMMs) and before
    ``experts.unpermute`` (the unsort), each over the rank's received rows gathered over ``etp``
    (:func:`alltoall_sort_ops`). The caller applies it only where ``experts / ep > 1`` (with one local expert
    the dispatcher skips both). Layers without routed experts, and layers that already have the sort, are
    left as they are."""
    layers = []
    for layer in model.layers:
        names = [op.name for op in layer.ops]
        if "experts.permute" not in names or ALLTOALL_SORT_OPS[0] in names:
            layers.append(layer)
            continue
        permute = layer.ops[names.index("experts.permute")]
        sort, unsort = alltoall_sort_ops(permute.elements, etp)
        ops = []
        for op in layer.ops:
            if op.name == "experts.unpermute":
                ops.append(unsort)
            ops.append(op)
            if op.name == "experts.permute":
                ops.append(sort)
        layers.append(replace(layer, ops=tuple(ops)))
    return replace(model, layers=tuple(layers))


MEGATRON_ATTENTION_TE_CALLS = 5
"""TransformerEngine module calls of a Megatron-Core attention block with query/key normalisation, each
way: the fused norm and QKV projection (``TELayerNormColumnParallelLinear``), the query and key norms
(``TENorm``, ``--qk-layernorm``), ``TEDotProductAttention`` and the output projection
(``TERowParallelLinear``) (NVIDIA/Megatron-LM@1e057005959b ``megatron/core/models/gpt/gpt_layer_specs.py``,
``get_gpt_layer_with_transformer_engine_spec``)."""


def with_megatron_moe_host_timeline(model: ModelSpec, *, local_experts: int, backward_sync: bool = False,
                                    recomputed_dispatch: bool = False) -> ModelSpec:
    """``model`` with the host timeline of Megatron-Core's MoE layer marked (:mod:`dpsim.workload.host_timeline`):
    the host waits for the GPU once the tokens a rank receives are counted, before the permutation (the
    alltoall dispatcher's ``cuda_dtoh_stream.synchronize()`` before the all-to-all, the flex dispatcher's
    busy-wait for DeepEP's notify counts and, before Megatron-LM 6782fe457f, its eager multihot conversion:
    NVIDIA/Megatron-LM@1e057005959b ``megatron/core/transformer/moe/token_dispatcher.py`` lines 317-330,
    428-430, 839-868, ``fused_a2a.py`` lines 89-114), because the grouped GEMM's per-expert row counts
    (``m_splits``) must be on the host; after it the host dispatches, before the GPU can run them, the
    TransformerEngine calls of the permutation, the two grouped linears (one GEMM launch and its allocations
    per local expert), the unpermutation, then the next block's attention (:data:`MEGATRON_ATTENTION_TE_CALLS`)
    and pre-MLP norm. ``backward_sync``: the backward waits too (the eager conversion's masked
    ``index_put_``); ``recomputed_dispatch``: the backward re-runs the dispatch first (``--recompute-modules
    moe``), a wait at the start of the layer's backward. Layers without routed experts get only their
    attention calls (and no wait); every op keeps its cost."""
    if local_experts < 1:
        raise ConfigError(f"local_experts: {local_experts!r} is not a positive integer")
    layers = []
    for layer in model.layers:
        names = [op.name for op in layer.ops]
        if any(n.startswith("host.") for n in names):
            layers.append(layer)
            continue
        ops: list[OpSpec] = []
        if any(isinstance(op, AttentionOp) for op in layer.ops) or "attention.scores" in names:
            ops.append(call_marker("te_module", MEGATRON_ATTENTION_TE_CALLS))
            layers.append(replace(layer, ops=tuple(ops) + layer.ops))
            continue
        if "experts.permute" not in names:
            layers.append(layer)
            continue
        first_multihot = next((n for n in names if n.startswith("experts.multihot.")), None)
        for op in layer.ops:
            if op is layer.ops[0]:
                ops.append(call_marker("te_module"))  # the pre-MLP norm
            if backward_sync and op.name == (first_multihot or "experts.permute"):
                ops.append(sync_marker(backward=True))
            if op.name == "experts.permute":
                ops += [sync_marker(), call_marker("te_module")]
            elif op.name in ("experts.gate_up", "experts.down"):
                ops += [call_marker("te_module"), call_marker("grouped_gemm", local_experts)]
            elif op.name == "experts.unpermute":
                ops.append(call_marker("te_module"))
            ops.append(op)
        if recomputed_dispatch:
            ops.append(sync_marker(backward=True))
        layers.append(replace(layer, ops=tuple(ops)))
    return replace(model, layers=tuple(layers))


def moe_activation_bytes(tokens: int, hidden: int, *, experts: int, top_k: int, expert_ffn: int,
                         shared_ffn: int) -> float:
    """Bytes an MoE layer keeps for backward per sample (2 bytes per element, b = 1): its norm
    (``2sh``), the router's input (``sh``) and fp32 probabilities (``4·s·experts``), the
    permuted tokens the expert GEMMs read (``k·sh``: the dispatch all-to-all's output buffer),
    per routed copy what Megatron-Core's grouped experts keep, fc1's fused gate and up output
    (``2·ffn``) and the GLU's output (``ffn``) (``megatron/core/transformer/moe/experts.py``,
    ``GroupedMLP`` with ``gated_linear_unit``): ``3·k·s·ffn``, the expert outputs the
    unpermutation weights by the router's probabilities (``k·sh``: the combine buffer), and
    the shared experts' ``4·s·shared_ffn`` (a Llama MLP's, :func:`llama_block_activation_bytes`)."""
    e = ACTIVATION_ELEMENT_BYTES
    sh = float(tokens) * hidden
    routed = routed_activation_bytes(tokens, hidden, top_k=top_k, expert_ffn=expert_ffn)
    return e * 3 * sh + 4.0 * tokens * experts + routed + e * 4.0 * tokens * shared_ffn
