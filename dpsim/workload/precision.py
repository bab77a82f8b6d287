"""Training precision and optimizer: bytes per parameter and what DDP all-reduces.

Bytes per parameter follow the ZeRO paper's accounting (Rajbhandari et al. 2020,
"ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", section 3.1):
mixed precision with Adam keeps 2 (fp16/bf16 weights) + 2 (gradients) + 12 (fp32 master
weights, momentum, variance) = 16 bytes per parameter. The seed's accounting keeps the
Adam moments in bf16: 2 + 2 + 4 = 8.

fp16 mixed precision (Micikevicius et al. 2018, "Mixed Precision Training") keeps the
same 16 bytes per parameter as bf16 mixed precision; it is what Volta GPUs support.
The gradient dtype is what DDP buckets and all-reduces, and what ZeRO / FSDP
reduce-scatter.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsim.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Precision:
    """How weights, gradients and optimizer state are stored, and compute's dtype."""

    name: str
    """Key used on the command line."""
    compute_dtype: str
    """dtype of the matmuls (sets the achieved FLOP/s)."""
    weight_bytes: int
    """Bytes per parameter of the weights the model computes with."""
    grad_dtype: str
    """dtype of gradients, hence of DDP's buckets and all-reduce."""
    grad_bytes: int
    """Bytes per parameter of the gradients."""
    master_bytes: int
    """Bytes per parameter of an fp32 master copy (0 when none)."""
    state_element_bytes: int
    """Bytes of one optimizer-state element (Adam's m or v, SGD's momentum)."""
    description: str
    """One line for humans."""


PRECISIONS: dict[str, Precision] = {
    "fp32": Precision(
        name="fp32", compute_dtype="float32", weight_bytes=4, grad_dtype="float32", grad_bytes=4,
        master_bytes=0, state_element_bytes=4,
        description="everything in fp32 (TF32 matmuls)",
    ),
    "amp": Precision(
        name="amp", compute_dtype="bfloat16", weight_bytes=4, grad_dtype="float32", grad_bytes=4,
        master_bytes=0, state_element_bytes=4,
        description="torch.autocast bf16: fp32 weights and gradients (DDP all-reduces fp32)",
    ),
    "bf16-mixed": Precision(
        name="bf16-mixed", compute_dtype="bfloat16", weight_bytes=2, grad_dtype="bfloat16", grad_bytes=2,
        master_bytes=4, state_element_bytes=4,
        description="bf16 weights and gradients, fp32 master weights and moments (ZeRO paper: 16 B/param with Adam)",
    ),
    "fp16-mixed": Precision(
        name="fp16-mixed", compute_dtype="float16", weight_bytes=2, grad_dtype="float16", grad_bytes=2,
        master_bytes=4, state_element_bytes=4,
        description="fp16 weights and gradients (loss scaling), fp32 master weights and moments: "
                    "16 B/param with Adam; the mixed precision Volta (V100) supports",
    ),
    "bf16": Precision(
        name="bf16", compute_dtype="bfloat16", weight_bytes=2, grad_dtype="bfloat16", grad_bytes=2,
        master_bytes=0, state_element_bytes=2,
        description="pure bf16 including optimizer moments (the seed's accounting: 8 B/param with Adam)",
    ),
}

OPTIMIZER_STATES: dict[str, int] = {"adamw": 2, "adam": 2, "sgd-momentum": 1, "sgd": 0}
"""Optimizer-state tensors per parameter (Adam: m and v; SGD with momentum: one buffer)."""


def check_precision_on_gpu(precision: Precision, gpu) -> None:
    """Refuse a precision whose compute dtype the GPU has no tensor cores for.

    Volta (V100) has fp16 tensor cores but no bf16 ones: bf16 matmuls there are emulated
    (``torch.cuda.is_bf16_supported(including_emulation=False)`` is False before
    compute capability 8.0), far below any rate dpsim could quote. So ``bf16-mixed``,
    ``bf16`` and ``amp`` (bf16 autocast) on a V100 are an error that names
    ``fp16-mixed``, rather than a silent fp16 rate.
    """
    dtype = precision.compute_dtype
    if dtype in ("bfloat16", "float16") and dtype not in gpu.peak_flops_per_s:
        other = [p.name for p in PRECISIONS.values() if p.compute_dtype in gpu.peak_flops_per_s]
        raise ConfigError(
            f"--precision: {precision.name!r} computes in {dtype}, which {gpu.name} has no tensor cores "
            f"for; choose one of {', '.join(other)}"
        )


def get_precision(name: str) -> Precision:
    """Look a precision up by key."""
    try:
        return PRECISIONS[name]
    except KeyError:
        raise ConfigError(
            f"--precision: {name!r} is not known; choose one of {', '.join(PRECISIONS)}"
        ) from None


def check_optimizer(name: str) -> str:
    """Validate an optimizer key."""
    if name not in OPTIMIZER_STATES:
        raise ConfigError(f"--optimizer: {name!r} is not known; choose one of {', '.join(OPTIMIZER_STATES)}")
    return name


def optimizer_state_bytes_per_param(precision: Precision, optimizer: str) -> int:
    """Optimizer state (master copy included) per parameter."""
    return precision.master_bytes + OPTIMIZER_STATES[check_optimizer(optimizer)] * precision.state_element_bytes


def optimizer_traffic_bytes_per_param(precision: Precision, optimizer: str) -> int:
    """Device-memory bytes one optimizer step reads and writes per parameter.

    It reads the gradient, reads and writes each state tensor and the master copy
    (if any), and writes the working weights; without a master copy it reads and
    writes the weights themselves.
    """
    states = OPTIMIZER_STATES[check_optimizer(optimizer)] * precision.state_element_bytes
    weights = precision.weight_bytes + 2 * precision.master_bytes if precision.master_bytes else 2 * precision.weight_bytes
    return precision.grad_bytes + 2 * states + weights
