"""Per-layer compute times of one replica on one GPU.

Forward time of a layer = its FLOPs x micro-batch / (achieved matmul FLOP/s x
``compute_efficiency``); backward = 2 x forward (weight and input gradients each cost
one forward's FLOPs: Kaplan et al. 2020, "Scaling Laws for Neural Language Models",
section 2.1, C ~ 6N per token = 2N forward + 4N backward). The optimizer step is
memory-bound: the bytes it moves over the device-memory bandwidth.

``compute_efficiency`` is the fraction of the best-shape matmul rate real layers reach.
The default 0.6 puts H100 bf16 at 0.6 x 794.5 = 477 TFLOP/s, 48 % of the 989 TFLOP/s
peak: between Llama 3's 38-43 % MFU on 16K H100s (Dubey et al. 2024, "The Llama 3
Herd of Models", table 4) and MegaScale's 55.2 % on 12,288 GPUs (Jiang et al., NSDI
2024). It is a modelling default: ``--single-gpu-step-ms`` or a calibration replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsim.errors import ConfigError
from dpsim.hardware import GpuSpec
from dpsim.workload.precision import Precision, optimizer_traffic_bytes_per_param
from dpsim.workload.spec import ModelSpec

DEFAULT_COMPUTE_EFFICIENCY = 0.6
BACKWARD_TO_FORWARD = 2.0


@dataclass(frozen=True, kw_only=True)
class LayerTime:
    """Compute time of one layer for one micro-batch."""

    name: str
    """Layer name."""
    forward_s: float
    """Forward time."""
    backward_s: float
    """Backward time."""
    param_names: tuple[str, ...]
    """Parameters whose gradients are ready when this layer's backward ends."""


@dataclass(frozen=True, kw_only=True)
class ComputeProfile:
    """Compute of one replica for one micro-batch, layer by layer."""

    layers: tuple[LayerTime, ...]
    """Layers in forward order."""
    optimizer_s: float
    """One optimizer step."""
    flops_per_step: float
    """Model FLOPs of forward + backward for one micro-batch (no recompute)."""

    @property
    def forward_s(self) -> float:
        """Whole forward pass."""
        return sum(layer.forward_s for layer in self.layers)

    @property
    def backward_s(self) -> float:
        """Whole backward pass."""
        return sum(layer.backward_s for layer in self.layers)

    @property
    def step_s(self) -> float:
        """Forward + backward + optimizer: the one-GPU step."""
        return self.forward_s + self.backward_s + self.optimizer_s


def compute_profile(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    micro_batch: int,
    precision: Precision,
    optimizer: str,
    compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY,
    single_gpu_step_s: float | None = None,
) -> ComputeProfile:
    """Layer times of ``model`` on ``gpu``.

    When ``single_gpu_step_s`` is given (a user's measured one-GPU step), every time is
    scaled so that forward + backward + optimizer equals it, keeping the proportions.
    """
    if micro_batch < 1:
        raise ConfigError(f"--micro-batch: {micro_batch} is not valid; expected an integer >= 1")
    if not 0 < compute_efficiency <= 1:
        raise ConfigError(f"--compute-efficiency: {compute_efficiency} is not valid; expected a number in (0, 1]")
    rate = gpu.achieved_rate(precision.compute_dtype) * compute_efficiency
    layers = []
    for layer in model.layers:
        fwd = layer.forward_flops_per_sample * micro_batch / rate
        layers.append(LayerTime(name=layer.name, forward_s=fwd, backward_s=BACKWARD_TO_FORWARD * fwd,
                                param_names=tuple(p.name for p in layer.params)))
    traffic = optimizer_traffic_bytes_per_param(precision, optimizer) * model.param_count
    optimizer_s = traffic / gpu.memory_bandwidth_bytes_per_s
    flops = model.forward_flops_per_sample * micro_batch * (1 + BACKWARD_TO_FORWARD)
    profile = ComputeProfile(layers=tuple(layers), optimizer_s=optimizer_s, flops_per_step=flops)
    if single_gpu_step_s is not None:
        if not single_gpu_step_s > 0:
            raise ConfigError(f"--single-gpu-step-ms: {single_gpu_step_s * 1e3} is not valid; expected a number > 0")
        scale = single_gpu_step_s / profile.step_s
        profile = ComputeProfile(
            layers=tuple(LayerTime(name=l.name, forward_s=l.forward_s * scale, backward_s=l.backward_s * scale,
                                   param_names=l.param_names) for l in layers),
            optimizer_s=optimizer_s * scale,
            flops_per_step=flops,
        )
    return profile
