"""Wall time (and peak memory) of a whole command, as the benchmark scripts measure it.

Importing this module compiles dpsim's bytecode once (:func:`compile_bytecode`), as
``pip install`` does for an installed package, so that every command timed here starts
as it would for a user.
"""

from __future__ import annotations

import compileall
import statistics
import subprocess
import sys
import time

REPEATS = 3
"""Runs per command; the median is reported."""

FLOOR = [sys.executable, "-c", "import numpy, networkx, simpy, yaml, rich, typer"]
"""The import floor: what any dpsim command pays before its own work (targets are relative to it)."""

def compile_bytecode() -> None:
    """Write the ``__pycache__`` of the dpsim package being measured.

    ``pip install`` compiles an installed package's modules (and the floor's libraries were
    installed that way), but an editable checkout run with ``PYTHONDONTWRITEBYTECODE=1``
    (these machines set it) never caches its bytecode: every ``dpsim`` process then
    recompiles ~140 modules, about 0.1 s that no installed dpsim pays and that the floor
    does not include. Reading cached bytecode is allowed under that variable.
    """
    import dpsim

    for path in dpsim.__path__:
        compileall.compile_dir(path, quiet=1, force=False)


compile_bytecode()

_RSS = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def wall(cmd: list[str], repeats: int = REPEATS, stat=statistics.median) -> float:
    """Wall time (s) of ``repeats`` runs of ``cmd`` (their median, or ``stat``), output discarded."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return stat(times)


def peak_mib(cmd: list[str]) -> float:
    """Peak resident memory (MiB) of one run of ``cmd`` (its own process, measured by a parent
    that runs nothing else: ``getrusage(RUSAGE_CHILDREN)``, Linux units of KiB)."""
    out = subprocess.run([sys.executable, "-c", _RSS, *cmd], check=True, capture_output=True, text=True).stdout
    return int(out.strip().splitlines()[-1]) / 1024


def cpu(cmd: list[str], repeats: int = REPEATS, stat=statistics.median) -> float:
    """User + system CPU time (s) of ``repeats`` runs of ``cmd`` (their median, or ``stat``):
    steadier than wall time on a machine other jobs keep busy (they take the cores, not this
    process's CPU seconds)."""
    import resource

    times = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return stat(times)
