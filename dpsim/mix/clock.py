"""The job mix's clock: every job's place in its phase as arrays, moved to the next phase end at once.

A day of hundreds of jobs crossing the network is millions of events (each job's compute and
communication phases, simulated step by step while arrivals keep changing who shares what), and at
every event the loop finds the first phase end among the running jobs and moves every one of them to
it. Done job by job in Python that was most of a large mix's time (O(jobs) interpreted steps an event);
here it is one pass over arrays, compiled where numba is installed (as the group solves are,
:mod:`dpsim.network.maxmin_jit`), numpy's otherwise.

The arithmetic is the one the loop did job by job, so the numbers are the same to the last bit: a
phase ends at ``now + left / rate`` and moving by ``dt`` leaves ``left - dt * rate``, with ``rate`` 1
while computing (``x / 1.0`` and ``x * 1.0`` are ``x`` exactly), the job's speed while communicating,
and 0 for a job that does not move (solo, stopped, gone); the time a job spends contended, and on the
link that binds it, is added ``dt`` by ``dt`` as before.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from dpsim.network import maxmin_jit


class Pace:
    """Every job's phase as the clock reads it (one entry per job of the mix)."""

    def __init__(self, n: int):
        self.n = n
        self.left = np.zeros(n)
        """Seconds (computing) or bytes (communicating) left in each job's phase."""
        self.rate = np.zeros(n)
        """1 computing, the job's speed (bytes of message per second) communicating, 0 otherwise."""
        self.speed = np.zeros(n)
        """Each job's speed in its latest group (set before or as it starts communicating)."""
        self.comm = np.zeros(n, dtype=bool)
        """Whether each job is communicating."""
        self.bind = np.full(n, -1, dtype=np.int64)
        """The link binding each job's slowest flow in its latest group that other jobs cross too (-1: none)."""
        self.shared = np.zeros(n, dtype=bool)
        """Whether each job's latest group holds other jobs."""
        self.others = np.zeros(n, dtype=np.int64)
        """The jobs of that group on its binding link (their number in the simulation's list of such sets)."""
        self.touched = np.zeros(n, dtype=bool)
        """Jobs whose phase or group changed since the clock last moved (their blame is read again)."""
        self.any_touched = False
        self.version = 0
        """Bumps when a job becomes solo or stops being solo, starts or stops (the live jobs change)."""
        self.contended = np.zeros(n)
        """Time each job communicated in a group with other jobs."""
        self.adds_contended = np.zeros(n, dtype=bool)
        """Whether it is doing so now."""
        self.on_entry = np.zeros(n)
        """Time on the binding link of the blame entry each job adds to now (the entry's own count is
        written back when the job's link changes)."""
        self.adds_entry = np.zeros(n, dtype=bool)
        """Whether it is adding to it now."""
        self.entry_link = np.full(n, -1, dtype=np.int64)
        """The link of the blame entry each job adds to (-1: none yet)."""
        self.entry_others = np.full(n, -1, dtype=np.int64)
        """The number of the jobs on it last merged into that entry."""
        self.rank = np.full(n, n, dtype=np.int64)
        """Each running job's place in the loop's order of its running jobs (``n``: not running): of
        phases that end at once, the loop takes the first in that order."""
        kernels = _kernels()
        self._next_end, self._advance, self._reblame, self._set_group = kernels if kernels is not None else (
            _next_end_numpy, _advance_numpy, _reblame_numpy, _set_group_numpy)

    def set_order(self, running) -> None:
        """The running jobs' order (a set's iteration order: the same until a job starts or stops)."""
        self.rank[:] = self.n
        order = np.fromiter(running, dtype=np.int64, count=len(running))
        self.rank[order] = np.arange(len(order))

    def set_phase(self, i: int, phase: str | None) -> None:
        """Job ``i`` now computes, communicates, runs solo (``solo``) or has stopped (``None``)."""
        if phase == "comm":
            self.rate[i] = self.speed[i]
            self.comm[i] = True
        else:
            self.rate[i] = 1.0 if phase == "compute" else 0.0
            self.comm[i] = False
        self.touched[i] = self.any_touched = True

    def set_group(self, jobs: np.ndarray, speeds: np.ndarray, bind: np.ndarray, shared: np.ndarray,
                  others: np.ndarray) -> None:
        """A group's shares for its communicating jobs."""
        self._set_group(jobs, speeds, bind, shared, others, self.speed, self.rate, self.bind, self.shared, self.others,
                        self.touched)
        self.any_touched = True

    def next_end(self, now: float) -> tuple[float, int]:
        """(the first phase end, the job whose phase ends then, or -1): of several, the first in
        :attr:`rank`'s order."""
        t, at = self._next_end(self.left, self.rate, self.rank, float(now))
        return float(t), int(at)

    def reblame(self) -> np.ndarray:
        """The blame state of the jobs touched since the clock last moved (then none is): whether each
        adds to its contended time and to its binding link's entry; returns those of them that add to
        another entry than before, or merge other jobs into it (the loop's Python does that)."""
        self.any_touched = False
        return self._reblame(self.touched, self.comm, self.shared, self.bind, self.others, self.adds_contended,
                             self.adds_entry, self.entry_link, self.entry_others)

    def advance(self, dt: float) -> None:
        """Every moving job ``dt`` seconds on; contended and blamed time added."""
        self._advance(self.left, self.rate, float(dt), self.contended, self.adds_contended, self.on_entry,
                      self.adds_entry)


def _set_group_numpy(jobs, speeds, bind, shared, others, speed_of, rate_of, bind_of, shared_of, others_of,
                     touched) -> None:
    speed_of[jobs] = speeds
    rate_of[jobs] = speeds
    bind_of[jobs] = bind
    shared_of[jobs] = shared
    others_of[jobs] = others
    touched[jobs] = True


def _set_group_loop(jobs, speeds, bind, shared, others, speed_of, rate_of, bind_of, shared_of, others_of,
                    touched):  # pragma: no cover (compiled by numba)
    for k in range(jobs.size):
        j = jobs[k]
        speed_of[j] = speeds[k]
        rate_of[j] = speeds[k]
        bind_of[j] = bind[k]
        shared_of[j] = shared[k]
        others_of[j] = others[k]
        touched[j] = True


_SCAN_IN_PYTHON = 64
"""Without numba, up to this many jobs the next phase end is found by a Python scan of the jobs (as the
loop did), past it by numpy's passes (a few microseconds each, whatever the count)."""


def _next_end_numpy(left: np.ndarray, rate: np.ndarray, rank: np.ndarray, now: float) -> tuple[float, int]:
    if len(left) <= _SCAN_IN_PYTHON:
        best, at = math.inf, -1
        for i, (x, r, o) in enumerate(zip(left.tolist(), rate.tolist(), rank.tolist())):
            if r > 0.0:
                e = now + x / r
                if e < best or (e == best and at >= 0 and o < rank[at]):
                    best, at = e, i
        return (best, at) if best < math.inf else (math.inf, -1)
    active = rate > 0
    ends = np.full(len(left), math.inf)
    np.divide(left, rate, out=ends, where=active)
    ends += now
    t = float(np.fmin.reduce(ends)) if len(ends) else math.inf  # fmin: a NaN end is no end, as `<` skips it
    if not t < math.inf:
        return math.inf, -1
    at = (ends == t).nonzero()[0]
    return t, int(at[np.argmin(rank[at])]) if len(at) > 1 else int(at[0])


def _reblame_numpy(touched, comm, shared, bind, others, adds_contended, adds_entry, entry_link,
                   entry_others) -> np.ndarray:
    jobs = touched.nonzero()[0]
    touched[jobs] = False
    adds = comm[jobs] & shared[jobs]
    adds_contended[jobs] = adds
    adds &= bind[jobs] >= 0
    adds_entry[jobs] = adds
    mine = jobs[adds]
    return mine[(entry_link[mine] != bind[mine]) | (entry_others[mine] != others[mine])]


def _advance_numpy(left, rate, dt, contended, adds_contended, on_entry, adds_entry) -> None:
    left -= dt * rate  # a job that does not move: left - 0.0, which is left
    np.add(contended, dt, out=contended, where=adds_contended)
    np.add(on_entry, dt, out=on_entry, where=adds_entry)


def _next_end_loop(left, rate, rank, now):  # pragma: no cover (compiled by numba)
    best = np.inf
    at = -1
    for i in range(left.size):
        r = rate[i]
        if r > 0.0:
            e = now + left[i] / r
            if e < best or (e == best and at >= 0 and rank[i] < rank[at]):
                best = e
                at = i
    if not best < np.inf:
        return np.inf, -1
    return best, at


def _reblame_loop(touched, comm, shared, bind, others, adds_contended, adds_entry, entry_link,
                  entry_others):  # pragma: no cover (compiled by numba)
    out = np.empty(touched.size, np.int64)
    k = 0
    for i in range(touched.size):
        if touched[i]:
            touched[i] = False
            adds = comm[i] and shared[i]
            adds_contended[i] = adds
            adds = adds and bind[i] >= 0
            adds_entry[i] = adds
            if adds and (entry_link[i] != bind[i] or entry_others[i] != others[i]):
                out[k] = i
                k += 1
    return out[:k]


def _advance_loop(left, rate, dt, contended, adds_contended, on_entry, adds_entry):  # pragma: no cover
    for i in range(left.size):
        r = rate[i]
        if r > 0.0:
            left[i] -= dt * r
        if adds_contended[i]:
            contended[i] += dt
        if adds_entry[i]:
            on_entry[i] += dt


def _kernels():
    """The two passes compiled, or ``None`` where numba is not installed (looked up through
    :func:`~dpsim.network.maxmin_jit.compiled` on every call, as the group solves are)."""
    return None if maxmin_jit.compiled() is None else _compiled()


@lru_cache(maxsize=1)
def _compiled():
    import numba

    return (numba.njit(cache=True)(_next_end_loop), numba.njit(cache=True)(_advance_loop),
            numba.njit(cache=True)(_reblame_loop), numba.njit(cache=True)(_set_group_loop))
