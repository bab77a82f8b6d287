"""Benchmark: ``dpsim memory``'s fit advice at huge micro-batches (bisection) against a linear search.

Run: ``python tests/benchmarks/bench_fit_advice.py``. Prints the time of
:func:`dpsim.memory.fit_advice` and its number of memory evaluations for micro-batches
from 64 to 1,048,576 (GPT-2 XL, DDP, 64 H100s: the advice is ZeRO-3 + checkpointing at a
smaller micro-batch), and, as the baseline measured in the same run, the same advice
found by a linear search (what ``fit_advice`` did before: every micro-batch from the top
down) up to 1,024 (16,384 takes two minutes), with the ratio. Then the whole CLI,
``dpsim memory --micro-batch 16384`` (118 s with the linear search), against
``--micro-batch 1``. Not a test: these machines are shared and noisy.
"""

from __future__ import annotations

import sys
import time

from wall_time import wall

import dpsim.memory as memory
from dpsim.hardware import get_gpu
from dpsim.workload.catalog import get_model
from dpsim.workload.precision import get_precision

MICRO_BATCHES = (64, 1024, 16384, 1 << 20)
LINEAR_UP_TO = 1024


def _advise(micro_batch: int) -> tuple[float, int, object]:
    calls = [0]
    real = memory.memory_breakdown

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    memory.memory_breakdown = counted
    try:
        t0 = time.perf_counter()
        advice = memory.fit_advice(get_model("gpt2-xl"), get_gpu("h100"), precision=get_precision("bf16-mixed"),
                                   optimizer="adamw", micro_batch=micro_batch, n_gpus=64, gpus_per_node=8)
        return time.perf_counter() - t0, calls[0], advice
    finally:
        memory.memory_breakdown = real


def _linear(lo, hi, ok):
    return next((n for n in range(hi, lo - 1, -1) if ok(n)), None)


def main() -> None:
    print(f"{'micro-batch':>11} {'bisection s':>11} {'evals':>6} {'linear s':>9} {'evals':>7} {'x faster':>8}  advice")
    for mb in MICRO_BATCHES:
        fast_s, fast_n, advice = _advise(mb)
        if mb <= LINEAR_UP_TO:
            bisect = memory.largest_true
            memory.largest_true = _linear
            try:
                slow_s, slow_n, slow_advice = _advise(mb)
            finally:
                memory.largest_true = bisect
            assert slow_advice == advice, (slow_advice, advice)
            linear = f"{slow_s:>9.3f} {slow_n:>7} {slow_s / fast_s:>8.0f}"
        else:
            linear = f"{'-':>9} {'-':>7} {'-':>8}"
        print(f"{mb:>11,} {fast_s:>11.4f} {fast_n:>6} {linear}  {advice.message}")
    cli = wall([sys.executable, "-m", "dpsim", "memory", "--micro-batch", "16384"])
    base = wall([sys.executable, "-m", "dpsim", "memory", "--micro-batch", "1"])
    print(f"dpsim memory --micro-batch 16384: {cli:.2f} s whole CLI (--micro-batch 1: {base:.2f} s; "
          f"118 s with the linear search)")


if __name__ == "__main__":
    main()
