"""GPU presets: compute rates and memory, each number citing its source.

Rows ``Hxxx`` refer to ``../shared/reference/hardware.csv`` (published measurements
with their sources); other numbers cite the vendor datasheet they come from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dpsim.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """One accelerator model."""

    name: str
    """Preset key, e.g. ``h100``."""
    description: str
    """Marketing name and form factor, e.g. ``NVIDIA H100 SXM5 80GB``."""
    peak_flops_per_s: dict[str, float]
    """Dense tensor-core peak per dtype name (``bfloat16``, ``float16``, ``float32``), FLOP/s."""
    achieved_flops_per_s: dict[str, float]
    """Best achieved matmul rate per dtype (e.g. mamf-finder), FLOP/s."""
    memory_bytes: float
    """Device memory capacity in bytes (GB = 1e9 as vendors state it)."""
    memory_bandwidth_bytes_per_s: float
    """Peak device-memory bandwidth, bytes/s."""
    sources: tuple[str, ...] = field(default=())
    """Citations for the numbers above."""

    def achieved_rate(self, dtype: str) -> float:
        """Achieved matmul FLOP/s for ``dtype`` (falls back to the closest available)."""
        for candidate in (dtype, "bfloat16" if dtype == "float16" else "float16"):
            if candidate in self.achieved_flops_per_s:
                return self.achieved_flops_per_s[candidate]
        raise ConfigError(
            f"gpu {self.name!r}: no achieved rate for dtype {dtype!r}; "
            f"known: {', '.join(self.achieved_flops_per_s)}"
        )


GPU_PRESETS: dict[str, GpuSpec] = {}
"""Built-in GPUs by key (filled below)."""


def get_gpu(name: str) -> GpuSpec:
    """Look a GPU preset up by key, case-insensitively."""
    try:
        return GPU_PRESETS[name.lower()]
    except KeyError:
        raise ConfigError(
            f"--gpu: {name!r} is not a known GPU; choose one of {', '.join(sorted(GPU_PRESETS))}"
        ) from None
