"""Memory per GPU for every strategy, with a fits / does-not-fit verdict and advice.

Bytes per parameter follow the ZeRO paper's accounting (Rajbhandari et al. 2020,
"ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", Sec. 3.1 and
5.1): with Ψ parameters, weights ``w·Ψ``, gradients ``g·Ψ`` and optimizer state
``K·Ψ`` (fp32 master copy included; mixed precision with Adam: w = g = 2, K = 12,
16 bytes per parameter; the seed's pure-bf16 accounting: 2 + 2 + 4 = 8). Per GPU, on
``N`` data-parallel ranks:

============================  ==========  ==========  ==========
strategy                      weights     gradients   optimizer
============================  ==========  ==========  ==========
``ddp``                       wΨ          gΨ          KΨ
``zero1`` (P_os)              wΨ          gΨ          KΨ/N
``zero2`` (P_os+g)            wΨ          gΨ/N        KΨ/N
``zero3``, ``fsdp`` (P_os+g+p)  wΨ/N        gΨ/N        KΨ/N
``fsdp-shard-grad-op``        wΨ          gΨ/N        KΨ/N
``fsdp-hybrid``               wΨ/G        gΨ/G        KΨ/G   (G = GPUs per node, or --zero-group)
``zero1 --zero-impl internlm``  wΨ          gΨ          K·max owned  (whole parameters, greedily, in --zero-group)
============================  ==========  ==========  ==========

"/N" is the exact shard with each implementation's padding: DeepSpeed pads its flat
buffer to a multiple of ``2N`` elements (ZeRO-1/2), FSDP pads each unit's flat
parameter to ``ceil(numel/N)`` per rank (:mod:`dpsim.strategies`). FSDP with mixed
precision keeps fp32 parameter and gradient shards and no separate master copy; its
total per parameter is the same 16 bytes, so the ZeRO accounting is used throughout.
``fsdp-shard-grad-op`` holds every unit unsharded from forward to backward, hence wΨ.
With gradient accumulation an FSDP1 trainer runs ``no_sync()``, which "will accumulate the
full model gradients (instead of gradient shards)" (torch ``FullyShardedDataParallel.no_sync``
docstring): gΨ then, as with FSDP2's ``set_requires_gradient_sync(False)`` (``--fsdp-accumulate
unsharded``). FSDP2 by default, and FSDP1 without ``no_sync``, reduce-scatter after every
micro-batch and keep only the gradient shard (``--fsdp-accumulate sharded``; PyTorch pull request
126166: "FSDP2 offers (1) [reduce-scatter per microbatch] without any intervention"). FSDP2
(``--fsdp-version 2``) shards every parameter on dim 0, each padded to ``ceil(dim0/N)`` rows.

The other categories:

* **activations** kept for backward for one micro-batch (catalog estimates at 2 bytes
  per element; fp32 compute doubles them; the tensors a precision stores in another dtype, such
  as autocast's fp32 residual stream, at theirs: :func:`activation_bytes_per_sample`; under
  ``--compile`` what the partitioner saves where a layer says), with the weight copies saved for
  backward (TransformerEngine's FP8 ones, :func:`fp8_saved_weight_bytes`, named apart as
  :attr:`MemoryBreakdown.fp8_weight_cache_bytes`; autocast's 16-bit ones,
  :func:`autocast_weight_bytes`), under the checkpointing policy of
  :mod:`~dpsim.strategies.checkpointing` (full: only each checkpointed unit's input is kept,
  plus one unit's full activations while it is recomputed, Korthikanti et al. 2022, Sec. 5;
  selective and op-level policies keep more and recompute less); root layers keep theirs;
* **communication buffers**: DDP's bucket copies of every gradient (the default
  ``gradient_as_bucket_view=False``; none with the view), its comm hook's state (PowerSGD's
  error feedback, P and Q; 16-bit copies of the buckets in flight) and buffers being
  broadcast (:func:`~dpsim.strategies.ddp_costs.ddp_comm_buffer_bytes`); DeepSpeed ZeRO-1/2's contiguous "ipg" gradient
  buffer of ``reduce_bucket_size`` elements (5e8, or ``--bucket-cap-mb`` converted to
  elements as the step program converts it:
  :func:`~dpsim.strategies.shards.deepspeed_reduce_bucket_elements`) in the gradient
  dtype, allocated at full size whatever the model, two of them with ``overlap_comm``
  (``DeepSpeedZeroOptimizer.backward``: "Use double buffers to avoid data access conflict
  when overlap_comm is enabled"); dpsim's ``overlap`` is ``overlap_comm``;
  ZeRO-3/FSDP's gathered working set: the root unit plus the current and the
  prefetched unit unsharded (``limit_all_gathers``: two units in flight), and the
  unsharded gradients of the unit being reduced (plus the root's, which are reduced
  last; ``BackwardPrefetch.BACKWARD_PRE`` "holds the current set of parameters, next
  set of parameters, and current set of gradients"; FSDP2's in the parameters' dtype); FSDP2 also stages the largest unit's
  all-gather output and reduce-scatter input in flat buffers beside its per-parameter tensors;
* **framework overhead**: CUDA context, workspaces, NCCL buffers (an assumption).

The verdict compares the total with the capacity less a headroom for the caching
allocator. When it does not fit, :func:`fit_advice` says what would: the smallest
sharding stage beyond the current one, then activation checkpointing, a smaller
micro-batch, and the smallest GPU count (a whole number of nodes) at which ZeRO-3 /
FSDP fits — or that no data-parallel configuration does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.hardware import GpuSpec, get_gpu
from dpsim.processes import meminfo_bytes
from dpsim.strategies.ddp_costs import (
    DEFAULT_DDP_OPTIONS,
    DdpOptions,
    ddp_comm_buffer_bytes,
)
from dpsim.strategies.registry import (
    BUCKET_CAP_MB,
    check_fsdp_unit,
    check_gemini_accum,
    check_grad_accum,
    check_honoured,
    check_zero_options,
    get_strategy,
    honours,
    sharded_numel,
    unsharded_accumulation,
    zero_shard_group,
)
from dpsim.strategies.shards import (
    INTERNLM_REDUCE_BUCKET_ELEMENTS,
    deepspeed_reduce_bucket_elements,
    internlm_owned_numel,
    unit_shard_numel,
    wrap_units,
)
from dpsim.strategies.checkpointing import (
    FULL_CHECKPOINTING,
    CheckpointPolicy,
    checkpointed,
    deepseek_cache_bytes,
    deepseek_saved_bytes_per_sample,
    megatron_saved_bytes_per_sample,
    op_saved_bytes_per_sample,
    policy_of,
)
from dpsim.strategies.gemini import check_gemini_precision, gemini_plan
from dpsim.strategies.program import _checkpoint_units
from dpsim.strategies.layout import OPTIMIZER_SHARDING_LAYOUT_STRATEGIES, checkpointed_blocks, reshards_after_forward
from dpsim.strategies.offload import expert_offload_bytes_per_sample
from dpsim.strategies.tensor import (
    block_input_bytes,
    layer_activation_bytes,
    saved_extra_bytes_per_rank,
    tp_model,
)
from dpsim.strategies.zero import internlm_stages
from dpsim.units import GiB, format_bytes
from dpsim.workload.fp8 import (
    fp8_element_bytes,
    fp8_saved_input_delta_bytes,
    fp8_saved_input_elements,
    fp8_weight_numel,
    gathered_weight_bytes,
    layers_fp8_weight_numel,
    layers_gathered_bytes,
    runs_in_fp8,
    saved_fp8_weight_bytes_per_element,
    saves_fp8_inputs,
    saves_fp8_weights,
)
from dpsim.workload.precision import (
    PRECISIONS,
    Precision,
    get_precision,
    input_scale,
    optimizer_state_bytes_per_param,
    saved_element_bytes,
    saved_extra_bytes,
)
from dpsim.workload.spec import MatmulOp, MemoryOp, ModelSpec

FRAMEWORK_OVERHEAD_BYTES = 2 * GiB
"""CUDA context, cuBLAS workspaces, NCCL buffers and what the driver keeps back of the memory NVML
reports (:data:`dpsim.hardware.DRIVER_MEMORY_MIB`: about 0.5 GiB on an A100 40GB). An assumption,
not a measurement: the CUDA context alone takes several hundred MiB and NCCL allocates per-channel
buffers (NCCL_BUFFSIZE 4 MiB x channels x peers); calibrate to replace."""

HEADROOM_FRACTION = 0.05
"""Share of device memory left free for the caching allocator's fragmentation. ASSUMED: no source gives
it (a run's fragmentation depends on its allocation pattern); with :data:`FRAMEWORK_OVERHEAD_BYTES`
counted in the total, an 80 GiB board (81,920 MiB as NVML reports it, :data:`dpsim.hardware.DRIVER_MEMORY_MIB`)
is usable to 76.0 GiB, of which 2 GiB is that overhead."""


@frozen_dataclass
class MemoryBreakdown:
    """Bytes per GPU, by category."""

    weights_bytes: float
    """Working weights (the GPU's shard of them when sharded)."""
    gradients_bytes: float
    """Gradients (the GPU's partition when sharded)."""
    optimizer_bytes: float
    """Optimizer state, fp32 master copy included (the GPU's partition when sharded)."""
    activations_bytes: float
    """Activations kept for backward for one micro-batch."""
    comm_buffers_bytes: float
    """DDP bucket buffers, DeepSpeed gradient buckets, or ZeRO-3/FSDP's gathered units."""
    overhead_bytes: float
    """Framework overhead (CUDA context, workspaces, NCCL)."""
    capacity_bytes: float
    """Device memory of the GPU."""
    strategy: str = "ddp"
    """Strategy the breakdown is for."""
    shard_group_size: int = 1
    """Ranks the sharded state is divided over (1 for DDP)."""
    suggestion: str | None = None
    """What would make it fit (``None`` when it fits or no advice was asked for)."""
    fp8_weights_bytes: float = 0.0
    """Of :attr:`weights_bytes`, the FP8 primary weights (``--fp8-params``) with the FP8 copies the recipe
    keeps of them for the step (the transpose on Hopper); 0 without ``--fp8-params``."""
    fp8_inputs_bytes: float = 0.0
    """What the FP8 linears' inputs, kept as FP8 copies (:func:`dpsim.workload.fp8.saves_fp8_inputs`), add to
    :attr:`activations_bytes` against 16-bit ones (negative: what they save); 0 without such a recipe."""
    fp8_weight_cache_bytes: float = 0.0
    """Of :attr:`activations_bytes`, the FP8 copies of the FP8 linears' 16-bit weights a TransformerEngine
    (or HAI-LLM) recipe keeps from forward to backward (:func:`saved_fp8_weight_copy_bytes`: cached for the
    step on a layout's stage, saved per micro-batch on the data-parallel path); 0 with ``--fp8-params``
    (the FP8 weights are the parameters: :attr:`fp8_weights_bytes`) and for recipes that keep none."""

    @property
    def total_bytes(self) -> float:
        """Everything above (:data:`BREAKDOWN_SUBPARTS` are parts of it already)."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.comm_buffers_bytes + self.overhead_bytes)

    @property
    def usable_bytes(self) -> float:
        """Capacity less the headroom."""
        return self.capacity_bytes * (1 - HEADROOM_FRACTION)

    @property
    def fits(self) -> bool:
        """Whether the total fits in the usable memory."""
        return self.total_bytes <= self.usable_bytes

    @property
    def model_state_bytes(self) -> float:
        """Weights + gradients + optimizer state (the ZeRO paper's "model states")."""
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes


BREAKDOWN_SUBPARTS = ("fp8_weights_bytes", "fp8_inputs_bytes", "fp8_weight_cache_bytes")
""":class:`MemoryBreakdown` fields that are parts of its categories (the weights', the activations'), not
categories of their own: a figure stacking the categories leaves them out."""


def with_subpart_rows(rows: Sequence[tuple[str, float]], mem: MemoryBreakdown) -> list[tuple[str, float]]:
    """``rows`` (``(category, value)``, categories named ``weights`` and ``activations`` among them) with the
    :data:`BREAKDOWN_SUBPARTS` that are not zero inserted under their category: the one table layout
    ``dpsim memory`` and the predict report share."""
    out = list(rows)

    def under(category: str, name: str, value: float) -> None:
        names = [n for n, _ in out]
        at = names.index(category) + 1
        while at < len(out) and names[at].startswith("  "):
            at += 1
        out.insert(at, (name, value))

    if mem.fp8_weights_bytes:
        under("weights", "  of which FP8 weights (--fp8-params)", mem.fp8_weights_bytes)
    if mem.fp8_weight_cache_bytes:
        under("activations", "  of which FP8 weight copies", mem.fp8_weight_cache_bytes)
    if mem.fp8_inputs_bytes:
        under("activations", "  FP8 linear inputs against 16-bit", mem.fp8_inputs_bytes)
    return out


def activation_bytes_per_sample(model: ModelSpec, *, activation_checkpointing: bool = False,
                                fsdp_unit: str = "block", checkpointing: CheckpointPolicy | None = None,
                                precision: Precision | None = None) -> float:
    """Activation bytes one sample keeps (2-byte elements) under a checkpointing policy
    (:mod:`~dpsim.strategies.checkpointing`; ``activation_checkpointing`` is ``full``).
    With ``precision``, in the units its ``activation_bytes / 2`` scale turns into bytes: the
    layers' :attr:`~dpsim.workload.spec.LayerSpec.saved_elements` and checkpointed inputs at the
    dtypes they are stored in (:func:`~dpsim.workload.precision.saved_element_bytes`); compiled
    (``precision.compiled``), what torch.compile's partitioner saves where a layer says
    (:attr:`~dpsim.workload.spec.LayerSpec.compiled_saved_elements`; the ``full``, ``selective``
    (less the attention core) and unchecked policies: ``op`` counts eager mode's tensors, as the
    tensor/pipeline layouts do).

    ``full`` keeps each checkpointed unit's input, the other layers' activations, and the
    largest checkpointed unit's activations while it is recomputed in backward;
    ``selective`` drops the attention core of every block; ``op`` keeps each block's input
    and the outputs of its matmuls and attention, plus the largest block's recomputed rest
    while it is recomputed.
    """
    kept, working = activation_parts_per_sample(model, activation_checkpointing=activation_checkpointing,
                                                fsdp_unit=fsdp_unit, checkpointing=checkpointing, precision=precision)
    return kept + working


def activation_parts_per_sample(model: ModelSpec, *, activation_checkpointing: bool = False,
                                fsdp_unit: str = "block", checkpointing: CheckpointPolicy | None = None,
                                precision: Precision | None = None, fp8_inputs: bool = True) -> tuple[float, float]:
    """:func:`activation_bytes_per_sample` in its two parts, in the same units: what is kept from the
    forward to the backward, and the working set of the unit being recomputed (0 without
    checkpointing), which is live only while that unit re-runs (not at the loss's backward).
    Under a recipe whose FP8 linears keep their inputs as FP8 copies
    (:func:`~dpsim.workload.fp8.saves_fp8_inputs`), each layer's full count has those copies for the
    16-bit inputs (:func:`~dpsim.workload.fp8.fp8_saved_input_elements`; ``fp8_inputs=False``: 16-bit);
    the ``op`` policy's kept tensors (matmul outputs) are counted as before."""
    policy = policy_of(activation_checkpointing, checkpointing)
    scale = 1.0 if precision is None else precision.activation_bytes / 2.0
    fp8_recipe = precision.fp8 if precision is not None and fp8_inputs and saves_fp8_inputs(precision.fp8) else None

    def extra(layer) -> float:  # what the layer's stored dtypes add, in 2-byte units
        return 0.0 if precision is None else saved_extra_bytes(layer.saved_elements, precision) / scale

    def fp8_in(layer) -> float:  # what its FP8 input copies change, in 2-byte units
        if fp8_recipe is None:
            return 0.0
        # A data-parallel job's model is the framework's own modules, each linear its own TE module
        # (fused_projections=False); a layout's are Megatron-Core's fused TE layers (stage_activation_bytes).
        return fp8_saved_input_delta_bytes(*fp8_saved_input_elements(layer, fp8_recipe, fused_projections=False),
                                           fp8_recipe, precision.activation_bytes) / scale

    def act(layer) -> float:
        if precision is not None and precision.compiled and layer.compiled_saved_elements is not None:
            # torch.compile's partitioner decides what is saved (LayerSpec.compiled_saved_elements).
            return sum(n * saved_element_bytes(c, precision) for n, c in layer.compiled_saved_elements) / scale
        return layer.activation_bytes_per_sample + extra(layer) + fp8_in(layer)

    def inp(layer) -> float:
        return layer.input_bytes_per_sample * (1.0 if precision is None
                                               else input_scale(layer.input_byte_class, precision))

    if not policy.active:
        return sum(act(l) for l in model.layers), 0.0
    units = [u for u in wrap_units(model, fsdp_unit) if not u.is_root]
    if not units:
        flag = "--activation-checkpointing" if activation_checkpointing else f"--recompute {policy.mode}"
        raise ConfigError(f"{flag}: model {model.name!r} has no {fsdp_unit} units to "
                          f"checkpoint; use --fsdp-unit layer")
    ckpt = checkpointed(units, policy)
    in_units = {i for u in ckpt for i in u.layers}
    root = sum(act(l) for i, l in enumerate(model.layers) if i not in in_units)
    full = [sum(act(model.layers[i]) for i in u.layers) for u in ckpt]
    if policy.mode == "full":
        inputs = sum(inp(model.layers[min(u.layers)]) for u in ckpt)
        return root + inputs, max(full, default=0.0)
    if policy.mode == "selective":
        core = tp_model(model, 1).layers

        def kept(i: int) -> float:
            layer = model.layers[i]
            if precision is not None and precision.compiled and layer.compiled_saved_elements is not None:
                # Selective recomputation only drops the attention core's saved tensors (its
                # inputs q, k, v stay saved by the checkpoint); the rest of the block is what the
                # partitioner saves as without it. Counting eager mode's tensors here made
                # compile + selective keep more than compile alone (Llama-3-8B FSDP2 on 8 H100:
                # 80.1 against 57.1 GiB).
                return max(0.0, act(layer) - core[i].core_activation_bytes_per_sample)
            return layer_activation_bytes(core[i], 1, sequence_parallel=False, recompute="selective") + extra(layer) \
                + fp8_in(layer)

        return root + sum(kept(i) for u in ckpt for i in u.layers), 0.0
    kept = [min(f, inp(model.layers[min(u.layers)]) + sum(_op_kept(model.layers[i]) for i in u.layers))
            for u, f in zip(ckpt, full)]
    return root + sum(kept), max((f - k for f, k in zip(full, kept)), default=0.0)


def fp8_saved_weight_bytes(model: ModelSpec, precision: Precision, policy: CheckpointPolicy, fsdp_unit: str,
                           architecture: str = "hopper", fsdp2: bool = False) -> float:
    """The FP8 weight copies a recipe keeps from forward to backward
    (:func:`dpsim.workload.fp8.saves_fp8_weights`: TransformerEngine's) on a GPU of ``architecture``:
    :func:`~dpsim.workload.fp8.saved_fp8_weight_bytes_per_element` uncached (the transposed copy
    TE 1.x saves; MXFP8's two) per FP8 weight element of every block, or, under checkpointing, of the
    largest checkpointed block while it is recomputed (the others keep no saved tensors) plus the
    blocks it leaves alone. Under FSDP2 (``fsdp2``) TE 2.x saves none and quantizes the gathered
    weight again in backward ("FSDP2: Don't save FP8 workspace for non-quantized weights",
    NVIDIA/TransformerEngine@d0067d0da6cb transformer_engine/pytorch/module/linear.py): counted for
    MXFP8, a TE 2.x recipe; the per-tensor recipes are counted as TE 1.x saves them, which has no
    such case."""
    if precision.fp8 is None or not saves_fp8_weights(precision.fp8):
        return 0.0
    if fsdp2 and precision.fp8.column_copy == "always":
        return 0.0
    numel = _saved_at_forward_end(model, policy, fsdp_unit, lambda l: fp8_weight_numel(l, precision.fp8))
    return saved_fp8_weight_copy_bytes(numel, precision, architecture, cached=False)


def saved_fp8_weight_copy_bytes(fp8_numel: float, precision: Precision, architecture: str, *,
                                cached: bool) -> float:
    """The one count of the FP8 weight copies a recipe (:func:`dpsim.workload.fp8.saves_fp8_weights`) keeps
    of ``fp8_numel`` FP8 linear weight elements on a GPU of ``architecture`` without ``--fp8-params``, for the
    data-parallel path (:func:`fp8_saved_weight_bytes`) and a layout's stage (:func:`layout_fp8_weight_bytes`)
    alike: :func:`~dpsim.workload.fp8.saved_fp8_weight_bytes_per_element` each.

    The two paths differ only in ``cached``, which is the caller's, not the path's: TE 1.x keeps the forward
    GEMM's row-wise copy and the input-gradient GEMM's transpose in two module buffers for the step only when
    the caller passes ``is_first_microbatch`` (``get_fp8_weights_scratchpad``: ``[self.weight1_fp8,
    self.weight1_t_fp8]``, NVIDIA/TransformerEngine@0004dbd0231c transformer_engine/pytorch/module/linear.py
    line 858), as Megatron-Core does: two bytes an element on Hopper. Without it the buffers are fresh each
    forward (line 851, "Return empty weight placeholders for each fwd/bwd pass") and the autograd function
    saves only the transpose (``ctx.save_for_backward(..., weight_t_fp8 if fp8 else None, ...)``, lines
    295-300; the weight-gradient GEMM reads the input's transpose and the output gradient, no weight): one
    byte, as the Hugging Face/Composer jobs of the data-parallel path run it. (TE 2.x saves the whole
    quantized weight uncached, ``wt_save = weightmat`` with row- and column-wise usage, d0067d0da6cb lines
    475 and 643: two bytes on Hopper; not counted, see ``saved_fp8_weight_bytes_per_element``.)"""
    if precision.fp8 is None or not saves_fp8_weights(precision.fp8):
        return 0.0
    return float(fp8_numel * saved_fp8_weight_bytes_per_element(precision.fp8, architecture, cached=cached))


def fp8_param_weight_bytes(numel: float, fp8_numel: float, precision: Precision,
                           architecture: str) -> tuple[float, float]:
    """``(weights, of them the FP8 linears')``: the bytes of ``numel`` unsharded parameters on one GPU,
    ``fp8_numel`` of them FP8 linear weights, under FP8 primary weights (``--fp8-params``) with a
    distributed optimizer that keeps every parameter whole (zero1: a layout's stage, or data parallelism
    alone). The FP8 copies TE keeps for the step are the parameters themselves (and, on Hopper, their
    cached transpose: :func:`~dpsim.workload.fp8.saved_fp8_weight_bytes_per_element` cached), which
    replace the 16-bit weights of the FP8 linears; the rest stay in the parameter dtype."""
    fp8 = fp8_numel * saved_fp8_weight_bytes_per_element(precision.fp8, architecture, cached=True)
    return (numel - fp8_numel) * precision.weight_bytes + fp8, fp8


def _saved_at_forward_end(model: ModelSpec, policy: CheckpointPolicy, fsdp_unit: str, numel) -> int:
    """``numel(layer)`` summed as a copy saved for backward is held: every layer's without
    checkpointing; under it, the layers outside the checkpointed blocks and the largest such block
    while it is recomputed (the others keep no saved tensors). ``selective`` recomputes only the
    attention core, which has no weights: every linear keeps its weight copy as without it."""
    if not policy.active or policy.mode == "selective":
        return sum(numel(layer) for layer in model.layers)
    ckpt = checkpointed([u for u in wrap_units(model, fsdp_unit) if not u.is_root], policy)
    in_units = {i for u in ckpt for i in u.layers}
    rest = sum(numel(layer) for i, layer in enumerate(model.layers) if i not in in_units)
    return rest + max((sum(numel(model.layers[i]) for i in u.layers) for u in ckpt), default=0)


def autocast_weight_numel(layer, precision: Precision) -> int:
    """Weight elements of ``layer`` that torch autocast casts to 16 bits each forward: the weights
    of its linear and convolution GEMMs (on autocast's lower-precision list), those an FP8 recipe
    runs in FP8 excepted (the recipe casts them itself). 0 for a layer known by its FLOPs only."""
    return min(layer.param_count, sum(op.n * op.k * op.batch for op in layer.ops
                                      if isinstance(op, MatmulOp) and op.kind in ("linear", "conv")
                                      and not (precision.fp8 is not None and runs_in_fp8(op, precision.fp8))))


def autocast_weight_bytes(model: ModelSpec, precision: Precision, policy: CheckpointPolicy, fsdp_unit: str,
                          *, cached: bool) -> float:
    """The 16-bit weight copies torch autocast holds at the end of forward (``amp-bf16``,
    ``amp-fp16``): each linear saves the copy it multiplied by for its input gradient, and
    ``cached_cast`` keeps one copy of every weight that is a leaf, not a view, and requires grad
    until the outermost autocast region exits, "at the end of each forward pass"
    (pytorch/pytorch@cfed411fae0c aten/src/ATen/autocast_mode.cpp). ``cached``: the parameters
    are such leaves (DDP's, DeepSpeed's, FSDP2's unsharded parameters): every cast weight, the
    checkpointed blocks' too, whatever the sharding (fairscale added ``clear_autocast_cache`` to
    its FSDP for this: "when training in AMP model with weight dtype32, FSDP may need to optionally
    clear the autocast cache to avoid GPU OOM", facebookresearch/fairscale pull request 650). FSDP1's parameters are views into its flat parameter, never cached:
    the copies the non-checkpointed layers save, plus the largest checkpointed block's while it is
    recomputed. Measured: the 16-bit weight copies ``LlamaDecoderLayer`` saves under autocast
    (tests/test_activation_dtypes.py)."""
    if not precision.autocast or precision.stream_bytes:  # torch autocast only (not MaxText's casts)
        return 0.0
    per = float(precision.activation_bytes)
    numel = lambda l: autocast_weight_numel(l, precision)  # noqa: E731
    if cached:
        return sum(numel(l) for l in model.layers) * per
    return _saved_at_forward_end(model, policy, fsdp_unit, numel) * per


def _op_kept(layer) -> float:
    # A layer known only by its FLOPs has no ops to recompute: it keeps everything.
    saved = op_saved_bytes_per_sample(layer)
    return layer.activation_bytes_per_sample if saved is None else saved


LOSS_IMPLS = ("fused", "eager")
"""``--loss-impl``: how the language-model loss holds its fp32 logits. ``fused``: one fp32 copy kept for
the backward, which the head's activations already count (:func:`~dpsim.workload.layers.lm_head_activation_bytes`'s
``4sv``); ``eager``: transformers' ForCausalLMLoss, whose backward holds more at once
(:data:`EAGER_LOSS_TRANSIENT_BYTES_PER_ELEMENT`)."""

EAGER_LOSS_TOTAL_BYTES_PER_ELEMENT = 12.0
"""Bytes per token and vocabulary entry live at the backward of transformers' causal-LM loss, counted
from its source: ``LlamaForCausalLM.forward`` returns ``self.lm_head(...)`` in the model's dtype
(huggingface/transformers@5dd4a63548857797727ae73eeb6a6e886ea02a3e
src/transformers/models/llama/modeling_llama.py) and ``ForCausalLMLoss`` upcasts it, ``logits =
logits.float()``, then calls ``nn.functional.cross_entropy`` through ``fixed_cross_entropy``
(huggingface/transformers@d0fed636753eeb35d790126c4496d06847983d60 src/transformers/loss/loss_utils.py).
``cross_entropy`` is ``log_softmax`` then ``nll_loss``: ``log_softmax`` saves its fp32 output for its
backward (4 bytes); ``nll_loss`` saves only the targets. The fp32 copy dies when the loss function
returns (nothing saved it) and the 16-bit logits when the trainer drops the model output (HF Trainer's
``compute_loss`` returns the loss alone), both before ``backward()``. In the backward,
``nll_loss_backward`` writes a zero-filled fp32 gradient of the log-softmax output (4 bytes) and
``_log_softmax_backward_data`` reads it with the saved output and writes the fp32 gradient of the
logits (4 bytes), all three live at once: 12 bytes. (The forward's peak is lower: 16-bit logits 2, the
fp32 copy 4, the log-softmax output 4: 10 bytes; xtmem's note in validation/large_model_runs.md counts
the same 12 s V for the older forward that upcast in the model.)"""
EAGER_LOSS_TRANSIENT_BYTES_PER_ELEMENT = EAGER_LOSS_TOTAL_BYTES_PER_ELEMENT - 4.0
"""What ``eager`` adds over ``fused``: the head's activations keep 4 bytes per token and vocabulary
entry already (the fp32 logits, ``log_softmax``'s saved output here), so the two fp32 gradients (8 bytes)
are the transient."""


def eager_loss_transient_bytes_per_sample(model: ModelSpec) -> float:
    """Bytes transformers' eager loss holds at its backward beyond what the head keeps, per sample:
    :data:`EAGER_LOSS_TRANSIENT_BYTES_PER_ELEMENT` x tokens x vocabulary of the model's loss (the op
    named ``loss``, :func:`~dpsim.workload.layers.lm_loss_op`; the largest, with a multi-token
    prediction head: its losses run one after another)."""
    sizes = [op.elements for layer in model.layers for op in layer.ops
             if isinstance(op, MemoryOp) and op.name == "loss"]
    if not sizes:
        raise ConfigError(f"--loss-impl: eager is a language model's loss over its vocabulary, and {model.name} "
                          f"has none; leave it out (or choose fused)")
    return EAGER_LOSS_TRANSIENT_BYTES_PER_ELEMENT * max(sizes)


def memory_breakdown(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    precision: Precision,
    optimizer: str,
    micro_batch: int,
    strategy: str = "ddp",
    n_gpus: int = 1,
    gpus_per_node: int | None = None,
    activation_checkpointing: bool = False,
    grad_accum: int = 1,
    fsdp_unit: str = "block",
    overlap: bool = True,
    bucket_cap_mb: float | None = None,
    ddp: DdpOptions | None = None,
    checkpointing: CheckpointPolicy | None = None,
    fsdp_version: str = "1",
    fsdp_accumulate: str = "auto",
    zero_impl: str = "deepspeed",
    zero_group: int | None = None,
    loss_impl: str = "fused",
) -> MemoryBreakdown:
    """Per-GPU memory of ``strategy`` on ``n_gpus`` data-parallel GPUs (see the module docstring).

    ``bucket_cap_mb`` sizes ZeRO-1/2's gradient buffers; DDP's bucket copies hold every
    gradient whatever the cap; other strategies refuse it. ``ddp``: DDP's arguments (torch's
    defaults when ``None``), which set its buffers
    (:func:`~dpsim.strategies.ddp_costs.ddp_comm_buffer_bytes`: no bucket copy with
    ``gradient_as_bucket_view``, a comm hook's state); refused by the other strategies.
    ``checkpointing``: the activation-checkpointing policy (``activation_checkpointing`` is
    ``full``); ``fsdp_version``, ``fsdp_accumulate``: the FSDP strategies' API and gradient
    accumulation (:data:`~dpsim.strategies.registry.FSDP_ACCUMULATE`). ``loss_impl``: one of
    :data:`LOSS_IMPLS`; ``eager`` adds transformers' loss transient at the loss's backward
    (:func:`eager_loss_transient_bytes_per_sample`).
    """
    record = get_strategy(strategy)
    if loss_impl not in LOSS_IMPLS:
        raise ConfigError(f"--loss-impl: {loss_impl!r} is not known; choose one of {', '.join(LOSS_IMPLS)}")
    check_honoured(strategy, BUCKET_CAP_MB, bucket_cap_mb)
    if ddp is not None and not ddp.is_default and record.family != "ddp":
        raise ConfigError(f"DDP options: {ddp} apply to --strategy ddp only, not {strategy}")
    check_fsdp_unit(fsdp_unit)
    check_grad_accum(grad_accum)
    if isinstance(micro_batch, bool) or not isinstance(micro_batch, int) or micro_batch < 1:
        raise ConfigError(f"--micro-batch: {micro_batch!r} is not valid; expected an integer >= 1")
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
        raise ConfigError(f"--gpus: {n_gpus!r} is not valid; expected an integer >= 1")
    psi = model.param_count
    w, g = precision.weight_bytes, precision.grad_bytes
    k = optimizer_state_bytes_per_param(precision, optimizer)
    fp8_weights = 0.0
    check_zero_options(strategy, zero_impl, zero_group, n_gpus=n_gpus, gpus_per_node=gpus_per_node or n_gpus)
    group = zero_shard_group(strategy, n_gpus, gpus_per_node or n_gpus, zero_group)
    no_sync_full_grads = unsharded_accumulation(strategy, grad_accum, fsdp_version, fsdp_accumulate)
    version = fsdp_version if record.family == "fsdp" else "1"
    shard = sharded_numel(model, strategy, group, fsdp_unit=fsdp_unit, fsdp_version=version)
    # Catalog activations are given at 2 bytes per element; fp32 compute keeps 4 (and the tensors a
    # precision stores otherwise count at their dtypes: activation_bytes_per_sample's ``precision``).
    act_scale = 2.0 if precision.compute_dtype == "float32" else 1.0
    if loss_impl == "fused":
        act = activation_bytes_per_sample(model, activation_checkpointing=activation_checkpointing,
                                          fsdp_unit=fsdp_unit, checkpointing=checkpointing,
                                          precision=precision) * micro_batch * act_scale
    else:
        # Two moments of the backward: the loss's (everything kept, plus its fp32 transient) and a
        # checkpointed unit's recompute (everything kept, plus that unit's working set); the loss's
        # backward runs before any recompute, so the two are never live together.
        kept, working = activation_parts_per_sample(model, activation_checkpointing=activation_checkpointing,
                                                    fsdp_unit=fsdp_unit, checkpointing=checkpointing,
                                                    precision=precision)
        act = kept * micro_batch * act_scale + max(working * micro_batch * act_scale,
                                                   eager_loss_transient_bytes_per_sample(model) * micro_batch)
    fp8_inputs = 0.0
    if saves_fp8_inputs(precision.fp8):
        # The FP8 input copies' share: against the same count with 16-bit inputs (the fused loss's parts).
        kept, working = activation_parts_per_sample(model, activation_checkpointing=activation_checkpointing,
                                                    fsdp_unit=fsdp_unit, checkpointing=checkpointing,
                                                    precision=precision, fp8_inputs=False)
        fp8_inputs = act - (kept + working) * micro_batch * act_scale if loss_impl == "fused" else 0.0
    # zero1 with FP8 primary weights: those copies are the parameters (fp8_param_weight_bytes, in the weights).
    fp8_cache = 0.0
    if not (precision.fp8_params and strategy == "zero1"):
        fp8_cache = fp8_saved_weight_bytes(model, precision, policy_of(activation_checkpointing, checkpointing),
                                           fsdp_unit, gpu.architecture,
                                           fsdp2=record.family == "fsdp" and version == "2")
        act += fp8_cache
    act += autocast_weight_bytes(model, precision, policy_of(activation_checkpointing, checkpointing), fsdp_unit,
                                 cached=not (record.family == "fsdp" and version == "1"))
    if strategy == "ddp":
        weights, grads, opt = psi * w, psi * g, psi * k
        buffers = ddp_comm_buffer_bytes(model, precision.grad_dtype, ddp or DEFAULT_DDP_OPTIONS,
                                        bucket_cap_mb=bucket_cap_mb)
    elif strategy == "zero1" and zero_impl == "internlm":
        # HybridZeroOptimizer: full 16-bit gradients until reduced, fp32 master and moments of the
        # parameters this rank owns (the largest owner's share: whole parameters, greedily), and the
        # flat copy of the bucket being all-reduced (TensorBucket.flatten in _reduce_and_copy).
        weights, grads = psi * w, psi * g
        opt = max(internlm_owned_numel(model.params, group)) * k
        buffers = min(psi, deepspeed_reduce_bucket_elements(bucket_cap_mb, g, default=INTERNLM_REDUCE_BUCKET_ELEMENTS)) * g
    elif strategy == "zero3" and zero_impl == "gemini":
        # Colossal-AI Gemini (dpsim/strategies/gemini.py): per chunk one 16-bit shard, the parameters' and then
        # the gradients' (grad_handle reduces into the chunk itself: no separate gradient), and the paired fp32
        # chunk's shard with HybridAdam's moments on it (k per element); the chunks gathered at once at the
        # schedule's peak as buffers.
        check_gemini_accum(zero_impl, grad_accum)
        check_gemini_precision(zero_impl, precision.name)
        policy = policy_of(activation_checkpointing, checkpointing)
        recomputed = ({max(u.layers): tuple(u.layers) for u in _checkpoint_units(model, fsdp_unit, policy)}
                      if policy.mode == "full" else {})
        plan = gemini_plan(model, group, recomputed)
        weights, grads, opt = plan.shard_numel * w, 0, plan.shard_numel * k
        buffers = 0 if plan.keep_gathered else plan.schedule.peak_gathered_numel * w
    elif strategy in ("zero1", "zero2"):
        weights = psi * w
        grads = psi * g if strategy == "zero1" else shard * g
        opt = shard * k
        buffers = deepspeed_reduce_bucket_elements(bucket_cap_mb, g) * g * (2 if overlap else 1)
    else:
        units = [u for u in wrap_units(model, fsdp_unit) if u.params]
        full = {u.name: unit_shard_numel(u.params, group, version) * group for u in units}
        root = sum(full[u.name] for u in units if u.is_root)
        largest = max((full[u.name] for u in units if not u.is_root), default=0)
        # Gathered parameters, in FP8 for the linears' weights under FSDP2's float8 all-gather.
        gathered = {u.name: layers_gathered_bytes(model, u.layers, full[u.name], w, precision.fp8) for u in units}
        root_gathered = sum(gathered[u.name] for u in units if u.is_root)
        largest_gathered = max((gathered[u.name] for u in units if not u.is_root), default=0)
        opt = shard * k
        # FSDP's mixed precision (a master dtype over 16-bit parameters) keeps its sharded gradient
        # in the parameter's full-precision dtype whatever the reduce dtype: FSDP1 casts the
        # reduce-scatter output back (``_cast_grad_to_param_dtype``, torch 2.13
        # ``fsdp/_runtime_utils.py`` line 1048), FSDP2 likewise (``foreach_reduce``:
        # ``_to_dtype_if_needed(reduce_output, orig_dtype)``, ``_fully_shard/_fsdp_collectives.py``
        # line 696). Its 16-bit parameter shard is not kept either: FSDP1 frees ``_mp_shard`` once
        # the all-gather has read it (``post_unshard``, ``fsdp/_flat_param.py`` lines 1529-1530),
        # FSDP2 casts the shard into the all-gather input; the kept shard is the master (in ``k``).
        fsdp_mixed = record.family == "fsdp" and bool(precision.master_bytes)
        shard_grad_bytes = precision.master_bytes if fsdp_mixed else g
        grads = psi * g if no_sync_full_grads else shard * shard_grad_bytes
        # FSDP2's unsharded gradients are in the parameters' dtype (foreach_reduce: ``grad_dtype =
        # unsharded_grads[0].dtype``); the reduce dtype is only its reduce-scatter input, staged
        # below and freed after the copy-in (``unsharded_grads.clear()``).
        grad_work = 0 if no_sync_full_grads else (root + largest) * (w if version == "2" else g)
        # FSDP2 stages every collective through a flat buffer beside the per-parameter tensors
        # (_fsdp_collectives.py): the largest unit's all-gather output until its copy-out
        # (foreach_all_gather_copy_out) and its reduce-scatter input (foreach_reduce's chunk_cat
        # copy-in, in the reduce dtype) until the reduce-scatter is done.
        staging = largest_gathered + largest * g if version == "2" else 0
        if strategy == "fsdp-shard-grad-op":
            # Every unit stays gathered from forward through backward; the persistent shard
            # is the fp32 master (in K) under mixed precision, a separate copy otherwise.
            weights = psi * w + (0 if precision.master_bytes else shard * w)
            buffers = grad_work + staging
        else:
            weights = 0 if fsdp_mixed else shard * w
            buffers = root_gathered + 2 * largest_gathered + grad_work + staging
        if precision.fp8_params:
            # FP8 primary weights (TransformerEngine's under FSDP2): the shard of each FP8 linear weight is
            # the FP8 parameter itself, one byte and its scales, beside the fp32 master in the optimizer (K);
            # gathered in FP8 (gathered_weight_bytes). fsdp-shard-grad-op's unsharded weights likewise.
            per = fp8_element_bytes(precision.fp8)
            fp8_shard = sum(-(-layers_fp8_weight_numel(model, u.layers, precision.fp8) // group) for u in units)
            fp8_weights = fp8_shard * per
            if strategy == "fsdp-shard-grad-op":
                fp8_full = layers_fp8_weight_numel(model, range(len(model.layers)), precision.fp8)
                fp8_weights = fp8_full * per
                weights = (psi - fp8_full) * w + fp8_weights + (0 if precision.master_bytes else shard * w)
            else:
                weights += fp8_weights
    if precision.fp8_params and strategy == "zero1":
        # The distributed optimizer keeps every parameter whole, as a layout's zero1 stage does (one count:
        # fp8_param_weight_bytes); the fp32 master and Adam state stay in the sharded optimizer (k).
        weights, fp8_weights = fp8_param_weight_bytes(
            psi, layers_fp8_weight_numel(model, range(len(model.layers)), precision.fp8), precision, gpu.architecture)
    return MemoryBreakdown(
        weights_bytes=float(weights),
        gradients_bytes=float(grads),
        optimizer_bytes=float(opt),
        activations_bytes=float(act),
        comm_buffers_bytes=float(buffers),
        overhead_bytes=float(FRAMEWORK_OVERHEAD_BYTES),
        capacity_bytes=float(gpu.memory_bytes),
        strategy=strategy,
        shard_group_size=group,
        fp8_weights_bytes=float(fp8_weights),
        fp8_inputs_bytes=float(fp8_inputs),
        fp8_weight_cache_bytes=float(fp8_cache),
    )


def ddp_memory(model: ModelSpec, gpu: GpuSpec, *, precision: Precision, optimizer: str,
               micro_batch: int) -> MemoryBreakdown:
    """Per-GPU memory of plain DDP training (kept for callers of the first API)."""
    return memory_breakdown(model, gpu, precision=precision, optimizer=optimizer, micro_batch=micro_batch)


STAGE_LADDERS = {
    "ddp": ("zero1", "zero2", "zero3"),
    "zero1": ("zero2", "zero3"),
    "zero2": ("zero3",),
    "zero3": (),
    "fsdp-shard-grad-op": ("fsdp",),
    "fsdp-hybrid": ("fsdp",),
    "fsdp": (),
}
"""Strategies to try, least sharded first, from each strategy."""


@frozen_dataclass
class FitAdvice:
    """What would make a configuration fit, found by re-evaluating the memory model."""

    fits: bool
    """The configuration fits as it is."""
    strategy: str | None = None
    """Strategy to use (``None``: keep it)."""
    activation_checkpointing: bool | None = None
    """Turn checkpointing on (``None``: no change)."""
    micro_batch: int | None = None
    """Micro-batch to use (``None``: keep it)."""
    gpus: int | None = None
    """GPU count to use (``None``: keep it)."""
    precision: str | None = None
    """``--precision`` to use (``None``: keep it)."""
    zero_group: int | None = None
    """``--zero-group`` to use: ``fsdp-hybrid``'s shard group (``None``: keep it)."""
    total_bytes: float | None = None
    """Per-GPU total with the advice applied."""
    message: str = ""
    """One line for humans."""

    def to_dict(self) -> dict:
        """JSON-able form."""
        out = {"fits": self.fits, "strategy": self.strategy, "activation_checkpointing": self.activation_checkpointing,
               "micro_batch": self.micro_batch, "gpus": self.gpus, "total_bytes": self.total_bytes,
               "message": self.message}
        if self.precision is not None:  # only when advised, so the JSON of every other advice stays as it was
            out["precision"] = self.precision
        if self.zero_group is not None:  # likewise
            out["zero_group"] = self.zero_group
        return out


def fit_advice(model: ModelSpec, gpu: GpuSpec, *, precision: Precision, optimizer: str, micro_batch: int,
               strategy: str = "ddp", n_gpus: int = 1, gpus_per_node: int | None = None,
               activation_checkpointing: bool = False, grad_accum: int = 1, fsdp_unit: str = "block",
               overlap: bool = True, bucket_cap_mb: float | None = None, max_gpus: int = 1 << 20,
               ddp: DdpOptions | None = None, checkpointing: CheckpointPolicy | None = None,
               fsdp_version: str = "1", fsdp_accumulate: str = "auto", zero_impl: str = "deepspeed",
               zero_group: int | None = None, loss_impl: str = "fused") -> FitAdvice:
    """The smallest change that makes ``model`` fit, in this order of preference:
    a more sharded strategy (ZeRO-1 -> 2 -> 3, or FSDP shard-grad-op -> full shard) on
    the same GPUs; that plus activation checkpointing; that plus a smaller micro-batch
    (more accumulation keeps the global batch); the fully sharded strategy on more GPUs
    (the smallest whole number of nodes). ``fsdp-hybrid`` first tries a wider shard group
    (``--zero-group``, whole servers). GPU counts above ``max_gpus`` are not offered.
    ``zero_impl`` and ``zero_group`` (InternLM's ZeRO-1) apply to the configuration asked for only.
    ``bucket_cap_mb`` applies to the strategies that take it; advice to move to one that
    does not says to drop it. Checkpointing advice is full checkpointing of every block
    (``checkpointing``, or ``activation_checkpointing``, is the policy asked for).
    """
    gpn = gpus_per_node or n_gpus
    base = {"precision": precision, "optimizer": optimizer, "fsdp_unit": fsdp_unit, "overlap": overlap,
            "gpus_per_node": gpn, "grad_accum": grad_accum, "fsdp_version": fsdp_version,
            "fsdp_accumulate": fsdp_accumulate, "loss_impl": loss_impl}
    policy = policy_of(activation_checkpointing, checkpointing)
    # The flag that turns full checkpointing on, as the user would add it to the command.
    ck_flag = ("--activation-checkpointing" if not policy.active else
               "--recompute full" + (" without --recompute-every" if policy.every != 1 else ""))

    def mem(s, n, ck, mb, prec=None):
        cap = bucket_cap_mb if honours(s, BUCKET_CAP_MB) else None
        return memory_breakdown(model, gpu, strategy=s, n_gpus=n, checkpointing=ck, micro_batch=mb,
                                bucket_cap_mb=cap, ddp=ddp if s == "ddp" else None,
                                **(base if prec is None else {**base, "precision": prec}))

    def use(s):
        return _strategy_text(s, bucket_cap_mb)

    def change(s):
        return "" if s == strategy else use(s) + " "

    cap = bucket_cap_mb if honours(strategy, BUCKET_CAP_MB) else None
    now = memory_breakdown(model, gpu, strategy=strategy, n_gpus=n_gpus, checkpointing=policy, micro_batch=micro_batch,
                           bucket_cap_mb=cap, ddp=ddp if strategy == "ddp" else None, zero_impl=zero_impl,
                           zero_group=zero_group, **base)
    usable = now.usable_bytes
    if now.fits:
        return FitAdvice(fits=True, total_bytes=now.total_bytes, message="fits")

    gb = format_bytes

    if strategy == "fsdp-hybrid":
        # A wider shard group keeps HSDP (whole servers per group, dividing the GPUs): the smallest that
        # fits is a smaller change than full sharding, which is the group of every GPU.
        for group in range(2 * gpn, n_gpus, gpn):
            if n_gpus % group or (zero_group is not None and group <= zero_group):
                continue
            m = memory_breakdown(model, gpu, strategy=strategy, n_gpus=n_gpus, checkpointing=policy,
                                 micro_batch=micro_batch, zero_group=group, **base)
            if m.fits:
                return FitAdvice(fits=False, zero_group=group, total_bytes=m.total_bytes,
                                 message=f"use --zero-group {group} (HSDP's shard group across {group // gpn} "
                                         f"servers): {gb(m.total_bytes)} of {gb(usable)} usable per GPU")
    ladder = STAGE_LADDERS[strategy]
    for s in ladder:
        m = mem(s, n_gpus, policy, micro_batch)
        if m.fits:
            return FitAdvice(fits=False, strategy=s, total_bytes=m.total_bytes,
                             message=f"use {use(s)}: {gb(m.total_bytes)} of {gb(usable)} usable per GPU")
    top = ladder[-1] if ladder else strategy
    can_ckpt = any(not u.is_root for u in wrap_units(model, fsdp_unit))
    ck_options = [policy] + ([FULL_CHECKPOINTING] if can_ckpt and policy != FULL_CHECKPOINTING else [])
    for ck in ck_options[1:]:
        m = mem(top, n_gpus, ck, micro_batch)
        if m.fits:
            return FitAdvice(fits=False, strategy=None if top == strategy else top, activation_checkpointing=True,
                             total_bytes=m.total_bytes,
                             message=f"use {change(top)}{ck_flag}: "
                                     f"{gb(m.total_bytes)} of {gb(usable)} usable per GPU")
    best_ck = ck_options[-1]
    # Memory grows with the micro-batch (activations are linear in it): the largest that fits
    # is found in O(log micro_batch) evaluations, not one per value.
    mb = largest_true(1, micro_batch - 1, lambda b: mem(top, n_gpus, best_ck, b).fits)
    if mb is not None:
        m = mem(top, n_gpus, best_ck, mb)
        ck_text = f"{ck_flag} " if best_ck is not policy else ""
        return FitAdvice(fits=False, strategy=None if top == strategy else top,
                         activation_checkpointing=True if ck_text else None, micro_batch=mb,
                         total_bytes=m.total_bytes,
                         message=f"use {change(top)}{ck_text}--micro-batch {mb} (raise "
                                 f"--grad-accum to keep the batch): {gb(m.total_bytes)} of {gb(usable)} usable")
    # 16-bit parameters instead of torch.autocast: autocast keeps a 16-bit copy of every weight it
    # casts until forward ends (autocast_weight_bytes: all of them where the parameters are leaves,
    # as DDP's, DeepSpeed's and FSDP2's are), which no sharding divides; FSDP's MixedPrecision
    # (param_dtype), FSDP2's MixedPrecisionPolicy and DeepSpeed's bf16 gather 16-bit weights and
    # keep no such copies. Llama-3-70B under FSDP2 on 64 H100 with full checkpointing: 131 GiB of
    # copies, "use tensor/pipeline parallelism" where --precision bf16-params fits at 50.8 GiB.
    sixteen = _sixteen_bit_params(precision)
    # On the strategy asked for, else on the most sharded one: a DDP job of Llama-2-70B on 64 H100 was told "no
    # data-parallel configuration fits" where ZeRO-3 with checkpointing and 16-bit parameters fits at 32.0 GiB.
    for s in dict.fromkeys((strategy, top)) if sixteen is not None else ():
        if s == strategy:
            m = memory_breakdown(model, gpu, strategy=strategy, n_gpus=n_gpus, checkpointing=best_ck,
                                 micro_batch=micro_batch, bucket_cap_mb=cap, ddp=ddp if strategy == "ddp" else None,
                                 zero_impl=zero_impl, zero_group=zero_group, **{**base, "precision": sixteen})
        else:
            m = memory_breakdown(model, gpu, strategy=s, n_gpus=n_gpus, checkpointing=best_ck, micro_batch=micro_batch,
                                 bucket_cap_mb=bucket_cap_mb if honours(s, BUCKET_CAP_MB) else None,
                                 ddp=ddp if s == "ddp" else None, **{**base, "precision": sixteen})
        if m.fits:
            ck_text = f" {ck_flag}" if best_ck is not policy else ""
            copies = autocast_weight_bytes(model, precision, best_ck, fsdp_unit, cached=True)
            return FitAdvice(fits=False, strategy=None if s == strategy else s, precision=sixteen.name,
                             activation_checkpointing=True if ck_text else None, total_bytes=m.total_bytes,
                             message=f"use {change(s)}--precision {sixteen.name}{ck_text} (16-bit parameters, fp32 "
                                     f"master: FSDP MixedPrecision param_dtype, DeepSpeed bf16; torch.autocast keeps a "
                                     f"16-bit copy of every weight until forward ends, up to {gb(copies)}): "
                                     f"{gb(m.total_bytes)} of {gb(usable)} usable per GPU")
    # More GPUs: the fully sharded total is fixed + sharded/N; solve, then check. Then the same with 16-bit
    # parameters, whose autocast copies no GPU count divides (Llama-2-70B on 16 H100: "no data-parallel
    # configuration fits" where bf16-params fits on 32).
    full = "fsdp" if strategy.startswith("fsdp") else "zero3"
    ck_text = f"{ck_flag} " if best_ck is not policy else ""
    one = mem(full, 1, best_ck, 1)
    fixed = one.total_bytes - one.model_state_bytes  # what sharding does not divide
    for prec in (None, sixteen) if sixteen is not None else (None,):
        lone = one if prec is None else mem(full, 1, best_ck, 1, prec)
        rest = lone.total_bytes - lone.model_state_bytes
        if rest >= usable:
            continue
        need = math.ceil(lone.model_state_bytes / (usable - rest))
        start = max(-(-need // gpn) * gpn, n_gpus + gpn if n_gpus >= gpn else gpn)
        # Sharded state shrinks as 1/N (padding moves it by less than N elements per tensor),
        # so the smallest count of whole nodes that fits, from the closed form up, takes
        # O(log N) evaluations; padding can cost a node or two more than the closed form.
        extra = smallest_true(0, (max_gpus - start) // gpn,
                              lambda k: mem(full, start + k * gpn, best_ck, 1, prec).fits)
        if extra is not None:
            n = start + extra * gpn
            m = mem(full, n, best_ck, 1, prec)
            mb_text = "--micro-batch 1 " if micro_batch > 1 else ""
            prec_text = "" if prec is None else f"--precision {prec.name} "
            return FitAdvice(fits=False, strategy=full, activation_checkpointing=True if ck_text else None,
                             micro_batch=1 if micro_batch > 1 else None, gpus=n, total_bytes=m.total_bytes,
                             precision=None if prec is None else prec.name,
                             message=f"use {use(full)} {prec_text}{ck_text}{mb_text}on --gpus {n} or more: "
                                     f"{gb(m.total_bytes)} of {gb(usable)} usable per GPU")
    if fixed < usable and full == "fsdp" and fsdp_version == "2":
        # More GPUs would fit but for FSDP2's per-parameter dim-0 padding (ceil(dim0/N) rows on
        # every rank): a tensor with fewer rows than GPUs, such as 8 stacked experts, stops
        # shrinking at one row per rank.
        why = (f"the sharded state stops shrinking at {gb(mem(full, max_gpus, best_ck, 1).model_state_bytes)} "
               f"per GPU (FSDP2 pads each parameter's first dimension to a row per GPU)")
    elif fixed < usable:
        why = f"the sharded state would need more than {max_gpus:,} GPUs"
    else:
        why = f"activations, gathered units and overhead alone need {gb(fixed)} of {gb(usable)} usable per GPU"
    # The levers that divide what is left: experts over expert-parallel ranks, a sample's
    # activations over context-parallel ranks when they are most of it (one sample's: what grows
    # with the batch, so not autocast's weight copies).
    per_sample = mem(full, 1, best_ck, 2).activations_bytes - one.activations_bytes
    levers = (["expert parallelism (--ep)"] if model.expert_param_count else []) + \
        (["context parallelism (--cp)"] if per_sample > fixed / 2 else []) + \
        ["tensor/pipeline parallelism or a GPU with more memory"]
    return FitAdvice(
        fits=False,
        message=(f"no data-parallel configuration fits: with {full}{', checkpointing' if best_ck.active else ''} "
                 f"and micro-batch 1, {why}; use {', '.join(levers)}"))


def _sixteen_bit_params(precision: Precision) -> Precision | None:
    """The 16-bit-parameter precision of a torch.autocast one (``amp-bf16`` -> ``bf16-params``,
    ``amp-fp16`` -> ``fp16-params``), its FP8 recipe and compilation kept; ``None`` for any other
    (MaxText's casts keep no autocast cache)."""
    if not precision.autocast or precision.stream_bytes:
        return None
    name = "fp16-params" if precision.compute_dtype == "float16" else "bf16-params"
    return replace(PRECISIONS[name], compiled=precision.compiled, fp8=precision.fp8)


def largest_true(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The largest ``n`` in ``[lo, hi]`` with ``ok(n)``, for ``ok`` true up to some point and false after
    (``None`` if ``ok(lo)`` is false or the range is empty).

    Exponential search up from ``lo`` (the answer is usually near it), then bisection:
    O(log(answer - lo)) calls of ``ok``.
    """
    if hi < lo or not ok(lo):
        return None
    good, step = lo, 1
    while True:
        probe = lo + step
        if probe > hi:
            bad = hi + 1
            break
        if not ok(probe):
            bad = probe
            break
        good, step = probe, step * 2
    while bad - good > 1:  # ok(good) and not ok(bad) (or bad past hi)
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good


def smallest_true(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The smallest ``n`` in ``[lo, hi]`` with ``ok(n)``, for ``ok`` false up to some point and true after
    (``None`` if ``ok(hi)`` is false or the range is empty); O(log(answer - lo)) calls."""
    if hi < lo:
        return None
    if ok(lo):
        return lo
    last_false = largest_true(lo, hi, lambda n: not ok(n))
    return None if last_false is None or last_false >= hi else last_false + 1


def _strategy_text(strategy: str, bucket_cap_mb: float | None) -> str:
    # The advised command must run: a strategy without gradient buckets refuses the cap.
    drop = bucket_cap_mb is not None and not honours(strategy, BUCKET_CAP_MB)
    return f"--strategy {strategy}" + (" without --bucket-cap-mb" if drop else "")



# ----------------------------------------------------------------- 3D layouts


@frozen_dataclass
class StageMemory:
    """Memory per GPU of one pipeline stage of a tensor/pipeline/data layout."""

    stage: int
    """Pipeline stage."""
    breakdown: MemoryBreakdown
    """Bytes per GPU by category."""
    params_per_gpu: int
    """Parameters one GPU of the stage holds (its tensor-parallel shard of the stage's layers)."""
    in_flight: tuple[int, ...]
    """Micro-batches whose activations the stage holds at its peak, per model chunk."""


def layout_stage_memory(tpm, assignment, layout, gpu: GpuSpec, *, precision: Precision, optimizer: str,
                        in_flight: Sequence[Sequence[int]], activations=None,
                        deferred_w: Sequence[int] | None = None,
                        expert_numels: Sequence[int] | None = None) -> tuple[StageMemory, ...]:
    """Per-GPU memory of every stage of a layout (:class:`~dpsim.strategies.layout.Layout`).

    ``tpm``: the tensor-parallel shard (:func:`~dpsim.strategies.tensor.tp_model`);
    ``assignment[stage][chunk]``: layer indices (:func:`~dpsim.strategies.layout.stage_assignment`);
    ``in_flight[stage][chunk]``: micro-batches held at the stage's peak
    (:func:`~dpsim.strategies.pipeline.in_flight`).

    - **Model state** of the stage's layers on one tensor-parallel rank, the last stage
      also keeping a copy of a tied word embedding (Megatron's
      ``shared_embedding_or_output_weight``): ``w`` + ``g`` + ``K`` bytes per parameter
      (the module docstring's table); ``zero1`` (Megatron's distributed optimizer) divides
      ``K`` by the data-parallel replicas (its ``6 + 12/d`` bytes per parameter with bf16
      parameters and fp32 gradients, ``docs/source/api-guide/dist_optimizer.md``); ``fsdp``
      under pipeline parallelism keeps the gathered parameters and the accumulated
      gradients for the whole step and shards ``K`` the same way; without pipeline stages it
      reshards after each forward (:func:`~dpsim.strategies.layout.reshards_after_forward`):
      weights and gradients divided by the replicas too, plus the largest unit gathered twice
      (current and prefetched) and its unsharded gradient.
    - **Activations** per micro-batch in flight (Korthikanti et al. 2022, Sec. 4.2.3: the
      first 1F1B stage holds ``pp`` micro-batches, the interleaved schedule's
      ``pp·(1 + (pp-1)/(pp·v))`` chunk's worth), per layer as
      :func:`~dpsim.strategies.tensor.layer_activation_bytes` gives them; with full
      recomputation each checkpointed block (every ``recompute_every``-th) keeps only its
      input, plus one block's full activations while it is recomputed; with ``op`` each
      block keeps its input and its shard's matmul and attention outputs, plus one block's
      recomputed rest (:mod:`~dpsim.strategies.checkpointing`); with ``moe`` each MoE layer keeps
      only its input, plus one MoE layer's activations while it is recomputed, the other layers
      as with ``op``; ``--offload expert-activations`` takes what it copies to the host off every
      micro-batch in flight (:func:`~dpsim.strategies.offload.expert_offload_bytes_per_sample`),
      one layer's worth back while it runs its backward. ``activations``: what
      :func:`stage_activation_bytes` gives for the same shard, split and policy (computed
      when not given). ``deferred_w[stage]``: micro-batches whose weight-gradient pass the stage
      still owes at its peak (:func:`~dpsim.strategies.pipeline.deferred_weight_grads`, ZB-H1), each
      holding :func:`deferred_weight_grad_bytes` per sample, not its whole activations.
      ``expert_numels[stage]``: the stage's routed-expert parameters per GPU (:func:`stage_expert_numels`,
      computed when not given).
    """
    shard_group_size, terms = _stage_terms(tpm, assignment, layout, gpu, precision=precision, optimizer=optimizer,
                                           in_flight=in_flight, activations=activations, deferred_w=deferred_w,
                                           expert_numels=expert_numels)
    overhead, capacity = float(FRAMEWORK_OVERHEAD_BYTES), float(gpu.memory_bytes)
    # The FP8 input copies' share of each stage's activations: against the same count with 16-bit inputs.
    plain_act: list[float] | None = None
    if saves_fp8_inputs(precision.fp8):
        _, plain = _stage_terms(tpm, assignment, layout, gpu, precision=precision, optimizer=optimizer,
                                in_flight=in_flight, deferred_w=deferred_w, expert_numels=expert_numels,
                                activations=stage_activation_bytes(tpm, assignment, layout, precision, fp8_inputs=False))
        plain_act = [float(term[4]) for term in plain]
    out = []
    for s, weights, grads, opt, act, buffers, numel, fp8_weights, fp8_cache in terms:
        breakdown = MemoryBreakdown(
            weights_bytes=float(weights), gradients_bytes=float(grads), optimizer_bytes=float(opt),
            activations_bytes=float(act), comm_buffers_bytes=float(buffers), overhead_bytes=overhead,
            capacity_bytes=capacity, strategy=layout.strategy, shard_group_size=shard_group_size,
            fp8_weights_bytes=float(fp8_weights),
            fp8_inputs_bytes=float(act) - plain_act[s] if plain_act is not None else 0.0,
            fp8_weight_cache_bytes=float(fp8_cache))
        out.append(StageMemory(stage=s, breakdown=breakdown, params_per_gpu=numel,
                               in_flight=tuple(in_flight[s])))
    return tuple(out)


def layout_stage_totals(tpm, assignment, layout, gpu: GpuSpec, *, precision: Precision, optimizer: str,
                        in_flight: Sequence[Sequence[int]], activations=None,
                        deferred_w: Sequence[int] | None = None,
                        expert_numels: Sequence[int] | None = None) -> tuple[float, float, tuple[int, ...]]:
    """What a search reads of :func:`layout_stage_memory` (same arguments): ``(total bytes of the fullest
    stage, usable bytes, parameters per GPU of each stage)``, the same figures bit for bit
    (:attr:`MemoryBreakdown.total_bytes`' sum in its order, :func:`worst_stage`'s choice), without building a
    breakdown per stage (a 16,384-GPU plan checks ~75,000 stages)."""
    _, terms = _stage_terms(tpm, assignment, layout, gpu, precision=precision, optimizer=optimizer,
                            in_flight=in_flight, activations=activations, deferred_w=deferred_w,
                            expert_numels=expert_numels)
    overhead = float(FRAMEWORK_OVERHEAD_BYTES)
    worst = -math.inf
    params = []
    for _, weights, grads, opt, act, buffers, numel, _, _ in terms:
        total = float(weights) + float(grads) + float(opt) + float(act) + float(buffers) + overhead
        # The first of the fullest, as worst_stage (largest total, then the lowest stage).
        if total > worst:
            worst = total
        params.append(numel)
    return worst, float(gpu.memory_bytes) * (1 - HEADROOM_FRACTION), tuple(params)


def _stage_terms(tpm, assignment, layout, gpu: GpuSpec, *, precision: Precision, optimizer: str,
                 in_flight: Sequence[Sequence[int]], activations=None, deferred_w: Sequence[int] | None = None,
                 expert_numels: Sequence[int] | None = None):
    """:func:`layout_stage_memory`'s count: ``(shard group size, per stage (stage, weights, gradients,
    optimizer state, activations, buffers, parameters per GPU, of the weights the FP8 primary weights', of the
    activations the FP8 weight cache's))``, the latter an iterator."""
    k = optimizer_state_bytes_per_param(precision, optimizer)
    act_scale = 2.0 if precision.compute_dtype == "float32" else 1.0
    if activations is None:
        activations = stage_activation_bytes(tpm, assignment, layout, precision)
    internlm = internlm_stages(tpm, assignment, layout, None, precision.grad_bytes)
    # The layout's, alike for every stage (properties, read once).
    # HSDP (fsdp-hybrid) shards over its shard group, every other strategy over dp x cp.
    d = layout.shard_group
    expert_group = layout.expert_shard_group
    shards_optimizer = layout.strategy in OPTIMIZER_SHARDING_LAYOUT_STRATEGIES
    resharded = reshards_after_forward(layout) and d > 1
    shard_group_size = layout.zero1_group if internlm else d if shards_optimizer else 1
    return shard_group_size, _stage_terms_of(tpm, assignment, layout, gpu, precision, in_flight, activations,
                                             deferred_w, expert_numels, internlm, k=k, act_scale=act_scale,
                                             shard_group=d, expert_group=expert_group,
                                             shards_optimizer=shards_optimizer, resharded=resharded)


def _stage_terms_of(tpm, assignment, layout, gpu, precision, in_flight, activations, deferred_w, expert_numels,
                    internlm, *, k, act_scale, shard_group, expert_group, shards_optimizer, resharded):
    """:func:`_stage_terms`' per-stage figures, stage by stage."""
    w, g = precision.weight_bytes, precision.grad_bytes
    mb = layout.micro_batch
    d = shard_group
    for s in range(len(assignment)):
        per_chunk, working, numel = activations[s]
        act = 0.0
        for c, per_mb in enumerate(per_chunk):
            act += in_flight[s][c] * per_mb * mb
        if deferred_w is not None and deferred_w[s]:
            act += deferred_w[s] * deferred_weight_grad_bytes(tpm, assignment[s], layout) * mb
        act = (act + working * mb) * act_scale
        fp8_weights = fp8_cache = 0.0
        weights = numel * w
        if precision.fp8_params:
            fp8_numel = stage_fp8_weight_numel(tpm, assignment[s], precision)
            weights, fp8_weights = fp8_param_weight_bytes(numel, fp8_numel, precision, gpu.architecture)
        else:
            fp8_cache = layout_fp8_weight_bytes(tpm, assignment[s], precision, gpu.architecture)
            act += fp8_cache
        # A mixture of experts' routed experts are sharded over their expert-data-parallel
        # replicas (Megatron-Core's distributed optimizer shards each buffer over its own group).
        experts = expert_numels[s] if expert_numels is not None else \
            sum(tpm.layers[i].expert_numel_per_rank for layers in assignment[s] for i in layers)
        # HSDP under expert parallelism shards them over the expert-data-parallel ranks of its shard group.
        shard = -(-(numel - experts) // d) + -(-experts // expert_group)  # a rank's share
        opt = shard * k if shards_optimizer else numel * k
        if internlm:  # whole parameters, greedily, within the ZERO1 group: the largest share's state
            opt = internlm[s].largest_owned * k
        grads, buffers = numel * g, 0
        if resharded:
            # Only the shards persist; the current and the prefetched unit are gathered, and the
            # unit being reduced holds its unsharded gradient (the data-parallel path's working set).
            # The routed experts' shards are split over their own edp replicas, as the optimizer
            # state above: torchtitan's apply_fsdp wraps them with `fully_shard(
            # transformer_block.moe.experts, mesh=dp_mod_ep_mesh)` (pytorch/torchtitan@2645c02d3926
            # torchtitan/models/llama4/infra/parallelize.py), the rest of the block on dp_mesh.
            # Under expert parallelism the experts are a unit of their own nested in their block, and torchtitan
            # prefetches the next block with its experts (``set_modules_to_forward_prefetch([next_transformer_block,
            # next_transformer_block.moe.experts])``, models/llama4/infra/parallelize.py@05a6cb3895a5): the working
            # set is still whole blocks, less the experts when each rank holds its own whole (never gathered).
            largest = max(_unit_numels(tpm, assignment[s], experts_local=layout.experts_apart
                                       and expert_group == 1), default=0)
            weights, grads, buffers = shard * w, shard * g, largest * (2 * w + g)
            if fp8_weights:
                # FP8 primary weights: the shard's FP8 linears' part in FP8, one byte and its scales (FSDP2
                # shards every parameter alike), each gathered unit's too
                # (:func:`~dpsim.workload.fp8.gathered_weight_bytes`), whose copies live while it is gathered.
                fp8_shard = -(-fp8_numel // d)
                fp8_weights = fp8_shard * fp8_element_bytes(precision.fp8)
                weights = (shard - fp8_shard) * w + fp8_weights
                gathered = max((gathered_weight_bytes(n, f, w, precision.fp8) for n, f in
                                _unit_numels(tpm, assignment[s], experts_local=layout.experts_apart
                                             and expert_group == 1, fp8_precision=precision)), default=0.0)
                buffers = 2 * gathered + largest * g
        yield s, weights, grads, opt, act, buffers, numel, fp8_weights, fp8_cache


def stage_expert_numels(tpm, assignment) -> tuple[int, ...]:
    """Per stage (``assignment[stage][chunk]``: layer indices), the routed-expert parameters one GPU holds."""
    return tuple(sum(tpm.layers[i].expert_numel_per_rank for layers in chunks for i in layers)
                 for chunks in assignment)


def layout_fp8_weight_bytes(tpm, chunks, precision: Precision, architecture: str = "hopper") -> float:
    """The FP8 weight copies a TransformerEngine recipe holds on one GPU of a layout's stage
    (``chunks``: its layers' indices per model chunk): per FP8 weight element of the stage's shard,
    :func:`~dpsim.workload.fp8.saved_fp8_weight_bytes_per_element` on a GPU of ``architecture``
    (the row-wise copy and, on Hopper, its transpose), for the whole step whatever the recomputation. Megatron-Core's TE wrappers pass
    ``is_first_microbatch`` to every TE linear (NVIDIA/Megatron-LM@004fe2f1fc49
    megatron/core/extensions/transformer_engine.py, ``TELinear.forward``: ``None`` only with
    ``disable_parameter_transpose_cache``), so the cast made at the first micro-batch is cached in
    the module and reused by the others, backward and recomputation included
    (:func:`dpsim.workload.fp8.saves_fp8_weights`; the data-parallel path's
    :func:`fp8_saved_weight_bytes` counts the uncached case). torchao recipes keep no copy."""
    if precision.fp8 is None or not saves_fp8_weights(precision.fp8):
        return 0.0
    numel = stage_fp8_weight_numel(tpm, chunks, precision)
    return saved_fp8_weight_copy_bytes(numel, precision, architecture, cached=True)


def _layer_fp8_numel(tpm, i: int, precision: Precision) -> int:
    """A rank's share of layer ``i``'s FP8 weights under the job's recipe: the count predict's and plan's
    parameter all-gathers move (:meth:`~dpsim.strategies.tensor.TpModel.fp8_weight_numels`)."""
    return tpm.fp8_weight_numels(precision.fp8)[i][0]


def stage_fp8_weight_numel(tpm, chunks, precision: Precision) -> int:
    """The FP8 linears' weight elements one GPU of a layout's stage holds (``chunks``: its layers' indices
    per model chunk; :func:`_layer_fp8_numel` each)."""
    return sum(_layer_fp8_numel(tpm, i, precision) for layers in chunks for i in layers)


def _unit_numels(tpm, chunks, *, experts_local: bool = False, fp8_precision: Precision | None = None) -> list:
    """Parameters per GPU each FSDP unit of a stage gathers: a block, or a layer outside the blocks; the
    routed experts left out when ``experts_local`` (their shard group is one rank: whole on each, never gathered).
    With ``fp8_precision``, ``(parameters, of them the FP8 linears' weights)`` per unit (:func:`_layer_fp8_numel`)."""
    units: dict[object, int] = {}
    fp8: dict[object, int] = {}
    for layers in chunks:
        for i in layers:
            layer = tpm.layers[i]
            key = layer.unit if layer.unit is not None else ("layer", i)
            units[key] = units.get(key, 0) + layer.numel_per_rank - (layer.expert_numel_per_rank if experts_local else 0)
            if fp8_precision is not None:
                total, experts = tpm.fp8_weight_numels(fp8_precision.fp8)[i]
                fp8[key] = fp8.get(key, 0) + total - (experts if experts_local else 0)
    if fp8_precision is not None:
        return [(n, fp8[k]) for k, n in units.items()]
    return list(units.values())


def deferred_weight_grad_bytes(tpm, chunks, layout) -> float:
    """What one sample keeps on a rank of a stage (``chunks``: its layers' indices per model chunk)
    while its weight-gradient pass ``W`` waits after its ``B`` (a zero-bubble schedule), before the
    precision's scale (2-byte elements): per linear matmul of the shard, its input and its output
    gradient, ``batch·m·(k + n)`` elements. The zero-bubble runtime keeps exactly these two for the
    deferred GEMM (sail-sg/zero-bubble-pipeline-parallelism@39f2c186
    megatron/core/tensor_parallel/layers.py: the linear's backward computes the input gradient
    and passes ``grad_output`` and ``input`` to ``WeightGradStore.put``); everything else the
    forward saved, softmaxes, norms, activation functions, the attention core, is freed by ``B``
    (Qi et al. 2024, arXiv:2401.10241, Table 1: ``M_W`` below ``M_B``). With sequence
    parallelism a block's first linear keeps its sequence-parallel shard of the input (``m / t``
    rows), all-gathered again when ``W`` runs (``pre_process`` there). Only those linears defer
    their weight gradient in that runtime (``WeightGradStore`` is fed from ``layers.py`` alone): the
    routed experts' grouped GEMMs (``GroupedMLP``, ``gg.ops.gmm``, megatron/core/transformer/moe/
    experts.py there; dpsim's MoE layer is grouped GEMMs) compute theirs inside ``B`` and keep
    nothing for ``W``, and so does the router's plain matmul."""
    t = layout.tp
    sp = layout.sequence_parallel and t > 1
    total = 0
    for layers in chunks:
        for i in layers:
            first = True
            for op in tpm.spec.layers[i].ops:
                if not isinstance(op, MatmulOp) or op.kind != "linear" or op.name.startswith("experts."):
                    continue
                rows_in = op.m // t if sp and first and tpm.layers[i].role == "block" else op.m
                total += op.batch * (rows_in * op.k + op.m * op.n)
                first = False
    return 2.0 * total


def stage_activation_bytes(tpm, assignment, layout, precision: Precision | None = None, *,
                           per_layer: dict | None = None,
                           fp8_inputs: bool = True) -> tuple[tuple[tuple[float, ...], float, int], ...]:
    """Per stage of :func:`layout_stage_memory`: the bytes one sample of one micro-batch keeps for
    backward in each model chunk, the working bytes of the block being recomputed (per
    sample), both before the precision's scale, and the parameters it holds per GPU (the
    last stage's copy of a tied embedding included). They depend on the shard, the split
    and the checkpointing policy only, so a search over micro-batches, schedules and
    replicas reuses them. With ``precision``, each layer's saved elements and each block's input
    count at the dtypes they are stored in (:func:`activation_bytes_per_sample`), still in the
    units of that scale. ``per_layer``: a dict the caller keeps for one ``tpm``, tensor-parallel size,
    sequence parallelism and ``precision`` (a search calls this for many stage splits of the same
    shard), memoising each layer's activations across calls. Under a recipe whose FP8 linears keep their
    inputs as FP8 copies (:func:`~dpsim.workload.fp8.saves_fp8_inputs`), each layer that keeps its
    activations (no recomputation, ``selective``, and the block ``full`` re-runs) counts those copies
    for the 16-bit inputs (:func:`~dpsim.workload.fp8.fp8_saved_input_elements`); ``fp8_inputs=False``
    counts them 16-bit (what the breakdown's :attr:`MemoryBreakdown.fp8_inputs_bytes` is measured
    against). The op-level policies (``op``, ``megatron``, ``moe``, ``deepseek``) count what they keep
    as before (``deepseek`` already caches its linears' inputs in FP8)."""
    t = layout.tp
    sp = layout.sequence_parallel
    scale = 1.0 if precision is None else precision.activation_bytes / 2.0
    memo = {} if per_layer is None else per_layer
    fp8_recipe = precision.fp8 if precision is not None and fp8_inputs and saves_fp8_inputs(precision.fp8) else None

    def fp8_in(i: int) -> float:  # what the layer's FP8 input copies change, in 2-byte units
        if fp8_recipe is None:
            return 0.0
        key = ("fp8 inputs", i)
        hit = memo.get(key)
        if hit is None:
            replaced, added = fp8_saved_input_elements(tpm.spec.layers[i], fp8_recipe, full_layer=tpm.model.layers[i],
                                                       tp=t, sequence_parallel=sp)
            hit = memo[key] = fp8_saved_input_delta_bytes(replaced, added, fp8_recipe,
                                                          precision.activation_bytes) / scale
        return hit

    def lab(layer, recompute: str) -> float:  # the layer's activations on a rank, in 2-byte units
        key = (layer.index, recompute)
        hit = memo.get(key)
        if hit is None:
            every = layer_activation_bytes(layer, t, sequence_parallel=sp, recompute=recompute)
            hit = memo[key] = every if precision is None else every + saved_extra_bytes_per_rank(
                layer, t, sequence_parallel=sp, precision=precision) / scale
        return hit

    def block_in(layer) -> float:  # a block's input in its stream's dtype, in 2-byte units
        kept = block_input_bytes(layer, t, sequence_parallel=sp)
        return kept if precision is None else kept * input_scale(layer.input_byte_class, precision)
    p = len(assignment)
    ckpt = {tpm.layers[block[0]].unit for block in checkpointed_blocks(tpm, layout)}
    deepseek_bytes = deepseek_cache_bytes(precision)
    out = []
    for s, chunks in enumerate(assignment):
        numel = sum(tpm.layers[i].numel_per_rank for layers in chunks for i in layers)
        # The last stage keeps its own copy of a tied embedding unless it holds the embedding
        # itself (one stage; DualPipe's last stage, which also runs the first stage's layers).
        holds_embedding = any(tpm.layers[i].role == "embedding" for layers in chunks for i in layers)
        if tpm.tied_embedding and p > 1 and s == p - 1 and not holds_embedding:
            numel += tpm.embedding_numel_per_rank
        working = 0.0
        per_chunk = []
        for layers in chunks:
            # A chunk's bytes depend on its layers and the policy alone: other stage splits of the same shard
            # (another pp x chunks of the same virtual stages) reuse them. Its working bytes are its own
            # maximum, joined to the stage's (a maximum: the order does not matter).
            chunk_key = (tuple(layers), layout.recompute, layout.recompute_every, layout.offload, fp8_recipe is None)
            known = memo.get(chunk_key) if per_layer is not None else None
            if known is not None:
                per_chunk.append(known[0])
                working = max(working, known[1])
                continue
            stage_working, working = working, 0.0
            per_mb = 0.0
            first_of: dict = {}  # each unit's first layer in the chunk (one pass, not one per unit)
            for i in layers:
                u = tpm.layers[i].unit
                if u is not None and (u not in first_of or i < first_of[u]):
                    first_of[u] = i
            starts = set(first_of.values())
            op_units: dict[str, list[float]] = {}  # op level: [all of the block, what it keeps, offloaded]
            for i in layers:
                layer = tpm.layers[i]
                # --offload expert-activations: these bytes wait on the host, back for the layer's backward.
                offloaded = (expert_offload_bytes_per_sample(tpm.spec.layers[i], layout.recompute)
                             if layout.offload == "expert-activations" else 0.0)
                if layout.recompute == "full" and layer.unit in ckpt:
                    if i in starts:
                        per_mb += block_in(layer)
                elif layout.recompute == "moe" and layer.unit in ckpt and layer.routed_bytes_per_sample > 0:
                    # The MoE layer keeps its own input; its activations live again while it re-runs.
                    per_mb += block_in(layer)
                    working = max(working, lab(layer, "off"))
                elif layout.recompute in ("op", "megatron", "moe", "deepseek") and layer.unit in ckpt:
                    every = lab(layer, "off")
                    if layout.recompute == "deepseek":
                        # Every layer keeps its own input (its norm re-runs from it) and what
                        # deepseek_saved_bytes_per_sample counts, at the bytes it says (not scaled).
                        saved = deepseek_saved_bytes_per_sample(tpm.spec.layers[i], **deepseek_bytes)
                        saved = None if saved is None else saved / scale
                        keeps_input = True
                    else:
                        saved = (op_saved_bytes_per_sample if layout.recompute == "op"
                                 else megatron_saved_bytes_per_sample)(tpm.spec.layers[i])
                        # op: the block is one checkpoint, which keeps the block's input. Megatron-Core
                        # recomputes each sub-block's norm from its own input, which the norm's
                        # CheckpointWithoutOutput keeps: the MLP's input too (the residual after
                        # attention; NVIDIA/Megatron-LM@d98e8a64ddf3 megatron/core/transformer/
                        # transformer_layer.py, _forward_pre_mlp_layernorm).
                        keeps_input = i in starts or layout.recompute != "op"
                    kept = op_units.setdefault(layer.unit, [0.0, 0.0, 0.0])
                    kept[0] += every
                    kept[1] += (every if saved is None else saved) + (block_in(layer) if keeps_input else 0.0)
                    kept[2] += offloaded
                else:
                    every = lab(layer, layout.recompute) + fp8_in(i)
                    per_mb += every - min(every, offloaded)
                    working = max(working, min(every, offloaded))
            for every, kept, offloaded in op_units.values():
                held = min(every, kept)
                per_mb += held - min(held, offloaded)
                working = max(working, every - held + min(held, offloaded))
            per_chunk.append(per_mb)
            if layout.recompute == "full":
                blocks: dict[str, float] = {}
                for i in layers:
                    layer = tpm.layers[i]
                    if layer.unit in ckpt:
                        blocks[layer.unit] = blocks.get(layer.unit, 0.0) + lab(layer, "off") + fp8_in(i)
                working = max([working, *blocks.values()])
            if per_layer is not None:
                memo[chunk_key] = (per_mb, working)
            working = max(stage_working, working)
        out.append((tuple(per_chunk), working, numel))
    return tuple(out)


def worst_stage(stages: Sequence[StageMemory]) -> StageMemory:
    """The stage with the largest total (the one that decides whether the layout fits)."""
    return max(stages, key=lambda m: (m.breakdown.total_bytes, -m.stage))


def offload_memory(m: MemoryBreakdown, offload: str, *, working_weight_bytes: float = 0.0,
                   working_grad_bytes: float = 0.0) -> MemoryBreakdown:
    """``m`` with what ``--offload`` (:mod:`dpsim.strategies.offload`) moves to the host taken off the
    GPU: the optimizer state and the gradient shard (``working_grad_bytes`` stay: the unit being
    reduced, where ``m`` does not count it among its buffers); with ``params+optimizer`` the parameter
    shard, ``working_weight_bytes`` staying (the gathered units, where ``m`` does not count them among
    its buffers)."""
    if offload == "off":
        return m
    out = replace(m, optimizer_bytes=0.0, gradients_bytes=float(working_grad_bytes))
    if offload == "params+optimizer":
        out = replace(out, weights_bytes=float(working_weight_bytes))
    return out


def host_available_bytes() -> float | None:
    """MemAvailable of this host (Linux), else ``None``."""
    available = meminfo_bytes("MemAvailable")
    return None if available is None else float(available)


HOST_MEMORY_SHARE = 0.95
"""Of the host's available memory, what ranks started on it may take together (the rest for the
parent process and the page cache the ranks' own imports need)."""


def check_cpu_ranks_fit(model: ModelSpec, *, name: str, optimizer: str, micro_batch: int, ranks: int,
                        fewer: str, available_bytes: float | None) -> None:
    """Refuse, before any rank starts, ``ranks`` CPU processes of this host each training ``model`` in
    float32 (weights, gradients, ``optimizer`` state, activations) when together they need more than
    :data:`HOST_MEMORY_SHARE` of ``available_bytes`` (``None``: unknown, no check); ``fewer`` names the
    flag that lowers ``ranks``. A catalog model is built with real weights on every rank: ``validate
    --model deepseek-v3`` asked each for terabytes."""
    breakdown = memory_breakdown(model, get_gpu("h100"), precision=get_precision("fp32"), optimizer=optimizer,
                                 micro_batch=micro_batch)
    need = breakdown.total_bytes - FRAMEWORK_OVERHEAD_BYTES  # no CUDA context on a CPU
    if available_bytes is None or need * ranks <= available_bytes * HOST_MEMORY_SHARE:
        return
    together = f"{ranks} ranks on this host need {format_bytes(need * ranks)}; " if ranks > 1 else ""
    raise ConfigError(f"--model: {name} at --micro-batch {micro_batch} needs about {format_bytes(need)} per rank "
                      f"(weights, gradients, {optimizer} state, activations); {together}this host has available "
                      f"{format_bytes(available_bytes)}; use a smaller --micro-batch or model, or {fewer}")
