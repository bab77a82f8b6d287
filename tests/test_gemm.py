"""The GEMM efficiency surface (dpsim/workload/gemm.py): invariants, fallbacks, and comparison with
published GEMM sweeps (tests/data/gemm_sweeps.csv)."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from dpsim.hardware import GPU_PRESETS, get_gpu
from dpsim.workload.gemm import (
    GEMM_FITS,
    GENERIC_GEMM_FITS,
    NEUTRAL_GEMM_FIT,
    gemm_compute_s,
    gemm_efficiency,
    enable_surface,
    gemm_fit,
    plateau_rate,
)
from dpsim.workload.roofline import Efficiencies, matmul_term

DATA = Path(__file__).parent / "data" / "gemm_sweeps.csv"
ROWS = list(csv.DictReader(open(DATA, newline="")))
H100, A100, B200 = get_gpu("h100"), get_gpu("a100"), get_gpu("b200")
SIZES = [256 * 2 ** i for i in range(8)]  # 256 .. 32768


@pytest.fixture(autouse=True)
def surface():
    """Every test here but the first runs with the surface on (dpsim's roofline leaves it off)."""
    enable_surface(True)
    yield
    enable_surface(False)


def test_the_roofline_leaves_the_surface_off_by_default():
    enable_surface(False)
    assert gemm_fit(H100, "bfloat16") is NEUTRAL_GEMM_FIT
    before = matmul_term(4096, 4096, 1024, 1, "bfloat16", 2, H100).compute_s
    # Off, a GEMM is its FLOPs at the best measured rate over the tile and wave quantization.
    quantized = gemm_efficiency(4096, 4096, 1024, 1, "bfloat16", H100)
    assert before == pytest.approx(2.0 * 4096 * 4096 * 1024 / (H100.achieved_rate("bfloat16") * quantized))
    enable_surface(True)
    assert gemm_fit(H100, "bfloat16") is GEMM_FITS[("hopper", "bfloat16")]
    assert matmul_term(4096, 4096, 1024, 1, "bfloat16", 2, H100).compute_s != before


def _of_peak(m, n, k, batch, key, gpu):
    """The GEMM's rate over the dense peak, or over the measured best on a GeForce board that measures
    above its datasheet peak (computed at the rated boost clock it exceeds)."""
    ceiling = max(gpu.peak_rate(key), gpu.achieved_rate(key))
    return gemm_efficiency(m, n, k, batch, key, gpu) * gpu.achieved_rate(key) / ceiling


@pytest.mark.parametrize("gpu", sorted(GPU_PRESETS))
@pytest.mark.parametrize("key", ["bfloat16", "float16", "float32", "float8"])
def test_efficiency_is_a_fraction_of_the_peak_on_every_preset(gpu, key):
    g = get_gpu(gpu)
    if key not in g.achieved_flops_per_s and key != "float16":
        pytest.skip(f"{gpu} has no {key} rate")
    for m, n, k in [(1, 4096, 4096), (4096, 1, 4096), (333, 777, 129), (8192, 8192, 8192), (65536, 128, 65536)]:
        assert 0 < _of_peak(m, n, k, 1, key, g) <= 1.0


def test_monotone_in_size_in_the_compute_bound_regime():
    for gpu in (H100, A100, B200):
        square = [gemm_efficiency(s, s, s, 1, "bfloat16", gpu) for s in SIZES]
        assert square == sorted(square)
        # A longer reduction over the same full-wave output tiles only amortises the fixed costs.
        deep = [gemm_efficiency(8192, 8192, k, 1, "bfloat16", gpu) for k in SIZES]
        assert deep == sorted(deep)


def test_big_square_gemms_run_near_the_fitted_plateau():
    for gpu in (H100, A100, B200):
        plateau = plateau_rate(gpu, "bfloat16") / gpu.achieved_rate("bfloat16")
        assert gemm_efficiency(16384, 16384, 16384, 1, "bfloat16", gpu) == pytest.approx(plateau, rel=0.05)
    # The H100 plateau is its mamf-finder best (794.5 TFLOP/s, dpsim.hardware) within a few per cent.
    assert plateau_rate(H100, "bfloat16") / 1e12 == pytest.approx(794.5, rel=0.08)


def test_small_gemms_pay_the_kernel_floor():
    fit = gemm_fit(H100, "bfloat16")
    # Four tiles on 132 SMs: the floor is most of the kernel.
    assert fit.launch_s < gemm_compute_s(256, 256, 256, 1, "bfloat16", H100) < 1.5 * fit.launch_s


def test_unknown_families_fall_back_never_crash():
    # Ada has no sweep: the generic (NVIDIA) fit; Ampere has a bf16 sweep (A100) but no TF32 one;
    # fp16 takes the bf16 fit; fp32 at full precision takes the TF32 one.
    assert gemm_fit(get_gpu("l4"), "bfloat16") is GENERIC_GEMM_FITS["bfloat16"]
    assert gemm_fit(A100, "bfloat16") is GEMM_FITS[("ampere", "bfloat16")]
    assert gemm_fit(get_gpu("a100-40gb"), "float16") is GEMM_FITS[("ampere", "bfloat16")]
    assert gemm_fit(A100, "float32") is GENERIC_GEMM_FITS["float32"]
    assert gemm_fit(H100, "float16") is GEMM_FITS[("hopper", "bfloat16")]
    assert gemm_fit(H100, "float32") is GEMM_FITS[("hopper", "float32")]  # TF32
    # CUDA-core FP32 (full precision, or a GPU without TF32) has no sweep.
    assert gemm_fit(H100, "float32-highest") is NEUTRAL_GEMM_FIT
    assert gemm_fit(get_gpu("v100"), "float32") is NEUTRAL_GEMM_FIT
    made_up = replace(H100, name="x", architecture="rubin", sm_count=None)
    assert gemm_fit(made_up, "bfloat16") is GENERIC_GEMM_FITS["bfloat16"]
    assert 0 < gemm_efficiency(4096, 4096, 4096, 1, "bfloat16", made_up) <= 2
    cpu = replace(H100, name="cpu", architecture="", peak_flops_per_s={}, sm_count=None)
    assert gemm_fit(cpu, "float32") is NEUTRAL_GEMM_FIT
    assert gemm_compute_s(4096, 4096, 4096, 1, "float32", cpu) > 0


def _measured_and_predicted(row):
    gpu = get_gpu(row["gpu"])
    b, m, n, k = (int(row[x]) for x in ("batch", "m", "n", "k"))
    key = row["dtype"]
    e = {"bfloat16": 2.0, "float32": 4.0, "float8": 1.0}[key]
    out = 2.0 if key == "float8" else e
    term = matmul_term(m, n, k, b, key, e, gpu, traffic_elements=float(m) * k + float(k) * n + out / e * float(m) * n)
    eff = Efficiencies()
    predicted_s = max(term.compute_s / eff.matmul, term.memory_s / eff.memory)
    return 2.0 * m * n * k * b / (float(row["tflops"]) * 1e12), predicted_s


@pytest.mark.parametrize("row_id, gpu, shape, tflops", [
    # ROCm/xla@d02afb4fc18a matmul_interpolator_data.h, sm_90 and sm_100_B200, bf16xbf16->bf16
    ("G1250", "h100", (1, 4096, 4096, 4096), 780.194),
    ("G1219", "h100", (1, 2048, 2048, 2048), 641.04),
    ("G0094", "b200", (1, 2048, 2048, 2048), 985.763),
    ("G0125", "b200", (1, 4096, 4096, 4096), 1416.867),
    # PrincetonUniversity/LLMCompass@b95c6c95a800 ae/figure5/ab/real_hardware/matmul_A100.csv, rows 7, 18
    ("G2632", "a100", (1, 4096, 12288, 12288), 277.493),
    ("G2643", "a100", (1, 8192, 8192, 8192), 277.553),
])
def test_golden_measurements(row_id, gpu, shape, tflops):
    row = next(r for r in ROWS if r["id"] == row_id)
    assert (row["gpu"], tuple(int(row[x]) for x in ("batch", "m", "n", "k"))) == (gpu, shape)
    assert float(row["tflops"]) == tflops
    measured, predicted = _measured_and_predicted(row)
    assert predicted == pytest.approx(measured, rel=0.15)


@pytest.mark.parametrize("gpu, key", [("h100", "bfloat16"), ("b200", "bfloat16"), ("b200", "float8"),
                                      ("b200", "float32")])
def test_the_surface_fits_the_published_sweeps(gpu, key):
    rows = [r for r in ROWS if r["gpu"] == gpu and r["dtype"] == key]
    errors = sorted(abs(p / m - 1) for m, p in map(_measured_and_predicted, rows))
    assert len(rows) == 375
    # Median (validation/accuracy_gemm.py: 4-5 %; H100 bf16 7.7 %: its isolated kernels run at boost
    # clocks above the sustained rate the preset takes, and the plateau is bounded at 1).
    assert errors[len(errors) // 2] < (0.08 if gpu == "h100" else 0.07)
    assert errors[int(0.9 * len(errors))] < 0.25


def test_the_a100_surface_fits_its_published_sweep():
    """LLMCompass's A100 SXM4 80GB bf16 matmuls, within the bounds the XLA sweeps meet, over the
    rows the kernel dominates: it timed each call by the host's wall clock with a synchronisation,
    a round trip of a few tens of µs that is all of its sub-0.1 ms rows (8192 x 64 x 64, 4 MFLOP,
    takes 0.030 ms)."""
    rows = [r for r in ROWS if r["gpu"] == "a100"]
    assert len(rows) == 20 and {r["dtype"] for r in rows} == {"bfloat16"}
    timed = [(m, p) for m, p in map(_measured_and_predicted, rows) if m >= 1e-4]
    assert len(timed) == 15
    errors = sorted(abs(p / m - 1) for m, p in timed)
    assert errors[len(errors) // 2] < 0.07
    assert errors[int(0.9 * len(errors))] < 0.25
    # Its long-K, full-wave GEMMs run at or above the preset's mamf-finder best (271.2 TFLOP/s):
    # the plateau sits at its bound, the sweep gives no lower A100 bf16 rate.
    assert GEMM_FITS[("ampere", "bfloat16")].plateau == 1.0
    big = [float(r["tflops"]) for r in rows if 2.0 * int(r["m"]) * int(r["n"]) * int(r["k"]) > 1e12]
    assert len(big) == 7 and min(big) > 271.2


def test_every_row_cites_its_source_and_no_kept_out_one():
    assert len(ROWS) == 2645 and len({r["id"] for r in ROWS}) == len(ROWS)
    for r in ROWS:
        assert r["source"].startswith(("ROCm/xla@d02afb4fc18a matmul_interpolator_data.h ",
                                       "PrincetonUniversity/LLMCompass@b95c6c95a800 "
                                       "ae/figure5/ab/real_hardware/matmul_A100.csv row "))
        assert r["gpu"] in GPU_PRESETS and float(r["tflops"]) > 0
        # No row above the GPU's dense peak (the H100 FP8 entries of the table are, and are left out).
        assert float(r["tflops"]) * 1e12 <= get_gpu(r["gpu"]).peak_rate(r["dtype"])


# Refits on every published sweep (1.5-3.5 s): the full suite runs it, the fast lane does not.
@pytest.mark.slow
def test_shipped_constants_are_the_fit_on_the_sweeps():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
    import accuracy_gemm

    rows = accuracy_gemm.load()
    x = {}
    for r in rows:
        x.setdefault((r["gpu"], r["dtype"]), []).append(r)
    x = {key: accuracy_gemm.features(rs) for key, rs in x.items()}
    for (gpu, dtype), xs in x.items():
        assert accuracy_gemm.fit(xs) == GEMM_FITS[(get_gpu(gpu).architecture, dtype)], (gpu, dtype)
    for dtype, shipped in GENERIC_GEMM_FITS.items():
        nvidia = [xs for (g, d), xs in x.items() if d == dtype and not get_gpu(g).architecture.startswith("cdna")]
        assert accuracy_gemm.fit_sources(nvidia) == shipped, dtype
