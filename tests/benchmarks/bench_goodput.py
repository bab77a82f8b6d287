"""Benchmark: ``dpsim goodput`` for a 16,384-GPU cluster over 54 days, against the import floor.

Run: ``python tests/benchmarks/bench_goodput.py``. Prints the wall time and CPU time of the
whole CLI process (``dpsim goodput --gpus 16384 --link infiniband --duration 54d --json``:
100 runs of the headline job, the interval study's ~12 intervals and both elastic policies,
hundreds of failures and thousands of checkpoint segments per run), target <= 1 s, plus the
65,536-GPU default (once an OverflowError), each as a ratio to the import floor measured in
the same run. Not a test: these machines are shared and noisy; CPU time is the steadier figure
on a busy machine.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time

from wall_time import FLOOR, wall

CASES = [
    ("16,384 GPUs, 54 days", ["--gpus", "16384", "--duration", "54d"]),
    ("65,536 GPUs, defaults", ["--gpus", "65536"]),
]


def cpu_s(cmd: list[str]) -> float:
    """User + system CPU time of one run of ``cmd`` (its own process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    floor, floor_cpu = wall(FLOOR), cpu_s(FLOOR)
    print(f"floor: import numpy, networkx, simpy, yaml, rich, typer = {floor:.3f} s wall, {floor_cpu:.3f} s CPU")
    for label, args in CASES:
        cmd = [sys.executable, "-m", "dpsim", "goodput", "--link", "infiniband", *args, "--json"]
        t0 = time.perf_counter()
        t = wall(cmd)
        c = cpu_s(cmd)
        print(f"{label:<34} wall {t:6.3f} s (floor x {t / floor:4.1f}), CPU {c:6.3f} s "
              f"(floor x {c / floor_cpu:4.1f}){'   target <= 1 s' if '16,384' in label else ''}")
        del t0


if __name__ == "__main__":
    main()
