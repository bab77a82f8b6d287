"""Memory per GPU under plain DDP, with a fits / does-not-fit verdict.

DDP keeps on every GPU the full weights, gradients and optimizer state (see
:mod:`dpsim.workload.precision` for the bytes per parameter), the activations kept for
backward, and its bucket buffers: with the default ``gradient_as_bucket_view=False``
each bucket is a flat tensor the gradients are copied into, one more gradient's worth
of memory (torch/nn/parallel/distributed.py, ``gradient_as_bucket_view`` docstring).
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsim.hardware import GpuSpec
from dpsim.units import GiB
from dpsim.workload.precision import Precision, optimizer_state_bytes_per_param
from dpsim.workload.spec import ModelSpec

FRAMEWORK_OVERHEAD_BYTES = 2 * GiB
"""CUDA context, cuBLAS workspaces and NCCL buffers. An assumption, not a measurement:
the CUDA context alone takes several hundred MiB and NCCL allocates per-channel buffers
(NCCL_BUFFSIZE 4 MiB x channels x peers); calibrate to replace."""

HEADROOM_FRACTION = 0.05
"""Share of device memory left free for the caching allocator's fragmentation."""


@dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """Bytes per GPU, by category."""

    weights_bytes: float
    """Working weights."""
    gradients_bytes: float
    """Gradients."""
    optimizer_bytes: float
    """Optimizer state, fp32 master copy included."""
    activations_bytes: float
    """Activations kept for backward for one micro-batch."""
    comm_buffers_bytes: float
    """DDP bucket buffers."""
    overhead_bytes: float
    """Framework overhead (CUDA context, workspaces, NCCL)."""
    capacity_bytes: float
    """Device memory of the GPU."""

    @property
    def total_bytes(self) -> float:
        """Everything above."""
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


def ddp_memory(model: ModelSpec, gpu: GpuSpec, *, precision: Precision, optimizer: str,
               micro_batch: int) -> MemoryBreakdown:
    """Per-GPU memory of plain DDP training."""
    params = model.param_count
    # Catalog activations are given at 2 bytes per element; fp32 compute keeps 4.
    act_scale = 2.0 if precision.compute_dtype == "float32" else 1.0
    return MemoryBreakdown(
        weights_bytes=params * precision.weight_bytes,
        gradients_bytes=params * precision.grad_bytes,
        optimizer_bytes=params * optimizer_state_bytes_per_param(precision, optimizer),
        activations_bytes=model.activation_bytes_per_sample * micro_batch * act_scale,
        comm_buffers_bytes=params * precision.grad_bytes,
        overhead_bytes=FRAMEWORK_OVERHEAD_BYTES,
        capacity_bytes=gpu.memory_bytes,
    )
