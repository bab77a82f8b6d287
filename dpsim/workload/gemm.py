"""GEMM efficiency as a function of shape (M, N, K, batch), dtype and GPU: a fitted surface.

A GEMM's compute time is that of a small mechanistic kernel model, with three constants per
GPU family and dtype fitted on published GEMM sweeps (``tests/data/gemm_sweeps.csv``, every row
citing its source):

* **Tile and wave quantization** (:func:`shape_efficiency`): the output is computed in
  :data:`TILE` x :data:`TILE` tiles, one per SM at a time; a shape whose tiles do not fill the
  last wave of SMs, or whose edges do not fill a tile, wastes the rest (NVIDIA "Matrix
  Multiplication Background User's Guide", DU-09799-001, Sec. 3.1-3.2); with fewer tiles than
  SMs, the reduction is split (split-K) over the idle SMs.
* **The main loop's fixed cost** (:attr:`GemmFit.k_overhead`): every tile loads its first
  operand slices before the tensor cores start and writes its output after they stop, a cost
  that does not shrink with K; a tile reducing over ``K`` elements runs at ``K / (K + k0)``.
* **A device-side floor** (:attr:`GemmFit.launch_s`): a kernel takes a few microseconds
  however little it computes (block scheduling, the tail of the last wave).
* **The plateau** (:attr:`GemmFit.plateau`): the rate full-wave, long-K GEMMs sustain, as a
  fraction of the GPU's best measured matmul rate (:meth:`dpsim.hardware.GpuSpec.achieved_rate`).
  Fitted at most 1: that rate is a sustained one (mamf-finder's best shape over many
  iterations), while the sweeps time a few isolated kernels, which run at boost clocks a
  training step does not hold (left free, H100 bf16 fitted 1.08 over mamf-finder's earlier 794.5, itself
  a burst figure; over the sustained 755 the preset now takes (:data:`dpsim.hardware.GH100_SUSTAINED_TFLOPS`)
  the H100 sweep sits higher still, and the bound leaves it 7.7 % median |error| in-sample, 6.4 % before).

The A100 sweep (LLMCompass, ``tests/data/README.md``) times each ``torch.matmul`` by the host's wall
clock around the call and a synchronisation (median of 50), not by the kernel alone: its fitted
floor (16 µs) holds that round trip, and its largest GEMMs run at 277-293 TFLOP/s, above the 271.2
mamf-finder best, so the Ampere plateau fits at its bound of 1 (no lower A100 bf16 rate than the
preset's is supported by it).

The sweeps' ``float32`` runs on TF32 (XF32) matrix cores; FP32 on CUDA cores (full precision,
or a GPU without TF32) has no sweep and keeps :data:`NEUTRAL_GEMM_FIT`. The fit weighs each
measurement by its time, as a step's error is the time-weighted mean of its kernels' errors.

**Off by default** (:data:`SURFACE_ENABLED`): it predicts the kernel sweeps far better than
before (in-sample median |error| of the time 4-8 % on H100/B200 bf16, fp8 and B200 TF32, 7.5 % on
the A100's bf16 sweep, against 32-64 % for the best rate with tile and wave quantization alone),
but end to end it does not pay yet. With it on and the roofline's two efficiencies refitted on
the single-GPU rows (memory 0.761, matmul 1.034), the single-GPU throughput section moves from a
leave-one-chip-out median |error| of 8.3 % to 7.0 % (worst 34.2 % to 33.9 %; 7.6 % and 35.4 %
before the A100 sweep), and a 22-row subset of the large-model runs
(``validation/accuracy_large_models.py --no-loso --only R001,R007,...``, mostly over-predicted,
measured before the A100 sweep) from a median of 20.8 % to 22.5 % (worst 66.0 % to 67.5 %); with
the efficiencies left as shipped, 20.1 % (worst 65.5 %). The 22 A100 runs (R023-R040 but R031,
R075, R079, R083, R087, R090) go from 10.2 % to 9.9 % (8.9 % with the generic fit in place of
the A100's: its long reductions cost no fixed k0). Until it helps,
the roofline costs a GEMM with :data:`NEUTRAL_GEMM_FIT` (tile and wave quantization at the best
measured rate, exactly as before the surface). ``python validation/accuracy_gemm.py
--with-surface SCRIPT ARGS...`` runs another validation script with the surface on.

Skinny shapes are bound by device memory instead: the roofline (:mod:`dpsim.workload.roofline`)
takes the longer of this compute time and the GEMM's traffic at the streaming bandwidth, and the
fit predicts the sweeps with that same maximum. ``python validation/accuracy_gemm.py`` fits the
constants per (GPU architecture, dtype) and per dtype over the NVIDIA GPUs (:data:`GENERIC_GEMM_FITS`,
what a GPU of a family without its own sweep gets), reports the error of predicting each GPU's
sweep with nothing fitted on it (leave-one-source-out), and prints the tables below.
"""

from __future__ import annotations

import math

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.hardware import GpuSpec

TILE = 128
"""Edge of cuBLAS's typical output tile (User's Guide DU-09799-001, Sec. 2.3: 256x128 and
128x128 are its most efficient tiles); the quantization unit of the shape efficiency. A 128 x 256
tile fitted the sweeps worse when tried (H100 bf16: median |error| 8 % against 4 %)."""

SPLIT_K_MIN_K = 256
"""Smallest reduction slice split-K hands to one SM (a few 64-deep main-loop iterations);
bounds the split of short reductions."""


@frozen_dataclass
class GemmFit:
    """The fitted constants of one GPU family and dtype (module docstring)."""

    plateau: float
    """Rate of full-wave, long-K GEMMs as a fraction of the best measured matmul rate."""
    k_overhead: float
    """Main-loop fixed cost in reduction elements (``k0``): a tile reducing over ``K`` runs at
    ``K / (K + k0)``."""
    launch_s: float
    """Device-side floor of one GEMM kernel, seconds."""


GEMM_FITS: dict[tuple[str, str], GemmFit] = {
    # validation/accuracy_gemm.py, fit on each GPU's sweep (time-weighted log-squared error, grid search)
    # Ampere on LLMCompass's A100 80GB SXM4 bf16 sweep (20 shapes, M or N=K from 64 to 32768): its
    # launch_s also holds the host round trip its wall-clock timing includes (module docstring).
    ("ampere", "bfloat16"): GemmFit(plateau=1.00, k_overhead=0.0, launch_s=16.0e-6),
    ("hopper", "bfloat16"): GemmFit(plateau=1.00, k_overhead=0.0, launch_s=6.0e-6),
    ("hopper", "float32"): GemmFit(plateau=0.89, k_overhead=14.0, launch_s=11.0e-6),
    ("blackwell", "bfloat16"): GemmFit(plateau=0.97, k_overhead=211.0, launch_s=5.5e-6),
    ("blackwell", "float32"): GemmFit(plateau=1.00, k_overhead=103.0, launch_s=7.5e-6),
    ("blackwell", "float8"): GemmFit(plateau=1.00, k_overhead=243.0, launch_s=6.0e-6),
    ("cdna3", "bfloat16"): GemmFit(plateau=0.91, k_overhead=78.0, launch_s=7.0e-6),
    ("cdna3", "float32"): GemmFit(plateau=0.70, k_overhead=68.0, launch_s=7.5e-6),
}
"""Constants per (:attr:`dpsim.hardware.GpuSpec.architecture`, rate key), fitted on the sweeps
of one GPU of that family: Hopper on H100 SXM, Blackwell on B200, CDNA3 on MI300X (OpenXLA's
default matmul performance tables), Ampere bf16 on A100 SXM4 80GB (LLMCompass's measured matmuls;
Ampere TF32 has no sweep and takes the generic fit), all in ``tests/data/gemm_sweeps.csv``.
``float16`` uses the ``bfloat16`` fit (the same tensor cores at the same rate)."""

GENERIC_GEMM_FITS: dict[str, GemmFit] = {
    # validation/accuracy_gemm.py, one fit over the NVIDIA sweeps of the dtype (A100, H100 and B200
    # bf16; H100 and B200 TF32; B200 FP8), each sweep weighing the same (accuracy_gemm.fit_sources)
    "bfloat16": GemmFit(plateau=1.00, k_overhead=78.0, launch_s=6.0e-6),
    "float32": GemmFit(plateau=0.95, k_overhead=103.0, launch_s=8.0e-6),
    "float8": GemmFit(plateau=1.00, k_overhead=243.0, launch_s=6.0e-6),
}
"""Constants for a GPU whose family has no sweep of the dtype (Ada, Volta, Turing, Ampere TF32, ...;
CDNA2 too): one fit over the NVIDIA GPUs' sweeps, as every such family but CDNA2 is NVIDIA's, each
sweep weighing the same. ``python validation/accuracy_gemm.py`` reports how well it predicts each
GPU's sweep when that GPU is left out of it."""

NEUTRAL_GEMM_FIT = GemmFit(plateau=1.0, k_overhead=0.0, launch_s=0.0)
"""For a device that is no GPU (a calibration profile's CPU, :attr:`GpuSpec.architecture` empty):
its measured rate stands, with only the tile quantization."""

SURFACE_ENABLED = False
"""Whether :func:`gemm_fit` hands the roofline the fitted surface (module docstring: off until it
improves the end-to-end accuracy sections); :func:`enable_surface` switches it."""

_FIT_DTYPE = {"float16": "bfloat16"}
"""Rate keys that take another key's fit: fp16 runs on the bf16 tensor cores at the same rate."""


def uses_tf32(rate_key: str, gpu: GpuSpec) -> bool:
    """Whether a ``rate_key`` matmul runs on TF32 tensor cores on ``gpu`` (float32 with TF32
    allowed, on a GPU that has TF32, i.e. whose full-precision FP32 rate is given apart)."""
    return rate_key == "float32" and "float32-highest" in gpu.peak_flops_per_s


def enable_surface(on: bool = True) -> None:
    """Switch the fitted surface on (or off) for every GEMM costed from now on (:data:`SURFACE_ENABLED`)."""
    global SURFACE_ENABLED
    SURFACE_ENABLED = on


def gemm_fit(gpu: GpuSpec, rate_key: str, *, surface: bool | None = None) -> GemmFit:
    """The constants for ``rate_key`` GEMMs on ``gpu``: its family's fit, else the dtype's generic fit,
    else the bf16 generic fit (a dtype with no sweep at all keeps the bf16 mechanism);
    :data:`NEUTRAL_GEMM_FIT` on a device that is no GPU, for float32 on CUDA cores (no sweep measures
    them: the sweeps' float32 runs on TF32 matrix cores), and while the surface is off (``surface``,
    by default :data:`SURFACE_ENABLED`)."""
    if not (SURFACE_ENABLED if surface is None else surface) or not gpu.architecture:
        return NEUTRAL_GEMM_FIT
    if rate_key.startswith("float32") and not uses_tf32(rate_key, gpu):
        return NEUTRAL_GEMM_FIT
    key = _FIT_DTYPE.get(rate_key, rate_key)
    fit = GEMM_FITS.get((gpu.architecture, key)) or GENERIC_GEMM_FITS.get(key)
    return fit or GENERIC_GEMM_FITS["bfloat16"]


def shape_efficiency(m: int, n: int, k: int, batch: int, gpu: GpuSpec) -> float:
    """Useful fraction of the SM-time a ``batch`` x (m x k)(k x n) GEMM occupies: tile and
    wave quantization over the GPU's SMs, with split-K when the tiles do not fill them."""
    return _quantization(m, n, k, batch, gpu)[0]


def _quantization(m: int, n: int, k: int, batch: int, gpu: GpuSpec) -> tuple[float, int]:
    """(:func:`shape_efficiency`, the split-K factor)."""
    tiles = math.ceil(m / TILE) * math.ceil(n / TILE) * batch
    useful = float(m) * n * batch
    if not gpu.sm_count:
        return useful / (tiles * TILE * TILE), 1
    split = 1
    if tiles < gpu.sm_count:
        split = max(1, min(gpu.sm_count // tiles, k // SPLIT_K_MIN_K))
    waves = math.ceil(tiles * split / gpu.sm_count)
    return min(1.0, useful * split / (waves * gpu.sm_count * TILE * TILE)), split


def plateau_rate(gpu: GpuSpec, rate_key: str, fit: GemmFit | None = None) -> float:
    """FLOP/s of full-wave, long-K GEMMs: the best measured rate times the fitted plateau; a
    plateau above 1 stops at the dense peak (where one is published; GeForce boards measure above
    theirs, so a plateau of 1 keeps their measured rate)."""
    fit = fit or gemm_fit(gpu, rate_key)
    rate = gpu.achieved_rate(rate_key) * fit.plateau
    if fit.plateau <= 1.0:
        return rate
    try:
        return min(rate, gpu.peak_rate(rate_key))
    except ConfigError:  # a calibration profile's device has no published peak
        return rate


def gemm_compute_s(m: int, n: int, k: int, batch: int, rate_key: str, gpu: GpuSpec,
                   fit: GemmFit | None = None) -> float:
    """Compute-bound seconds of a ``batch`` x (m x k)(k x n) GEMM (the memory bound is the
    roofline's): quantized tiles at the plateau rate, each slowed by the main loop's fixed
    cost, plus the kernel's floor."""
    if min(m, n, k, batch) <= 0:
        return 0.0
    fit = fit or gemm_fit(gpu, rate_key)
    quantized, split = _quantization(m, n, k, batch, gpu)
    depth = k / split
    flops = 2.0 * m * n * k * batch
    return flops / (plateau_rate(gpu, rate_key, fit) * quantized) * ((depth + fit.k_overhead) / depth) + fit.launch_s


def gemm_efficiency(m: int, n: int, k: int, batch: int, rate_key: str, gpu: GpuSpec,
                    fit: GemmFit | None = None) -> float:
    """Fraction of the best measured matmul rate the GEMM's compute reaches (in (0, 1] of the dense
    peak over the best rate): ``2 m n k batch / (rate x`` :func:`gemm_compute_s` ``)``."""
    flops = 2.0 * m * n * k * batch
    return flops / (gpu.achieved_rate(rate_key) * gemm_compute_s(m, n, k, batch, rate_key, gpu, fit))
