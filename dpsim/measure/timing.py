"""Timing plumbing of the calibration harness: clocks, the watchdog, progress steps.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import threading
import time
from typing import Callable

import torch

Emit = Callable[[dict], None]


# ----------------------------------------------------------------------------- plumbing


STARTUP_GRACE_S = 60.0
"""Joining the process group may take at least this long (ranks of a multi-node job
start at different times) whatever ``timeout_s`` is."""


class Watchdog:
    """Ends the process when no step has begun or ended for ``timeout_s`` seconds.

    Until the first step has ended (the process group is up) the limit is at least
    :data:`STARTUP_GRACE_S`.
    """

    def __init__(self, rank: int, timeout_s: float):
        self.rank, self.timeout_s = rank, timeout_s
        self.started = False
        self.label = "start-up"
        self.last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dpsim-watchdog", daemon=True)
        self._thread.start()

    def beat(self, label: str) -> None:
        self.label, self.last = label, time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            idle = time.monotonic() - self.last
            if idle > (self.timeout_s if self.started else max(self.timeout_s, STARTUP_GRACE_S)):
                sys.stderr.write(f"dpsim: error: calibrate: rank {self.rank}: no progress for {idle:.0f} s "
                                 f"during {self.label}; a rank has died or hung; aborting, no profile written\n")
                sys.stderr.flush()
                os._exit(3)


class Clock:
    """Wall time on CPU (or, with ``thread_cpu``, the calling thread's CPU time), CUDA events on
    the current stream on GPU."""

    def __init__(self, device: torch.device, *, thread_cpu: bool = False):
        self.cuda = device.type == "cuda"
        self.thread_cpu = thread_cpu and not self.cuda
        self._now = time.thread_time if self.thread_cpu else time.perf_counter

    def start(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return self._now()

    def stop(self, start) -> float:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        return self._now() - start

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def kernel_clock(device: torch.device) -> Clock:
    """The clock of a kernel's own time: CUDA events on GPU; on a CPU rank with one intra-op
    thread, that thread's CPU time (the kernel runs on it; the time the scheduler gives other
    processes meanwhile is not the kernel's: on a 2-core box at load average 20-29, wall-clock
    kernel times predicted a model's step 78 % off its wall-clock step timed at another moment
    under another load); with several threads wall time (their CPU times add up across cores)."""
    return Clock(device, thread_cpu=device.type == "cpu" and torch.get_num_threads() == 1)


def _fault() -> tuple[str, int, int] | None:
    raw = os.environ.get("DPSIM_CALIBRATE_FAULT")
    if not raw:
        return None
    kind, rank, step = raw.split(":")
    return kind, int(rank), int(step)


class Steps:
    """Counts steps, reports them (``emit``) and feeds the watchdog; injects test faults."""

    def __init__(self, rank: int, emit: Emit, watchdog: Watchdog | None):
        self.rank, self.emit, self.watchdog = rank, emit, watchdog
        self.index = 0
        self.fault = _fault()

    def begin(self, label: str) -> None:
        if self.watchdog:
            self.watchdog.beat(label)
        if self.fault and self.fault[1] == self.rank and self.index >= self.fault[2]:
            if self.fault[0] == "die":
                os._exit(17)
            if self.fault[0] == "hang":
                while True:
                    time.sleep(3600)
        self.emit({"event": "begin", "rank": self.rank, "index": self.index, "label": label})

    def end(self, label: str) -> None:
        if self.watchdog:
            self.watchdog.beat(label)
            self.watchdog.started = True
        self.emit({"event": "end", "rank": self.rank, "index": self.index, "label": label})
        self.index += 1

    def grow(self, by: int) -> None:
        """The plan has ``by`` more steps than announced (a measurement repeats until it converges)."""
        self.emit({"event": "grow", "rank": self.rank, "by": by})


def human_bytes(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


def _median_time(fn, clock: Clock, *, warmup: int = 2, repeats: int = 5, batch_s: float = 0.02,
                 max_inner: int = 1000) -> float:
    for _ in range(warmup):
        fn()
    clock.sync()
    t = clock.start()
    fn()
    est = max(clock.stop(t), 1e-7)
    inner = int(min(max_inner, max(1, math.ceil(batch_s / est))))
    times = []
    for _ in range(repeats):
        clock.sync()
        t = clock.start()
        for _ in range(inner):
            fn()
        times.append(clock.stop(t) / inner)
    return statistics.median(times)
