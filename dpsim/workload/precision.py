"""Training precision and optimizer: what each framework setting stores, computes and reduces.

Each precision is named after the framework setting it models, because that setting,
not a generic "mixed precision", decides the bytes of every category:

========================  ======  =====  ======  ======  =====  =========================================
``--precision``           params  grads  master  Adam    bytes  framework setting
========================  ======  =====  ======  ======  =====  =========================================
``fp32``                  4       4      -       4+4     16     plain fp32 (PyTorch's default)
``tf32``                  4       4      -       4+4     16     fp32 with TF32 matmuls allowed
``amp-bf16`` (default)    4       4      -       4+4     16     ``torch.autocast(dtype=torch.bfloat16)``
``fp32-params-bf16-acts`` 4       4      -       4+4     16     JAX/MaxText ``weight_dtype=float32``,
                                                                ``dtype=bfloat16`` (bf16 residual stream)
``amp-fp16``              4       4      -       4+4     16     ``torch.autocast`` fp16 + ``GradScaler``
``bf16-params``           2       2      4       4+4     16     16-bit model, fp32 master: DeepSpeed ``bf16``,
                                                                Megatron; FSDP ``MixedPrecision(param_dtype=bf16)``
``fp16-params``           2       2      4       4+4     16     the same in fp16 with loss scaling
                                                                (DeepSpeed ``fp16``, Megatron ``--fp16``, Apex O2)
``bf16-fp32-grads-bf16-moments``
                          2       4      4       2+2     8+4    DeepSeek-V3's HAI-LLM (BF16 AdamW moments)
``bf16-true``             2       2      -       2+2     8      ``model.to(torch.bfloat16)`` (Lightning
                                                                ``bf16-true``; the seed's 8 B/param)
========================  ======  =====  ======  ======  =====  =========================================

The 16 bytes of the 16-bit-parameter rows are the ZeRO paper's accounting (Rajbhandari
et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
Sec. 3.1). ``torch.autocast`` keeps the parameters, hence their ``.grad``, in fp32: it
casts weights to 16 bits inside each op (``torch/amp/autocast_mode.py``), so plain DDP
all-reduces **fp32** gradients (``DistributedDataParallel`` buckets ``param.grad`` as
is); only a communication hook, a framework that keeps 16-bit gradients
(``bf16-params``) or FSDP's ``MixedPrecision(reduce_dtype=...)`` reduces in 16 bits. The
gradient dtype below is what DDP buckets and all-reduces and what ZeRO / FSDP
reduce-scatter; the parameter dtype is what ZeRO-3 / FSDP all-gather.

For the FSDP strategies the rows read: ``amp-bf16``/``fp32`` = FSDP without
``mixed_precision`` (its default; autocast, if any, only changes compute): fp32 shards,
fp32 all-gathers and reduce-scatters. ``bf16-params`` = FSDP
``MixedPrecision(param_dtype=torch.bfloat16)``, whose ``reduce_dtype`` defaults to
``param_dtype`` ("If this is None but param_dtype is not None, then this takes on the
param_dtype value", ``torch.distributed.fsdp.MixedPrecision``): bf16 all-gathers and
reduce-scatters of fp32 shards; the per-parameter total (4 + 4 + 8 = 16 bytes of
shards) equals the ZeRO row's, which :mod:`dpsim.memory` uses.

The old names stay as aliases with their old meaning (:data:`PRECISION_ALIASES`):
``bf16-mixed`` is ``bf16-params`` and ``fp16-mixed`` is ``fp16-params`` (note that
Lightning's ``"bf16-mixed"`` means autocast, i.e. ``amp-bf16``), ``amp`` is
``amp-bf16`` and ``bf16`` is ``bf16-true``.

Activations (:func:`saved_element_bytes`): matmul outputs in the compute dtype; the residual
stream and the norms' products in :attr:`Precision.residual_bytes`, the parameters' dtype in
torch (fp32 under autocast, which casts only the inputs of the ops on its lists), bf16 in
``fp32-params-bf16-acts``.

Matmul rates (the keys of :class:`dpsim.hardware.GpuSpec`): PyTorch runs float32
matmuls at full FP32 precision by default (``torch.backends.cuda.matmul.allow_tf32``
is False since 1.12), but cuDNN convolutions with TF32 (``torch.backends.cudnn.
allow_tf32`` is True): ``fp32`` computes linear layers on the CUDA cores and
convolutions on TF32 tensor cores; ``tf32`` both on TF32 (what
``set_float32_matmul_precision("high")`` and NVIDIA's NGC containers give).

Optimizer step (:func:`optimizer_traffic_bytes_per_param`): what PyTorch runs by
default on CUDA tensors, the ``foreach`` implementation (one multi-tensor kernel per
elementwise op, not ``fused=True``), op by op as ``torch/optim/adam.py``
``_multi_tensor_adam`` and ``torch/optim/sgd.py`` ``_multi_tensor_sgd`` call them; the
16-bit-parameter rows use a fused update of the fp32 master copy, as DeepSpeed's, Megatron's
and Apex's fused Adam do, between the two copies those frameworks make every step: the
16-bit gradients into fp32 ones before it, the updated fp32 master into the 16-bit weights
after it.
"""

from __future__ import annotations

from dataclasses import replace

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.workload.fp8 import Fp8Recipe, check_fp8_on_gpu, fp8_all_gather, get_fp8_recipe


@frozen_dataclass
class Precision:
    """How weights, gradients and optimizer state are stored, and in which dtype each op computes."""

    name: str
    """Key used on the command line."""
    compute_dtype: str
    """dtype of the activations matmuls produce (``float32``, ``bfloat16``, ``float16``);
    also the key of the peak used for MFU."""
    matmul_dtype: str
    """Rate key (:data:`dpsim.hardware.MATMUL_DTYPES`) of linear layers and attention."""
    conv_dtype: str
    """Rate key of convolutions (cuDNN allows TF32 by default: ``float32`` for fp32 models)."""
    activation_bytes: int
    """Bytes per element of matmul/convolution outputs (16-bit under autocast)."""
    weight_bytes: int
    """Bytes per parameter of the weights the model holds, also the dtype of the residual
    stream and of norms' outputs (fp32 under autocast) unless :attr:`stream_bytes` says otherwise."""
    grad_dtype: str
    """dtype of gradients, hence of DDP's buckets and all-reduce."""
    grad_bytes: int
    """Bytes per parameter of the gradients."""
    master_bytes: int
    """Bytes per parameter of an fp32 master copy (0 when none)."""
    state_element_bytes: int
    """Bytes of one optimizer-state element (Adam's m or v, SGD's momentum)."""
    autocast: bool = False
    """Weights are cast to 16 bits inside every matmul each forward (``torch.autocast``)."""
    stream_bytes: int = 0
    """Bytes per element of the residual stream and the norms' outputs; 0: the parameters' dtype
    (:attr:`weight_bytes`), as in torch, whose autocast casts the inputs of matmuls only and whose
    16-bit models run everything in 16 bits. See :attr:`residual_bytes`."""
    grad_scaler: bool = False
    """fp16 loss scaling: gradients are checked for overflow (and unscaled) every step."""
    fp8: Fp8Recipe | None = None
    """The FP8 recipe its linear layers run (``--fp8``, :mod:`dpsim.workload.fp8`); ``None``: none."""
    compiled: bool = False
    """The step runs under ``torch.compile`` (``--compile``): Inductor fuses each element-wise chain
    between GEMMs into one kernel (:mod:`dpsim.workload.compiled`)."""
    fused_wgrad_accumulation: bool = False
    """Every weight-gradient GEMM accumulates into the gradient buffer in its epilogue (Megatron's
    gradient accumulation fusion through TransformerEngine, the layout path's ``--grad-accum-fusion``,
    set by :func:`dpsim.predict.layout.shard_compute`): it reads and writes the buffer,
    ``grad_bytes`` each, where an unfused one writes an ``activation_bytes`` gradient
    (:func:`dpsim.workload.roofline.wgrad_output_bytes`)."""
    description: str
    """One line for humans: the framework setting it models."""

    @property
    def fp8_params(self) -> bool:
        """The FP8 linears' weights are FP8 parameters (``--fp8-params``, :attr:`Fp8Recipe.fp8_params`)."""
        return self.fp8 is not None and self.fp8.fp8_params

    @property
    def residual_bytes(self) -> int:
        """Bytes per element of the residual stream (:attr:`stream_bytes`, else :attr:`weight_bytes`)."""
        return self.stream_bytes or self.weight_bytes


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision(
        name="fp32", compute_dtype="float32", matmul_dtype="float32-highest", conv_dtype="float32",
        activation_bytes=4, weight_bytes=4, grad_dtype="float32", grad_bytes=4, master_bytes=0,
        state_element_bytes=4,
        description="plain fp32, PyTorch's defaults: matmuls in full FP32, convolutions in TF32 (cuDNN)",
    ),
    Precision(
        name="tf32", compute_dtype="float32", matmul_dtype="float32", conv_dtype="float32",
        activation_bytes=4, weight_bytes=4, grad_dtype="float32", grad_bytes=4, master_bytes=0,
        state_element_bytes=4,
        description="fp32 with TF32 matmuls allowed (set_float32_matmul_precision('high'), NGC containers)",
    ),
    Precision(
        name="amp-bf16", compute_dtype="bfloat16", matmul_dtype="bfloat16", conv_dtype="bfloat16",
        activation_bytes=2, weight_bytes=4, grad_dtype="float32", grad_bytes=4, master_bytes=0,
        state_element_bytes=4, autocast=True,
        description="torch.autocast(dtype=torch.bfloat16): fp32 params, grads and Adam state; DDP "
                    "all-reduces fp32 gradients",
    ),
    # MaxText's ``weight_dtype: float32`` with ``dtype: bfloat16``: its Embed looks the tokens up in
    # the table cast to ``self.dtype`` (``jnp.asarray(self.embedding, self.dtype)[inputs]``,
    # AI-Hypercomputer/maxtext@00d800c3d92f MaxText/layers/embeddings.py), so the residual stream
    # and every saved activation are bf16, while the fp32 weights are cast at each use.
    Precision(
        name="fp32-params-bf16-acts", compute_dtype="bfloat16", matmul_dtype="bfloat16", conv_dtype="bfloat16",
        activation_bytes=2, weight_bytes=4, grad_dtype="float32", grad_bytes=4, master_bytes=0,
        state_element_bytes=4, autocast=True, stream_bytes=2,
        description="fp32 params, grads and Adam state cast to bf16 at each use, bf16 activations and "
                    "residual stream (JAX/MaxText weight_dtype float32, dtype bfloat16)",
    ),
    Precision(
        name="amp-fp16", compute_dtype="float16", matmul_dtype="float16", conv_dtype="float16",
        activation_bytes=2, weight_bytes=4, grad_dtype="float32", grad_bytes=4, master_bytes=0,
        state_element_bytes=4, autocast=True, grad_scaler=True,
        description="torch.autocast (fp16) + GradScaler: fp32 params, grads and Adam state (runs on Volta)",
    ),
    Precision(
        name="bf16-params", compute_dtype="bfloat16", matmul_dtype="bfloat16", conv_dtype="bfloat16",
        activation_bytes=2, weight_bytes=2, grad_dtype="bfloat16", grad_bytes=2, master_bytes=4,
        state_element_bytes=4,
        description="bf16 params and grads (reduced in bf16), fp32 master and Adam state: DeepSpeed bf16, "
                    "FSDP MixedPrecision(param_dtype=bf16)",
    ),
    # Megatron-LM's --bf16 forces --accumulate-allreduce-grads-in-fp32 (megatron/arguments.py@2e90a342f5,
    # megatron/training/arguments.py@937571cfd4: "bfloat16 requires gradient accumulation and
    # all-reduce to be done in fp32"), the DDP's grad_reduce_in_fp32; no opt-out until
    # --grad-reduce-in-bf16 (Megatron-LM d165a8548b, February 2025).
    Precision(
        name="bf16-fp32-grads", compute_dtype="bfloat16", matmul_dtype="bfloat16", conv_dtype="bfloat16",
        activation_bytes=2, weight_bytes=2, grad_dtype="float32", grad_bytes=4, master_bytes=4,
        state_element_bytes=4,
        description="bf16 params, fp32 gradient buffer (accumulated and reduced in fp32), fp32 master and "
                    "Adam state: Megatron-LM --bf16 (main_grad)",
    ),
    # DeepSeek-V3 (arXiv:2412.19437 Sec. 3.3.3, "Low-Precision Optimizer States"): "We adopt the BF16 data
    # format instead of FP32 to track the first and second moments in the AdamW optimizer", while "the
    # master weights (stored by the optimizer) and gradients (used for batch size accumulation) are still
    # retained in FP32": bf16-fp32-grads with 2-byte moments, 4 + 2 + 2 = 8 bytes of optimizer state.
    Precision(
        name="bf16-fp32-grads-bf16-moments", compute_dtype="bfloat16", matmul_dtype="bfloat16",
        conv_dtype="bfloat16", activation_bytes=2, weight_bytes=2, grad_dtype="float32", grad_bytes=4,
        master_bytes=4, state_element_bytes=2,
        description="bf16 params, fp32 gradients and master, bf16 Adam moments (DeepSeek-V3's HAI-LLM, "
                    "arXiv:2412.19437 Sec. 3.3.3)",
    ),
    Precision(
        name="fp16-params", compute_dtype="float16", matmul_dtype="float16", conv_dtype="float16",
        activation_bytes=2, weight_bytes=2, grad_dtype="float16", grad_bytes=2, master_bytes=4,
        state_element_bytes=4, grad_scaler=True,
        description="fp16 params and grads with loss scaling, fp32 master and Adam state: DeepSpeed fp16, "
                    "Megatron --fp16, Apex O2 (runs on Volta)",
    ),
    Precision(
        name="bf16-true", compute_dtype="bfloat16", matmul_dtype="bfloat16", conv_dtype="bfloat16",
        activation_bytes=2, weight_bytes=2, grad_dtype="bfloat16", grad_bytes=2, master_bytes=0,
        state_element_bytes=2,
        description="model.to(torch.bfloat16), Adam state in bf16 too (Lightning bf16-true; the seed's "
                    "8 B/param)",
    ),
)}
"""Every precision by its canonical name."""

PRECISION_ALIASES: dict[str, str] = {
    "amp": "amp-bf16",
    "bf16-mixed": "bf16-params",
    "fp16-mixed": "fp16-params",
    "bf16": "bf16-true",
}
"""Names dpsim used before the precisions were named after framework settings, with the
precision that has their old meaning."""

DEFAULT_PRECISION = "amp-bf16"
"""What a plain PyTorch DDP + ``torch.autocast(dtype=torch.bfloat16)`` user runs."""

OPTIMIZER_STATES: dict[str, int] = {"adamw": 2, "adam": 2, "sgd-momentum": 1, "sgd": 0}
"""Optimizer-state tensors per parameter (Adam: m and v; SGD with momentum: one buffer)."""


def check_precision_on_gpu(precision: Precision, gpu) -> None:
    """Refuse a precision whose compute dtype the GPU has no tensor cores for.

    Volta and Turing have fp16 tensor cores but no bf16 ones: bf16 matmuls there are
    emulated (``torch.cuda.is_bf16_supported(including_emulation=False)`` is False before
    compute capability 8.0), far below any rate dpsim could quote. So a bf16 precision on
    a V100 is an error that names the fp16 ones, rather than a silent fp16 rate.
    """
    if precision.fp8 is not None:
        check_fp8_on_gpu(precision.fp8, gpu)
    dtype = precision.matmul_dtype
    if dtype in ("bfloat16", "float16") and dtype not in gpu.peak_flops_per_s:
        other = [p.name for p in PRECISIONS.values() if p.matmul_dtype not in ("bfloat16", "float16")
                 or p.matmul_dtype in gpu.peak_flops_per_s]
        raise ConfigError(
            f"--precision: {precision.name!r} computes in {dtype}, which {gpu.name} has no tensor cores "
            f"for; choose one of {', '.join(other)}"
        )


def get_precision(name: str, fp8: str | None = None, *, strategy: str = "ddp", fsdp_version: str = "1",
                  compile: bool = False, layout: bool = False, fp8_params: bool = False) -> Precision:
    """Look a precision up by name or old alias (:data:`PRECISION_ALIASES`), with the FP8
    recipe ``fp8`` (``--fp8``) on top of it as it runs under ``strategy`` (FSDP2 gathers
    float8 weights: :func:`dpsim.workload.fp8.fp8_all_gather`), compiled by ``torch.compile``
    when ``compile`` (``--compile``); ``layout``: ``strategy`` runs over the replicas of a
    tensor/pipeline layout (its ``fsdp`` is torchtitan's FSDP2); ``fp8_params`` (``--fp8-params``):
    the recipe's linears keep FP8 primary weights (:attr:`~dpsim.workload.fp8.Fp8Recipe.fp8_params`)."""
    try:
        precision = PRECISIONS[PRECISION_ALIASES.get(name, name)]
    except (KeyError, TypeError):
        raise ConfigError(
            f"--precision: {name!r} is not known; choose one of {', '.join(PRECISIONS)}"
        ) from None
    if compile:
        precision = replace(precision, compiled=True)
    if fp8_params:
        check_fp8_params(precision, fp8)
    if fp8 is None:
        return precision
    if precision.matmul_dtype not in ("bfloat16", "float16"):
        raise ConfigError(f"--fp8: runs on a 16-bit precision (its non-FP8 ops compute in bf16); "
                          f"--precision {precision.name} computes in {precision.matmul_dtype}: use amp-bf16 "
                          "or bf16-params")
    recipe = fp8_all_gather(get_fp8_recipe(fp8), strategy=strategy, fsdp_version=fsdp_version, layout=layout)
    if fp8_params:
        recipe = replace(recipe, fp8_params=True)
    return replace(precision, fp8=recipe)


FP8_PARAMS_STRATEGIES = "a distributed optimizer (--strategy zero1, with or without --tp/--pp/--cp) or FSDP2 " \
                        "(--strategy fsdp --fsdp-version 2, or fsdp/fsdp-hybrid with --tp/--pp/--cp)"
"""Where ``--fp8-params`` runs: Megatron-LM refuses ``--fp8-param-gather`` elsewhere ("--fp8-param-gather only
supported with distributed optimizer or torch fsdp2", NVIDIA/Megatron-LM megatron/training/arguments.py): the
FP8 parameters are updated by re-quantizing the optimizer's fp32 master shards."""


def check_fp8_params(precision: Precision, fp8: str | None) -> None:
    """Refuse ``--fp8-params`` without what it needs: an FP8 recipe that keeps FP8 primary weights
    (TransformerEngine's ``fp8_model_init``; torchao's float8 training keeps high-precision parameters) and a
    precision whose optimizer keeps an fp32 master copy (the 16-bit weights it replaces are that master's cast)."""
    if fp8 is None:
        raise ConfigError("--fp8-params: keeps the FP8 linears' weights in FP8 and needs an FP8 recipe; give --fp8 "
                          "te-delayed, te-current, te-blockwise or mxfp8, or leave --fp8-params out")
    recipe = get_fp8_recipe(fp8)
    if recipe.framework != "transformer-engine":
        raise ConfigError(f"--fp8-params: FP8 primary weights are TransformerEngine's (fp8_model_init); --fp8 "
                          f"{fp8} ({recipe.framework}) keeps high-precision weights: use a te-* or mxfp8 recipe, "
                          f"or leave --fp8-params out")
    if not precision.master_bytes or precision.weight_bytes != 2:
        raise ConfigError(f"--fp8-params: needs 16-bit parameters with an fp32 master copy in the optimizer "
                          f"(bf16-params, bf16-fp32-grads, fp16-params); --precision {precision.name} has none")


def check_fp8_params_strategy(strategy: str, *, fsdp_version: str, layout: bool) -> None:
    """Refuse ``--fp8-params`` under a strategy without a sharded optimizer to hold the master copy
    (:data:`FP8_PARAMS_STRATEGIES`)."""
    # Data parallelism alone: zero1 is Megatron-Core's distributed optimizer at tp = pp = cp = 1 (the same
    # mechanism as a layout's); DDP keeps no master shard and FSDP1 has no FP8 parameters.
    ok = strategy in ("zero1", "fsdp", "fsdp-hybrid") if layout else \
        strategy == "zero1" or (strategy.startswith("fsdp") and fsdp_version == "2")
    if not ok:
        version = f" --fsdp-version {fsdp_version}" if strategy.startswith("fsdp") else ""
        raise ConfigError(f"--fp8-params: runs with {FP8_PARAMS_STRATEGIES}; --strategy {strategy}{version}"
                          f"{'' if layout else ' without --tp/--pp/--cp'} is not one")


def check_optimizer(name: str) -> str:
    """Validate an optimizer key."""
    if name not in OPTIMIZER_STATES:
        raise ConfigError(f"--optimizer: {name!r} is not known; choose one of {', '.join(OPTIMIZER_STATES)}")
    return name


def optimizer_state_bytes_per_param(precision: Precision, optimizer: str) -> int:
    """Optimizer state (master copy included) per parameter."""
    return precision.master_bytes + OPTIMIZER_STATES[check_optimizer(optimizer)] * precision.state_element_bytes


ADAMW_DEFAULT_WEIGHT_DECAY = 0.01
"""``torch.optim.AdamW``'s default ``weight_decay``: non-zero, so its step starts with
``_foreach_mul_(params, 1 - lr * weight_decay)``. ``Adam`` and ``SGD`` default to 0 and skip it."""


def optimizer_traffic_bytes_per_param(precision: Precision, optimizer: str, *, fused: bool | None = None) -> float:
    """Device-memory bytes one optimizer step reads and writes per parameter.

    ``fused=None`` is what the precision's framework runs: PyTorch's default ``foreach``
    kernels for the fp32-parameter rows and ``bf16-true``, a fused master-weight update for
    ``bf16-params``/``fp16-params``. With p, g, s the bytes of a parameter, gradient and
    state element, each foreach op reads its inputs and writes its output once:

    * AdamW (``_multi_tensor_adam``, decoupled weight decay): ``mul_(p)`` 2p,
      ``lerp_(m, g)`` 2s+g, ``mul_(v)`` 2s, ``addcmul_(v, g, g)`` 2s+g, ``sqrt(v)`` 2s,
      ``div_`` 2s, ``add_(eps)`` 2s, ``addcdiv_(p, m, .)`` 2p+2s: 4p + 14s + 2g, 80 bytes in fp32;
      Adam (no weight decay by default) drops ``mul_(p)``: 72 bytes;
    * SGD with momentum (``_multi_tensor_sgd``): ``mul_(buf)`` 2s, ``add_(buf, g)`` 2s+g,
      ``add_(p, buf)`` 2p+s: 32 bytes in fp32; plain SGD ``add_(p, g)``: 12 bytes;
    * fused (one pass): read p, g and each state, write p and each state;
    * ``GradScaler`` adds ``_amp_foreach_non_finite_check_and_unscale_`` (read and write g).

    With an fp32 master copy the update runs on fp32 tensors (p = g = 4) between two copies:
    the 16-bit gradients into fp32 master gradients before it (read g16, write 4 bytes; the
    loss-scaled rows unscale and check for overflow in the same pass) and the updated master
    into the 16-bit weights after it (read 4, write the weight's bytes): Apex O2's
    ``post_backward_with_master_weights`` (``scaler.unscale`` of the fp16 gradients into new
    fp32 ones, one ``multi_tensor_scale`` pass that also flags overflow) and
    ``_master_params_to_model_params`` (NVIDIA/apex@f17401fc71f54f80df8350ca649d0c180d874c59
    apex/amp/_process_optimizer.py); Megatron-LM's ``_copy_model_grads_to_main_grads`` and
    ``_copy_main_params_to_model_params`` around ``optimizer.step()``
    (NVIDIA/Megatron-LM@d657a3ef5cedf68aad17c4b76d847902978b42cd megatron/optimizer/optimizer.py,
    ``MixedPrecisionOptimizer.step``, which unscales in a pass of its own). Gradients already
    kept in fp32 (``bf16-fp32-grads``) need no first copy. Fused Adam over an fp16-params
    model: 6 + 28 + 6 = 40 bytes.
    """
    n_states = OPTIMIZER_STATES[check_optimizer(optimizer)]
    if fused is None:
        fused = precision.master_bytes > 0
    s = precision.state_element_bytes
    to_master = to_model = 0
    if precision.master_bytes:
        p = g = precision.master_bytes
        if precision.grad_bytes < precision.master_bytes:
            to_master = precision.grad_bytes + precision.master_bytes
        to_model = precision.master_bytes + precision.weight_bytes
    else:
        p, g = precision.weight_bytes, precision.grad_bytes
    if fused:
        step = 2 * p + g + 2 * n_states * s
    elif optimizer in ("adam", "adamw"):
        decay = 2 * p if optimizer == "adamw" and ADAMW_DEFAULT_WEIGHT_DECAY else 0
        step = decay + 2 * p + 14 * s + 2 * g
    elif optimizer == "sgd-momentum":
        step = 2 * p + 5 * s + g
    else:
        step = 2 * p + g
    total = to_master + step + to_model
    if precision.grad_scaler and not to_master:
        # No copy pass to fold the overflow check into: GradScaler's unscale reads and writes g.
        total += 2 * g
    return float(total)


def saved_element_bytes(byte_class: str, precision: Precision) -> float:
    """Bytes of one saved activation element of ``byte_class`` (:data:`dpsim.workload.spec.SAVED_CLASSES`)
    under ``precision``: ``act`` the matmuls' output dtype; ``stream`` the residual stream's, the
    parameters' dtype (autocast casts only the inputs of the ops on its lists, so the residual
    adds and an eager norm's products keep fp32 parameters' fp32: torch 2.13.0
    ``ATen/autocast_mode.h``, whose ``AT_FORALL_LOWER_PRECISION_FP`` holds ``linear``, ``matmul``,
    ``scaled_dot_product_attention`` and no ``add``, ``mul`` or ``mean``, and whose
    ``AT_FORALL_FP32`` holds ``pow``, ``rsqrt``, ``layer_norm``, ``rms_norm``); ``f32`` 4;
    ``recast`` a 16-bit copy that exists only where the stream and the matmuls' dtypes differ
    (autocast: ``cached_cast`` in pytorch/pytorch@cfed411fae0c aten/src/ATen/autocast_mode.cpp
    reuses a cast only for ``arg.requires_grad() && arg.is_leaf() && !arg.is_view()``, the weights)."""
    plain = element_bytes(byte_class, precision)
    if plain is not None:
        return plain
    if byte_class == "recast":
        act, stream = precision.activation_bytes, precision.residual_bytes
        return 0.0 if stream == act else float(act)
    raise ConfigError(f"saved activation class {byte_class!r} is not known")


def element_bytes(byte_class: str, precision: Precision) -> float | None:
    """Bytes of one element of the classes a saved tensor and a memory pass share: ``act`` (the
    matmuls' output dtype), ``stream`` (the residual stream's, :attr:`Precision.residual_bytes`) and
    ``f32``; ``None`` for any other class (each caller knows its own)."""
    if byte_class == "act":
        return float(precision.activation_bytes)
    if byte_class == "stream":
        return float(precision.residual_bytes)
    if byte_class == "f32":
        return 4.0
    return None


def saved_extra_bytes(saved_elements, precision: Precision) -> float:
    """Bytes ``saved_elements`` (:attr:`dpsim.workload.spec.LayerSpec.saved_elements`) keep under
    ``precision`` beyond what a layer's 2-byte count, scaled to the matmuls' dtype, gives them:
    each ``stream``/``f32`` element's own size less the matmuls' element, each ``recast`` in full."""
    act = float(precision.activation_bytes)
    return sum(n * (saved_element_bytes(c, precision) - (0.0 if c == "recast" else act)) for n, c in saved_elements)


def input_scale(byte_class: str, precision: Precision) -> float:
    """Factor on a layer's ``input_bytes_per_sample`` (2-byte elements) that, after the activations'
    ``activation_bytes / 2`` scale, gives its bytes in ``byte_class``'s dtype under ``precision``."""
    return saved_element_bytes(byte_class, precision) / float(precision.activation_bytes)
