"""Benchmark: ``predict``'s wall time against the micro-batches per step, extrapolated vs every one simulated.

Run: ``python tests/benchmarks/bench_predict_microbatches.py [--repeats N]``. For llama-2-7b on ``infiniband``,
data parallelism alone (16 GPUs, ``--grad-accum``, ``--steps 3``) and ``--tp 2 --pp 4`` (8 GPUs, one replica,
``--global-batch`` = micro-batches), at 64, 1,024, 32,768 and 1,000,000 micro-batches per replica, it prints the
wall time of ``predict`` (best of ``--repeats``, in process, after a warm-up prediction) and, in the same run,
of the full simulation of every micro-batch (:func:`dpsim.predict.extrapolate.full_simulation`) up to
``--full-up-to`` micro-batches (default 32,768: in process, past the CLI's limit of 10,000 simulated
micro-batches; a million would take tens of minutes), with their ratio and the relative difference of the step
time. Below
:data:`~dpsim.predict.extrapolate.EXTRAPOLATE_ABOVE` micro-batches both are the same path.

Not a test: these machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import time

from dpsim.predict import PredictConfig, predict
from dpsim.predict.extrapolate import full_simulation, sample_counts

COUNTS = (64, 1024, 32_768, 1_000_000)
LAYOUTS = {
    "ddp 16 GPUs": lambda n: PredictConfig(model="llama-2-7b", link="infiniband", gpus=16, micro_batch=1,
                                           grad_accum=n),
    "tp2 pp4 8 GPUs": lambda n: PredictConfig(model="llama-2-7b", link="infiniband", gpus=8, tp=2, pp=4,
                                              micro_batch=1, global_batch=n),
}


def timed(config, repeats: int) -> tuple[float, float]:
    """(best wall seconds of ``predict(config)``, its step time)."""
    best, step = float("inf"), 0.0
    for _ in range(repeats):
        t = time.perf_counter()
        step = predict(config).step_time_s
        best = min(best, time.perf_counter() - t)
    return best, step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--full-up-to", type=int, default=32_768,
                        help="simulate every micro-batch up to this count, past the CLI's limit too")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; best of {args.repeats}")
    print(f"{'layout':<16}{'micro-batches':>14}{'path':>14}{'predict s':>11}{'full s':>10}{'ratio':>8}"
          f"{'step rel. diff':>16}")
    for name, make in LAYOUTS.items():
        predict(make(64))  # warm: imports, the model's costs, memo tables
        for n in COUNTS:
            config = make(n)
            path = "extrapolated" if sample_counts(config) is not None else "full"
            fast_s, step = timed(config, args.repeats)
            if path == "full":
                full_s, full_step = fast_s, step
            elif n <= args.full_up_to:  # the config was made outside full_simulation(): past the limit too
                with full_simulation():
                    full_s, full_step = timed(config, 1)
            else:
                full_s = full_step = None
            full = f"{full_s:10.3f}{full_s / fast_s:8.1f}{abs(step - full_step) / full_step:16.1e}" \
                if full_s is not None else f"{'not run':>10}{'':>8}{'':>16}"
            print(f"{name:<16}{n:>14,}{path:>14}{fast_s:11.3f}{full}", flush=True)


if __name__ == "__main__":
    main()
