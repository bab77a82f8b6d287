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
    """Dense tensor-core peak per dtype name (``bfloat16``, ``float16``, ``float32``,
    ``float8``), FLOP/s. ``float32`` is a float32 matmul with TF32 tensor cores allowed
    (Ampere and later); on Volta, which has no TF32, it is the CUDA-core FP32 peak."""
    achieved_flops_per_s: dict[str, float]
    """Best achieved matmul rate per dtype (e.g. mamf-finder), FLOP/s."""
    memory_bytes: float
    """Device memory capacity in bytes (GB = 1e9 as vendors state it)."""
    memory_bandwidth_bytes_per_s: float
    """Peak device-memory bandwidth, bytes/s."""
    sources: tuple[str, ...] = field(default=())
    """Citations for the numbers above."""

    def achieved_rate(self, dtype: str) -> float:
        """Achieved matmul FLOP/s for ``dtype``.

        ``float16`` and ``bfloat16`` stand in for each other when only one is given:
        they share the tensor-core rate on Ampere and later, and on Volta (V100, no
        bf16 tensor cores) a "bf16" mixed-precision job runs as fp16 AMP, which is
        the rate returned. Any other missing dtype raises :class:`ConfigError`.
        """
        return self._rate(self.achieved_flops_per_s, dtype, "achieved")

    def peak_rate(self, dtype: str) -> float:
        """Dense tensor-core peak FLOP/s for ``dtype``, with the same fallback as :meth:`achieved_rate`."""
        return self._rate(self.peak_flops_per_s, dtype, "peak")

    def _rate(self, rates: dict[str, float], dtype: str, kind: str) -> float:
        half = {"float16": "bfloat16", "bfloat16": "float16"}
        for candidate in (dtype, half.get(dtype)):
            if candidate in rates:
                return rates[candidate]
        raise ConfigError(
            f"gpu {self.name!r}: no {kind} rate for dtype {dtype!r}; known: {', '.join(rates)}"
        )


TFLOPS = 1e12
"""1 TFLOP/s in FLOP/s."""
_GB = 1e9
_TB = 1e12

# Matmul efficiency (achieved / dense peak) of the GPUs measured with mamf-finder in
# hardware.csv. "float16" reuses the bf16 numbers: every preset but V100 has the same
# fp16 and bf16 tensor-core peak (datasheets), and the rows measure bf16 only.
# "float32" means a float32 matmul with TF32 tensor cores allowed (Ampere and later);
# no TF32 matmul is measured in the rows, so its achieved rate is the TF32 peak times
# the same GPU's measured bf16 efficiency.
_A100_BF16_EFFICIENCY = 271.2 / 312.0  # H013 achieved / H020 peak = 0.869
_H100_BF16_EFFICIENCY = 794.5 / 989.0  # H015 achieved / H021 peak = 0.803
_B200_BF16_EFFICIENCY = 1745.0 / 2250.0  # H017 achieved / H022 peak = 0.776
_H200_OVER_H100_FP8 = 1453.4 / 1402.6  # H019 / H018: measured H200 vs H100 fp8 matmul = 1.036

_H100_SXM_DATASHEET = (
    "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: 80 GB HBM3, 3.35 TB/s; "
    "bf16/fp16 1,979 TFLOPS and fp8 3,958 TFLOPS with sparsity, i.e. 989 / 1,979 dense)"
)

GPU_PRESETS: dict[str, GpuSpec] = {}
"""Built-in GPUs by key."""


def _register(spec: GpuSpec) -> None:
    GPU_PRESETS[spec.name] = spec


# --- V100 (Volta): fp16 tensor cores only, no bf16, no TF32 ---------------------------
_V100_FP16_PEAK = 125 * TFLOPS  # H023 (DLPerf, Tesla V100-SXM2-16GB) = V100 SXM2 datasheet
_V100_FP32_PEAK = 15.7 * TFLOPS  # V100 SXM2 datasheet: FP32 on CUDA cores (no TF32 on Volta)
for _name, _mem_gb in (("v100", 32), ("v100-16gb", 16)):
    _register(GpuSpec(
        name=_name,
        description=f"NVIDIA Tesla V100 SXM2 {_mem_gb}GB",
        peak_flops_per_s={
            "float16": _V100_FP16_PEAK,  # H023
            "float32": _V100_FP32_PEAK,  # datasheet; CUDA-core FP32, Volta has no TF32
        },
        # No measured V100 matmul rate in hardware.csv: peak x the A100 SXM bf16
        # efficiency (H013/H020 = 0.869), the nearest measured generation.
        achieved_flops_per_s={
            "float16": _V100_FP16_PEAK * _A100_BF16_EFFICIENCY,  # 108.7 TF/s, derived (H023 x H013/H020)
            "float32": _V100_FP32_PEAK * _A100_BF16_EFFICIENCY,  # 13.6 TF/s, derived (datasheet x H013/H020)
        },
        memory_bytes=_mem_gb * _GB,  # V100 SXM2 datasheet: 16 or 32 GB HBM2
        memory_bandwidth_bytes_per_s=900 * _GB,  # V100 SXM2 datasheet: 900 GB/s
        sources=(
            "hardware.csv H023: V100-SXM2 fp16 tensor-core peak 125 TFLOP/s (Oneflow-Inc/DLPerf)",
            "NVIDIA Tesla V100 datasheet (SXM2: 15.7 TFLOPS FP32, 125 TFLOPS tensor, "
            "16/32 GB HBM2 at 900 GB/s)",
            "achieved = peak x A100 SXM bf16 efficiency 271.2/312 (hardware.csv H013/H020); "
            "no measured V100 row",
        ),
    ))

# --- A100 SXM4 80GB (Ampere) -------------------------------------------------------
_register(GpuSpec(
    name="a100",
    description="NVIDIA A100 SXM4 80GB",
    peak_flops_per_s={
        "bfloat16": 312 * TFLOPS,  # H020
        "float16": 312 * TFLOPS,  # A100 datasheet: fp16 = bf16 = 312 dense
        "float32": 156 * TFLOPS,  # H020 notes: TF32 156.0 dense
    },
    achieved_flops_per_s={
        "bfloat16": 271.2 * TFLOPS,  # H013 (mamf-finder best shape)
        "float16": 271.2 * TFLOPS,  # H013, same tensor-core rate as bf16
        "float32": 156 * TFLOPS * _A100_BF16_EFFICIENCY,  # 135.6, H020 TF32 x H013/H020
    },
    memory_bytes=80 * _GB,  # A100 datasheet: 80 GB HBM2e
    memory_bandwidth_bytes_per_s=2039 * _GB,  # A100 datasheet: 2,039 GB/s (SXM 80GB)
    sources=(
        "hardware.csv H013: A100 SXM bf16 matmul 271.2 TFLOP/s achieved (mamf-finder)",
        "hardware.csv H020: A100 SXM dense peak bf16 312, tf32 156 TFLOP/s",
        "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM: 80 GB HBM2e, 2,039 GB/s)",
    ),
))

# --- H100 SXM5 80GB (Hopper) -------------------------------------------------------
_register(GpuSpec(
    name="h100",
    description="NVIDIA H100 SXM5 80GB",
    peak_flops_per_s={
        "bfloat16": 989 * TFLOPS,  # H021
        "float16": 989 * TFLOPS,  # H100 datasheet: fp16 = bf16
        "float32": 494.5 * TFLOPS,  # H021 notes: TF32 494.5 dense
        "float8": 1979 * TFLOPS,  # H018 notes: fp8 dense peak 1979
    },
    achieved_flops_per_s={
        "bfloat16": 794.5 * TFLOPS,  # H015
        "float16": 794.5 * TFLOPS,  # H015, same tensor-core rate as bf16
        "float32": 494.5 * TFLOPS * _H100_BF16_EFFICIENCY,  # 397.3, H021 TF32 x H015/H021
        "float8": 1402.6 * TFLOPS,  # H018
    },
    memory_bytes=80 * _GB,  # H100 datasheet: 80 GB HBM3
    memory_bandwidth_bytes_per_s=3.35 * _TB,  # H100 datasheet: 3.35 TB/s
    sources=(
        "hardware.csv H015: H100 SXM bf16 matmul 794.5 TFLOP/s achieved (mamf-finder)",
        "hardware.csv H018: H100 SXM fp8 matmul 1402.6 TFLOP/s achieved, peak 1979",
        "hardware.csv H021: H100 SXM dense peak bf16 989, tf32 494.5 TFLOP/s",
        _H100_SXM_DATASHEET,
    ),
))

# --- H200 SXM 141GB (Hopper, same GH100 die as H100, HBM3e) --------------------------
# Same compute die and clocks as H100 SXM, so the same dense peaks (H021; H019 notes
# the same fp8 peak 1979 as H018). No bf16 matmul is measured on H200: take the H100
# bf16 measurement (H015) scaled by how much faster H200 ran the fp8 matmul than H100
# (H019/H018 = 1.036), i.e. peak x H100 bf16 efficiency x that factor.
_H200_BF16_ACHIEVED = 794.5 * TFLOPS * _H200_OVER_H100_FP8  # 823.3 TF/s, derived
_register(GpuSpec(
    name="h200",
    description="NVIDIA H200 SXM 141GB",
    peak_flops_per_s={
        "bfloat16": 989 * TFLOPS,  # H021 (same die as H100)
        "float16": 989 * TFLOPS,  # H021 (same die as H100)
        "float32": 494.5 * TFLOPS,  # H021 notes (same die as H100)
        "float8": 1979 * TFLOPS,  # H019 notes
    },
    achieved_flops_per_s={
        "bfloat16": _H200_BF16_ACHIEVED,  # derived: H015 x H019/H018
        "float16": _H200_BF16_ACHIEVED,  # same tensor-core rate as bf16
        "float32": 494.5 * TFLOPS * (_H200_BF16_ACHIEVED / (989 * TFLOPS)),  # 411.6, TF32 peak x bf16 eff.
        "float8": 1453.4 * TFLOPS,  # H019
    },
    memory_bytes=141 * _GB,  # H200 datasheet: 141 GB HBM3e
    memory_bandwidth_bytes_per_s=4.8 * _TB,  # H200 datasheet: 4.8 TB/s
    sources=(
        "hardware.csv H019: H200 SXM fp8 matmul 1453.4 TFLOP/s achieved, peak 1979",
        "hardware.csv H021: H100 SXM dense peaks (H200 uses the same GH100 die)",
        "bf16 achieved derived = H015 794.5 x (H019 1453.4 / H018 1402.6) = 823.3 TFLOP/s; "
        "no measured H200 bf16 row",
        "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: 141 GB HBM3e, 4.8 TB/s, same "
        "compute as H100 SXM)",
    ),
))

# --- B200 (Blackwell, HGX/DGX B200, 1000 W) ------------------------------------------
_register(GpuSpec(
    name="b200",
    description="NVIDIA B200 SXM (HGX/DGX B200) 180GB",
    peak_flops_per_s={
        "bfloat16": 2250 * TFLOPS,  # H022
        "float16": 2250 * TFLOPS,  # HGX B200 spec: fp16 = bf16
        "float32": 1125 * TFLOPS,  # H022 notes: TF32 1125.0 dense
    },
    achieved_flops_per_s={
        "bfloat16": 1745.0 * TFLOPS,  # H017
        "float16": 1745.0 * TFLOPS,  # H017, same tensor-core rate as bf16
        "float32": 1125 * TFLOPS * _B200_BF16_EFFICIENCY,  # 872.5, H022 TF32 x H017/H022
    },
    # 192 GB of HBM3e was announced (8 stacks x 24 GB); shipping HGX/DGX B200 expose
    # 180 GB per GPU (DGX B200: 1,440 GB for 8 GPUs).
    memory_bytes=180 * _GB,
    memory_bandwidth_bytes_per_s=8 * _TB,  # NVIDIA B200: 8 TB/s HBM3e per GPU
    sources=(
        "hardware.csv H017: B200 SXM bf16 matmul 1745.0 TFLOP/s achieved (mamf-finder)",
        "hardware.csv H022: B200 SXM dense peak bf16 2250, tf32 1125 TFLOP/s",
        "NVIDIA DGX B200 user guide: 8 x B200 with 1,440 GB total GPU memory (180 GB each)",
        "NVIDIA Blackwell B200 specifications: 8 TB/s HBM3e bandwidth per GPU (192 GB as "
        "announced, 180 GB usable on HGX/DGX B200)",
    ),
))

def get_gpu(name: str) -> GpuSpec:
    """Look a GPU preset up by key, case-insensitively."""
    try:
        return GPU_PRESETS[name.lower()]
    except KeyError:
        raise ConfigError(
            f"--gpu: {name!r} is not a known GPU; choose one of {', '.join(sorted(GPU_PRESETS))}"
        ) from None
