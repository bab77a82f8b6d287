"""Frozen descriptions of a model: parameters, layers and their costs.

A model is an ordered list of layers; each layer owns parameter tensors (in the order
``model.parameters()`` would yield them) and costs forward FLOPs per sample. Backward
and the optimizer are derived from these by :mod:`dpsim.workload.compute`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dpsim.errors import WorkloadError

DTYPE_SIZE_BYTES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "float8": 1,
    "int8": 1,
}
"""Bytes per element of each dtype name dpsim accepts (torch's names, no prefix)."""


def dtype_size_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype``; raises :class:`WorkloadError` naming the allowed ones."""
    try:
        return DTYPE_SIZE_BYTES[dtype]
    except KeyError:
        allowed = ", ".join(DTYPE_SIZE_BYTES)
        raise WorkloadError(f"dtype: {dtype!r} is not known; allowed: {allowed}") from None


@dataclass(frozen=True, kw_only=True)
class ParamSpec:
    """One parameter tensor, as ``model.named_parameters()`` would list it."""

    name: str
    """Fully qualified name, e.g. ``h.0.attn.c_attn.weight``."""
    shape: tuple[int, ...]
    """Tensor shape."""
    dtype: str = "float32"
    """Element dtype (torch name without ``torch.``); the gradient has the same dtype."""

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def size_bytes(self) -> int:
        """Bytes of the tensor (and of its gradient)."""
        return self.numel * dtype_size_bytes(self.dtype)


@dataclass(frozen=True, kw_only=True)
class LayerSpec:
    """A unit of compute in forward/backward order that owns zero or more parameters."""

    name: str
    """Module path, e.g. ``h.3.mlp``."""
    params: tuple[ParamSpec, ...] = ()
    """Parameters owned by this layer, in registration order."""
    forward_flops_per_sample: float = 0.0
    """Forward FLOPs for one sample (a multiply-add counts 2)."""
    activation_bytes_per_sample: float = 0.0
    """Bytes this layer keeps for backward per sample, at 2 bytes per element (bf16/fp16)."""

    @property
    def param_count(self) -> int:
        """Parameters in this layer."""
        return sum(p.numel for p in self.params)


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A whole model: its layers in forward order plus metadata."""

    name: str
    """Catalog key or user-given name."""
    layers: tuple[LayerSpec, ...]
    """Layers in forward execution order."""
    tokens_per_sample: int | None = None
    """Sequence length for token models; ``None`` for e.g. image models."""
    published_param_count: int | None = None
    """Parameter count as published by the model's authors, when known."""
    source: str = ""
    """Where the architecture and published count come from."""

    def __post_init__(self) -> None:
        if not self.layers:
            raise WorkloadError(f"model {self.name!r}: has no layers")
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise WorkloadError(f"model {self.name!r}: duplicate parameter names")

    @property
    def params(self) -> tuple[ParamSpec, ...]:
        """All parameters in registration (``model.parameters()``) order."""
        return tuple(p for layer in self.layers for p in layer.params)

    @property
    def param_count(self) -> int:
        """Total number of parameters."""
        return sum(layer.param_count for layer in self.layers)

    @property
    def forward_flops_per_sample(self) -> float:
        """Forward FLOPs for one sample."""
        return sum(layer.forward_flops_per_sample for layer in self.layers)

    @property
    def activation_bytes_per_sample(self) -> float:
        """Activation bytes kept for backward per sample."""
        return sum(layer.activation_bytes_per_sample for layer in self.layers)
