"""GPU presets: compute rates, memory and SM counts, each number citing its source.

Rows ``Hxxx`` refer to ``../shared/reference/hardware.csv`` (published measurements
with their sources); "MAMF table" is the *Maximum Achievable Matmul FLOPS comparison
table* and "spec table" the *TFLOPS comparison table* of
stas00/ml-engineering@744d01e18b79 ``compute/accelerator/README.md`` (dense peaks
without sparsity, each row citing the vendor page); other numbers cite the vendor
datasheet they come from. Vendors often print peaks *with* 2:4 sparsity (marked ``*``
in datasheets); every peak here is dense, half of such a figure.

Rate keys (torch dtype names, see :data:`MATMUL_DTYPES`):

* ``float16``, ``bfloat16``, ``float8``: tensor-core (matrix-core) matmul peak;
* ``float32``: a float32 matmul *with TF32 allowed* (``torch.backends.cuda.matmul.
  allow_tf32 = True``, ``set_float32_matmul_precision("high")``, cuDNN's default for
  convolutions, and NGC containers' default through ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE``):
  the TF32 tensor-core peak on Ampere and later, the FP32 peak before (no TF32);
* ``float32-highest``: a float32 matmul at full precision, PyTorch's default for
  matmuls since 1.12 (``set_float32_matmul_precision("highest")``): the CUDA-core
  FP32 peak. Given only where it differs from ``float32`` (Ampere and later).

*Achieved* rates are the best measured matmul rate where one is published: mamf-finder's
best shape (the MAMF table), or the best square ``torch.mm`` of a community benchmark
(:data:`_TPD`, whose H100 bf16 rows agree with mamf-finder's within 1.5 %). Both time short
runs that hold boost clocks; where the rate a GPU *sustains* at its power limit is published
(mamf-finder's MSMF, measured in a node whose other GPUs compute), it replaces them: the 700 W
GH100 presets (:data:`GH100_SUSTAINED_TFLOPS`, 5 % below the burst figure). A rate key
with no measurement of its own is derived from the GPU's measured 16-bit rate times the
ratio that key keeps to it where both are measured on the same silicon (TF32 ~ half the
16-bit rate, as the datasheets' peaks say); a GPU with no measurement at all takes the
dense peak times :data:`NVIDIA_MEASURED_EFFICIENCY`. Power-limited boards (T4, L4, A10,
H100 PCIe) measure far below their peak; GeForce boards measure *above* the datasheet's
peak, which is computed at the rated boost clock that they exceed under load. The
roofline (:mod:`dpsim.workload.roofline`) starts from these rates and loses more on small
or skinny shapes.
"""

from __future__ import annotations

import math
from dataclasses import field, replace

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass

MATMUL_DTYPES = ("float8", "float16", "bfloat16", "float32", "float32-highest")
"""Rate keys a preset may give (see the module docstring)."""

ARCHITECTURES = ("pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3")
"""GPU generations of the presets."""


@frozen_dataclass
class GpuSpec:
    """One accelerator model, as one PyTorch device sees it."""

    name: str
    """Preset key, e.g. ``h100``."""
    description: str
    """Marketing name and form factor, e.g. ``NVIDIA H100 SXM5 80GB``."""
    peak_flops_per_s: dict[str, float]
    """Dense peak per rate key (module docstring: ``float16``, ``bfloat16``, ``float8``,
    ``float32`` = TF32 where it exists, ``float32-highest`` = CUDA-core FP32), FLOP/s."""
    achieved_flops_per_s: dict[str, float]
    """Best achieved matmul rate per rate key (mamf-finder's best shape, or derived), FLOP/s."""
    memory_bytes: float
    """Device memory capacity in bytes: as the driver reports it where that is published
    (:data:`DRIVER_MEMORY_MIB`), else the datasheet's GB (1e9)."""
    memory_bandwidth_bytes_per_s: float
    """Peak device-memory bandwidth, bytes/s (the datasheet's)."""
    stream_bandwidth_bytes_per_s: float | None = None
    """Device-memory bandwidth a streaming kernel reaches (STREAM's ``scale``: one load and
    one store stream), bytes/s: measured where published, else the peak times the measured
    fraction of a GPU with the same memory technology (:data:`STREAM_FRACTION`). ``None``:
    not known, the peak stands in (:attr:`streaming_bandwidth_bytes_per_s`)."""
    architecture: str = ""
    """GPU generation (:data:`ARCHITECTURES`): sets which attention kernels PyTorch runs
    (:func:`dpsim.workload.attention_rates.kernel_pair`, through :attr:`attention_architecture`),
    whether TF32 exists, and the fits keyed by generation (GEMMs, FP8 recipes, NCCL tables)."""
    attention_generation: str = ""
    """The generation whose fused-attention fit costs this GPU (:attr:`attention_architecture`),
    where it is not :attr:`architecture`'s: ``blackwell-ultra`` for B300/GB300, whose special
    function units run twice Blackwell's exponentials per second, the one unit attention's rate
    depends on beyond the tensor cores (:data:`dpsim.workload.attention_rates.HEAD_DIM_HALF_SCALE`).
    Everything else keyed by generation (GEMM fits, FP8 recipes, NCCL tables) keeps
    :attr:`architecture`. Empty: the same as :attr:`architecture`."""
    sm_count: int | None = None
    """Streaming multiprocessors (NVIDIA) or compute units (AMD): the roofline's wave
    quantization divides output tiles over them; ``None`` when not published (no wave
    quantization is modelled then)."""
    sources: tuple[str, ...] = field(default=())
    """Citations for the numbers above."""

    @property
    def attention_architecture(self) -> str:
        """The generation :func:`dpsim.workload.attention_rates.kernel_pair` costs fused attention as:
        :attr:`attention_generation`, or :attr:`architecture` where that is empty."""
        return self.attention_generation or self.architecture

    @property
    def streaming_bandwidth_bytes_per_s(self) -> float:
        """The memory rate the roofline divides traffic by: :attr:`stream_bandwidth_bytes_per_s`,
        or the peak where no streaming measurement applies."""
        return self.stream_bandwidth_bytes_per_s or self.memory_bandwidth_bytes_per_s

    def achieved_rate(self, dtype: str) -> float:
        """Achieved matmul FLOP/s for ``dtype``.

        ``float16`` and ``bfloat16`` stand in for each other when only one is given (a
        GPU without bf16 tensor cores is refused earlier, by
        :func:`dpsim.workload.precision.check_precision_on_gpu`); ``float32-highest``
        falls back to ``float32`` on GPUs without TF32, where the two are the same.
        Any other missing key raises :class:`ConfigError`.
        """
        return self._rate(self.achieved_flops_per_s, dtype, "achieved")

    def peak_rate(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``, with the same fallback as :meth:`achieved_rate`."""
        return self._rate(self.peak_flops_per_s, dtype, "peak")

    def _rate(self, rates: dict[str, float], dtype: str, kind: str) -> float:
        fallback = {"float16": "bfloat16", "bfloat16": "float16", "float32-highest": "float32"}
        for candidate in (dtype, fallback.get(dtype)):
            if candidate in rates:
                return rates[candidate]
        raise ConfigError(
            f"gpu {self.name!r}: no {kind} rate for dtype {dtype!r}; known: {', '.join(rates)}"
        )


TFLOPS = 1e12
"""1 TFLOP/s in FLOP/s."""
_GB = 1e9
_TB = 1e12

# Measured matmul efficiency (achieved / dense peak), MAMF table, bf16.
_A100_SXM_EFF = 271.2 / 312.0  # H013 / H020 = 0.869
_A100_PCIE_EFF = 252.9 / 312.0  # H014 / spec table = 0.811
_H100_EFF = 794.5 / 989.0  # H015 / H021 = 0.803
_GH200_EFF = 828.6 / 989.0  # H016 / spec table = 0.838
_B200_EFF = 1745.0 / 2250.0  # H017 / H022 = 0.776
_GB200_EFF = 1822.0 / 2500.0  # MAMF table GB200 SXM row / spec table = 0.729
_MI300X_EFF = 668.4 / 1300.0  # MAMF table MI300X row (PYTORCH_TUNABLEOP_ENABLED=1) = 0.514

NVIDIA_MEASURED_EFFICIENCY = (_A100_SXM_EFF + _A100_PCIE_EFF + _H100_EFF + _GH200_EFF + _B200_EFF) / 5
"""Mean bf16 matmul efficiency of the NVIDIA GPUs measured in hardware.csv (H013-H017):
0.819. For NVIDIA GPUs with no published matmul measurement at all: a GEMM-benchmark
constant from *other* GPUs, never fitted to throughput. Power-limited
boards measure well below it (T4 0.65, L4 0.58, H100 PCIe 0.66: :data:`_TPD`), so it is
optimistic for a 150 W board such as the A10 (:data:`POWER_LIMITED_EFFICIENCY`)."""

POWER_LIMITED_EFFICIENCY = (41.93 / 65.0 + 70.89 / 121.0 + 495.93 / 756.0) / 3
"""Mean 16-bit matmul efficiency measured on boards whose power budget caps their tensor
clocks (:data:`_TPD` rows: T4 70 W fp16 41.93 of 65, L4 72 W bf16 70.89 of 121, H100 PCIe
350 W bf16 495.93 of 756): 0.629. The A10 (GA102, 150 W) has no published matmul
measurement; its datasheet peak (125 TFLOPS fp16 at the 1695 MHz boost) cannot be sustained
in 150 W: the same GA102 on the 300 W RTX A6000 measures 120.49 TFLOP/s fp16
(zzc0721/torch-performance-test-data@078586871da3 database.md, 'NVIDIA RTX A6000',
Mightlaus), 2.5 W per achieved TFLOP/s, so 150 W sustains about 60 TFLOP/s at the A6000's
clocks and somewhat more at the lower voltage of lower clocks. The datasheet fraction of the
power-limited boards (79 TFLOP/s) lies in that bracket; the measured mean of unconstrained
boards (:data:`NVIDIA_MEASURED_EFFICIENCY`, 102 TFLOP/s) does not. Not fitted to throughput."""

_MAMF = ("MAMF table (stas00/ml-engineering@744d01e18b79 compute/accelerator/README.md, "
         "'Maximum Achievable Matmul FLOPS comparison table')")
_SPEC = ("spec table (stas00/ml-engineering@744d01e18b79 compute/accelerator/README.md, "
         "'TFLOPS comparison table', dense, each row citing the vendor page)")
_DERIVED = "achieved = dense peak x {eff:.3f} ({why}); no published matmul measurement of this GPU"
_TPD = ("zzc0721/torch-performance-test-data@9d82827637262c4351e3f9483f96b8cff57a601f database.md "
        "(test.py: torch.mm of square matrices 1024-10240, best size, 30 iterations after 10 warm-up; "
        "columns fp32 = TF32 off, tf32, fp16, bf16)")
"""The community matmul benchmark the GPUs without a MAMF row cite, row by row."""

# TF32 / 16-bit matmul rate measured on one board (_TPD rows), for GPUs whose TF32 is not
# measured: the datasheets' 1:2 peak ratio holds within a few per cent.
_HOPPER_TF32_OVER_BF16 = 402.15 / 797.51  # _TPD 'NVIDIA H100 80GB HBM3' (HaxxorCialtion) = 0.504
_A100_TF32_OVER_BF16 = 108.32 / 234.14  # _TPD 'NVIDIA A100-PCIE-40GB' (yjzxkxdn) = 0.463
_GA102_TF32_OVER_FP16 = (38.15 / 77.83 + 32.03 / 64.10) / 2  # _TPD RTX 3080 Ti (datdanboi25), 3080 10GB = 0.495
_AD10X_TF32_OVER_BF16 = 31.88 / 70.89  # _TPD 'NVIDIA L4' (Arcannite) = 0.450

_STREAM = ("te42kyfo/gpu-benches@1c36d509ee717dca9215c27135fa1e611bb03ed1 gpu-stream/{file}.txt, 'scale' "
           "column (one load and one store stream) at 100 % occupancy: {gbs} GB/s of {peak} GB/s peak")
"""The streaming-bandwidth measurement a preset cites (its file, result and the board's peak)."""

STREAM_FRACTION: dict[str, float] = {
    "hbm2": 802.0 / 900.0,  # gpu-stream/v100.txt: V100, 802 of 900 GB/s = 0.891
    "hbm2e": 1704.0 / 2000.0,  # gpu-stream/h100_pcie.txt: H100 PCIe, 1704 of 2000 GB/s = 0.852
    "hbm3e": 3165.0 / 4800.0,  # gpu-stream/h200.txt: H200, 3165 of 4800 GB/s = 0.659
    "gddr6": 652.0 / 696.0,  # gpu-stream/a40.txt: A40 (GA102, GDDR6), 652 of 696 GB/s = 0.937
    "gddr6-ada": 770.0 / 864.0,  # gpu-stream/l40.txt: L40 (AD102, GDDR6), 770 of 864 GB/s = 0.891
    "cdna2": 1358.0 / 1638.4,  # gpu-stream/mi210.txt: MI210 (CDNA2, HBM2e), 1358 of 1638.4 GB/s = 0.829
}
"""Fraction of the peak memory bandwidth a streaming kernel reaches, measured (te42kyfo/gpu-benches
@1c36d509, gpu-stream, 'scale' at full occupancy) on one board per memory technology, for the
presets that have no measurement of their own. It is far from constant: HBM2/HBM2e and GDDR6
boards stream at 83-94 % of their peak, the H200's HBM3e at 66 %. HBM3 has no published
measurement there: H100 SXM/NVL, H800, H20 and GH200 96 GB take the HBM2e fraction measured on
the same GH100 memory system (H100 PCIe), MI300X the one measured on CDNA2 (MI210); assumptions
the H200's 66 % says may be generous. GDDR7 (RTX 5090) has none either: it takes the GDDR6 fraction
of the newest GDDR board measured (L40)."""

GPU_PRESETS: dict[str, GpuSpec] = {}
"""Built-in GPUs by key."""


DRIVER_MEMORY_MIB = {"h100": 81_559, "h200": 143_771, "a100": 81_920, "a100-40gb": 40_960, "a10": 23_028,
                     "l40s": 46_068, "l4": 23_034, "t4": 15_360}
"""Device memory as NVML (``nvidia-smi``) reports it, MiB, where it is published: Modal's table "Why does
an NVIDIA H100 80GB card offer 85.52 GB?" (thundergolfer.com/blog/nvidia-gpu-memory-capacity). The
datasheets' "80 GB" of the HBM boards is 80 GiB (H100 81,559 MiB, A100 81,920 MiB: 7 % above 80e9
bytes); the GDDR boards with ECC report a little less than their GiB (L40S 46,068 MiB of 48).
What the driver then keeps back (an A100 40GB's deviceQuery: 40,441 of those 40,960 MiB,
upb-pc2 wiki "NVIDIA A100 40GB with NVLINK") and the CUDA context are
:data:`dpsim.memory.FRAMEWORK_OVERHEAD_BYTES`'s."""
_DRIVER_MEMORY_SOURCE = ("memory: {mib:,} MiB as NVML reports it (Modal, thundergolfer.com/blog/"
                         "nvidia-gpu-memory-capacity), not the datasheet's GB x 1e9")

SAME_BOARD_MEMORY = {"h800": "h100"}
"""Boards with no published NVML figure of their own that carry another board's memory: the H800
SXM5 is the H100 SXM5's GH100 with the same 80 GB of HBM3 at 3.35 TB/s, only NVLink and FP64 cut
(its preset's sources), so it exposes what the H100 SXM5 does, not 80e9 bytes (which left it 5.0 GiB
short of the board it is). An assumption from the shared board, not an H800 measurement."""
_SAME_BOARD_SOURCE = ("memory: {mib:,} MiB, the {other} preset's NVML figure (the same board and HBM3 stacks; "
                      "dpsim.hardware.SAME_BOARD_MEMORY), not measured on this GPU")


def _register(spec: GpuSpec) -> None:
    assert spec.name not in GPU_PRESETS, spec.name
    if spec.name in DRIVER_MEMORY_MIB:
        mib = DRIVER_MEMORY_MIB[spec.name]
        spec = replace(spec, memory_bytes=float(mib * 2**20),
                       sources=spec.sources + (_DRIVER_MEMORY_SOURCE.format(mib=mib),))
    elif spec.name in SAME_BOARD_MEMORY:
        other = SAME_BOARD_MEMORY[spec.name]
        mib = DRIVER_MEMORY_MIB[other]
        spec = replace(spec, memory_bytes=float(mib * 2**20),
                       sources=spec.sources + (_SAME_BOARD_SOURCE.format(mib=mib, other=other),))
    assert set(spec.achieved_flops_per_s) <= set(spec.peak_flops_per_s) <= set(MATMUL_DTYPES), spec.name
    assert spec.architecture in ARCHITECTURES, spec.name
    GPU_PRESETS[spec.name] = spec


def _scaled(peaks: dict[str, float], efficiency: float) -> dict[str, float]:
    """Achieved rates derived as peak x one efficiency (fp8 left out: :func:`_fp8_achieved` derives it)."""
    return {k: v * efficiency for k, v in peaks.items() if k != "float8"}


FP8_OVER_BF16_EFFICIENCY = (1402.6 / 1979.0) / (794.5 / 989.0)
"""How much less of its peak an FP8 GEMM reaches than a bf16 one on the same GPU: 0.883 on the
H100 SXM (hardware.csv H018 fp8 1402.6 of 1979, H015 bf16 794.5 of 989; mamf-finder's best
shapes). Measured elsewhere: H200 0.919 (H019 1453.4 of 1979, bf16 790.29 of 989), B200 0.983 and
GB200 0.992 (MAMF table fp8 / bf16 rows). GPUs with an FP8 peak and no FP8 measurement (H100 PCIe
and NVL, GH200, H20, L4, L40S, RTX 4090) take the H100 SXM's, the lowest: an assumption."""


def _fp8_achieved(peaks: dict[str, float], achieved: dict[str, float]) -> dict[str, float]:
    """``{"float8": rate}`` derived from the GPU's own achieved bf16 rate where it has an FP8 peak
    and no FP8 measurement: bf16 achieved x FP8/bf16 peak x :data:`FP8_OVER_BF16_EFFICIENCY`."""
    if "float8" not in peaks or "float8" in achieved:
        return {}
    return {"float8": achieved["bfloat16"] * peaks["float8"] / peaks["bfloat16"] * FP8_OVER_BF16_EFFICIENCY}


def _derived_gpu(*, name: str, description: str, architecture: str, peaks_tflops: dict[str, float],
                 memory_gb: float, bandwidth_gb_s: float, sm_count: int | None, sources: tuple[str, ...],
                 efficiency: float = NVIDIA_MEASURED_EFFICIENCY,
                 why: str = "mean of the measured NVIDIA GPUs, H013-H017",
                 measured_tflops: dict[str, float] | None = None, memory: str,
                 stream_gb_s: float | None = None) -> GpuSpec:
    """A preset whose achieved rates are ``measured_tflops`` (each cited in ``sources``) and,
    for the other rate keys, the dense peak times ``efficiency``; its streaming bandwidth is
    ``stream_gb_s`` (measured, cited) or the peak times :data:`STREAM_FRACTION` of ``memory``."""
    peaks = {k: v * TFLOPS for k, v in peaks_tflops.items()}
    measured = {k: v * TFLOPS for k, v in (measured_tflops or {}).items()}
    achieved = {**_scaled(peaks, efficiency), **measured}
    achieved.update(_fp8_achieved(peaks, achieved))
    derived = sorted(set(achieved) - set(measured))
    note = ()
    if derived:
        note = (_DERIVED.format(eff=efficiency, why=why) if not measured else
                f"{', '.join(derived)} achieved = dense peak x {efficiency:.3f} ({why}); not measured on this GPU",)
    stream = stream_gb_s if stream_gb_s is not None else bandwidth_gb_s * STREAM_FRACTION[memory]
    return GpuSpec(
        name=name, description=description, architecture=architecture, peak_flops_per_s=peaks,
        achieved_flops_per_s=achieved, memory_bytes=memory_gb * _GB,
        memory_bandwidth_bytes_per_s=bandwidth_gb_s * _GB, stream_bandwidth_bytes_per_s=stream * _GB,
        sm_count=sm_count, sources=sources + note + _stream_note(memory, stream_gb_s),
    )


def _stream_note(memory: str, stream_gb_s: float | None) -> tuple[str, ...]:
    """The citation of a preset's streaming bandwidth when it is derived, not measured."""
    if stream_gb_s is not None:
        return ()
    return (f"streaming bandwidth = peak x {STREAM_FRACTION[memory]:.3f}, the {memory} fraction of "
            "STREAM_FRACTION (te42kyfo/gpu-benches@1c36d509 gpu-stream); not measured on this GPU",)


# --- Pascal: no tensor cores; fp16 runs at twice the fp32 rate on the CUDA cores --------
# ... but only with fp16 accumulation: torch's fp16 matmuls accumulate in fp32, which
# runs at the fp32 rate (the P100 PCIe row of _TPD: fp16 8.39, fp32 8.63 TFLOP/s of its
# 9.3 fp32 peak). The SXM2 preset takes that board's fp32 efficiency for both.
_P100_FP32_EFF = 8.63 / 9.3  # _TPD 'NVIDIA Tesla P100 PCIE 16GB' (zzc0208) / datasheet PCIe fp32 peak
_register(_derived_gpu(
    name="p100", architecture="pascal", description="NVIDIA Tesla P100 SXM2 16GB",
    peaks_tflops={"float16": 21.2, "float32": 10.6},
    measured_tflops={"float16": 10.6 * _P100_FP32_EFF, "float32": 10.6 * _P100_FP32_EFF},
    memory_gb=16, bandwidth_gb_s=732, sm_count=56, memory="hbm2",
    sources=("NVIDIA Tesla P100 datasheet (SXM2: 21.2 TFLOPS half, 10.6 TFLOPS single precision, "
             "16 GB CoWoS HBM2 at 732 GB/s; PCIe: 9.3 TFLOPS single precision)",
             "NVIDIA Tesla P100 whitepaper (GP100): 56 SMs on Tesla P100",
             f"{_TPD}: 'NVIDIA Tesla P100 PCIE 16GB' fp32 8.63, fp16 8.39 TFLOP/s; achieved fp16 = fp32 = "
             "SXM2 fp32 peak x that board's fp32 efficiency 0.928"),
))

# --- Volta: fp16 tensor cores only, no bf16, no TF32 -------------------------------------
_V100_SOURCES = (
    "hardware.csv H023: V100-SXM2 fp16 tensor-core peak 125 TFLOP/s (Oneflow-Inc/DLPerf)",
    "NVIDIA Tesla V100 datasheet (SXM2: 15.7 TFLOPS FP32, 125 TFLOPS tensor; PCIe: 14 TFLOPS "
    "FP32, 112 TFLOPS tensor; 16/32 GB HBM2 at 900 GB/s)",
    "NVIDIA Tesla V100 GPU architecture whitepaper: 80 SMs on Tesla V100",
)
_V100_MEASURED = {"float16": 94.84, "float32": 14.06}  # _TPD 'NVIDIA Tesla V100-SXM2-16GB' (hhhhhge)
_V100_STREAM = _STREAM.format(file="v100", gbs=802, peak=900)
for _name, _mem_gb in (("v100", 32), ("v100-16gb", 16)):
    _register(_derived_gpu(
        name=_name, architecture="volta", description=f"NVIDIA Tesla V100 SXM2 {_mem_gb}GB",
        peaks_tflops={"float16": 125.0, "float32": 15.7},  # H023; datasheet (CUDA-core FP32)
        measured_tflops=dict(_V100_MEASURED),
        memory_gb=_mem_gb, bandwidth_gb_s=900, sm_count=80, memory="hbm2", stream_gb_s=802.0,
        sources=_V100_SOURCES + (f"{_TPD}: 'NVIDIA Tesla V100-SXM2-16GB' fp16 94.84, fp32 14.06 TFLOP/s",
                                 _V100_STREAM),
    ))
# The PCIe boards: the same GV100 at lower clocks; the SXM2 board's measured efficiencies.
for _name, _mem_gb in (("v100-pcie", 32), ("v100-pcie-16gb", 16)):
    _register(_derived_gpu(
        name=_name, architecture="volta", description=f"NVIDIA Tesla V100 PCIe {_mem_gb}GB",
        peaks_tflops={"float16": 112.0, "float32": 14.0},  # datasheet, PCIe column
        measured_tflops={"float16": 112.0 * 94.84 / 125.0, "float32": 14.0 * 14.06 / 15.7},
        memory_gb=_mem_gb, bandwidth_gb_s=900, sm_count=80, memory="hbm2", stream_gb_s=802.0,
        sources=_V100_SOURCES + (f"{_TPD}: 'NVIDIA Tesla V100-SXM2-16GB' fp16 94.84, fp32 14.06 TFLOP/s; achieved = "
                                 "PCIe peak x the SXM2 board's efficiency (0.759 fp16, 0.896 fp32)", _V100_STREAM),
    ))

# --- Turing: fp16 tensor cores, no bf16, no TF32 -----------------------------------------
_register(_derived_gpu(
    name="t4", architecture="turing", description="NVIDIA T4 16GB (PCIe, 70 W)",
    peaks_tflops={"float16": 65.0, "float32": 8.1},
    measured_tflops={"float16": 41.93, "float32": 4.35},  # _TPD, median of the three T4 rows
    memory_gb=16, bandwidth_gb_s=320, sm_count=40, memory="gddr6",
    sources=("NVIDIA T4 datasheet: 8.1 TFLOPS single precision, 65 TFLOPS mixed precision "
             "(FP16/FP32), 16 GB GDDR6 at 320+ GB/s",
             "NVIDIA Turing GPU architecture whitepaper (TU104): Tesla T4 has 40 SMs",
             f"{_TPD}: three 'NVIDIA Tesla T4 16GB' rows, fp16 41.91 / 42.71 / 41.93, fp32 4.17 / 4.43 / 4.35 "
             "TFLOP/s (medians taken; a 70 W board runs far below its peak)"),
))
_register(_derived_gpu(
    name="rtx2080ti", architecture="turing", description="NVIDIA GeForce RTX 2080 Ti 11GB (reference clocks)",
    # GeForce Turing runs fp16 tensor math with fp32 accumulation -- what cuBLAS uses for
    # torch's fp16 matmuls -- at half the fp16-accumulate rate (107.6).
    peaks_tflops={"float16": 53.8, "float32": 13.4},
    measured_tflops={"float16": 58.58, "float32": 13.04},  # _TPD 'NVIDIA GeForce RTX 2080 Ti 22GB' (yjzxkxdn)
    memory_gb=11, bandwidth_gb_s=616, sm_count=68, memory="gddr6",
    sources=("NVIDIA Turing GPU architecture whitepaper, GeForce RTX 2080 Ti reference board: 13.4 "
             "TFLOPS FP32, 53.8 TFLOPS FP16 tensor with FP32 accumulate (107.6 with FP16 accumulate), "
             "11 GB GDDR6 at 616 GB/s, 68 SMs",
             f"{_TPD}: 'NVIDIA GeForce RTX 2080 Ti 22GB' (the same TU102 with more memory) fp16 58.58, fp32 13.04 "
             "TFLOP/s: above the peak at the rated 1545 MHz boost, which GeForce boards exceed under load"),
))

# --- GA102/GA10x Ampere (GDDR): TF32 and bf16 tensor cores --------------------------------
_register(_derived_gpu(
    name="a10", architecture="ampere", description="NVIDIA A10 24GB (PCIe, 150 W)",
    peaks_tflops={"bfloat16": 125.0, "float16": 125.0, "float32": 62.5, "float32-highest": 31.2},
    memory_gb=24, bandwidth_gb_s=600, sm_count=72, memory="gddr6",  # GA102 + GDDR6, as the A40 measured
    efficiency=POWER_LIMITED_EFFICIENCY, why="mean measured on the power-limited boards T4, L4 and H100 PCIe: "
    "POWER_LIMITED_EFFICIENCY; 150 W cannot sustain the datasheet rate",
    sources=("NVIDIA A10 datasheet: FP32 31.2 TFLOPS, TF32 62.5 | 125* TFLOPS, BF16/FP16 125 | "
             "250* TFLOPS (* with sparsity), 24 GB GDDR6 at 600 GB/s",
             "NVIDIA Ampere GA102 GPU architecture whitepaper: A10 has 72 SMs"),
))
_register(_derived_gpu(
    name="rtx3090", architecture="ampere", description="NVIDIA GeForce RTX 3090 24GB",
    # GeForce GA102: fp16/bf16 tensor math with fp32 accumulation at half the fp16-accumulate rate.
    # That half rate is the one training sees: cuBLAS accumulates torch's fp16 matmuls in fp32,
    # and PyTorch asks cuDNN for fp32 math on half convolutions, AMP's included
    # (pytorch/pytorch@8f4329ea aten/src/ATen/cudnn/Descriptors.h, ConvolutionDescriptor::set:
    # "if (dataType == CUDNN_DATA_HALF) mathType = CUDNN_DATA_FLOAT").
    peaks_tflops={"bfloat16": 71.0, "float16": 71.0, "float32": 35.6, "float32-highest": 35.6},
    # _TPD: three RTX 3090 rows (zzc0208, a-cold-bird, Mightlaus), medians: bf16 76.58, fp16
    # 75.64, fp32 (TF32 off) 24.79; TF32 not measured: fp16 x the GA102 ratio.
    measured_tflops={"bfloat16": 76.58, "float16": 75.64, "float32": 75.64 * _GA102_TF32_OVER_FP16,
                     "float32-highest": 24.79},
    memory_gb=24, bandwidth_gb_s=936, sm_count=82, memory="gddr6",  # GDDR6X on GA102: the A40's GA102 fraction
    sources=("NVIDIA Ampere GA102 GPU architecture whitepaper, GeForce RTX 3090: 35.6 TFLOPS FP32, "
             "35.6 TFLOPS TF32 tensor, 71 TFLOPS FP16/BF16 tensor with FP32 accumulate, 24 GB GDDR6X "
             "at 936 GB/s, 82 SMs",
             f"{_TPD}: three RTX 3090 rows, bf16 76.34 / 76.68 / 76.58, fp16 75.64 / 75.88 / 75.48, fp32 "
             "24.46 / 24.84 / 24.79 TFLOP/s (medians taken): 8 % above the peak at the rated 1695 MHz boost, "
             "which GeForce boards exceed under load",
             f"TF32 achieved = fp16 achieved x {_GA102_TF32_OVER_FP16:.3f}, the TF32/fp16 ratio {_TPD} measured "
             "on two other GA102 GeForce boards (RTX 3080 Ti 38.15/77.83, RTX 3080 32.03/64.10)"),
))

# Workstation and data-center GA102 boards run fp16/bf16 tensor math with fp32 accumulation at
# the full rate (GeForce at half): their datasheet peaks are the ones training sees.
_A6000_MEASURED = {"bfloat16": 123.34, "float16": 120.49, "float32-highest": 23.92}  # _TPD 'NVIDIA RTX A6000' (Mightlaus)
_A6000_PEAKS = {"bfloat16": 154.8, "float16": 154.8, "float32": 77.4, "float32-highest": 38.7}
_GA102_BOARDS = ("NVIDIA Ampere GA102 GPU architecture whitepaper: RTX A6000 has 84 SMs; lamonoai/gpumap@8d5e174f6f25 "
                 "nvidia/GPU.md (Ampere table): A40 and RTX A6000 both 84 SMs (10,752 CUDA cores), 300 W")
_register(_derived_gpu(
    name="a6000", architecture="ampere", description="NVIDIA RTX A6000 48GB (PCIe, 300 W)",
    peaks_tflops=dict(_A6000_PEAKS),
    measured_tflops={**_A6000_MEASURED, "float32": _A6000_MEASURED["float16"] * _GA102_TF32_OVER_FP16},
    memory_gb=48, bandwidth_gb_s=768, sm_count=84, memory="gddr6",  # GA102 + GDDR6, as the A40 measured
    sources=("NVIDIA RTX A6000 datasheet: FP32 38.7 TFLOPS, tensor 309.7 TFLOPS with sparsity (154.8 dense "
             "FP16/BF16 with FP32 accumulate, TF32 77.4 dense), 48 GB GDDR6 at 768 GB/s", _GA102_BOARDS,
             f"{_TPD}: 'NVIDIA RTX A6000' (Mightlaus) bf16 123.34, fp16 120.49, fp32 (TF32 off) 23.92 TFLOP/s",
             f"TF32 achieved = fp16 achieved x {_GA102_TF32_OVER_FP16:.3f}, the TF32/fp16 ratio {_TPD} measured "
             "on two GA102 GeForce boards (RTX 3080 Ti 38.15/77.83, RTX 3080 32.03/64.10)"),
))
# The A40: the same 84-SM GA102, GDDR6 and 300 W as the RTX A6000 at a lower boost clock, with no
# matmul measurement of its own: its peaks times the A6000's measured efficiency per rate key.
_A40_PEAKS = {"bfloat16": 149.7, "float16": 149.7, "float32": 74.8, "float32-highest": 37.4}
_A6000_ACHIEVED = GPU_PRESETS["a6000"].achieved_flops_per_s
_register(_derived_gpu(
    name="a40", architecture="ampere", description="NVIDIA A40 48GB (PCIe, 300 W)",
    peaks_tflops=dict(_A40_PEAKS),
    measured_tflops={k: v * _A6000_ACHIEVED[k] / (_A6000_PEAKS[k] * TFLOPS) for k, v in _A40_PEAKS.items()},
    memory_gb=48, bandwidth_gb_s=696, sm_count=84, memory="gddr6", stream_gb_s=652.0,
    sources=("NVIDIA A40 datasheet: FP32 37.4, TF32 74.8 | 149.6*, BF16/FP16 149.7 | 299.4* TFLOPS (* with "
             "sparsity), 48 GB GDDR6 at 696 GB/s, 300 W", _GA102_BOARDS,
             f"achieved = A40 peak x the RTX A6000's measured achieved/peak per rate key ({_TPD}: 'NVIDIA RTX "
             "A6000' bf16 123.34 of 154.8, fp16 120.49 of 154.8, fp32 23.92 of 38.7; TF32 derived as for the A6000); "
             "no published matmul measurement of the A40",
             _STREAM.format(file="a40", gbs=652, peak=696)),
))

# --- Ada (GDDR): TF32, bf16 and fp8 tensor cores -----------------------------------------
_register(_derived_gpu(
    name="l4", architecture="ada", description="NVIDIA L4 24GB (PCIe, 72 W)",
    peaks_tflops={"bfloat16": 121.0, "float16": 121.0, "float32": 60.0, "float32-highest": 30.3,
                  "float8": 242.5},
    measured_tflops={"bfloat16": 70.89, "float16": 68.83, "float32": 31.88, "float32-highest": 15.38},
    memory_gb=24, bandwidth_gb_s=300, sm_count=58, memory="gddr6-ada",
    sources=("NVIDIA L4 datasheet: FP32 30.3 TFLOPS, TF32 120*, BF16/FP16 242*, FP8 485* TFLOPS "
             "(* with sparsity; dense is half), 24 GB GDDR6 at 300 GB/s",
             "NVIDIA Ada GPU architecture whitepaper: L4 has 58 SMs",
             f"{_TPD}: 'NVIDIA L4' (Arcannite) bf16 70.89, fp16 68.83, tf32 31.88, fp32 15.38 TFLOP/s "
             "(a 72 W board runs far below its peak)"),
))
_register(_derived_gpu(
    name="l40s", architecture="ada", description="NVIDIA L40S 48GB (PCIe, 350 W)",
    peaks_tflops={"bfloat16": 362.0, "float16": 362.0, "float32": 183.0, "float32-highest": 91.6,
                  "float8": 733.0},
    measured_tflops={"bfloat16": 269.15, "float16": 264.02, "float32": 269.15 * _AD10X_TF32_OVER_BF16,
                     "float32-highest": 46.88},
    memory_gb=48, bandwidth_gb_s=864, sm_count=142, memory="gddr6-ada",
    sources=(f"{_SPEC}: L40S fp32 91.6, tf32 183, bf16/fp16 362, fp8 733 TFLOPS",
             "NVIDIA L40S datasheet: 48 GB GDDR6 at 864 GB/s",
             "NVIDIA Ada GPU architecture whitepaper: L40S has 142 SMs",
             f"{_TPD}: 'NVIDIA L40S' (Mightlaus) bf16 269.15, fp16 264.02, fp32 46.88 TFLOP/s; TF32 not "
             f"measured: bf16 x {_AD10X_TF32_OVER_BF16:.3f}, the TF32/bf16 ratio measured on the L4 (AD104)"),
))

_register(_derived_gpu(
    name="rtx4090", architecture="ada", description="NVIDIA GeForce RTX 4090 24GB",
    # GeForce Ada: fp16/bf16 tensor math with fp32 accumulation -- what training uses (see rtx3090) --
    # at half the fp16-accumulate rate (330.3); TF32 at the FP32 CUDA-core rate.
    # FP8 with fp32 accumulation (what FP8 training GEMMs run), at half the fp16-accumulate 660.6 too.
    peaks_tflops={"bfloat16": 165.2, "float16": 165.2, "float32": 82.6, "float32-highest": 82.6,
                  "float8": 330.3},
    # _TPD: the six 24 GB RTX 4090 rows (48 GB and 4090 D boards left out), medians; TF32 one row.
    measured_tflops={"bfloat16": 165.26, "float16": 166.87, "float32": 85.65, "float32-highest": 54.255},
    memory_gb=24, bandwidth_gb_s=1008, sm_count=128, memory="gddr6-ada",  # GDDR6X on AD102: the L40's AD102 fraction
    sources=("NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090: 128 SMs, 82.6 TFLOPS FP32, 82.6 TF32 "
             "tensor, 165.2 TFLOPS FP16/BF16 tensor with FP32 accumulate (330.3 with FP16 accumulate), dense, "
             "24 GB GDDR6X at 1,008 GB/s (the same figures: lamonoai/gpumap@8d5e174f6f25 nvidia/GPU.md, Ada table)",
             "NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090: peak FP8 tensor 660.6 TFLOPS with FP16 "
             "accumulate, 330.3 with FP32 accumulate, dense (lamonoai/gpumap@8d5e174f6f25 nvidia/GPU.md, Ada "
             "table: FP8 661 dense, the FP16-accumulate figure)",
             f"{_TPD}: six RTX 4090 24GB rows (Charming, sd0ric4, HuanLin, a-cold-bird, CharonlYMY, xiaoxi68), "
             "bf16 170.06 / 173.31 / 162.39 / 163.09 / 165.71 / 164.81, fp16 165.08 / 171.06 / 162.35 / 167.80 / "
             "165.94 / 168.38, fp32 (TF32 off) 55.01 / 54.77 / 46.48 / 54.67 / 51.57 / 53.84 TFLOP/s (medians "
             "taken), tf32 85.65 (xiaoxi68): at or above the peak at the rated 2520 MHz boost, which GeForce boards "
             "exceed under load"),
))

# --- GA100 Ampere (HBM) --------------------------------------------------------------
_A100_PEAKS = {"bfloat16": 312 * TFLOPS, "float16": 312 * TFLOPS, "float32": 156 * TFLOPS,
               "float32-highest": 19.5 * TFLOPS}  # H020 (bf16, tf32 in its notes); spec table fp32
_A100_SOURCES = (f"{_SPEC}: A100 SXM and PCIe both fp32 19.5, tf32 156, bf16/fp16 312 TFLOPS",
                 "NVIDIA A100 Tensor Core GPU architecture whitepaper: 108 SMs on A100")
# The SXM4 boards: the same GA100 at the same 400 W and clocks (one column of peaks in the datasheet);
# the 40 GB one has HBM2 at 1,555 GB/s, streaming as measured on a 40 GB A100 (gpu-stream/a100_40).
_A100_SXM = {
    "a100": (80, 2039, 1732, "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM: 80 GB HBM2e, 2,039 GB/s)",
             _STREAM.format(file="a100_80", gbs=1732, peak=2039) + " (the repository's plot.py peak list gives "
             "2,039 GB/s for its A100 80GB: the SXM4 board)"),
    "a100-40gb": (40, 1555, 1381, "NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM: 40 GB HBM2, 1,555 GB/s, "
                  "400 W, the same peaks as the 80 GB SXM)",
                  _STREAM.format(file="a100_40", gbs=1381, peak=1555) + " (a 40 GB A100; both 40 GB boards have "
                  "the same HBM2 at 1,555 GB/s)"),
}
for _name, (_mem_gb, _bw, _stream, _mem_source, _stream_source) in _A100_SXM.items():
    _register(GpuSpec(
        name=_name,
        description=f"NVIDIA A100 SXM4 {_mem_gb}GB",
        architecture="ampere",
        peak_flops_per_s=dict(_A100_PEAKS),
        achieved_flops_per_s={
            "bfloat16": 271.2 * TFLOPS,  # H013 (mamf-finder best shape)
            "float16": 271.2 * TFLOPS,  # H013, same tensor-core rate as bf16
            "float32": 271.2 * _A100_TF32_OVER_BF16 * TFLOPS,  # TF32/bf16 measured on an A100 PCIe (_TPD)
            "float32-highest": 19.18 * TFLOPS,  # _TPD 'NVIDIA A100 SXM4 80GB' (aiguoliuguo) fp32
        },
        memory_bytes=_mem_gb * _GB,
        memory_bandwidth_bytes_per_s=_bw * _GB,
        stream_bandwidth_bytes_per_s=_stream * _GB,  # gpu-stream, scale
        sm_count=108,
        sources=(
            "hardware.csv H013: A100 SXM bf16 matmul 271.2 TFLOP/s achieved (mamf-finder)",
            "hardware.csv H020: A100 SXM dense peak bf16 312, tf32 156 TFLOP/s",
            _mem_source,
            f"{_TPD}: 'NVIDIA A100 SXM4 80GB' fp32 (TF32 off) 19.18, bf16 264.53 TFLOP/s (H013's 271.2 kept)",
            f"TF32 achieved = bf16 achieved x {_A100_TF32_OVER_BF16:.3f}, the TF32/bf16 ratio {_TPD} measured on "
            "'NVIDIA A100-PCIE-40GB' (108.32 / 234.14)",
            _stream_source,
        ) + _A100_SOURCES,
    ))
# Streaming: the 40 GB board measured (1381 GB/s); the 80 GB PCIe board (HBM2e) at the 80 GB SXM4
# board's measured fraction 1732 / 2039.
_A100_PCIE_STREAM = {
    "a100-pcie-40gb": (1381.0, _STREAM.format(file="a100_40", gbs=1381, peak=1555)),
    "a100-pcie-80gb": (1935 * 1732.0 / 2039.0, "streaming bandwidth = peak x 1732 / 2039 = 0.849, the fraction "
                       + _STREAM.format(file="a100_80", gbs=1732, peak=2039) + " (A100 80GB SXM4, the same HBM2e)"),
}
for _name, _mem_gb, _bw in (("a100-pcie-40gb", 40, 1555), ("a100-pcie-80gb", 80, 1935)):
    _register(GpuSpec(
        name=_name,
        description=f"NVIDIA A100 PCIe {_mem_gb}GB",
        architecture="ampere",
        peak_flops_per_s=dict(_A100_PEAKS),
        achieved_flops_per_s={
            "bfloat16": 252.9 * TFLOPS,  # H014 (mamf-finder best shape, A100 PCIe)
            "float16": 252.9 * TFLOPS,  # H014, same tensor-core rate as bf16
            "float32": 252.9 * _A100_TF32_OVER_BF16 * TFLOPS,
            "float32-highest": 17.56 * TFLOPS,  # _TPD 'NVIDIA A100-PCIE-40GB' (yjzxkxdn) fp32
        },
        memory_bytes=_mem_gb * _GB,
        memory_bandwidth_bytes_per_s=_bw * _GB,
        stream_bandwidth_bytes_per_s=_A100_PCIE_STREAM[_name][0] * _GB,
        sm_count=108,
        sources=(
            "hardware.csv H014: A100 PCIe bf16 matmul 252.9 TFLOP/s achieved (mamf-finder)",
            "NVIDIA A100 Tensor Core GPU datasheet (A100 PCIe: 40 GB HBM2 at 1,555 GB/s; 80 GB HBM2e "
            "at 1,935 GB/s)",
            f"{_TPD}: 'NVIDIA A100-PCIE-40GB' fp32 (TF32 off) 17.56, tf32 108.32, bf16 234.14 TFLOP/s (H014's "
            "252.9 kept); TF32 achieved = bf16 achieved x their TF32/bf16 ratio",
            _A100_PCIE_STREAM[_name][1],
        ) + _A100_SOURCES,
    ))

# --- GH100 Hopper --------------------------------------------------------------------
_H100_SXM_DATASHEET = (
    "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: 80 GB HBM3, 3.35 TB/s; "
    "bf16/fp16 1,979 TFLOPS and fp8 3,958 TFLOPS with sparsity, i.e. 989 / 1,979 dense)"
)
_HOPPER_SMS = "NVIDIA H100 Tensor Core GPU architecture whitepaper: 132 SMs on H100 SXM5, 114 on H100 PCIe"
_H100_PEAKS = {"bfloat16": 989 * TFLOPS, "float16": 989 * TFLOPS, "float32": 494.5 * TFLOPS,
               "float32-highest": 67 * TFLOPS, "float8": 1979 * TFLOPS}  # H021, H018 notes, spec table


_MSMF = ("MAMF & MSMF table (stas00/ml-engineering@0359db89793c313e90e4f8a8bc8a2b1514ba00ae "
         "compute/accelerator/README.md, 'Maximum Achievable and Sustainable Matmul FLOPS comparison table')")
GH100_SUSTAINED_TFLOPS = {"bfloat16": 755.0, "float8": 1354.0}
"""Matmul rate a 700 W GH100 *sustains*, TFLOP/s: the MSMF of the H200 SXM in :data:`_MSMF` (BF16 row,
note 3: 755 at 1536x2816x6144, ~685-688 W, 1860-1918 MHz; FP8 row, note 11: 1354 at 1536x2816x10240),
each the median GPU of an 8-GPU node measured while the other seven run a continuous matmul
(``mamf-finder-all-gpus.py``, 'Siblings' yes), after the SM clock has settled at the power cap. The
same table's burst rate (MAMF) of that H200 is 850 / 1525 at 1980 MHz and ~150-170 W: a training step
holds the GPU at its power limit, so the sustained rate is the one it runs at. Taken for every 700 W
GH100 preset (H100 SXM, H800, H200, GH200 96 GB): the same 132-SM die, clocks and power limit (the
H100 SXM itself has no MSMF row: '-' in the table). It replaces mamf-finder's earlier figures
(hardware.csv H015 794.5 and H018 1402.6 on the H100 SXM, H019 1453.4 on the H200: a mean of 100
iterations of one shape after 50 warm-up, about 20 ms at the best shape 2048x2048x13312, the kind of
short run the tool's own README now calls the boost-clock burst) and the community torch.mm benchmark's 790.29 on the H200 (30
iterations). The A100 needs no such change: its old figure is already the sustained one (A100 PCIe
MAMF 252.9 in H014 against an MSMF of 258 in the same table)."""

_H100_FP32_EFF = (51.88 + 52.11) / 2 / 67.0  # _TPD two 'NVIDIA H100 80GB HBM3' rows, fp32 / spec-table peak


def _hopper(name: str, description: str, bf16_achieved: float, fp8_achieved: float | None,
            memory_gb: float, bandwidth_tb_s: float, sources: tuple[str, ...],
            peaks: dict[str, float] = _H100_PEAKS, sm_count: int = 132,
            measured: dict[str, float] | None = None, memory: str = "hbm2e",
            stream_tb_s: float | None = None) -> GpuSpec:
    """A GH100 preset: bf16 (and fp8) measured, fp16 = bf16, TF32 = bf16 x the TF32/bf16 ratio
    measured on an H100 SXM, full FP32 at the H100 SXM's measured efficiency; ``measured``
    (FLOP/s, cited in ``sources``) replaces any of them. Streaming bandwidth: ``stream_tb_s``
    (measured, cited) or the peak times :data:`STREAM_FRACTION` of ``memory`` (HBM3 boards take
    the HBM2e fraction measured on the H100 PCIe: see :data:`STREAM_FRACTION`)."""
    achieved = {"bfloat16": bf16_achieved, "float16": bf16_achieved,
                "float32": bf16_achieved * _HOPPER_TF32_OVER_BF16,
                "float32-highest": peaks["float32-highest"] * _H100_FP32_EFF}
    if fp8_achieved is not None:
        achieved["float8"] = fp8_achieved
    achieved.update(measured or {})
    achieved.update(_fp8_achieved(peaks, achieved))
    stream = stream_tb_s if stream_tb_s is not None else bandwidth_tb_s * STREAM_FRACTION[memory]
    return GpuSpec(name=name, description=description, architecture="hopper", peak_flops_per_s=dict(peaks),
                   achieved_flops_per_s=achieved, memory_bytes=memory_gb * _GB,
                   memory_bandwidth_bytes_per_s=bandwidth_tb_s * _TB, stream_bandwidth_bytes_per_s=stream * _TB,
                   sm_count=sm_count,
                   sources=sources + _stream_note(memory, stream_tb_s) + (_HOPPER_SMS, f"unless measured here: TF32 achieved = bf16 achieved x "
                                      f"{_HOPPER_TF32_OVER_BF16:.3f} and FP32 = peak x {_H100_FP32_EFF:.3f}, both "
                                      f"measured on an H100 SXM ({_TPD}: tf32 402.15 / bf16 797.51; fp32 51.88, "
                                      "52.11 of 67)"))


_register(_hopper(
    "h100", "NVIDIA H100 SXM5 80GB", GH100_SUSTAINED_TFLOPS["bfloat16"] * TFLOPS,
    GH100_SUSTAINED_TFLOPS["float8"] * TFLOPS, 80, 3.35,
    (f"{_MSMF}: H200 SXM (same 700 W GH100) bf16 755, fp8 1354 TFLOP/s sustained (MSMF, siblings busy), "
     "taken for the H100 SXM (GH100_SUSTAINED_TFLOPS); its burst figures hardware.csv H015 bf16 794.5 and "
     "H018 fp8 1402.6 (mamf-finder, peak 1979) replaced",
     "hardware.csv H021: H100 SXM dense peak bf16 989, tf32 494.5 TFLOP/s",
     f"{_SPEC}: H100 SXM fp32 67 TFLOPS", _H100_SXM_DATASHEET,
     f"{_TPD}: 'NVIDIA H100 80GB HBM3' (HaxxorCialtion) tf32 402.15, bf16 797.51 TFLOP/s measured (30 "
     "iterations: a burst rate, so TF32 = the sustained bf16 x their ratio, not 402.15 itself)"),
))
# A 350 W board: it measures 66 % of its peak where the 700 W SXM measures 80 %.
_register(_hopper(
    "h100-pcie", "NVIDIA H100 PCIe 80GB", 495.93 * TFLOPS, None, 80, 2.0,
    (f"{_SPEC}: H100 PCIe fp32 51, tf32 378, bf16/fp16 756, fp8 1513 TFLOPS",
     "NVIDIA H100 datasheet (H100 PCIe: 80 GB HBM2e at 2 TB/s)",
     f"{_TPD}: 'NVIDIA H100 PCIe' (htdxd) bf16 495.93, fp16 458.03, tf32 240.43, fp32 36.95 TFLOP/s; "
     "'NVIDIA H800 PCIe' (the same board for China) 503.83, 478.23, 242.83, 37.77 agrees",
     _STREAM.format(file="h100_pcie", gbs=1704, peak=2000)),
    peaks={"bfloat16": 756 * TFLOPS, "float16": 756 * TFLOPS, "float32": 378 * TFLOPS,
           "float32-highest": 51 * TFLOPS, "float8": 1513 * TFLOPS},
    sm_count=114,
    measured={"float16": 458.03 * TFLOPS, "float32": 240.43 * TFLOPS, "float32-highest": 36.95 * TFLOPS},
    stream_tb_s=1.704,
))
_register(_hopper(
    "h100-nvl", "NVIDIA H100 NVL 94GB (one GPU of the NVLink-bridged pair)", 835.5 * TFLOPS * _H100_EFF,
    None, 94, 3.9,
    ("NVIDIA H100 datasheet (H100 NVL: FP32 60, TF32 835*, BF16/FP16 1,671*, FP8 3,341* TFLOPS "
     "(* with sparsity; dense is half), 94 GB HBM3 at 3.9 TB/s)",
     "bf16 achieved = peak x the H100 SXM efficiency H015/H021 (same GH100 die, no NVL measurement)"),
    peaks={"bfloat16": 835.5 * TFLOPS, "float16": 835.5 * TFLOPS, "float32": 417.5 * TFLOPS,
           "float32-highest": 60 * TFLOPS, "float8": 1670.5 * TFLOPS},
))
_register(_hopper(
    # The 96 GB HBM3 superchip has no matmul measurement of its own: H016 (828.6) is the 900 W
    # 141 GiB HBM3e version. This one takes the 700 W GH100's sustained rate (GH100_SUSTAINED_TFLOPS): the
    # same 132-SM GH100 with HBM3, at the 700 W that Lambda's table lists for its GH200 96GB system.
    "gh200", "NVIDIA GH200 Grace Hopper (H100 GPU, 96GB HBM3)", GH100_SUSTAINED_TFLOPS["bfloat16"] * TFLOPS, None,
    96, 4.0,
    (f"{_MSMF}: H200 SXM bf16 755 TFLOP/s sustained (GH100_SUSTAINED_TFLOPS), taken for the 96 GB "
     "HBM3 GH200 at 700 W, which has no measurement of its own; hardware.csv H016 (GH200 828.6 TFLOP/s) is the "
     "'900W 141GiB HBM3e version' (stas00/ml-engineering@744d01e18b79 compute/accelerator/README.md, MAMF table)",
     "lambdal/deeplearning-benchmark@aa5addb6a53675a649a80036dad548f1c27cbcc4 pytorch/csv_v1_v2/"
     "pytorch-train-throughput-fp16.csv: 'LambdaCloud 1x GH200 96GB' listed at 700 W, as H100 SXM",
     f"{_SPEC}: GH200 SXM same peaks as H100 SXM",
     "NVIDIA GH200 Grace Hopper Superchip datasheet: 96 GB HBM3 at 4 TB/s (a 144 GB HBM3e at 4.9 TB/s "
     "version also exists)"),
))
# H200: the same GH100 die and clocks as H100 SXM, so the same dense peaks (H021; H019
# notes the same fp8 peak 1979 as H018).
_register(_hopper(
    "h200", "NVIDIA H200 SXM 141GB", GH100_SUSTAINED_TFLOPS["bfloat16"] * TFLOPS,
    GH100_SUSTAINED_TFLOPS["float8"] * TFLOPS, 141, 4.8,
    (f"{_MSMF}: H200 SXM bf16 755, fp8 1354 TFLOP/s sustained (MSMF, siblings busy; GH100_SUSTAINED_TFLOPS); "
     "its burst figures hardware.csv H019 fp8 1453.4 (peak 1979) and the torch.mm bf16 790.29 below replaced",
     "hardware.csv H021: H100 SXM dense peaks (H200 uses the same GH100 die)",
     f"{_TPD}: 'NVIDIA H200' (Mightlaus) bf16 790.29, fp16 759.40, fp32 51.34 TFLOP/s",
     "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: 141 GB HBM3e, 4.8 TB/s, same "
     "compute as H100 SXM)", _STREAM.format(file="h200", gbs=3165, peak=4800)),
    measured={"float16": 759.40 * TFLOPS, "float32-highest": 51.34 * TFLOPS}, memory="hbm3e", stream_tb_s=3.165,
))

# H800: the H100 SXM5 for China, the same 132-SM GH100 at 700 W with NVLink cut to 400 GB/s (a
# topology matter, not the GPU's) and FP64 to 1 TFLOPS; no matmul measurement of its own, so the
# 700 W GH100's sustained rates (GH100_SUSTAINED_TFLOPS) and the H100 SXM's TF32/bf16 ratio.
_register(_hopper(
    "h800", "NVIDIA H800 SXM5 80GB", GH100_SUSTAINED_TFLOPS["bfloat16"] * TFLOPS,
    GH100_SUSTAINED_TFLOPS["float8"] * TFLOPS, 80, 3.35,
    ("deepseek-ai/FlashMLA@f6894dbf015a docs/20250422-new-kernel-deep-dive.md: 'An NVIDIA H800 SXM5 GPU has a "
     "peak memory bandwidth of 3.35 TB/s and peak FLOPs of 990 TFlops' (bf16 dense, the H100 SXM's 989)",
     "DeepSeek-V3 technical report (arXiv:2412.19437) Sec. 3.5.1: 132 SMs on the H800",
     "aiwiki.ai/wiki/nvidia_h800: the H100's GH100 silicon with chip-to-chip bandwidth (NVLink 400 GB/s) and "
     "FP64 cut below the October 2022 export thresholds; 80 GB HBM3",
     f"{_MSMF}: H200 SXM bf16 755, fp8 1354 TFLOP/s sustained (GH100_SUSTAINED_TFLOPS), taken for the "
     "H800 (same die, SMs, clocks and power), which has no measurement of its own",
     "hardware.csv H021: H100 SXM dense peaks bf16 989, tf32 494.5", f"{_SPEC}: H100 SXM fp32 67 TFLOPS",
     f"{_TPD}: 'NVIDIA H100 80GB HBM3' (HaxxorCialtion) tf32 402.15 / bf16 797.51 TFLOP/s measured, their ratio "
     "taken as for the H100 SXM"),
))
# H20: the China-market Hopper with 78 SMs, 96 GB HBM3 at 4.0 TB/s and 400 W; compute capped at
# 148 TFLOPS dense bf16, which the community benchmark reaches at 96 % (both rows agree). Fused attention
# is costed as "hopper-h20": its tensor cores are capped, its exponential units are not, and a published
# H20 attention benchmark gives its own ceilings (dpsim.workload.attention_rates.HEAD_DIM_HALF_SCALE).
_register(replace(_hopper(
    "h20", "NVIDIA H20 96GB (SXM, 400 W)", 142.25 * TFLOPS, None, 96, 4.0,
    ("zangshuxian.com/new/674733024499207168: H20 has 78 SMs (Geekbench 6), FP16 dense 148, TF32 74, FP32 44, "
     "INT8 296 TFLOPS, 4.0 TB/s",
     "willitrunai.com/es/gpus/h20-96gb: 96 GB HBM3 at 4,000 GB/s, 148 TFLOPS FP16, 296 INT8 TOPS, 400 W",
     "lamonoai/gpumap@8d5e174f6f25 nvidia/GPU.md (Hopper table), HGX H20: 78 SMs, 96 GB HBM3, FP32 44, "
     "FP8 296 TFLOPS, 400 W",
     f"{_TPD}: 'NVIDIA H20' (xiaoxi68) bf16 142.25, fp16 142.09, tf32 71.80, fp32 (TF32 off) 31.99 TFLOP/s; "
     "'NVIDIA H20 96GB' (Charming) bf16 141.86, fp16 141.73, fp32 31.95 agrees"),
    peaks={"bfloat16": 148 * TFLOPS, "float16": 148 * TFLOPS, "float32": 74 * TFLOPS,
           "float32-highest": 44 * TFLOPS, "float8": 296 * TFLOPS},
    sm_count=78,
    measured={"float16": 142.09 * TFLOPS, "float32": 71.80 * TFLOPS, "float32-highest": 31.99 * TFLOPS},
), attention_generation="hopper-h20"))

# --- Blackwell -------------------------------------------------------------------------
_register(GpuSpec(
    name="b200",
    description="NVIDIA B200 SXM (HGX/DGX B200) 180GB",
    architecture="blackwell",
    peak_flops_per_s={
        "bfloat16": 2250 * TFLOPS,  # H022
        "float16": 2250 * TFLOPS,  # HGX B200 spec: fp16 = bf16
        "float32": 1125 * TFLOPS,  # H022 notes: TF32 1125.0 dense
        "float32-highest": 80 * TFLOPS,  # spec table: B200 SXM fp32 80
        "float8": 4500 * TFLOPS,  # spec table
    },
    achieved_flops_per_s={
        "bfloat16": 1745.0 * TFLOPS,  # H017
        "float16": 1745.0 * TFLOPS,  # H017, same tensor-core rate as bf16
        "float32": 1125 * TFLOPS * _B200_EFF,  # 872.5, H022 TF32 x H017/H022
        "float32-highest": 80 * TFLOPS * _B200_EFF,
        "float8": 3432.5 * TFLOPS,  # MAMF table, B200 SXM fp8 row
    },
    # 192 GB of HBM3e was announced (8 stacks x 24 GB); shipping HGX/DGX B200 expose
    # 180 GB per GPU (DGX B200: 1,440 GB for 8 GPUs).
    memory_bytes=180 * _GB,
    memory_bandwidth_bytes_per_s=8 * _TB,  # NVIDIA B200: 8 TB/s HBM3e per GPU
    stream_bandwidth_bytes_per_s=8 * _TB * STREAM_FRACTION["hbm3e"],  # HBM3e as the H200 measured
    # "a B200 SKU also reads 148" SMs (stas00/ml-engineering@744d01e18b79 training/performance/README.md,
    # on SM counts by SKU); wave quantization needs it.
    sm_count=148,
    sources=(
        "hardware.csv H017: B200 SXM bf16 matmul 1745.0 TFLOP/s achieved (mamf-finder)",
        "hardware.csv H022: B200 SXM dense peak bf16 2250, tf32 1125 TFLOP/s",
        f"{_SPEC}: B200 SXM fp32 80, fp8 4500 TFLOPS; {_MAMF}: B200 fp8 3432.5",
        "NVIDIA DGX B200 user guide: 8 x B200 with 1,440 GB total GPU memory (180 GB each)",
        "NVIDIA Blackwell B200 specifications: 8 TB/s HBM3e bandwidth per GPU (192 GB as "
        "announced, 180 GB usable on HGX/DGX B200)",
        "stas00/ml-engineering@744d01e18b79 training/performance/README.md: a B200 SKU has 148 SMs",
    ) + _stream_note("hbm3e", None),
))
_register(GpuSpec(
    name="gb200",
    description="NVIDIA GB200 (one B200 GPU of a Grace Blackwell superchip, NVL72) 186GB",
    architecture="blackwell",
    peak_flops_per_s={"bfloat16": 2500 * TFLOPS, "float16": 2500 * TFLOPS, "float32": 1250 * TFLOPS,
                      "float32-highest": 80 * TFLOPS, "float8": 5000 * TFLOPS},  # spec table, per GPU
    achieved_flops_per_s={
        "bfloat16": 1822.0 * TFLOPS, "float16": 1822.0 * TFLOPS,  # MAMF table GB200 SXM row
        "float32": 1250 * TFLOPS * _GB200_EFF, "float32-highest": 80 * TFLOPS * _GB200_EFF,
        "float8": 3615.6 * TFLOPS,  # MAMF table GB200 fp8 row
    },
    memory_bytes=186 * _GB,  # GB200 NVL72: up to 13.4 TB HBM3e for 72 GPUs
    memory_bandwidth_bytes_per_s=8 * _TB,  # GB200 NVL72: 576 TB/s for 72 GPUs
    stream_bandwidth_bytes_per_s=8 * _TB * STREAM_FRACTION["hbm3e"],  # HBM3e as the H200 measured
    sm_count=None,
    sources=(
        f"{_SPEC}: GB200 SXM per chip fp32 80, tf32 1250, bf16/fp16 2500, fp8 5000 TFLOPS",
        f"{_MAMF}: GB200 SXM bf16 1822.0, fp8 3615.6 TFLOP/s",
        "NVIDIA GB200 NVL72 specifications: 72 Blackwell GPUs, up to 13.4 TB HBM3e (186 GB each) "
        "at 576 TB/s (8 TB/s each)",
        "TF32/FP32 achieved = peak x the bf16 efficiency 1822/2500",
    ) + _stream_note("hbm3e", None),
))

# --- Blackwell Ultra (B300, GB300) ------------------------------------------------------
# The same dual-die Blackwell SMs and tensor cores as B200/GB200, reworked for NVFP4 (dense FP4
# 1.5x) at the cost of INT8 and FP64, with 12-high HBM3e stacks (288 GB) and up to 1,400 W. Its
# dense BF16/FP8/TF32 peaks are those of the Blackwell part it follows (HGX B300 = HGX B200, GB300
# NVL72 = GB200 NVL72) and none has a published matmul measurement, so each takes its
# predecessor's measured rates; the fits keyed by architecture (GEMM surface, FP8 recipes, NCCL
# tables) apply as "blackwell". Fused attention is costed as "blackwell-ultra" (its own cuDNN rows,
# dpsim.workload.attention_rates): the special function units that run softmax's exponentials do
# twice Blackwell's work per second (_SFU_EX2). Nothing is fitted here. FP4 has no rate key (MATMUL_DTYPES).
_BLACKWELL_ULTRA = ("NVIDIA Technical Blog, 'Inside NVIDIA Blackwell Ultra: The Chip Powering the AI Factory Era' "
                    "(developer.nvidia.com/blog/inside-nvidia-blackwell-ultra-the-chip-powering-the-ai-factory-era): "
                    "160 SMs in the full implementation, 15 PFLOPS dense NVFP4, 288 GB HBM3e (8 stacks) at 8 TB/s, "
                    "fifth-generation NVLink 1.8 TB/s per GPU, 1,400 W")
_VERDA_GB300 = ("verda.com/blog/gb300-nvl72-architecture, 'Per-GPU specifications' table (dense), column {col}")
_SFU_EX2 = ("NVIDIA Technical Blog, 'Making Softmax More Efficient with NVIDIA Blackwell Ultra' "
            "(developer.nvidia.com/blog/making-softmax-more-efficient-with-nvidia-blackwell-ultra/): Blackwell Ultra "
            "doubles the SFU (MUFU.EX2) throughput of Blackwell; verda.com/blog/gb300-nvl72-architecture, 'Per-GPU "
            "specifications' table, row 'Attention acceleration (SFU EX2)': 10.7 TeraExponentials/s on GB300 and B300, "
            "5 on GB200 and B200")


def _blackwell_ultra(base: str, *, name: str, description: str, memory_gb: float, fp32_tflops: float,
                     measured: str, sources: tuple[str, ...]) -> GpuSpec:
    """A Blackwell Ultra preset: ``base``'s peaks and measured rates (``measured`` cites them), its
    own memory, its own CUDA-core FP32 peak (achieved at ``base``'s bf16 efficiency), and fused
    attention costed as Blackwell Ultra's (twice the exponential units, :data:`_SFU_EX2`)."""
    spec = GPU_PRESETS[base]
    efficiency = spec.achieved_flops_per_s["bfloat16"] / spec.peak_flops_per_s["bfloat16"]
    fp32 = fp32_tflops * TFLOPS
    return replace(
        spec, name=name, description=description, memory_bytes=memory_gb * _GB, sm_count=None,
        attention_generation="blackwell-ultra",
        peak_flops_per_s={**spec.peak_flops_per_s, "float32-highest": fp32},
        achieved_flops_per_s={**spec.achieved_flops_per_s, "float32-highest": fp32 * efficiency},
        sources=sources + (_BLACKWELL_ULTRA, _SFU_EX2,
                           f"achieved rates: the {base} preset's ({measured}), same tensor cores and dense peaks; no "
                           f"published matmul measurement of {name}; TF32 and FP32 achieved = peak x {base}'s bf16 "
                           f"efficiency {efficiency:.3f}",
                           "SMs enabled on the product not published (160 is the full implementation): no wave "
                           "quantization") + _stream_note("hbm3e", None),
    )


_register(_blackwell_ultra(
    "gb200", name="gb300",
    description="NVIDIA GB300 (one Blackwell Ultra GPU of a Grace Blackwell Ultra superchip, NVL72) 279GB",
    # 288 GB announced; 279 usable, as GB200 exposes 186 of its 192.
    memory_gb=279, fp32_tflops=80, measured=f"{_MAMF}: GB200 SXM bf16 1822.0, fp8 3615.6 TFLOP/s",
    sources=(_VERDA_GB300.format(col="GB300") + ": FP4 15, FP8 5, FP16/BF16 2.5, TF32 1.25, FP32 0.080 PFLOPS; "
             "279 GB HBM3E at 8 TB/s; 1.4 kW",
             "verda.com/blog/gb300-nvl72-architecture, 'GB300 NVL72 rack-aggregate performance' (dense): FP16/BF16 "
             "180, FP8 360 PFLOPS, 576 TB/s, NVLink 130 TB/s for 72 GPUs (2.5, 5 PFLOPS and 8 TB/s each; the "
             "GB200 NVL72's per-GPU BF16/FP8 peaks, as the gb200 preset's spec table)",
             "glennklockwood.com/garden/processors/B300, 'GB300 NVL72' (as NVIDIA advertises it): 360 PF FP8, 20 TB HBM "
             "at 576 TB/s, 130 TB/s NVLink for 72 GPUs (278 GB, 8 TB/s and 1.8 TB/s each)"),
))
_register(_blackwell_ultra(
    "b200", name="b300", description="NVIDIA B300 SXM (HGX/DGX B300, Blackwell Ultra) 270GB",
    # 288 GB announced; 270 usable, as HGX/DGX B200 exposes 180 of its 192.
    memory_gb=270, fp32_tflops=75,
    measured=f"hardware.csv H017: B200 SXM bf16 1745.0 TFLOP/s (mamf-finder); {_MAMF}: B200 fp8 3432.5",
    sources=("glennklockwood.com/garden/processors/B300, 'Performance' table (HGX B300, TFLOPS): matrix TF32 1125, "
             "FP16/BF16 2250, FP8 4500, dense FP4 13125; FP32 (VFMA) 75; 288 GB HBM3e, 8 TB/s",
             "fibermall.com/blog/?p=17161, HGX B300 NVL16 specifications table (8 packages, with sparsity): FP8 72, "
             "FP16/BF16 36, TF32 18 PFLOPS; FP32 600 TFLOPS; up to 2.3 TB: the HGX B200 column's compute",
             _VERDA_GB300.format(col="B300") + ": FP16/BF16 2.25, FP8 4.5 PFLOPS; 270 GB HBM3E; "
             "7.7 TB/s there, 8 TB/s in NVIDIA's blog (below), taken as for b200"),
))

# GeForce Blackwell (GB202, sm_120): not a small B200 -- no tensor memory, the older MMA path,
# and fp16/bf16 with fp32 accumulation at half the fp16-accumulate rate, as on GeForce Ada.
_register(_derived_gpu(
    name="rtx5090", architecture="blackwell", description="NVIDIA GeForce RTX 5090 32GB",
    peaks_tflops={"bfloat16": 209.5, "float16": 209.5, "float32": 104.8, "float32-highest": 104.8},
    # _TPD: the four RTX 5090 desktop rows (5090 D and laptop boards left out), medians; TF32 one row.
    measured_tflops={"bfloat16": 238.04, "float16": 229.52, "float32": 122.19, "float32-highest": 68.365},
    # GDDR7 has no streaming measurement: the newest GDDR board measured (L40, GDDR6 on AD102) stands in.
    memory_gb=32, bandwidth_gb_s=1792, sm_count=170, memory="gddr6-ada",
    sources=("GeForce RTX 5090 specifications as tabulated by Linux Format, May 2025 (Jarred Walton, "
             "pocketmags.com): GB202, 170 SMs, 21,760 shaders at a 2,407 MHz boost, 104 TFLOPS FP32, 838 TFLOPS "
             "FP16 (sparse, FP16 accumulate), 32 GB GDDR7 on 512 bits at 1,792 GB/s, 575 W",
             "lamonoai/gpumap@8d5e174f6f25 nvidia/GPU.md (Blackwell table), GeForce RTX 5090, dense: FP16 tensor "
             "419 TFLOPS with FP16 accumulate, 210 with FP32 accumulate, BF16 (FP32 accumulate) 210, TF32 105; "
             "209.5 and 104.8 are 170 SMs x 2,407 MHz x 512 and 256 FLOP per clock",
             "QuantumDrizzy/BLACKWALL@71dc975de3d4 README.md: on sm_120 (RTX 5060 Ti) cuBLAS runs BF16/FP16 with "
             "FP32 accumulate at 46.4 TFLOP/s and FP16 with FP16 accumulate at 85.7: the half rate",
             f"{_TPD}: four RTX 5090 rows (HuanLin, sakmist, TendoArisu, mfzzf), bf16 236.03 / 242.18 / 221.65 / "
             "240.05, fp16 224.41 / 237.63 / 220.90 / 234.63, fp32 (TF32 off) 69.16 / 67.57 / 63.99 / 70.47 TFLOP/s "
             "(medians taken), tf32 122.19 (mfzzf): up to 17 % above the peak at the rated boost",
             "caiguangya/blackwell-matmul@844e0b126f7f README.md: an RTX 5090's cuBLAS TF32 4096^3 matmul runs "
             "103.6 TFLOP/s with clocks unlimited and 87.2 capped at the rated 2407 MHz boost (x1.19): the board "
             "runs well above the clock its datasheet peaks assume"),
))

# --- AMD CDNA (RCCL wiring is the network layer's; only the GPU is described here) ------
# An MI250X package holds two GCDs, and PyTorch sees each GCD as one device (one DDP
# rank), so the preset is one GCD: half the package's rates, memory and bandwidth.
_register(_derived_gpu(
    name="mi250x", architecture="cdna2", description="AMD Instinct MI250X, one GCD of two (one PyTorch device, 64GB)",
    # Package: fp16/bf16 383 matrix, fp32 matrix 95.7 (what rocBLAS SGEMM runs on), no TF32.
    peaks_tflops={"bfloat16": 383.0 / 2, "float16": 383.0 / 2, "float32": 95.7 / 2},
    memory_gb=64, bandwidth_gb_s=3276.8 / 2, sm_count=110, memory="cdna2",
    efficiency=_MI300X_EFF, why="MI300X's measured bf16 efficiency 668.4/1300, the nearest measured AMD GPU",
    sources=(f"{_SPEC}: MI250X bf16/fp16 383 TFLOPS (package), no TF32",
             "AMD Instinct MI250X specifications: 220 CUs, 95.7 TFLOPS FP32 matrix, 128 GB HBM2e at "
             "3.2768 TB/s per package of two GCDs"),
))
_register(GpuSpec(
    name="mi300x",
    description="AMD Instinct MI300X 192GB",
    architecture="cdna3",
    peak_flops_per_s={"bfloat16": 1307.4 * TFLOPS, "float16": 1307.4 * TFLOPS, "float32": 653.7 * TFLOPS,
                      "float32-highest": 163.4 * TFLOPS, "float8": 2614.9 * TFLOPS},
    achieved_flops_per_s={
        "bfloat16": 668.4 * TFLOPS, "float16": 668.4 * TFLOPS,  # MAMF table MI300X row
        "float32": 653.7 * TFLOPS * _MI300X_EFF, "float32-highest": 163.4 * TFLOPS * _MI300X_EFF,
    },
    memory_bytes=192 * _GB,
    memory_bandwidth_bytes_per_s=5.3 * _TB,
    # HBM3, no streaming measurement: the CDNA2 (MI210) fraction.
    stream_bandwidth_bytes_per_s=5.3 * _TB * STREAM_FRACTION["cdna2"],
    sm_count=304,
    sources=(
        "AMD Instinct MI300X specifications: 304 CUs, FP32 163.4, TF32 653.7, FP16/BF16 1307.4, FP8 "
        "2614.9 TFLOPS dense, 192 GB HBM3 at 5.3 TB/s",
        f"{_MAMF}: MI300X bf16 668.4 TFLOP/s (PYTORCH_TUNABLEOP_ENABLED=1)",
        "TF32/FP32 achieved = peak x the bf16 efficiency 668.4/1307.4",
    ) + _stream_note("cdna2", None),
))


def get_gpu(name: str) -> GpuSpec:
    """Look a GPU preset up by key, case-insensitively."""
    try:
        return GPU_PRESETS[name.lower()]
    except KeyError:
        raise ConfigError(
            f"--gpu: {name!r} is not a known GPU; choose one of {', '.join(sorted(GPU_PRESETS))}"
        ) from None


# --- Power caps (--power-cap-w) --------------------------------------------------------
# A power cap (nvidia-smi -pl, NVML's power limit) makes the GPU lower its clocks whenever its
# draw would pass the cap, so a cap below what a step draws slows its kernels. The rate a capped
# GPU keeps is measured, not derived: what is given here is a whole training step's throughput at
# each cap over the throughput at the board's full 400 W, for GPUs where such a sweep is published.
_EMERALD_SWEEP = ("ai-emerald/emerald-ai-demo-may-2025@34403aef78c2 data/dvfs_sweep.csv (Colangelo et al., "
                  "'Turning AI Data Centers into Grid-Interactive Assets', arXiv:2507.00909; A100s of a 256-GPU "
                  "cloud cluster capped with nvidia-smi -pl, the patch llm-foundry-d91c4beb-add-emerald.patch "
                  "emerald/control_power.py): the mean 'normalized throughput' of its three pretraining "
                  "workloads (pt_mpt_7b_fast, pt_mpt_13b_sm, pt_mpt_13b_lg: MPT pretraining with llm-foundry) "
                  "at each 'GPU power cap'; they spread by at most 0.024 around it")
_A100_CAP_THROUGHPUT = ((100.0, 0.1855), (200.0, 0.6291), (250.0, 0.7837), (300.0, 0.8667), (350.0, 0.9226),
                        (400.0, 1.0))
"""(cap W, step throughput over the uncapped 400 W one), :data:`_EMERALD_SWEEP`. The boards are SXM4:
at the 400 W cap they drew 377-388 W, above any A100 PCIe board's 250-300 W limit. The fraction is a
whole step's (compute and whatever communication it waited for) and dpsim applies it to compute alone:
where the measured steps waited for communication the cap does not slow, their compute slowed more
than this, so the slowdown charged here is at most the true one."""

POWER_CAP_THROUGHPUT: dict[str, tuple[tuple[float, float], ...]] = {
    "a100": _A100_CAP_THROUGHPUT, "a100-40gb": _A100_CAP_THROUGHPUT}
"""GPU preset -> measured (cap W, throughput fraction) points, rising in both; only GPUs with a
published sweep (both A100 SXM4 boards: one GA100 at the same 400 W, the datasheet's one column)."""

POWER_CAP_RANGE_W: dict[str, tuple[float, float]] = {"a100": (100.0, 400.0), "a100-40gb": (100.0, 400.0)}
"""GPU preset -> the power limits its board accepts, W: 100 W lowest (NERSC, 'GPU Power Capping on
Perlmutter', docs.nersc.gov/jobs/power-capping: A100 40 GB 100-400 W) and the 400 W the A100 SXM4
datasheet gives both boards (NVIDIA A100 Tensor Core GPU datasheet: max TDP 400 W), which the
sweep above also ends at."""

POWER_CAP_SOURCES: dict[str, str] = {"a100": _EMERALD_SWEEP, "a100-40gb": _EMERALD_SWEEP}
"""GPU preset -> the citation of its curve."""


def power_cap_throughput(gpu: str, cap_w: float | None) -> float:
    """Fraction of its uncapped compute rate a ``gpu`` preset keeps under a ``cap_w`` power cap
    (``None``: no cap, 1), linear between the measured caps of :data:`POWER_CAP_THROUGHPUT`.

    A cap outside the board's accepted limits (:data:`POWER_CAP_RANGE_W`), or on a GPU with no
    published sweep, raises :class:`ConfigError`; a lower cap never gives a higher fraction.
    """
    if cap_w is None:
        return 1.0
    if isinstance(cap_w, bool) or not isinstance(cap_w, (int, float)) or not math.isfinite(cap_w):
        raise ConfigError(f"--power-cap-w: {cap_w!r} is not valid; expected a power in watts, e.g. 350")
    key = gpu.lower()
    if key not in POWER_CAP_THROUGHPUT:
        raise ConfigError(f"--power-cap-w: no measured throughput under a power cap for gpu {gpu!r}; published "
                          f"for {', '.join(sorted(POWER_CAP_THROUGHPUT))} only (leave --power-cap-w out)")
    low, high = POWER_CAP_RANGE_W[key]
    if not low <= cap_w <= high:
        raise ConfigError(f"--power-cap-w: {cap_w:g} W is outside the power limits of gpu {key!r}; allowed: "
                          f"{low:g} to {high:g} W")
    points = POWER_CAP_THROUGHPUT[key]
    for (w0, f0), (w1, f1) in zip(points, points[1:]):
        if cap_w <= w1:
            return f0 + (f1 - f0) * (cap_w - w0) / (w1 - w0)
    return points[-1][1]
