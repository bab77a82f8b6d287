"""Wall time of a whole command, as the benchmark scripts measure it."""

from __future__ import annotations

import statistics
import subprocess
import time

REPEATS = 3
"""Runs per command; the median is reported."""


def wall(cmd: list[str]) -> float:
    """Median wall time (s) of ``REPEATS`` runs of ``cmd``, output discarded."""
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
