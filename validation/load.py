"""How much of this machine other processes took while a measurement ran ("outside load").

The validation runs share a small machine with whatever else runs on it; a run taken while
something else used the cores measures that contention, not the model. :class:`Load`
reads the machine's busy CPU time (``/proc/stat``) and subtracts what this process's
children used (``getrusage(RUSAGE_CHILDREN)``: the ranks, torchrun, ``ip``; waited-for
descendants are included), as a share of all cores over the wall time.
"""

from __future__ import annotations

import os
import resource
import time


def _cpu_busy_s() -> float:
    with open("/proc/stat") as fh:
        fields = fh.readline().split()[1:]
    ticks = [int(x) for x in fields]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Load:
    """``with Load() as load: ...`` then ``load.outside``: other processes' share of the machine, 0..1."""

    def __enter__(self) -> "Load":
        self.t0, self.busy0 = time.monotonic(), _cpu_busy_s()
        self.mine0 = _children_cpu_s() + _self_cpu_s()
        return self

    def __exit__(self, *exc) -> None:
        wall = max(time.monotonic() - self.t0, 1e-9)
        outside = (_cpu_busy_s() - self.busy0) - (_children_cpu_s() + _self_cpu_s() - self.mine0)
        self.outside = min(1.0, max(0.0, outside / (wall * (os.cpu_count() or 1))))
