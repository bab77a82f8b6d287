"""Frozen descriptions of a model: parameters, layers and their costs.

A model is a list of layers in forward *execution* order; each layer owns the
parameter tensors it uses (so its backward is what produces their gradients) and
costs forward FLOPs per sample. Backward and the optimizer are derived from these by
:mod:`dpsim.workload.compute`.

Two parameter orders matter and can differ from the layer order:

* *registration* order, what ``model.parameters()`` yields (DDP indexes parameters
  by it): :attr:`ModelSpec.params`. It is the concatenation of the layers'
  parameters unless :attr:`ModelSpec.registration_order` says otherwise (e.g.
  HuggingFace Llama registers both RMSNorms of a block after its MLP, though they
  run before attention and before the MLP);
* *gradient-ready* order, in which backward hands gradients to autograd (DDP's
  rebuilt buckets follow it): :attr:`ModelSpec.grad_ready_params`, the layers in
  reverse, each in its own :attr:`LayerSpec.grad_ready_order` (by default its
  parameters reversed; ``LayerNorm``/``BatchNorm`` give ``weight`` before ``bias``,
  ``Linear`` gives ``bias`` before ``weight``).

A simple model needs neither field: with the defaults, the ready order is reverse
registration order, exact for a stack of ``Linear``/embedding modules that run in
registration order. A workload traced from a torch module records the whole observed
order in :attr:`ModelSpec.grad_ready_order` when the layers' order cannot express it.

For sharding and checkpointing, a layer may name its *unit* (:attr:`LayerSpec.unit`,
the transformer block an FSDP auto-wrap policy wraps) and its input size
(:attr:`LayerSpec.input_bytes_per_sample`, what checkpointing keeps).
"""

from __future__ import annotations

import math
from dataclasses import field
from functools import cached_property

from dpsim.errors import WorkloadError
from dpsim.frozen import frozen_dataclass

DTYPE_SIZE_BYTES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "float8": 1,
    "int8": 1,
    "int64": 8,
    "int32": 4,
    "bool": 1,
}
"""Bytes per element of each dtype name dpsim accepts (torch's names, no prefix); the integer
ones and ``bool`` occur in buffers (BatchNorm's ``num_batches_tracked``, position ids, masks)."""


def dtype_size_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype``; raises :class:`WorkloadError` naming the allowed ones."""
    try:
        return DTYPE_SIZE_BYTES[dtype]
    except KeyError:
        allowed = ", ".join(DTYPE_SIZE_BYTES)
        raise WorkloadError(f"dtype: {dtype!r} is not known; allowed: {allowed}") from None


@frozen_dataclass
class ParamSpec:
    """One parameter tensor, as ``model.named_parameters()`` would list it."""

    name: str
    """Fully qualified name, e.g. ``h.0.attn.c_attn.weight``."""
    shape: tuple[int, ...]
    """Tensor shape."""
    dtype: str = "float32"
    """Element dtype (torch name without ``torch.``); the gradient has the same dtype."""

    @cached_property  # cached (frozen, so it cannot change): a sweep asks millions of times
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def size_bytes(self) -> int:
        """Bytes of the tensor (and of its gradient)."""
        return self.numel * dtype_size_bytes(self.dtype)


MATMUL_KINDS = ("linear", "conv", "router")
"""What a :class:`MatmulOp` is: a linear layer (``rate key = Precision.matmul_dtype``), a
convolution run as an implicit GEMM (``Precision.conv_dtype``) or an MoE router, which
Megatron-Core runs in fp32 (``--moe-router-dtype fp32``, the setting of the MoE runs it
publishes: yanring/Megatron-MoE-ModelZoo's model configs) whatever the training precision."""

SAVED_CLASSES = ("act", "stream", "f32", "recast")
"""How a saved activation is stored, per precision (:func:`dpsim.memory.saved_element_bytes`):
``act`` a matmul's 16-bit output (fp32 without autocast), ``stream`` the residual stream or a
tensor computed from it in its dtype (the parameters' dtype: fp32 under autocast, whose
adds and norms do not cast), ``f32`` fp32 under every precision (HF ``LlamaRMSNorm``'s
``hidden_states.to(torch.float32)``: a copy of a 16-bit stream, the stream itself when fp32),
``recast`` autocast's 16-bit copy of a ``stream`` tensor for one more matmul that reads it
(autocast caches only the casts of leaf tensors: the weights), none without autocast."""

BYTE_CLASSES = ("act", "stream", "f32", "byte", "cast", "upcast", "nchw")
"""How a :class:`MemoryOp` pass is sized, per element, for a precision
(:func:`dpsim.workload.roofline.pass_bytes`): ``act`` a matmul/convolution output (16-bit
under autocast), ``stream`` the residual stream and norm outputs (the parameters' dtype:
fp32 under autocast), ``f32`` always 4 bytes (softmax and loss under autocast), ``byte`` a
1-byte mask, ``cast`` autocast's copy of a ``stream`` tensor into ``act`` (0 when the two
dtypes agree), ``upcast`` autocast's copy of an ``act`` tensor into fp32, ``nchw`` cuDNN's
layout transpose of a 16-bit channels-first tensor for its tensor-core kernels (0 in fp32)."""


@frozen_dataclass
class MatmulOp:
    """One matmul of a layer's forward, per sample: ``(m x k) @ (k x n)``, ``batch`` times.

    A linear layer has ``m`` = tokens of the sample; a convolution is the implicit GEMM
    ``m`` = output pixels, ``n`` = output channels, ``k`` = input channels x kernel area.
    The micro-batch multiplies ``m``. Backward runs two matmuls of the same FLOPs, the
    input gradient ``(m x n) @ (n x k)`` and the weight gradient ``(n x m) @ (m x k)``.
    """

    name: str
    """What it computes, e.g. ``qkv``."""
    m: int
    """Output rows per sample."""
    n: int
    """Output columns."""
    k: int
    """Reduction length."""
    batch: int = 1
    """Independent products of this shape per sample (e.g. grouped convolutions)."""
    kind: str = "linear"
    """``linear``, ``conv`` or ``router`` (:data:`MATMUL_KINDS`)."""
    kernel: int = 1
    """Kernel edge of a convolution (``k`` already includes its area)."""
    stride: int = 1
    """Stride of a convolution."""

    @property
    def flops_per_sample(self) -> float:
        """Forward FLOPs per sample (a multiply-add counts 2)."""
        return 2.0 * self.m * self.n * self.k * self.batch


ATTENTION_KERNELS = ("sdpa", "triton", "flash1", "flash3", "cudnn")
"""Fused attention kernels an :class:`AttentionOp` may name: ``sdpa`` (PyTorch's
scaled_dot_product_attention: FlashAttention-2 on Ampere and later), ``triton``
(HazyResearch's Triton FlashAttention, slower by
:data:`dpsim.workload.roofline.TRITON_FLASH_SLOWDOWN`), ``flash1`` (HazyResearch's flash-attn
1.x, slower by :data:`dpsim.workload.roofline.FLASH1_SLOWDOWN`), ``flash3`` (FlashAttention-3) and
``cudnn`` (cuDNN's fused attention, as SDPA's cuDNN backend and TransformerEngine run it); the
last two are Hopper kernels, costed as FlashAttention-2 elsewhere
(:func:`dpsim.workload.attention_rates.kernel_pair`)."""


@frozen_dataclass
class AttentionOp:
    """Scaled dot-product attention of one layer, per sample: ``softmax(QKᵀ)V`` over ``heads``.

    With ``fused`` (SDPA's flash / memory-efficient kernels) it is one kernel that keeps no
    score matrix and, when ``causal``, skips the masked half; otherwise it is two batched
    matmuls plus the element-wise passes over the ``heads x seq x seq`` scores that eager
    implementations run (scale, mask, softmax, dropout).
    """

    name: str = "attention"
    """Label."""
    seq: int
    """Query and key length."""
    heads: int
    """Query heads."""
    head_dim: int
    """Size of one head."""
    causal: bool = False
    """Decoder (causal) mask."""
    fused: bool = True
    """One fused kernel (FlashAttention / SDPA) rather than matmul + softmax + matmul."""
    dropout: bool = False
    """Dropout on the attention probabilities (eager implementations only)."""
    masked: bool = True
    """An additive or causal mask is applied to the scores (eager implementations only)."""
    kernel: str = "sdpa"
    """The fused kernel: ``sdpa`` (PyTorch's scaled_dot_product_attention, FlashAttention-2
    on Ampere and later), ``triton`` (HazyResearch's Triton FlashAttention, which
    llm-foundry's ``attn_impl: triton`` runs), ``flash1`` (flash-attn 1.x), ``flash3`` or ``cudnn``; see
    :data:`ATTENTION_KERNELS`."""
    kv_seq: int | None = None
    """Key length when it differs from :attr:`seq` (then the query length): one context-parallel
    rank's queries attend to the keys of the whole sequence (:mod:`dpsim.strategies.context`)."""
    causal_share: float = 0.5
    """With ``causal``: the share of the ``seq x kv_seq`` scores the mask leaves to compute (half of
    a square; a context-parallel rank's share of its queries against every key)."""
    softcap: bool = False
    """Logit soft-capping, ``cap · tanh(scores / cap)`` before the softmax (Gemma 2's
    ``attn_logit_softcapping``): eager attention runs it as three kernels over the scores; fused
    kernels apply it in registers (flash-attn 2.6's ``softcap``), costed at the uncapped rate (no
    published benchmark of the capped kernel was found)."""
    window: int = 0
    """Sliding-window attention: each query attends to itself and the ``window - 1`` keys before it
    (Mistral's ``sliding_window``, Gemma 2's local layers); 0: the whole causal prefix. The builder
    folds it into :attr:`causal_share` (:func:`dpsim.workload.layers.window_causal_share`); kept here
    so that the layouts and kernels that cannot run a window refuse it by name."""

    def __post_init__(self) -> None:
        if self.kernel not in ATTENTION_KERNELS:
            raise WorkloadError(f"attention op {self.name!r}: kernel {self.kernel!r} is not one of "
                                f"{', '.join(ATTENTION_KERNELS)}")

    @property
    def flops_per_sample(self) -> float:
        """Forward FLOPs over the full square (the MFU convention): ``4 · seq² · heads · head_dim``."""
        return 4.0 * self.seq * (self.seq if self.kv_seq is None else self.kv_seq) * self.heads * self.head_dim


@frozen_dataclass
class MemoryOp:
    """Element-wise or reduction work of a layer's forward that streams tensors through device memory.

    ``forward`` and ``backward`` list ``(passes, byte_class)``: each pass reads or writes one
    tensor of ``elements`` elements sized by :data:`BYTE_CLASSES`. ``fixed_backward`` is
    backward traffic per micro-batch over ``fixed_elements`` elements that does not grow
    with samples (an embedding's dense weight gradient: the table zeroed, then accumulated).
    """

    name: str
    """What it is, e.g. ``ln_1``, ``gelu``, ``loss``."""
    elements: float
    """Elements of the tensor streamed, per sample."""
    forward: tuple[tuple[float, str], ...]
    """Tensor passes of the forward, each with its byte class."""
    backward: tuple[tuple[float, str], ...] = ()
    """Tensor passes of the backward."""
    fixed_elements: float = 0.0
    """Elements of the per-micro-batch tensor of :attr:`fixed_backward`."""
    fixed_backward: tuple[tuple[float, str], ...] = ()
    """Backward passes over ``fixed_elements``, once per micro-batch whatever its size."""
    kind: str = field(default="", compare=False, repr=False)
    """The kernel it runs, a key of :data:`dpsim.workload.memory_kinds.MEMORY_KINDS`, when its name does not
    say it (an activation named ``act``); ``""``: read from the name (:func:`~dpsim.workload.memory_kinds.memory_kind`).
    Not compared: it names the kernel a profile rates, not work the roofline counts."""

    def __post_init__(self) -> None:
        for _, cls in self.forward + self.backward + self.fixed_backward:
            if cls not in BYTE_CLASSES:
                raise WorkloadError(f"memory op {self.name!r}: byte class {cls!r} is not one of "
                                    f"{', '.join(BYTE_CLASSES)}")


OpSpec = MatmulOp | AttentionOp | MemoryOp
"""One operation of a layer, as the roofline costs it."""

EXPERT_PARAM_MARK = ".experts."
"""What names a routed expert's stacked weight (``mlp.experts.gate_up_proj``, one ``experts x
rows x cols`` tensor per layer, as transformers v5 and Megatron's grouped GEMM keep them):
expert parallelism shards these, tensor parallelism does not (:func:`is_expert_param`)."""


def is_expert_param(param: "ParamSpec") -> bool:
    """Whether ``param`` is the stacked weight of a layer's routed experts (:data:`EXPERT_PARAM_MARK`)."""
    return EXPERT_PARAM_MARK in param.name and len(param.shape) == 3


MTP_UNIT_PREFIX = "model.mtp."
"""What names the block of a multi-token prediction module (``model.mtp.0`` for depth 1;
DeepSeek-V3, arXiv:2412.19437, Sec. 2.2): a transformer block after the model's last one that
is no block of the pipeline split. Megatron-Core places every MTP layer on the last pipeline stage
by default (Megatron-Core developer guide, "Multi-Token Prediction (MTP)", "Pipeline Parallel
Layout for MTP", docs.nvidia.com/megatron-core/developer-guide/0.16.1/user-guide/features/
multi_token_prediction.html), and DeepSeek-V3 keeps the MTP module with the output head on one
pipeline rank (arXiv:2412.19437 Sec. 3.2.3), so ``--pp`` and ``--stage-layers`` split the main
blocks only and the MTP blocks follow the last one (:func:`is_mtp_unit`)."""


def is_mtp_unit(unit: str | None) -> bool:
    """Whether ``unit`` is a multi-token prediction module's block (:data:`MTP_UNIT_PREFIX`)."""
    return unit is not None and unit.startswith(MTP_UNIT_PREFIX)


@frozen_dataclass
class MoeSpec:
    """A mixture-of-experts model's expert layers (every block from ``dense_layers`` on)."""

    experts: int
    """Routed experts per MoE layer."""
    top_k: int
    """Experts each token is routed to."""
    expert_ffn: int
    """Inner width of one routed expert (a gated MLP: three matrices)."""
    shared_experts: int = 0
    """Experts every token goes through (DeepSeek's shared expert), run as one dense MLP."""
    shared_ffn: int = 0
    """Inner width of one shared expert."""
    dense_layers: int = 0
    """Blocks before the first MoE layer, with a dense MLP (DeepSeek-V3: 3)."""


@frozen_dataclass
class LayerSpec:
    """A unit of compute in forward/backward order that owns zero or more parameters."""

    name: str
    """Module path, e.g. ``h.3.mlp``."""
    params: tuple[ParamSpec, ...] = ()
    """Parameters owned by this layer: those its forward uses, so that its backward
    produces their gradients. A parameter used by several layers (tied weights) is
    owned by the one that runs first, whose backward completes its gradient. The
    order is free but sets two defaults: :attr:`ModelSpec.params` concatenates the
    layers' parameters and :attr:`grad_ready_order` reverses them."""
    grad_ready_order: tuple[str, ...] | None = None
    """Names of :attr:`params` in the order this layer's backward hands their gradients
    to autograd (what DDP records as gradient-ready order); ``None`` means
    :attr:`params` reversed. Must be a permutation of the parameter names."""
    forward_flops_per_sample: float = 0.0
    """Forward FLOPs for one sample (a multiply-add counts 2)."""
    activation_bytes_per_sample: float = 0.0
    """Bytes this layer keeps for backward per sample, at 2 bytes per element (bf16/fp16)."""
    megatron_activation_bytes_per_sample: float | None = None
    """What the layer keeps instead when Megatron-Core with TransformerEngine runs it (fused norms
    and SwiGLU, grouped key-value heads not repeated; for a GPT block with a GELU MLP, Korthikanti et al.
    2022's count: :func:`dpsim.workload.layers.with_megatron_activations`);
    ``None``: no separate count (the layer keeps :attr:`activation_bytes_per_sample` there too)."""
    megatron_legacy_activation_bytes_per_sample: float | None = None
    """What the layer keeps instead under legacy Megatron-LM's ``megatron/model`` with flash-attn and apex's
    fused norms (:func:`dpsim.workload.layers.megatron_legacy_block_activation_bytes`, ``--activations
    megatron-legacy``); ``None``: no such count."""
    input_bytes_per_sample: float = 0.0
    """Bytes of the layer's input activations per sample (2 bytes per element): what
    activation checkpointing keeps when a checkpointed unit starts with this layer."""
    input_byte_class: str = "act"
    """The dtype the layer's input is stored in (:data:`SAVED_CLASSES`): ``stream`` for a
    transformer block's input, the residual stream (fp32 under autocast), ``act`` (16-bit
    under autocast) otherwise. :attr:`input_bytes_per_sample` counts it at 2 bytes."""
    saved_elements: tuple[tuple[float, str], ...] = ()
    """Saved elements per sample whose dtype a precision sets apart from the matmuls' 16-bit
    output dtype, as ``(elements, class)`` pairs (:data:`SAVED_CLASSES`): ``stream`` and
    ``f32`` ones are among :attr:`activation_bytes_per_sample`'s 2-byte elements, ``recast``
    ones come on top. Empty: every saved element is a matmul output (``act``)."""
    compiled_saved_elements: tuple[tuple[float, str], ...] | None = None
    """Every element the layer saves for backward per sample when the step runs under
    ``torch.compile`` (``--compile``), by class: what AOTAutograd's min-cut partitioner keeps
    (:func:`dpsim.workload.layers.llama_compiled_saved_elements`). ``None``: what eager mode saves."""
    ops: tuple[OpSpec, ...] = ()
    """The layer's operations for the roofline (:mod:`dpsim.workload.roofline`): its
    matmuls, attention and memory-bound work, per sample. A catalog builder writes them; a
    traced torch module's are lowered from the aten operators it runs
    (:mod:`dpsim.workload.lowering`). Empty only for a layer known by its FLOPs alone (a
    hand-written spec), which is then costed as matmul FLOPs."""
    unit: str | None = None
    """The wrap unit this layer belongs to — a transformer block's module path, as an
    FSDP auto-wrap policy (``transformer_auto_wrap_policy``) wraps it and activation
    checkpointing checkpoints it; ``None``: the root unit (embeddings, final norm, head).
    Layers of one unit are consecutive."""

    def __post_init__(self) -> None:
        for cls in (self.input_byte_class, *(c for _, c in self.saved_elements),
                    *(c for _, c in self.compiled_saved_elements or ())):
            if cls not in SAVED_CLASSES:
                raise WorkloadError(f"layer {self.name!r}: saved class {cls!r} is not one of "
                                    f"{', '.join(SAVED_CLASSES)}")
        if self.grad_ready_order is not None:
            names = [p.name for p in self.params]
            if sorted(self.grad_ready_order) != sorted(names):
                raise WorkloadError(
                    f"layer {self.name!r}: grad_ready_order {list(self.grad_ready_order)} is not "
                    f"a permutation of its parameters {names}"
                )

    @cached_property  # frozen, so it cannot change (as ParamSpec.numel): the layer-time memo asks per layer and shard
    def param_count(self) -> int:
        """Parameters in this layer."""
        return sum(p.numel for p in self.params)

    @property
    def grad_ready_params(self) -> tuple[ParamSpec, ...]:
        """:attr:`params` in the order this layer's backward makes their gradients ready."""
        if self.grad_ready_order is None:
            return tuple(reversed(self.params))
        by_name = {p.name: p for p in self.params}
        return tuple(by_name[n] for n in self.grad_ready_order)


@frozen_dataclass
class ModelSpec:
    """A whole model: its layers in forward order plus metadata."""

    name: str
    """Catalog key or user-given name."""
    layers: tuple[LayerSpec, ...]
    """Layers in forward execution order (backward runs them in reverse)."""
    registration_order: tuple[str, ...] | None = None
    """Every parameter name in ``model.parameters()`` order, when that differs from
    concatenating the layers' parameters; ``None`` means the concatenation. Must be a
    permutation of the parameter names."""
    grad_ready_order: tuple[str, ...] | None = None
    """Every parameter name in the order backward makes the gradients ready, when it is
    known as a whole (e.g. recorded from a torch module's backward) and differs from the
    layers' order; ``None`` means layers in reverse, each in its own order. Must be a
    permutation of the parameter names."""
    tokens_per_sample: int | None = None
    """Sequence length for token models; ``None`` for e.g. image models."""
    published_param_count: int | None = None
    """Parameter count as published by the model's authors, when known."""
    source: str = ""
    """Where the architecture and published count come from."""
    buffers: tuple[ParamSpec, ...] = ()
    """Module buffers (``named_buffers()``: BatchNorm running statistics, ...), which DDP
    broadcasts from rank 0 before every synchronised forward (``broadcast_buffers``)."""
    moe: MoeSpec | None = None
    """Its expert layers, for a mixture-of-experts model (``None``: dense)."""

    def __post_init__(self) -> None:
        if not self.layers:
            raise WorkloadError(f"model {self.name!r}: has no layers")
        names = [p.name for layer in self.layers for p in layer.params]
        if len(set(names)) != len(names):
            raise WorkloadError(f"model {self.name!r}: duplicate parameter names")
        if self.registration_order is not None and sorted(self.registration_order) != sorted(names):
            raise WorkloadError(
                f"model {self.name!r}: registration_order is not a permutation of the "
                f"layers' parameter names"
            )
        if self.grad_ready_order is not None and sorted(self.grad_ready_order) != sorted(names):
            raise WorkloadError(
                f"model {self.name!r}: grad_ready_order is not a permutation of the "
                f"layers' parameter names"
            )
        seen: set[str] = set()
        previous = object()
        for layer in self.layers:
            if layer.unit != previous and layer.unit is not None and layer.unit in seen:
                raise WorkloadError(f"model {self.name!r}: the layers of unit {layer.unit!r} are not consecutive")
            if layer.unit is not None:
                seen.add(layer.unit)
            previous = layer.unit

    @cached_property
    def params(self) -> tuple[ParamSpec, ...]:
        """All parameters in registration (``model.parameters()``) order."""
        in_layers = tuple(p for layer in self.layers for p in layer.params)
        if self.registration_order is None:
            return in_layers
        by_name = {p.name: p for p in in_layers}
        return tuple(by_name[n] for n in self.registration_order)

    @cached_property
    def grad_ready_params(self) -> tuple[ParamSpec, ...]:
        """All parameters in gradient-ready order: the order backward makes their
        gradients ready, which DDP records in the first iteration and rebuilds its
        buckets from: :attr:`grad_ready_order` when given, else layers in reverse, each
        in its :attr:`LayerSpec.grad_ready_order`."""
        if self.grad_ready_order is not None:
            by_name = {p.name: p for layer in self.layers for p in layer.params}
            return tuple(by_name[n] for n in self.grad_ready_order)
        return tuple(p for layer in reversed(self.layers) for p in layer.grad_ready_params)

    def layer_index_by_param(self) -> dict[str, int]:
        """Map each parameter name to the index of the layer that owns it (whose
        backward produces its gradient)."""
        return {p.name: i for i, layer in enumerate(self.layers) for p in layer.params}

    @cached_property
    def param_count(self) -> int:
        """Total number of parameters."""
        return sum(layer.param_count for layer in self.layers)

    @cached_property
    def expert_param_count(self) -> int:
        """Parameters of the routed experts (:func:`is_expert_param`), 0 for a dense model."""
        return sum(p.numel for layer in self.layers for p in layer.params if is_expert_param(p))

    @cached_property
    def active_param_count(self) -> int:
        """Parameters one token uses: all but the ``1 - top_k / experts`` of the routed experts it
        skips (the "active" count MoE model cards publish)."""
        if self.moe is None:
            return self.param_count
        skipped = self.expert_param_count * (self.moe.experts - self.moe.top_k) // self.moe.experts
        return self.param_count - skipped

    @cached_property
    def forward_flops_per_sample(self) -> float:
        """Forward FLOPs for one sample."""
        return sum(layer.forward_flops_per_sample for layer in self.layers)

    @cached_property
    def activation_bytes_per_sample(self) -> float:
        """Activation bytes kept for backward per sample."""
        return sum(layer.activation_bytes_per_sample for layer in self.layers)
