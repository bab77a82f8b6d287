"""FP8 training recipes: which GEMMs run in FP8, the casts they cost, and what FSDP2 gathers.

A recipe (``--fp8``) sits on top of a ``--precision`` (which keeps deciding the parameters,
gradients, master copy and optimizer state): it moves the *linear layers'* three GEMMs
(forward, input gradient, weight gradient) to the GPU's FP8 tensor-core rate and adds the
memory-bound kernels that feed them. Attention, the embedding and the LM head stay in the
precision's 16-bit dtype in every recipe below: TransformerEngine puts only its ``te.Linear``
/ ``LayerNormLinear`` / ``LayerNormMLP`` GEMMs, and a mixture of experts' ``GroupedLinear`` expert
GEMMs, under ``fp8_autocast`` (its FP8 attention is a separate ``fp8_dpa`` opt-in); torchao's
``convert_to_float8_training`` swaps ``nn.Linear`` modules (grouped experts stay 16-bit), and the recipes that run it leave the output projection out (torchtitan's float8
converter filters ``output``; the torchao README: "we recommend ... skip the final output
layer"); llm-foundry's ``amp_fp8`` swaps the blocks' linears for ``te.Linear`` and keeps the
LM head (a tied embedding there) in bf16.

Per linear of a micro-batch with input ``m x k``, weight ``n x k`` and output ``m x n``, each
FP8 operand is *cast*: read the high-precision tensor, write FP8 (one byte an element) plus
its scales. The recipes differ in how many passes that takes (:class:`Fp8Recipe`):

* **amax**: per-tensor *current* (dynamic) scaling needs the tensor's max(|x|) before it can
  cast, one more read: "FP8 Current Scaling requires two tensor reads per quantization: one
  to compute amax, one to cast. FP8 Delayed Scaling eliminates the first read by predicting
  the scaling factor from historical amax values" (TransformerEngine documentation, "FP8
  Delayed Scaling"); torchao's dynamic scaling is ``tensor_to_amax`` then the cast, and
  its own roofline counts "kernel 1: x_bf16 -> max_abs_stage_1", "kernel 2: ... max_abs_stage_2",
  "kernel 3: x_bf16, max_abs -> to_float8" (pytorch/ao@d370196369 torchao/float8/roofline_utils.py).
  MXFP8's 32-element block maxima are computed inside the quantize kernel (no extra pass).
* **copies**: Hopper's FP8 tensor cores take only the "TN" layout, so the weight-gradient
  GEMM needs the input and the output gradient transposed, and the input-gradient GEMM the
  weight transposed: TransformerEngine's ``cast_transpose`` writes a row-wise and a
  column-wise FP8 copy in one pass ("Hopper only supports TN GEMMs for FP8. 'Column-wise data'
  is transpose of data", while "Blackwell supports any GEMM layout for FP8", so per-tensor
  recipes write one copy there: NVIDIA/TransformerEngine pull request 2514,
  transformer_engine/common/gemm/cublaslt_gemm.cu ``CanonicalizeGemmInput``; Ada is taken as
  Hopper). MXFP8 writes both on Blackwell too, each with its own scales, since
  a 1x32 block runs along the reduction dimension of the GEMM that reads it (TE "MXFP8":
  "Blocks are one-dimensional, containing 32 consecutive values"; the OCP Microscaling
  Formats (MX) v1.0 spec: a shared E8M0 scale per 32-element block, so 1/32 byte of scale per
  element).
* **which casts**: TransformerEngine casts the input and the weight in forward and saves
  the FP8 copies (the transposes) for backward, then casts the output gradient once. torchao's
  ``matmul_with_hp_or_float8_args`` saves the *high-precision* input and weight
  (``ctx.save_for_backward(input_hp, weight_hp_t)``) and casts again in backward: the
  output gradient for the input gradient, the weight for it, the output gradient again and
  the input for the weight gradient (pytorch/ao@7ca1bfbefd torchao/float8/float8_linear.py).
  A weight already cast (FSDP2's float8 all-gather) is not cast again.

Each cast is costed as the kernels torchao's own roofline counts: the two-stage amax
reduction and one cast pass. Eager PyTorch runs more passes than that (``abs``, ``max``, the
scale multiply, ``clamp``, the conversion: not modelled); under ``--compile`` an activation's
or gradient's amax is fused into the kernel that produced it, as that roofline's
``fuse_with_prev`` assumes (:mod:`dpsim.workload.compiled`).

**torchao tensorwise under torch.compile** (:func:`cast_plan`): one scale per tensor makes the
backward's casts of the output gradient (for the input gradient and for the weight gradient)
the same computation, and the input's backward cast the same as its forward one (the same
``hp_tensor_to_float8_dynamic`` of the same tensor: ``matmul_with_hp_or_float8_args`` is
``allow_in_graph``, so AOTAutograd traces forward and backward as one joint graph). What differs is
the layout: ``torch._scaled_mm`` takes its first operand row-major and its second column-major,
and torchao's ``preprocess_addmm`` makes them so (``a_data.contiguous()``, ``b_data.t().contiguous().t()``,
pytorch/ao@36027d82d1 torchao/float8/float8_ops.py), so the weight gradient's ``dy.t() @ x``
needs column-major FP8 copies of both. Inductor fuses the cast with that transposed copy into one
kernel writing both ("the operators of ``fp8 = cast_to_fp8(input_tensor); fp8_t =
fp8.t().contiguous().t()`` is used in every float8 linear. We use Inductor to generate the
performant fused kernel for these ops": pytorch/pytorch issue 130015, which also reports that kernel's
remaining inefficiencies; it is costed at the streaming rate like every cast), which is how torchao's
roofline counts the compiled tensorwise cast of an input or output gradient: one amax (fused with
the producer) and one kernel, "x_bf16, max_abs -> to_float8 -> x_fp8_dim0, x_fp8_dim1", once per
forward and backward; a weight: its amax, a forward cast, and a backward cast reusing that amax
("kernel 4 (bwd): x_bf16, max_abs -> to_float8 -> x_fp8_dim1"; pytorch/ao@36027d82d1
torchao/testing/training/roofline_utils.py ``get_tensor_memory_traffic_ovhd_s``, tensorwise).
Under the float8 all-gather the weight arrives in FP8 row-major, and the input gradient's
``dy @ w`` copies it column-major (``preprocess_addmm``): one FP8 read and write per element.
Rowwise scales differ between the two layouts (a scale per row of each), so its casts stay apart.

FSDP2 float8 all-gather (torchao ``enable_fsdp_float8_all_gather``, tensorwise only):
``fully_shard`` gathers the linears' weights in FP8, half the bytes of bf16, cast on the
shard before the collective, and ``precompute_float8_dynamic_scale_for_fsdp`` computes every
weight's scale with "a single all-reduce ... for all float8 weights" after the optimizer step
(torchao documentation). :func:`fp8_all_gather` says when it applies; the FSDP strategies
and the memory model read the gathered bytes from :func:`gathered_weight_bytes`.
"""

from __future__ import annotations

from dataclasses import replace

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.workload.spec import AttentionOp, LayerSpec, MatmulOp, OpSpec

FP8_RATE_KEY = "float8"
"""Rate key (:data:`dpsim.hardware.MATMUL_DTYPES`) of an FP8 GEMM."""

FP8_BYTES = 1
"""Bytes of one FP8 element (E4M3 or E5M2)."""

MX_BLOCK = 32
"""Elements sharing one E8M0 scale byte in MXFP8 (OCP Microscaling Formats v1.0; TE "MXFP8")."""

BLOCKWISE_TILE = 128
"""Elements sharing one FP32 scale under DeepSeek-V3's fine-grained FP8 (1x128 activation tiles, 128x128
weight blocks: arXiv:2412.19437 Sec. 3.3.2)."""

FP8_ARCHITECTURES = ("ada", "hopper", "blackwell")
"""Generations with FP8 tensor cores that TransformerEngine and torchao run: Ada (sm_89) and Hopper (sm_90)
first, and Blackwell. Ampere and older have none; AMD CDNA3 (its FNUZ formats, ROCm forks) is not modelled."""

NOT_FP8_MATMULS = frozenset({"lm_head"})
"""Linear GEMMs every recipe keeps in 16 bits (module docstring)."""

AMAX_ALL_REDUCE_BYTES_PER_LINEAR = 4
"""One fp32 amax per FP8 weight in ``precompute_float8_dynamic_scale_for_fsdp``'s all-reduce."""


@frozen_dataclass
class Fp8Recipe:
    """One FP8 training recipe, as the framework that runs it casts and saves."""

    name: str
    """``--fp8`` value."""
    framework: str
    """``transformer-engine``, ``torchao`` or ``hai-llm`` (DeepSeek's own, not public)."""
    amax_reads: int
    """Extra reads of the high-precision tensor before each cast (1: current/dynamic scaling;
    0: delayed scaling or MXFP8, whose amax rides in the cast)."""
    column_copy: str
    """When a cast also writes a column-wise (transposed) FP8 copy: ``always`` (MXFP8: its blocks
    run along the reduction dimension of the GEMM that reads it), ``tn-only`` (per-tensor
    TransformerEngine recipes, on GPUs whose FP8 GEMMs take only the TN layout: before
    Blackwell) or ``never`` (torchao casts again for each layout it needs)."""
    scale_bytes_per_element: float
    """Scale bytes written per element (1/32 for MXFP8; per-tensor and per-row scales are negligible)."""
    recast_in_backward: bool
    """Backward casts the output gradient twice and the weight and input again (torchao saves
    the high-precision tensors); else it casts the output gradient once and reads the FP8
    copies saved in forward (TransformerEngine)."""
    fsdp_float8_all_gather: bool
    """FSDP2 gathers the FP8 weights (torchao ``enable_fsdp_float8_all_gather``: tensorwise only)."""
    one_scale_per_tensor: bool = False
    """One scale serves every layout of a tensor (torchao tensorwise), so under torch.compile a
    tensor's casts for its row- and column-major FP8 copies are one kernel (:func:`cast_plan`)."""
    architectures: tuple[str, ...] = FP8_ARCHITECTURES
    """GPU generations that run it."""
    cached_weight_copies: int = 0
    """FP8 copies of each weight kept for the whole step (cast once, reused by every micro-batch);
    0: the TransformerEngine count (:func:`saved_fp8_weight_bytes_per_element`)."""
    weight_scale_bytes_per_element: float | None = None
    """Scale bytes per weight element of those copies; ``None``: :attr:`scale_bytes_per_element`."""
    fp8_params: bool = False
    """The FP8 linears' weights *are* FP8 parameters (``--fp8-params``: TransformerEngine's
    ``fp8_model_init``, which Megatron-LM's ``--fp8-param-gather`` and NeMo's ``fp8_params`` turn on): no
    16-bit copy of them exists, the fp32 master copy lives in the (sharded) optimizer, and wherever
    parameters are all-gathered (FSDP, the distributed optimizer's gather of the updated parameters) they
    move in FP8 (:func:`gathers_fp8_weights`). Set by :func:`dpsim.workload.precision.get_precision`."""
    description: str
    """One line: the framework setting."""


# DeepSeek-V3's fine-grained FP8 (arXiv:2412.19437 Sec. 3.3.2): activations scaled per 1x128 tile,
# weights per 128x128 block, E4M3 everywhere, "the maximum absolute value online for each 1x128
# activation tile or 128x128 weight block" (computed by the quantize kernel: no amax pass), and
# the activations cached for backward re-quantized as 128x1 tiles for the transposed GEMM (Sec.
# 3.5.2): a row- and a column-wise copy, as MXFP8's. One FP32 scale per 128 elements (TE "FP8
# Blockwise Scaling": "a local FP32 scaling factor shared by a block of elements", one per 128;
# nvidia.github.io/TransformerEngine features/low_precision_training/fp8_blockwise_scaling), the
# recipe TE's Float8BlockScaling runs, "inspired by the quantization scheme used to train the
# DeepSeek-v3 model". Hopper only here: the GPUs DeepSeek ran it on (H800).
_TE_BLOCKWISE = Fp8Recipe(
    name="te-blockwise", framework="transformer-engine", amax_reads=0, column_copy="always",
    scale_bytes_per_element=4.0 / BLOCKWISE_TILE, recast_in_backward=False, fsdp_float8_all_gather=False,
    architectures=("hopper",),
    description="DeepSeek-V3's fine-grained FP8, as TransformerEngine Float8BlockScaling: 1x128 activation "
                "tiles and 128x128 weight blocks with FP32 scales, row- and column-wise copies (Hopper)",
)
"""``te-blockwise``, named here because ``deepseek-blockwise`` is the same casts with its own weight copies."""


FP8_RECIPES: dict[str, Fp8Recipe] = {r.name: r for r in (
    Fp8Recipe(
        name="te-delayed", framework="transformer-engine", amax_reads=0, column_copy="tn-only",
        scale_bytes_per_element=0.0, recast_in_backward=False, fsdp_float8_all_gather=False,
        description="TransformerEngine DelayedScaling (its default recipe): scales from the amax history, "
                    "cast + transpose in one pass",
    ),
    Fp8Recipe(
        name="te-current", framework="transformer-engine", amax_reads=1, column_copy="tn-only",
        scale_bytes_per_element=0.0, recast_in_backward=False, fsdp_float8_all_gather=False,
        description="TransformerEngine Float8CurrentScaling: per-tensor amax pass, then cast + transpose",
    ),
    Fp8Recipe(
        name="torchao-tensorwise", framework="torchao", amax_reads=1, column_copy="never", scale_bytes_per_element=0.0,
        recast_in_backward=True, fsdp_float8_all_gather=True, one_scale_per_tensor=True,
        description="torchao convert_to_float8_training, tensorwise dynamic scaling; FSDP2 gathers weights "
                    "in float8 (enable_fsdp_float8_all_gather)",
    ),
    Fp8Recipe(
        name="torchao-rowwise", framework="torchao", amax_reads=1, column_copy="never", scale_bytes_per_element=0.0,
        recast_in_backward=True, fsdp_float8_all_gather=False,
        description="torchao float8 rowwise (axiswise dynamic scaling); weights gathered in bf16",
    ),
    Fp8Recipe(
        name="mxfp8", framework="transformer-engine", amax_reads=0, column_copy="always",
        scale_bytes_per_element=1.0 / MX_BLOCK, recast_in_backward=False, fsdp_float8_all_gather=False,
        architectures=("blackwell",),
        description="TransformerEngine MXFP8BlockScaling: 1x32 blocks with E8M0 scales, row- and "
                    "column-wise copies (Blackwell only)",
    ),
    _TE_BLOCKWISE,
    # The same fine-grained FP8 as DeepSeek's own HAI-LLM runs it (the casts costed as te-blockwise's). Its
    # weights: deepseek-ai/profile-data@4496024 train.json, one DualPipe F&B pair of the V3 pretraining
    # settings, quantizes no weight (every per_token_cast / per_channel_cast_and_transpose grid has a
    # 4,096-token or routed-token dimension) but transposes every FP8 weight of the four layers once in
    # the backward chunk (cuda::batched_transpose<512, 128> on unsigned char, grids of 128x128 tiles
    # matching each weight: 7,168 = o_proj 7168x16384 and the four local experts' gate_up, 3,584 their
    # down, 2,304 q_b, 1,792 the shared gate_up, 1,024 kv_b, 896 the shared down, 672 q_a, 280 kv_a
    # padded to 640 rows). So one row-wise FP8 copy of each weight lives across the micro-batches and the
    # column-wise one only while its layer runs backward; one FP32 scale per 128x128 block (Sec. 3.3.2).
    replace(
        _TE_BLOCKWISE, name="deepseek-blockwise", framework="hai-llm", cached_weight_copies=1,
        weight_scale_bytes_per_element=4.0 / BLOCKWISE_TILE ** 2,
        description="DeepSeek-V3's fine-grained FP8 as its HAI-LLM keeps it: te-blockwise's casts, one row-wise "
                    "FP8 copy of each weight kept for the step, its transpose made per backward (Hopper)",
    ),
)}
"""Every recipe by ``--fp8`` name."""


def get_fp8_recipe(name: str) -> Fp8Recipe:
    """The recipe named ``name``, or a one-line error listing them."""
    try:
        return FP8_RECIPES[name]
    except (KeyError, TypeError):
        raise ConfigError(f"--fp8: {name!r} is not known; choose one of {', '.join(FP8_RECIPES)}") from None


def check_fp8_on_gpu(recipe: Fp8Recipe, gpu) -> None:
    """Refuse a recipe on a GPU without FP8 tensor cores (or, for MXFP8, without Blackwell's)."""
    if gpu.architecture not in recipe.architectures or FP8_RATE_KEY not in gpu.peak_flops_per_s:
        needs = "Blackwell (b200, gb200, b300, gb300)" if recipe.architectures == ("blackwell",) else \
            "Hopper (h100, h200, h800, ...)" if recipe.architectures == ("hopper",) else \
            "Ada, Hopper or Blackwell (l4, l40s, h100, h200, b200, ...)"
        raise ConfigError(f"--fp8: {recipe.name!r} needs FP8 tensor cores of {needs}; {gpu.name} "
                          f"({gpu.architecture or 'unknown generation'}) has none for it: leave --fp8 out")


def fp8_all_gather(recipe: Fp8Recipe | None, *, strategy: str, fsdp_version: str,
                   layout: bool = False) -> Fp8Recipe | None:
    """``recipe`` as it runs under ``strategy``: the float8 all-gather exists only in FSDP2
    (``fully_shard``'s ``fsdp_pre_all_gather`` extension); elsewhere weights are cast locally. A
    tensor/pipeline ``layout``'s ``fsdp`` replicas run as torchtitan's FSDP2, which enables the float8
    all-gather whenever the data-parallel dimension is sharded, with tensor parallelism too
    (pytorch/torchtitan@0f892e8fbae2 torchtitan/float8.py: ``enable_fsdp_float8_all_gather =
    parallel_dims.dp_shard_enabled and float8_config.enable_fsdp_float8_all_gather``)."""
    if recipe is None or not recipe.fsdp_float8_all_gather:
        return recipe
    if strategy.startswith("fsdp") and (fsdp_version == "2" or (layout and strategy in ("fsdp", "fsdp-hybrid"))):
        return recipe
    return replace(recipe, fsdp_float8_all_gather=False)


def fp8_grouped_experts(recipe: Fp8Recipe | None) -> bool:
    """Whether ``recipe`` runs a mixture of experts' grouped expert GEMMs in FP8. TransformerEngine's
    do: Megatron-Core's experts are ``TEGroupedLinear``, a ``te.pytorch.GroupedLinear``
    (NVIDIA/Megatron-LM megatron/core/extensions/transformer_engine.py), a TE module that runs under
    the recipe's ``fp8_autocast`` like ``te.pytorch.Linear``. torchao's float8 conversion swaps
    ``nn.Linear`` modules only, so grouped expert weights (3-D parameters) stay 16-bit unless its
    separate MoE prototype (``torchao.prototype.moe_training``) is opted into, which no recipe here is."""
    # HAI-LLM's experts run DeepSeek's FP8 grouped GEMMs (dpsk::grouped_gemm fp8 kernels in
    # deepseek-ai/profile-data@4496024 train.json).
    return recipe is not None and recipe.framework in ("transformer-engine", "hai-llm")


def runs_in_fp8(op: OpSpec, recipe: Fp8Recipe | None = None) -> bool:
    """Whether ``recipe`` runs ``op`` in FP8: a linear layer's GEMM (not a batched attention
    product, not a convolution, not the LM head), and the grouped expert GEMMs
    (``experts.*``, batched over the experts) where :func:`fp8_grouped_experts`."""
    if not (isinstance(op, MatmulOp) and op.kind == "linear" and op.name not in NOT_FP8_MATMULS):
        return False
    return op.batch == 1 or (op.name.startswith("experts.") and fp8_grouped_experts(recipe))


def fp8_weight_numel(layer: LayerSpec, recipe: Fp8Recipe | None = None) -> int:
    """Weight elements of ``layer`` that ``recipe`` keeps and gathers in FP8: its FP8 linears'
    ``n x k`` (times the experts of a grouped GEMM)."""
    return min(layer.param_count, sum(op.n * op.k * op.batch for op in layer.ops if runs_in_fp8(op, recipe)))


def fp8_expert_weight_numel(layer: LayerSpec, recipe: Fp8Recipe | None = None) -> int:
    """Of :func:`fp8_weight_numel`, the routed experts' grouped GEMMs' (``experts.*``): what a layout gathers
    with the experts over their expert-data-parallel group rather than with the dense parameters."""
    if not fp8_grouped_experts(recipe):
        return 0
    return min(layer.param_count, sum(op.n * op.k * op.batch for op in layer.ops
                                      if op.name.startswith("experts.") and runs_in_fp8(op, recipe)))


def layers_fp8_weight_numel(model, layer_indices, recipe: Fp8Recipe | None) -> int:
    """:func:`fp8_weight_numel` summed over ``model``'s layers at ``layer_indices`` (an FSDP unit's) under
    ``recipe`` (the job's, always: TransformerEngine's run a mixture of experts' grouped GEMMs in FP8, so
    without it a TE job's FP8 expert weights were gathered and held as 16-bit ones)."""
    return sum(fp8_weight_numel(model.layers[i], recipe) for i in layer_indices)


def fp8_element_bytes(recipe: Fp8Recipe) -> float:
    """Bytes of one FP8 element as ``recipe`` writes it: one byte and its share of the scales
    (:attr:`Fp8Recipe.scale_bytes_per_element`). Every FP8 copy counts this way: a cast's output, a saved input,
    an FP8 primary weight's shard."""
    return FP8_BYTES + recipe.scale_bytes_per_element


def saved_fp8_weight_bytes_per_element(recipe: Fp8Recipe, architecture: str, *, cached: bool) -> float:
    """Bytes a TransformerEngine linear keeps per weight element for its FP8 weight from forward to
    backward, with its scales: ``cached`` (the caller passes ``is_first_microbatch``, as Megatron-Core
    does, and the module keeps the cast for the whole step) or not.

    Cached, TE keeps the row-wise copy the forward GEMM reads and, where the GPU's FP8 GEMMs take
    only the TN layout, the transposed (column-wise) copy the input-gradient GEMM reads
    (:func:`fp8_copies`): TE 1.x in two persistent buffers written by one kernel
    (``fp8_cast_transpose_fused(..., cast_out=weight_fp8._data, transpose_out=weight_t_fp8._data)``
    into ``self.weight1_fp8, self.weight1_t_fp8``: NVIDIA/TransformerEngine@3ec878759cc6
    transformer_engine/pytorch/module/linear.py); TE 2.x in one workspace quantized for both usages
    (``weight_quantizer.set_usage(rowwise=True, columnwise=columnwise_usage)``, NVIDIA/TransformerEngine@d0067d0da6cb
    same file), whose column-wise usage is a transpose only where non-TN FP8 GEMMs are not supported
    (``with_transpose = columnwise_usage && !is_non_tn_fp8_gemm_supported``,
    transformer_engine/pytorch/csrc/quantizer.cpp): two bytes an element on Hopper (and Ada), one on
    Blackwell under per-tensor recipes; MXFP8 keeps row- and column-wise blocks everywhere.

    Uncached, TE 1.x writes both into fresh buffers each forward ("Return empty weight placeholders
    for each fwd/bwd pass", ``get_fp8_weights_scratchpad``) and saves only the transpose
    (``ctx.save_for_backward(..., weight_t_fp8 ...)``): one byte an element, the copy this path
    counts for the per-tensor recipes. TE 2.x saves its whole quantized weight (``wt_save =
    weightmat``), the row-wise copy too: one more byte an element on Hopper, not counted (the
    published rows of this path ran TE 1.x: Composer ``amp_fp8``). MXFP8 exists in TE 2.x only, so
    its uncached copies are the cached ones."""
    if cached and recipe.cached_weight_copies:
        scales = recipe.scale_bytes_per_element if recipe.weight_scale_bytes_per_element is None \
            else recipe.weight_scale_bytes_per_element
        return recipe.cached_weight_copies * (FP8_BYTES + scales)
    per_copy = fp8_element_bytes(recipe)
    if cached or recipe.column_copy == "always":
        return fp8_copies(recipe, architecture) * per_copy
    return per_copy


def caches_fp8_weights(recipe: Fp8Recipe | None) -> bool:
    """Whether a tensor/pipeline layout's FP8 linears cast their weights once a step rather than every
    micro-batch: TransformerEngine's, which Megatron-Core calls with ``is_first_microbatch``
    (:func:`dpsim.memory.layout_fp8_weight_bytes`, the memory this cache holds). ``te.Linear``'s forward
    casts only when ``update_fp8_weights = is_first_microbatch is None or is_first_microbatch or
    skip_fp8_weight_update is not None`` and otherwise reads the FP8 weight (and transpose) it cast at the
    first micro-batch (NVIDIA/TransformerEngine@0004dbd0231c transformer_engine/pytorch/module/linear.py,
    ``_Linear.forward``). DeepSeek's HAI-LLM quantizes no weight within a forward-and-backward pair and
    keeps one row-wise FP8 copy of each weight for the step (deepseek-ai/profile-data@4496024, the
    ``deepseek-blockwise`` recipe's source; its per-backward transpose is in :func:`cast_plan`). torchao
    keeps no cast weight."""
    return recipe is not None and recipe.framework in ("transformer-engine", "hai-llm")


def saves_fp8_weights(recipe: Fp8Recipe) -> bool:
    """Whether each FP8 linear keeps an FP8 copy of its whole (unsharded) weight from forward to
    backward: TransformerEngine saves the weight's FP8 cast for the input-gradient GEMM (a tensor
    of its own, which FSDP's resharding does not free; cached across micro-batches only when
    the caller passes ``is_first_microbatch``). torchao saves the weight it was given
    (``ctx.save_for_backward(input_hp, weight_hp_t)``): the parameter, or under the float8
    all-gather the gathered FP8 weight, both storage FSDP frees after forward and gathers again.
    (Under torch.compile the partitioner may save a cast FP8 weight instead, which torchtitan's
    ``force_recompute_fp8_weight_in_bwd`` prevents: pytorch/torchtitan docs/float8.md; not modelled.)"""
    return recipe.framework in ("transformer-engine", "hai-llm")


def saves_fp8_inputs(recipe: Fp8Recipe | None) -> bool:
    """Whether ``recipe``'s FP8 linears keep their *input* for the weight-gradient GEMM as the FP8 copy
    they cast, not the 16-bit tensor. TransformerEngine's do, whatever the weights' storage: ``te.Linear``
    keeps the quantized input and drops its row-wise data ("Discard row-wise data since it is not needed in
    backward pass": ``inputmat.update_usage(rowwise_usage=False, columnwise_usage=True)``, then
    ``saved_inputmat = inputmat``), ``LayerNormLinear`` and ``LayerNormMLP`` save the quantized norm output
    ``ln_out`` and, for fc2, ``act_out = fc2_input_quantizer(act_out)`` beside the 16-bit norm input
    ``inputmat``, fc1's output (the activation's input) and the fp32 ``mu``/``rsigma``
    (NVIDIA/TransformerEngine@d0067d0da6cb transformer_engine/pytorch/module/linear.py, layernorm_mlp.py,
    ``prepare_for_saving``); DeepSeek-V3's HAI-LLM too ("it is a natural choice to cache activations in FP8
    format for the backward pass of the Linear operator", arXiv:2412.19437 Sec. 3.3.3). torchao saves the
    high-precision input (``ctx.save_for_backward(input_hp, weight_hp_t)``)."""
    return recipe is not None and recipe.framework in ("transformer-engine", "hai-llm")


def fp8_saved_input_elements(layer: LayerSpec, recipe: Fp8Recipe | None, *, full_layer: LayerSpec | None = None,
                             tp: int = 1, sequence_parallel: bool = False,
                             fused_projections: bool = True) -> tuple[float, float]:
    """``(replaced, added)``: elements per sample of the inputs ``layer``'s FP8 linears keep as FP8 copies
    (:func:`saves_fp8_inputs`; ``(0, 0)`` otherwise). ``replaced``: inputs no other op keeps, whose 16-bit
    saved tensor the FP8 copy replaces (a norm's output, the activation's output fc2 reads). ``added``: the
    output of a fused attention kernel, which the kernel keeps in 16 bits for its own backward
    (FlashAttention's backward reads ``O``: Dao 2023, arXiv:2307.08691, Algorithm 2, ``D_i = rowsum(dO_i * O_i)``;
    TransformerEngine's ``FusedAttnFunc`` saves ``out``), so the output projection's FP8 copy comes on top
    (attention stays 16-bit without TE's separate ``fp8_dpa``). Linears that read one tensor (a layer's
    consecutive FP8 linears with the same rows and reduction, as :func:`shares_compiled_input_cast`
    recognises them) keep one copy where they are one module (``fused_projections``): Megatron-Core's TE layers
    fuse q/k/v into one ``LayerNormLinear`` (``linear_qkv``) and the gate and up projections into one fc1.
    Otherwise (a Hugging Face model whose ``nn.Linear`` modules are swapped for ``te.Linear`` ones, as
    llm-foundry's ``amp_fp8`` does) each module casts and keeps its own copy: the first replaces the shared
    16-bit input, the others are added. What stays 16-bit is not counted here: the norms' inputs (the
    residual stream), the attention core's q, k, v, output and fp32 softmax statistics, the activation's input.

    ``layer`` may be a tensor-parallel rank's shard (:attr:`dpsim.strategies.tensor.TpModel.spec`) with
    ``full_layer`` the unsharded layer: a column-parallel linear (its reduction ``k`` unsplit) reads the whole
    sequence, of which TE keeps only the rank's sequence-parallel shard (``ln_out`` before its all-gather,
    gathered again in backward): ``/ tp`` under ``sequence_parallel``."""
    if not saves_fp8_inputs(recipe):
        return 0.0, 0.0
    full_k = {op.name: op.k for op in full_layer.ops if isinstance(op, MatmulOp)} if full_layer is not None else {}
    replaced = added = 0.0
    previous: MatmulOp | None = None
    after_fused_attention = False
    for op in layer.ops:
        if isinstance(op, AttentionOp):
            after_fused_attention, previous = op.fused, None
            continue
        if not (isinstance(op, MatmulOp) and runs_in_fp8(op, recipe)):
            previous = None
            continue
        shared = previous is not None and (previous.m, previous.k, previous.batch) == (op.m, op.k, op.batch)
        previous = op
        if shared and fused_projections:
            continue
        n = float(op.m) * op.k * op.batch
        if sequence_parallel and tp > 1 and full_k.get(op.name) == op.k:
            n /= tp
        if after_fused_attention or shared:
            added += n
        else:
            replaced += n
        after_fused_attention = False
    return replaced, added


def fp8_saved_input_delta_bytes(replaced: float, added: float, recipe: Fp8Recipe | None,
                                activation_bytes: float) -> float:
    """Bytes :func:`fp8_saved_input_elements`' ``(replaced, added)`` change a layer's saved activations by
    (negative: fewer): each FP8 copy one byte plus the recipe's scales, each replaced tensor's
    ``activation_bytes`` gone."""
    if recipe is None or not (replaced or added):
        return 0.0
    per = fp8_element_bytes(recipe)
    return added * per - replaced * (activation_bytes - per)


def cast_passes(recipe: Fp8Recipe, *, weight_cast_in_forward: bool) -> tuple[tuple[str, int], ...]:
    """(operand, casts) of one linear per micro-batch, forward then backward: ``x`` the input,
    ``w`` the weight, ``dy`` the output gradient (module docstring)."""
    w = 1 if weight_cast_in_forward else 0
    if recipe.recast_in_backward:
        return (("x", 1), ("w", w), ("dy", 2), ("w_bwd", w), ("x_bwd", 1))
    return (("x", 1), ("w", w), ("dy", 1))


def fp8_copies(recipe: Fp8Recipe, architecture: str) -> int:
    """FP8 copies one cast writes on a GPU of ``architecture``: row-wise, and column-wise where
    :attr:`Fp8Recipe.column_copy` says the GEMMs need it."""
    column = recipe.column_copy == "always" or (recipe.column_copy == "tn-only" and architecture != "blackwell")
    return 2 if column else 1






def gathers_fp8_weights(recipe: Fp8Recipe | None) -> bool:
    """Whether parameter all-gathers move the FP8 linears' weights in one byte: FSDP2's float8 all-gather
    (torchao, :attr:`Fp8Recipe.fsdp_float8_all_gather`) or FP8 primary weights (:attr:`Fp8Recipe.fp8_params`:
    the parameter itself is FP8, so Megatron-Core's distributed optimizer gathers its FP8 bytes,
    ``DistributedDataParallelConfig.fp8_param_gather``)."""
    return recipe is not None and (recipe.fsdp_float8_all_gather or recipe.fp8_params)


def layers_gathered_bytes(model, layer_indices, full_numel: float, weight_bytes: float,
                          recipe: Fp8Recipe | None) -> float:
    """:func:`gathered_weight_bytes` of ``full_numel`` parameters of ``model``'s layers at ``layer_indices`` (an
    FSDP unit's, or every layer for zero1's gather of the updated parameters), their FP8 weights counted under
    ``recipe`` (:func:`layers_fp8_weight_numel`): the one count of every parameter all-gather of predict's
    programs, the memory model and plan."""
    if not gathers_fp8_weights(recipe):
        return full_numel * weight_bytes
    return gathered_weight_bytes(full_numel, layers_fp8_weight_numel(model, layer_indices, recipe), weight_bytes,
                                 recipe)


def gathered_weight_bytes(full_numel: float, fp8_numel: float, weight_bytes: float, recipe: Fp8Recipe | None) -> float:
    """Bytes of one unit's all-gather (and of its gathered parameters): FP8 for the linears'
    weights under the float8 all-gather or FP8 primary weights (:func:`gathers_fp8_weights`), the
    parameter dtype for the rest."""
    if not gathers_fp8_weights(recipe):
        return full_numel * weight_bytes
    fp8 = min(fp8_numel, full_numel)
    return fp8 * FP8_BYTES + (full_numel - fp8) * weight_bytes


def compiled_cast_amax_reads(operand: str) -> bool:
    """Whether an FP8 cast of ``operand`` (:func:`cast_passes`) keeps its separate amax read under
    torch.compile (``--compile``): a weight's does (its amax reduces a parameter, a kernel of its
    own); an activation's or output gradient's is fused into the kernel that produced the tensor,
    as torchao's roofline models the compiled case (``fuse_with_prev``: :mod:`dpsim.workload.compiled`)."""
    return operand in ("w", "w_bwd")


@frozen_dataclass
class CastPass:
    """The cast kernels of one operand of one FP8 linear per micro-batch (:func:`cast_plan`)."""

    operand: str
    """``x`` (input), ``w`` (weight), ``dy`` (output gradient), ``x_bwd`` / ``w_bwd`` (their
    backward casts), ``w_t`` (the column-major copy of a weight gathered in FP8)."""
    casts: int
    """Times it is cast per micro-batch."""
    amax_reads: int
    """Reads of the high-precision tensor for its amax before each cast (0: fused or reused)."""
    copies: int
    """FP8 copies each cast writes (2: row- and column-major in one kernel)."""
    backward: bool
    """Whether it runs in the backward pass."""
    reads_fp8: bool = False
    """Whether it reads an FP8 tensor (``w_t``) rather than the high-precision one."""


def cast_plan(recipe: Fp8Recipe, architecture: str, *, compiled: bool) -> tuple[CastPass, ...]:
    """The cast kernels of one FP8 linear per micro-batch: :func:`cast_passes` in eager mode (the
    activation and gradient amax fused into their producer under ``compiled``:
    :func:`compiled_cast_amax_reads`); under torch.compile with :attr:`Fp8Recipe.one_scale_per_tensor`,
    torchao's compiled casts as its roofline counts them (module docstring): the input and the
    output gradient once each, both layouts in one kernel; the weight's backward cast reusing its
    forward amax; under the float8 all-gather the gathered weight's column-major copy."""
    copies = fp8_copies(recipe, architecture)
    gathered = recipe.fsdp_float8_all_gather
    if compiled and recipe.one_scale_per_tensor:
        plan = [CastPass(operand="x", casts=1, amax_reads=0, copies=2, backward=False),
                CastPass(operand="dy", casts=1, amax_reads=0, copies=2, backward=True)]
        if gathered:
            plan.append(CastPass(operand="w_t", casts=1, amax_reads=0, copies=1, backward=True, reads_fp8=True))
        else:
            plan += [CastPass(operand="w", casts=1, amax_reads=recipe.amax_reads, copies=copies, backward=False),
                     CastPass(operand="w_bwd", casts=1, amax_reads=0, copies=copies, backward=True)]
        return tuple(plan)
    plan = [
        CastPass(operand=operand, casts=casts, copies=copies, backward=operand not in ("x", "w"),
                 amax_reads=recipe.amax_reads if not compiled or compiled_cast_amax_reads(operand) else 0)
        for operand, casts in cast_passes(recipe, weight_cast_in_forward=not gathered) if casts]
    if recipe.cached_weight_copies:
        # HAI-LLM (deepseek-blockwise): the weight's cast writes the row-wise copy it keeps for the step,
        # and each backward transposes that FP8 copy for its input-gradient GEMM (the
        # cuda::batched_transpose<512, 128> on unsigned char of every FP8 weight in each backward chunk of
        # deepseek-ai/profile-data@4496024 train.json): one FP8 read and write an element.
        plan = [replace(c, copies=recipe.cached_weight_copies) if c.operand == "w" else c for c in plan]
        plan.append(CastPass(operand="w_t", casts=1, amax_reads=0, copies=1, backward=True, reads_fp8=True))
    return tuple(plan)


def cast_pass_bytes_per_element(recipe: Fp8Recipe, cast: CastPass, high_precision_bytes: float) -> float:
    """Device-memory bytes one cast of ``cast`` moves per element: its amax reads and its read of
    the tensor (FP8 for ``w_t``), and its FP8 copies with their scales."""
    read = FP8_BYTES if cast.reads_fp8 else high_precision_bytes
    return (cast.amax_reads + 1) * read + cast.copies * fp8_element_bytes(recipe)


def cast_pass_kernels(cast: CastPass) -> float:
    """Kernels one cast of ``cast`` launches: the cast, and the two-stage amax reduction where it reads one."""
    return 1.0 + 2.0 * cast.amax_reads


def shares_compiled_input_cast(recipe: Fp8Recipe | None, previous: OpSpec | None, op: OpSpec, *,
                               compiled: bool) -> bool:
    """Whether ``op``'s input casts are the ones ``previous`` already ran: under torch.compile, torchao
    linears that read the same tensor (a block's q/k/v projections, an MLP's gate and up projections:
    separate ``nn.Linear`` modules in OLMo-core, ``q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)``,
    allenai/OLMo-core@e27ba74550f1 src/olmo_core/nn/attention.py, ``w1``/``w3`` in feed_forward.py;
    and torchtitan's ``wq``/``wk``/``wv``, ``w1``/``w3``) cast it with the same computation, which the
    common-subexpression pass run on the joint forward and backward graph before partitioning merges
    into one (``min_cut_rematerialization_partition`` runs ``fx_graph_cse`` when ``config.cse``,
    torch/_functorch/partitioners.py; ``cse = True``, "Applies CSE to the graph before partitioning",
    torch/_functorch/config.py, torch 2.13.0).
    The op spec carries no tensor identities, so projections of one input are recognised as a layer's
    consecutive FP8 linears with the same rows and reduction (``m``, ``k``): the catalog builders and
    traced modules list parallel projections next to each other, and a sequential pair has an
    element-wise op between them in every block here (two square linears chained with nothing
    between would be taken as one input: not modelled). TransformerEngine casts each module's input
    in its own kernel in eager mode (its q/k/v is one fused linear)."""
    if not (compiled and recipe is not None and recipe.framework == "torchao"):
        return False
    if not (isinstance(previous, MatmulOp) and isinstance(op, MatmulOp)):
        return False
    if not (runs_in_fp8(previous, recipe) and runs_in_fp8(op, recipe)):
        return False
    return (previous.m, previous.k, previous.batch) == (op.m, op.k, op.batch)
