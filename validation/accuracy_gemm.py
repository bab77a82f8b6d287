"""Fit the GEMM surface (:mod:`dpsim.workload.gemm`) on published GEMM sweeps and report its error.

    python validation/accuracy_gemm.py
    python validation/accuracy_gemm.py --with-surface validation/accuracy_compute.py

Reads ``tests/data/gemm_sweeps.csv`` (measured TFLOP/s per shape, dtype and GPU, every row citing
its source), fits :class:`~dpsim.workload.gemm.GemmFit` per (GPU architecture, dtype) and one per
dtype over the NVIDIA GPUs (a grid search minimising the squared log error of the kernel time, each row weighted by its
measured time),
and prints:

* the in-sample error of each family's fit, next to the model before the surface (the best
  measured rate with tile and wave quantization only);
* leave-one-source-out: each GPU's sweep (one source each) predicted with the generic fit of the
  *other* GPUs' sweeps, the fallback a GPU of an unmeasured family gets (each sweep weighing the
  same: :func:`fit_sources`);
* the constants to paste (the generic ones fitted on the NVIDIA sweeps: every family without
  a sweep of its own but CDNA2 is NVIDIA's) into :data:`~dpsim.workload.gemm.GEMM_FITS` and
  :data:`~dpsim.workload.gemm.GENERIC_GEMM_FITS`.

``--with-surface SCRIPT ARGS...`` instead runs another validation script with the surface switched
on (:func:`dpsim.workload.gemm.enable_surface`; the roofline leaves it off by default), to
measure its end-to-end effect.

A row's prediction is the roofline's: the longer of the surface's compute time and the GEMM's
traffic (inputs and output once) at the streaming bandwidth over ``MEMORY_EFFICIENCY``.
"""

from __future__ import annotations

import argparse
import csv
import runpy
import sys
from pathlib import Path

import numpy as np

from dpsim.hardware import get_gpu
from dpsim.workload.fp8 import FP8_RATE_KEY
from dpsim.workload.gemm import NEUTRAL_GEMM_FIT, GemmFit, _quantization, enable_surface
from dpsim.workload.roofline import Efficiencies, matmul_term

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "gemm_sweeps.csv"

ELEMENT_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0, FP8_RATE_KEY: 1.0}
"""Input bytes per element; FP8 GEMMs write a 16-bit output (the sweeps' ``->bf16``)."""

PLATEAUS = np.round(np.arange(0.40, 1.0001, 0.01), 2)
"""At most 1: the best measured rate is sustained, the sweeps' isolated kernels run at boost
clocks (:attr:`dpsim.workload.gemm.GemmFit.plateau`)."""
K_OVERHEADS = np.concatenate([[0.0], np.round(np.geomspace(8, 2048, 40))])
LAUNCH_S = np.round(np.arange(0.0, 16.01e-6, 0.5e-6), 9)


def load(path: Path = DATA) -> list[dict]:
    """The sweep rows, typed."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append({**r, **{x: int(r[x]) for x in ("batch", "m", "n", "k")}, "tflops": float(r["tflops"])})
    return rows


def features(rows: list[dict]) -> np.ndarray:
    """Per row: FLOPs over (best rate x quantization), the per-split depth, the memory time,
    the dense peak over the best rate, and the measured time."""
    eff = Efficiencies()
    out = []
    for r in rows:
        gpu = get_gpu(r["gpu"])
        b, m, n, k, key = r["batch"], r["m"], r["n"], r["k"], r["dtype"]
        quantized, split = _quantization(m, n, k, b, gpu)
        flops = 2.0 * m * n * k * b
        e = ELEMENT_BYTES[key]
        out_e = 2.0 if key == FP8_RATE_KEY else e
        traffic = float(m) * k + float(k) * n + out_e / e * float(m) * n
        memory_s = matmul_term(m, n, k, b, key, e, gpu, traffic_elements=traffic).memory_s / eff.memory
        best = gpu.achieved_rate(key)
        out.append((flops / (best * quantized), k / split, memory_s, gpu.peak_rate(key) / best,
                    flops / (r["tflops"] * 1e12)))
    return np.array(out)


def predict(x: np.ndarray, fit: GemmFit) -> np.ndarray:
    """Predicted kernel seconds of feature rows ``x`` under ``fit`` (as :func:`dpsim.workload.gemm.gemm_compute_s`)."""
    base, depth, memory_s, peak_over_best, _ = x.T
    plateau = np.minimum(fit.plateau, peak_over_best)
    compute = base / plateau * (depth + fit.k_overhead) / depth + fit.launch_s
    return np.maximum(compute / Efficiencies().matmul, memory_s)


def fit(x: np.ndarray, weight: np.ndarray | None = None) -> GemmFit:
    """The grid point minimising the time-weighted mean squared log error of the time (``weight``,
    summing to 1, by default each row's share of the measured time)."""
    base, depth, memory_s, peak_over_best, measured = x.T
    plateau = np.minimum(PLATEAUS[:, None], peak_over_best[None, :])
    # Each row weighs its measured time: a training step's error is the time-weighted mean of its
    # kernels' errors, so long GEMMs matter more than microsecond ones.
    if weight is None:
        weight = measured / measured.sum()
    best: tuple[float, GemmFit] | None = None
    for k0 in K_OVERHEADS:
        slowed = base * (depth + k0) / depth
        for t0 in LAUNCH_S:
            pred = np.maximum((slowed[None, :] / plateau + t0) / Efficiencies().matmul, memory_s[None, :])
            loss = (np.log(pred / measured[None, :]) ** 2 * weight[None, :]).sum(axis=1)
            i = int(loss.argmin())
            if best is None or loss[i] < best[0]:
                best = (float(loss[i]), GemmFit(plateau=float(PLATEAUS[i]), k_overhead=float(k0), launch_s=float(t0)))
    assert best is not None
    return best[1]


def fit_sources(sweeps: list[np.ndarray]) -> GemmFit:
    """One fit over several GPUs' sweeps, each sweep weighing the same in total (its rows by their
    share of its measured time): pooled, the source timing the longest kernels would set the fit
    alone (LLMCompass's A100 rows run up to 61 ms, XLA's table's at most about 1 ms)."""
    weight = np.concatenate([xs[:, 4] / xs[:, 4].sum() / len(sweeps) for xs in sweeps])
    return fit(np.concatenate(sweeps), weight)


def errors(x: np.ndarray, fit_: GemmFit) -> np.ndarray:
    """|predicted / measured - 1| of the time per row."""
    return np.abs(predict(x, fit_) / x[:, 4] - 1)


def summary(e: np.ndarray) -> str:
    return f"median {np.median(e) * 100:5.1f} %  p90 {np.percentile(e, 90) * 100:5.1f} %  worst {e.max() * 100:5.0f} %"


def _fmt(f: GemmFit) -> str:
    return f"GemmFit(plateau={f.plateau:.2f}, k_overhead={f.k_overhead:.1f}, launch_s={f.launch_s:.1e})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--with-surface", nargs=argparse.REMAINDER, metavar="SCRIPT",
                    help="run SCRIPT (and its arguments) with the GEMM surface on, then stop")
    args = ap.parse_args()
    if args.with_surface:
        enable_surface(True)
        sys.argv = list(args.with_surface)
        runpy.run_path(sys.argv[0], run_name="__main__")
        return
    rows = load()
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["gpu"], r["dtype"]), []).append(r)
    x = {g: features(rs) for g, rs in groups.items()}
    print(f"{len(rows)} rows, {len(groups)} (GPU, dtype) sweeps\n")
    print("In-sample, per family (error of the kernel time):")
    family: dict[tuple[str, str], GemmFit] = {}
    for (gpu, dtype), xs in sorted(x.items()):
        f = fit(xs)
        family[(get_gpu(gpu).architecture, dtype)] = f
        print(f"  {gpu:7s} {dtype:9s} surface {summary(errors(xs, f))} | before {summary(errors(xs, NEUTRAL_GEMM_FIT))}")
    print("\nLeave-one-source-out (each GPU predicted by the generic fit of the other GPUs):")
    gpus = sorted({g for g, _ in x})
    for held in gpus:
        for dtype in sorted({d for g, d in x if g == held}):
            rest = [xs for (g, d), xs in x.items() if d == dtype and g != held]
            if not rest:
                print(f"  {held:7s} {dtype:9s} no other GPU has a {dtype} sweep")
                continue
            f = fit_sources(rest)
            print(f"  {held:7s} {dtype:9s} surface {summary(errors(x[(held, dtype)], f))} | "
                  f"before {summary(errors(x[(held, dtype)], NEUTRAL_GEMM_FIT))}")
    print("\nGEMM_FITS:")
    for key, f in sorted(family.items()):
        print(f"    {key!r}: {_fmt(f)},")
    print("GENERIC_GEMM_FITS (NVIDIA sweeps only: the families without a sweep are NVIDIA's):")
    for dtype in sorted({d for _, d in x}):
        nvidia = [xs for (g, d), xs in x.items() if d == dtype and not get_gpu(g).architecture.startswith("cdna")]
        print(f"    {dtype!r}: {_fmt(fit_sources(nvidia))},")


if __name__ == "__main__":
    main()
