"""The SimPy engine: data-parallel training steps, task by task.

A step is a :class:`StepProgram`: compute tasks every rank runs in order (forward and
backward layers, optimizer) and communication ops on one FIFO stream. A compute task
may *wait* for comm ops (the optimizer waits for every bucket; an FSDP layer's forward
waits for its all-gather) and *launches* comm ops when it ends (a layer's backward
completes the buckets whose last gradient it produced). A comm op starts once every
rank has launched it and the stream is free (ops on one communicator run one after
another), and lasts what the :class:`~dpsim.collectives.CollectiveModel` says. While a
collective runs, compute progresses ``1 + overlap_slowdown`` times slower
(communication kernels take SMs, or CPU threads for gloo); and, the other way round,
while any rank computes, a collective progresses ``1 + comm_slowdown`` times slower
(compute competes for the cores gloo's threads run on, or for SMs and memory
bandwidth). ``comm_slowdown`` is 0 unless a calibration measured it, and then the
engine's schedule is exactly the one it plays without it.

A comm op names its communicator (:attr:`CommOp.group`): all ranks, or a sub-group
such as the GPUs of one node (FSDP hybrid sharding); the ops of every communicator
share the one FIFO stream. The engine knows no strategy: :mod:`dpsim.strategies` builds
the programs (DDP, ZeRO, FSDP, with gradient accumulation and activation checkpointing).

Identical ranks are one rank: the engine simulates one process per *distinct* rank
(``rank_compute_scale``), so a homogeneous 65,536-GPU job costs what one rank costs.
This engine is the reference: ``predict`` plays a homogeneous job with the exact
SimPy-free player :func:`dpsim.engine.play.play_program`, tested against it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from dpsim.collectives.ops import CollectiveModel
from dpsim.engine.program import CommOp, StepProgram
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass

if TYPE_CHECKING:
    import simpy


@frozen_dataclass
class TraceEvent:
    """One interval of activity on one rank."""

    rank: int
    """Rank group index (0 for a homogeneous job)."""
    step: int
    """Training step index."""
    kind: str
    """``forward``, ``backward``, ``optimizer``, ``allreduce``, ..."""
    name: str
    """Layer name, or the comm op's name."""
    start_s: float
    """Start time."""
    end_s: float
    """End time."""
    bucket: int | None = None
    """Comm op index for communication events."""


@frozen_dataclass
class StepTiming:
    """Timing of one simulated step.

    Phases are rank 0's; the step ends when the *last* rank finishes its optimizer.
    """

    step_time_s: float
    """From the first rank's step start to the last rank's step end."""
    forward_s: float
    """Forward compute on rank 0 (wall time, slowdown included)."""
    backward_s: float
    """Backward compute on rank 0 (wall time, slowdown included, recompute too)."""
    optimizer_s: float
    """Optimizer step on rank 0."""
    comm_s: float
    """Sum of the step's collectives' durations."""
    exposed_comm_s: float
    """Time in which a collective ran and rank 0 computed nothing."""


@frozen_dataclass
class SimulationResult:
    """All steps of a simulation plus its trace."""

    steps: tuple[StepTiming, ...]
    """One entry per simulated step."""
    trace: Sequence[TraceEvent]
    """Every interval, for timelines: a tuple, or (from :func:`dpsim.engine.play.play_program`)
    a sequence that builds its events when first read and equals the tuple of them."""


class _Rank:
    """A rank's compute, slowed while communication is active."""

    def __init__(self, env: simpy.Environment, slowdown: float, stream: "_Stream | None" = None):
        self.env, self.slowdown = env, slowdown
        self.comm_active = False
        self._changed: simpy.Event | None = None
        self.stream = stream
        """Told when this rank starts or stops computing (it slows the collectives)."""

    def compute(self, duration_s: float):
        """Generator: run ``duration_s`` of compute, re-rating whenever comm starts or stops."""
        if self.stream is None:
            yield from self._compute(duration_s)
            return
        self.stream.computing(+1)
        try:
            yield from self._compute(duration_s)
        finally:
            self.stream.computing(-1)

    def _compute(self, duration_s: float):
        remaining = duration_s
        while remaining > 1e-15:
            rate = 1.0 / (1.0 + self.slowdown) if self.comm_active else 1.0
            start = self.env.now
            timer = self.env.timeout(remaining / rate)
            if not self.slowdown:
                yield timer
                return
            self._changed = self.env.event()
            fired = yield timer | self._changed
            self._changed = None
            if timer in fired:
                return
            remaining -= (self.env.now - start) * rate

    def set_comm(self, active: bool) -> None:
        self.comm_active = active
        if self._changed is not None and not self._changed.triggered:
            self._changed.succeed()


class _Stream:
    """The communication stream's progress, slowed while any rank computes (``comm_slowdown``)."""

    def __init__(self, env: simpy.Environment, slowdown: float):
        self.env, self.slowdown = env, slowdown
        self.busy = 0
        self._changed: simpy.Event | None = None

    def computing(self, delta: int) -> None:
        before = self.busy > 0
        self.busy += delta
        if (self.busy > 0) != before and self._changed is not None and not self._changed.triggered:
            self._changed.succeed()

    def run(self, duration_s: float):
        """Generator: ``duration_s`` of communication, re-rated whenever compute starts or stops."""
        remaining = duration_s
        while remaining > 1e-15:
            rate = comm_rate(self.slowdown, self.busy > 0)
            start = self.env.now
            timer = self.env.timeout(remaining / rate)
            self._changed = self.env.event()
            fired = yield timer | self._changed
            self._changed = None
            if timer in fired:
                return
            remaining -= (self.env.now - start) * rate


class PlayedCollectives:
    """``collectives`` with the duration one engine run gave each op of a program.

    With a ``comm_slowdown`` a collective lasts longer than its model says while ranks
    compute. The per-rank replay (:mod:`dpsim.engine.replay`) schedules collectives with
    fixed durations, so it plays them with the durations of the noise-free run (exact when
    the ranks are identical; an approximation when their compute differs). Anything else
    is the wrapped model's.
    """

    def __init__(self, collectives: CollectiveModel, durations_s: dict[CommOp, float]):
        self._collectives = collectives
        self._durations_s = dict(durations_s)

    def __getattr__(self, name: str):
        return getattr(self._collectives, name)

    def played_time_s(self, op: CommOp) -> float | None:
        """The played duration of ``op`` (``None`` for an op of another program)."""
        return self._durations_s.get(op)


def played_durations(program: StepProgram, sim: SimulationResult) -> dict[CommOp, float]:
    """Each comm op's duration in the last simulated step (the steady state)."""
    last = max((e.step for e in sim.trace), default=0)
    return {program.comms[e.bucket]: e.end_s - e.start_s for e in sim.trace
            if e.step == last and e.bucket is not None and e.kind not in COMPUTE_KINDS}


def comm_op_time_s(collectives: CollectiveModel, op: CommOp) -> float:
    """Duration of ``op`` on its communicator: ``collectives.time`` for ``world``, else
    the sub-communicator's model (``collectives.group(name)``); the played duration when
    ``collectives`` is a :class:`PlayedCollectives`."""
    played = getattr(collectives, "played_time_s", None)
    if played is not None:
        t = played(op)
        if t is not None:
            return t
    if op.group == "world":
        return collectives.time(op.op, op.size_bytes).time_s
    group = getattr(collectives, "group", None)
    if group is None:
        raise ConfigError(
            f"comm op {op.name!r} runs on communicator {op.group!r}, but the collective model has no "
            f"sub-communicators; use dpsim.collectives.groups.GroupCollectives")
    return group(op.group).time(op.op, op.size_bytes).time_s


def comm_rate(comm_slowdown: float, computing: bool) -> float:
    """Seconds of a collective's modelled time done per second of wall time: ``1 / (1 + comm_slowdown)``
    while compute runs beside it, else 1.

    The one rule every engine applies to a measured ``comm_slowdown`` (this module's
    ``_Stream``, :mod:`dpsim.engine.play` and the pipeline engine
    :func:`dpsim.engine.pipeline.run_pipeline`), so the DDP path and the layout path slow a
    collective by the same calibration in the same way.
    """
    return 1.0 / (1.0 + comm_slowdown) if computing else 1.0


def check_comm_slowdown(comm_slowdown: float) -> None:
    """Refuse a ``comm_slowdown`` that is not a number >= 0 (one line, the value named)."""
    if not comm_slowdown >= 0:
        raise ConfigError(f"comm slowdown: {comm_slowdown} is not valid; expected a number >= 0")


def check_run_arguments(steps: int, overlap_slowdown: float, comm_slowdown: float,
                        rank_compute_scale: Sequence[float] | Sequence[Sequence[float]]) -> list[list[float]]:
    """:func:`run_program`'s arguments checked; the compute factors as one row per step."""
    if steps < 1:
        raise ConfigError(f"--steps: {steps} is not valid; expected an integer >= 1")
    if overlap_slowdown < 0:
        raise ConfigError(f"--overlap-slowdown: {overlap_slowdown} is not valid; expected a number >= 0")
    check_comm_slowdown(comm_slowdown)
    scales = [list(row) if isinstance(row, Sequence) else None for row in rank_compute_scale]
    if all(s is None for s in scales):
        per_step = [list(rank_compute_scale)] * steps  # type: ignore[list-item]
    else:
        per_step = [list(row) for row in rank_compute_scale]  # type: ignore[arg-type]
        if len(per_step) != steps or len({len(r) for r in per_step}) != 1:
            raise ConfigError("rank_compute_scale: give one factor per rank, or one row of them per step")
    if len(per_step[0]) < 1 or any(not (f > 0) for row in per_step for f in row):
        raise ConfigError("rank_compute_scale: every factor must be a number > 0")
    return per_step


def run_program(
    program: StepProgram,
    collectives: CollectiveModel,
    *,
    steps: int = 1,
    overlap_slowdown: float = 0.0,
    rank_compute_scale: Sequence[float] | Sequence[Sequence[float]] = (1.0,),
    comm_slowdown: float = 0.0,
) -> SimulationResult:
    """Simulate ``steps`` repetitions of ``program`` on every distinct rank.

    ``rank_compute_scale`` multiplies each rank's compute: one factor per distinct rank
    (the same every step), or one row per step of one factor per rank.
    ``comm_slowdown``: a collective runs ``1 + comm_slowdown`` times slower while any rank
    computes (0: collectives last what the model says; see the module docstring).
    """
    # Imported here: predict plays homogeneous jobs without SimPy and skips its import.
    import simpy

    per_step = check_run_arguments(steps, overlap_slowdown, comm_slowdown, rank_compute_scale)
    n_ranks = len(per_step[0])

    env = simpy.Environment()
    trace: list[TraceEvent] = []
    n_ops = len(program.comms)
    comm_time = [comm_op_time_s(collectives, c) for c in program.comms]
    stream = _Stream(env, comm_slowdown) if comm_slowdown > 0 else None
    ranks = [_Rank(env, overlap_slowdown, stream) for _ in range(n_ranks)]
    # launched[s][i][r]: rank r launched op i of step s; finished[s][i]: op i of step s ended.
    launched = [[[env.event() for _ in range(n_ranks)] for _ in range(n_ops)] for _ in range(steps)]
    finished = [[env.event() for _ in range(n_ops)] for _ in range(steps)]
    records: list[list[dict]] = [[{} for _ in range(n_ranks)] for _ in range(steps)]

    def rank_process(r: int):
        rank = ranks[r]
        for s in range(steps):
            scale = per_step[s][r]
            rec = records[s][r]
            rec["start"] = env.now
            rec.update(forward=0.0, backward=0.0, optimizer=0.0)
            for i in program.launch_at_start:
                launched[s][i][r].succeed()
            for task in program.tasks:
                for i in task.wait_for:
                    if not finished[s][i].triggered:
                        yield finished[s][i]
                t0 = env.now
                yield from rank.compute(task.duration_s * scale)
                bucket = "optimizer" if task.kind == "optimizer" else "forward" if task.kind == "forward" else "backward"
                rec[bucket] += env.now - t0
                trace.append(TraceEvent(rank=r, step=s, kind=task.kind, name=task.name, start_s=t0, end_s=env.now))
                for i in task.launch_after:
                    launched[s][i][r].succeed()
            rec["end"] = env.now

    def comm_process():
        for s in range(steps):
            for i in program.launch_order:
                yield simpy.AllOf(env, launched[s][i])
                start = env.now
                for rank in ranks:
                    rank.set_comm(True)
                if stream is None:
                    yield env.timeout(comm_time[i])
                else:
                    yield from stream.run(comm_time[i])
                for rank in ranks:
                    rank.set_comm(False)
                c = program.comms[i]
                trace.append(TraceEvent(rank=0, step=s, kind=c.kind, name=c.name,
                                        start_s=start, end_s=env.now, bucket=i))
                finished[s][i].succeed()

    for r in range(n_ranks):
        env.process(rank_process(r))
    env.process(comm_process())
    env.run()
    return summarise(records, trace, sum(comm_time), played=stream is not None)


COMPUTE_KINDS = frozenset({"forward", "backward", "recompute", "optimizer"})
"""Trace kinds that are compute (anything else is a collective)."""


def summarise(records: list[list[dict]], trace: list[TraceEvent], comm_s: float, *,
              played: bool = False) -> SimulationResult:
    """Step timings from each rank's step records (``start``, ``end``, ``forward``, ``backward``,
    ``optimizer``) and the trace; ``played``: a collective's time is what it took (slowed by
    compute), else ``comm_s``."""
    by_step: dict[int, tuple[list, list]] = {}
    for e in trace:
        busy, comm = by_step.setdefault(e.step, ([], []))
        if e.kind in COMPUTE_KINDS:
            if e.rank == 0:
                busy.append((e.start_s, e.end_s))
        else:
            comm.append((e.start_s, e.end_s))
    timings = tuple(step_timing(recs, *by_step.get(s, ([], [])), comm_s, played=played)
                    for s, recs in enumerate(records))
    return SimulationResult(steps=timings, trace=tuple(trace))


def step_timing(recs: list[dict], busy: list[tuple[float, float]], comm: list[tuple[float, float]],
                comm_s: float, *, played: bool = False) -> StepTiming:
    """One step's timing from every rank's record of it, rank 0's compute intervals (``busy``)
    and the collectives' (``comm``, in stream order); see :func:`summarise`."""
    r0 = recs[0]
    return StepTiming(
        step_time_s=max(r["end"] for r in recs) - min(r["start"] for r in recs),
        forward_s=r0["forward"],
        backward_s=r0["backward"],
        optimizer_s=r0["optimizer"],
        comm_s=sum(b - a for a, b in comm) if played else comm_s,
        exposed_comm_s=uncovered_s(comm, busy),
    )


def _union(intervals: list[tuple[float, float]]) -> list[list[float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def uncovered_s(intervals: list[tuple[float, float]], cover: list[tuple[float, float]]) -> float:
    """Length of the union of ``intervals`` not covered by the union of ``cover``.

    Both unions are sorted and disjoint, so one pass over them subtracts every overlap in
    ascending order; a pair that does not overlap would subtract 0, so the sum is the one
    every pair gives (bit for bit), in linear time.
    """
    covered = _union(cover)
    total, j, n = 0.0, 0, len(covered)
    for a, b in _union(intervals):
        length = b - a
        while j < n and covered[j][1] <= a:
            j += 1
        k = j
        while k < n and covered[k][0] < b:
            c, d = covered[k]
            length -= max(0.0, min(b, d) - max(a, c))
            k += 1
        total += length
    return total
