"""Wall time (and peak memory) of a whole command, as the benchmark scripts measure it."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

REPEATS = 3
"""Runs per command; the median is reported."""

FLOOR = [sys.executable, "-c", "import numpy, networkx, simpy, yaml, rich, typer"]
"""The import floor: what any dpsim command pays before its own work (targets are relative to it)."""

_RSS = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def wall(cmd: list[str]) -> float:
    """Median wall time (s) of ``REPEATS`` runs of ``cmd``, output discarded."""
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_mib(cmd: list[str]) -> float:
    """Peak resident memory (MiB) of one run of ``cmd`` (its own process, measured by a parent
    that runs nothing else: ``getrusage(RUSAGE_CHILDREN)``, Linux units of KiB)."""
    out = subprocess.run([sys.executable, "-c", _RSS, *cmd], check=True, capture_output=True, text=True).stdout
    return int(out.strip().splitlines()[-1]) / 1024


def cpu(cmd: list[str]) -> float:
    """Median user + system CPU time (s) of ``REPEATS`` runs of ``cmd``: steadier than wall time
    on a machine other jobs keep busy (they take the cores, not this process's CPU seconds)."""
    import resource

    times = []
    for _ in range(REPEATS):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return statistics.median(times)
