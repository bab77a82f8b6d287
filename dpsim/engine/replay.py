"""The fast per-rank replay of a step program: exact engine semantics without a SimPy process per rank.

It plays a :class:`~dpsim.engine.program.StepProgram` with the semantics of
:func:`dpsim.engine.simulate.run_program` (same comm FIFO, same "a collective starts once
every rank launched it and the stream is free", same compute slowdown while a collective
runs, each rank starting its next step right after its own last task), but without a
SimPy process per rank:

* **Causal order without events.** Ops run one after another on the stream, so when
  ranks are advanced segment by segment (a segment = consecutive compute tasks between
  two launch/wait points), every collective that can overlap a segment's compute was
  launched by an earlier segment and is already scheduled; an op launched by this
  segment starts after every rank has finished it. Each rank's progress through a
  segment is therefore a closed-form inversion of the piecewise-linear "work done by
  time t" curve (rate 1 outside collectives, 1/(1+slowdown) inside), vectorised over
  ranks and Monte-Carlo samples with numpy.
* **Only the extreme ranks drive the schedule.** A rank's launch times are monotone in
  its step start and its compute factor, so a rank that starts no later and computes
  no slower than another never sets a collective's start: the schedule is decided by
  the Pareto front of (step start, factor) -- O(log N) ranks for i.i.d. noise. When the
  step ends synchronously (the last task waits for the last collective and launches
  nothing, as DDP's optimizer does) every other rank's end is one closed-form step from
  that collective's end, so the middle of the step is played for the front only.
* **Identical ranks are one rank.** Callers collapse ranks with equal factors into one
  column (:func:`dpsim.variability.monte_carlo.monte_carlo` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from dpsim.collectives.ops import CollectiveModel
from dpsim.engine.program import StepProgram
from dpsim.engine.simulate import comm_op_time_s
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass

# ----------------------------------------------------------------------------- the fast path

@dataclass(frozen=True)
class _Segment:
    wait_for: tuple[int, ...]
    duration_s: float
    launch_after: tuple[int, ...]


def program_segments(program: StepProgram) -> tuple[_Segment, ...]:
    """Consecutive tasks merged where nothing is launched or waited for in between.

    A rank's factor is the same for every task of a step, and compute progress is
    additive, so a merged segment ends exactly when its last task would.
    """
    segs: list[_Segment] = []
    for task in program.tasks:
        if segs and not segs[-1].launch_after and not task.wait_for:
            last = segs[-1]
            segs[-1] = _Segment(last.wait_for, last.duration_s + task.duration_s, task.launch_after)
        else:
            segs.append(_Segment(task.wait_for, task.duration_s, task.launch_after))
    return tuple(segs)


@frozen_dataclass
class RankRun:
    """Per-step results of :func:`simulate_ranks` for a batch of independent samples."""

    step_start_s: np.ndarray
    """(samples, steps): the first rank's step start."""
    step_end_s: np.ndarray
    """(samples, steps): the last rank's step end."""
    comm_start_s: np.ndarray
    """(samples, steps * ops): collective starts, in stream (FIFO) order."""
    comm_end_s: np.ndarray
    """(samples, steps * ops): collective ends, in stream order."""
    rank_end_s: np.ndarray | None
    """(samples, steps, ranks): every rank's step end, when ``record_ranks`` was set."""
    ranks_simulated: int
    """Distinct rank columns played (after collapsing identical ranks)."""
    max_front: int
    """Largest number of ranks played through the middle of a step (the Pareto front)."""

    @property
    def step_time_s(self) -> np.ndarray:
        """(samples, steps): the engine's step time, first rank's start to last rank's end."""
        return self.step_end_s - self.step_start_s

    @property
    def step_interval_s(self) -> np.ndarray:
        """(samples, steps): time between consecutive step completions (what throughput sees)."""
        ends = self.step_end_s
        return np.diff(ends, axis=1, prepend=0.0)


def _rows_searchsorted(a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Row-wise ``searchsorted(a[b], v[b], side='right')`` for 2-D ``a`` and ``v``."""
    if a.shape[0] == 1:
        return np.searchsorted(a[0], v[0], side="right")[None, :]
    return np.stack([np.searchsorted(a[i], v[i], side="right") for i in range(a.shape[0])])


class _Stream:
    """The communication stream of a batch of samples: scheduled ops, in FIFO order."""

    def __init__(self, batch: int, capacity: int, slowdown: float):
        self.start = np.empty((batch, capacity))
        self.end = np.empty((batch, capacity))
        self.free = np.zeros(batch)
        self.m = 0  # ops scheduled
        self.p = 0  # ops before p have ended before every rank still being advanced
        self.slowdown = slowdown
        self.c = slowdown / (1.0 + slowdown)

    def schedule(self, launch_s: np.ndarray, duration_s: float) -> int:
        start = np.maximum(self.free, launch_s)
        end = start + duration_s
        self.start[:, self.m] = start
        self.end[:, self.m] = end
        self.free = end
        self.m += 1
        return self.m - 1

    def advance(self, t0: np.ndarray, work_s: np.ndarray) -> np.ndarray:
        """When each rank, starting at ``t0``, has done ``work_s`` of compute.

        Compute runs at rate 1, or 1/(1+slowdown) while a scheduled collective runs.
        With W(t) = t - c * (collective time before t), c = slowdown/(1+slowdown), the
        end is W^-1(W(t0) + work). Only collectives already scheduled can overlap
        (see the module docstring), so W is known wherever it is needed.
        """
        if self.c == 0.0 or self.m == self.p:
            return t0 + work_s
        tmin = t0.min(axis=1)
        while self.p < self.m and bool(np.all(self.end[:, self.p] <= tmin)):
            self.p += 1
        if self.p == self.m:
            return t0 + work_s
        a, b = self.start[:, self.p:self.m], self.end[:, self.p:self.m]
        length = b - a
        cum = np.concatenate([np.zeros((a.shape[0], 1)), np.cumsum(length, axis=1)], axis=1)
        c = self.c
        # Collective time within the window before t0.
        j = _rows_searchsorted(a, t0) - 1
        jc = np.maximum(j, 0)
        a_j = np.take_along_axis(a, jc, 1)
        inside = np.minimum(t0 - a_j, np.take_along_axis(length, jc, 1))
        comm_before = np.where(j >= 0, np.take_along_axis(cum, jc, 1) + inside, 0.0)
        target = t0 - c * comm_before + work_s
        w_a = a - c * cum[:, :-1]  # W at each collective's start
        w_b = b - c * cum[:, 1:]  # W at each collective's end
        k = _rows_searchsorted(w_a, target) - 1
        kc = np.maximum(k, 0)
        wa_k = np.take_along_axis(w_a, kc, 1)
        wb_k = np.take_along_axis(w_b, kc, 1)
        in_comm = np.take_along_axis(a, kc, 1) + (target - wa_k) * (1.0 + self.slowdown)
        after = np.take_along_axis(b, kc, 1) + (target - wb_k)
        return np.where(k < 0, target, np.where(target <= wb_k, in_comm, after))


def pareto_front(start_s: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """(batch, F) rank indices covering, per row, every rank not dominated in (start, factor).

    Rank q dominates r when it starts no earlier and computes no faster; a dominated
    rank never launches a collective later than its dominator. Rows with a smaller
    front are padded with dominated ranks (harmless: they are simply played too).
    """
    order = np.lexsort((-factor, -start_s), axis=-1)
    f_sorted = np.take_along_axis(factor, order, 1)
    running = np.maximum.accumulate(f_sorted, axis=1)
    keep = np.empty_like(f_sorted, dtype=bool)
    keep[:, 0] = True
    keep[:, 1:] = f_sorted[:, 1:] > running[:, :-1]
    width = int(keep.sum(axis=1).max())
    first = np.argsort(~keep, axis=1, kind="stable")[:, :width]
    return np.take_along_axis(order, first, 1)


def simulate_ranks(
    program: StepProgram,
    collectives: CollectiveModel,
    factors: np.ndarray | Callable[[int], np.ndarray],
    *,
    steps: int | None = None,
    overlap_slowdown: float = 0.0,
    record_ranks: bool = False,
    use_front: bool = True,
) -> RankRun:
    """Play ``steps`` steps of ``program`` on every rank, each with its own compute factor.

    Parameters
    ----------
    program : StepProgram
        What every rank does in one step (e.g. a strategy's, :func:`dpsim.strategies.build_step_program`).
    collectives : CollectiveModel
        Cost of each comm op (over all ranks).
    factors : numpy.ndarray or callable
        Compute factor of each rank in each step: ``(steps, ranks)`` for one sample,
        ``(samples, steps, ranks)`` for several, or ``f(step) -> (samples, ranks)``
        (then ``steps`` is required). The same meaning as
        :func:`dpsim.engine.run_program`'s per-step ``rank_compute_scale``.
    steps : int, optional
        Steps, when ``factors`` is a callable.
    overlap_slowdown : float
        Compute slowdown while a collective runs.
    record_ranks : bool
        Keep every rank's step end (memory: samples x steps x ranks).
    use_front : bool
        Play only the Pareto front through the middle of a synchronous step (exact;
        ``False`` plays every rank, for checks).

    Returns
    -------
    RankRun
        Step starts and ends and the collective schedule, per sample.
    """
    if callable(factors):
        if steps is None:
            raise ConfigError("simulate_ranks: give steps when factors is a callable")
        draw = factors
    else:
        arr = np.asarray(factors, dtype=float)
        if arr.ndim == 2:
            arr = arr[None]
        if arr.ndim != 3:
            raise ConfigError("factors: expected (steps, ranks) or (samples, steps, ranks)")
        steps = arr.shape[1] if steps is None else steps
        if arr.shape[1] != steps:
            raise ConfigError(f"factors: {arr.shape[1]} rows of steps, but steps={steps}")
        draw = lambda s: arr[:, s, :]  # noqa: E731
    if steps < 1:
        raise ConfigError(f"--steps: {steps} is not valid; expected an integer >= 1")
    if overlap_slowdown < 0:
        raise ConfigError(f"--overlap-slowdown: {overlap_slowdown} is not valid; expected a number >= 0")

    n_ops = len(program.comms)
    position = {op: k for k, op in enumerate(program.launch_order)}
    # Each op on its own communicator (hybrid sharding runs intra- and inter-node groups).
    op_time = [comm_op_time_s(collectives, c) for c in program.comms]
    segs = program_segments(program)
    last = segs[-1]
    # Synchronous end: the last segment waits for the last op, which the segment before it
    # launched (so every rank is idle when that op ends) and launches nothing.
    sync_end = (use_front and n_ops > 0 and len(segs) >= 2 and not last.launch_after
                and program.launch_order[-1] in last.wait_for
                and program.launch_order[-1] in segs[-2].launch_after)
    middle = segs[:-1] if sync_end else segs

    first = np.asarray(draw(0), dtype=float)
    if first.ndim != 2 or first.shape[1] < 1:
        raise ConfigError("factors: each step needs a (samples, ranks) array with at least one rank")
    batch, n_ranks = first.shape
    stream = _Stream(batch, steps * n_ops, overlap_slowdown)
    t = np.zeros((batch, n_ranks))
    step_start = np.empty((batch, steps))
    step_end = np.empty((batch, steps))
    rank_end = np.empty((batch, steps, n_ranks)) if record_ranks else None
    max_front = 0

    for s in range(steps):
        factor = first if s == 0 else np.asarray(draw(s), dtype=float)
        if factor.shape != (batch, n_ranks) or not np.all(factor > 0):
            raise ConfigError("factors: every step needs the same (samples, ranks) shape and factors > 0")
        base = s * n_ops
        step_start[:, s] = t.min(axis=1)
        if sync_end:
            idx = pareto_front(t, factor)
            tf, ff = np.take_along_axis(t, idx, 1), np.take_along_axis(factor, idx, 1)
        else:
            tf, ff = t, factor
        max_front = max(max_front, tf.shape[1])

        def launch(ops: Sequence[int], when: np.ndarray) -> None:
            for i in ops:
                k = stream.schedule(when, op_time[i])
                assert k == base + position[i], "ops are scheduled in stream order"

        launch(program.launch_at_start, tf.max(axis=1))
        for seg in middle:
            if seg.wait_for:
                ready = np.max(stream.end[:, [base + position[i] for i in seg.wait_for]], axis=1)
                tf = np.maximum(tf, ready[:, None])
            tf = stream.advance(tf, seg.duration_s * ff)
            launch(seg.launch_after, tf.max(axis=1))
        if sync_end:
            # Every rank finished its previous segment before the last op was launched,
            # so its last segment starts when that op ends.
            ready = np.max(stream.end[:, [base + position[i] for i in last.wait_for]], axis=1)
            t = stream.advance(np.broadcast_to(ready[:, None], (batch, n_ranks)), last.duration_s * factor)
        else:
            t = tf
        step_end[:, s] = t.max(axis=1)
        if rank_end is not None:
            rank_end[:, s, :] = t
    return RankRun(step_start_s=step_start, step_end_s=step_end,
                   comm_start_s=stream.start[:, :stream.m].copy(), comm_end_s=stream.end[:, :stream.m].copy(),
                   rank_end_s=rank_end, ranks_simulated=n_ranks, max_front=max_front)
