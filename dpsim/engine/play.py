"""The fast exact player of a homogeneous job: one rank and its FIFO comm stream, without SimPy.

Every plain ``predict`` (and every sweep point) is a homogeneous job: all ranks run the
same program at the same speed, so the SimPy engine (:func:`~dpsim.engine.simulate.run_program`)
plays one rank. Two actors then make the whole step -- the rank's compute stream and the
communication stream -- and a loop that advances whichever finishes its current piece
first replaces SimPy's event queue, its generators and condition events: llama-2-7b's
DDP step (133 tasks, 226 buckets) x 3 steps plays in ~1.8 ms of CPU instead of ~12 ms
(``python tests/benchmarks/bench_sweep.py`` measures it).

**Same numbers as SimPy, not just close ones.** The loop does the arithmetic the SimPy
engine does, in the same order, so a prediction is bit-for-bit the one SimPy gives (the
golden outputs prove it on ~270 CLI invocations, and ``tests/test_engine_play.py``
checks every strategy and random programs against it):

* a piece of work ends at ``start + remaining / rate``, with ``rate = 1 / (1 + slowdown)``
  while slowed (a division by the rate, as the engine's timers are);
* SimPy re-rates a computing rank whenever a collective ends (``remaining -= elapsed *
  rate``), even when another starts at once and the rate stays the same, and re-rates a
  running collective whenever the rank starts or ends a task (``comm_slowdown``). Each
  such split rounds, so the player splits exactly there and nowhere else: at every event
  of the *other* actor. A split at the instant a piece starts is exact (it subtracts 0);
* a piece whose timer falls on the same instant as the other actor's event ends at its
  timer (SimPy's timer was queued first); after a split, less than 1e-15 s of work left
  ends the piece there, as the engine's ``while remaining > 1e-15`` does; a task or (with
  ``comm_slowdown``) a collective of at most 1e-15 s takes no time;
* the rate of a piece that starts at an instant is the one in force once everything of
  that instant has happened (SimPy re-rates at zero cost when the state changes later in
  the same instant).

Steps are played one after another in absolute time, as SimPy plays them: a steady-state
step repeats the one before it, but ``t0 + d`` rounds differently for every ``t0``, and
the golden outputs hold the engine's own rounding. The trace holds SimPy's events; only
events that end at one instant may be listed in another order than SimPy's queue lists them.

:func:`play_program` hands several distinct ranks (per-rank factors) to SimPy; the
variability model's thousands of ranks go to the vectorised replay (:mod:`dpsim.engine.replay`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from dpsim.collectives.ops import CollectiveModel
from dpsim.engine.program import StepProgram
from dpsim.engine.simulate import (
    COMPUTE_KINDS,
    SimulationResult,
    TraceEvent,
    check_run_arguments,
    comm_op_time_s,
    comm_rate,
    run_program,
    step_timing,
)

_KIND_BUCKET = {"forward": "forward", "optimizer": "optimizer"}
"""Where a task's wall time is booked (anything else is backward: backward, recompute)."""

_EPS_S = 1e-15
"""The SimPy engine's ``while remaining > 1e-15``: less work than this is done."""


def play_program(
    program: StepProgram,
    collectives: CollectiveModel,
    *,
    steps: int = 1,
    overlap_slowdown: float = 0.0,
    rank_compute_scale: Sequence[float] | Sequence[Sequence[float]] = (1.0,),
    comm_slowdown: float = 0.0,
) -> SimulationResult:
    """:func:`~dpsim.engine.simulate.run_program`'s result, played without SimPy when there is
    one distinct rank (see the module docstring); with several, SimPy plays it.

    Same arguments and errors as :func:`~dpsim.engine.simulate.run_program`.
    """
    per_step = check_run_arguments(steps, overlap_slowdown, comm_slowdown, rank_compute_scale)
    if len(per_step[0]) != 1:
        return run_program(program, collectives, steps=steps, overlap_slowdown=overlap_slowdown,
                           rank_compute_scale=rank_compute_scale, comm_slowdown=comm_slowdown)
    return play_homogeneous(program, collectives, scales=[row[0] for row in per_step],
                            overlap_slowdown=overlap_slowdown, comm_slowdown=comm_slowdown)


def play_homogeneous(program: StepProgram, collectives: CollectiveModel, *, scales: Sequence[float],
                     overlap_slowdown: float = 0.0, comm_slowdown: float = 0.0) -> SimulationResult:
    """Play ``len(scales)`` steps of ``program`` on one rank whose compute is ``scales[s]`` times
    the program's in step ``s`` (arguments already checked; see :func:`play_program`)."""
    tasks, comms = program.tasks, program.comms
    n_ops, n_tasks, steps = len(comms), len(tasks), len(scales)
    order = program.launch_order
    position = [0] * n_ops
    for k, i in enumerate(order):
        position[i] = k
    comm_time = _comm_times(program, collectives)
    op_time = [comm_time[i] for i in order]  # by stream position
    durations = [t.duration_s for t in tasks]
    wait_last = [max((position[i] for i in t.wait_for), default=-1) for t in tasks]  # stream position
    launches = [tuple(position[i] for i in t.launch_after) for t in tasks]
    at_start = tuple(position[i] for i in program.launch_at_start)
    bucket_of = [_KIND_BUCKET.get(t.kind, "backward") for t in tasks]
    # summarise() books an interval by its trace kind, whichever actor ran it.
    task_is_compute = [t.kind in COMPUTE_KINDS for t in tasks]
    op_is_compute = [comms[i].kind in COMPUTE_KINDS for i in order]

    slow = 1.0 / (1.0 + overlap_slowdown)
    rank_splits = bool(overlap_slowdown)  # the engine re-rates compute only when it is slowed
    stream_mode = comm_slowdown > 0
    comm_slow = comm_rate(comm_slowdown, True) if stream_mode else 1.0

    total_ops = steps * n_ops
    launched = [False] * total_ops
    # (is a comm op, task index or stream position, step, start, end), in the order SimPy's
    # trace has them (as they end): the trace's events, built if it is read (PlayedTrace).
    spans: list[tuple[bool, int, int, float, float]] = []
    busy: list[list[tuple[float, float]]] = [[] for _ in range(steps)]
    comm: list[list[tuple[float, float]]] = [[] for _ in range(steps)]
    records: list[dict] = []

    inf = float("inf")
    now = 0.0
    # The rank: step s, next task ti; while r_busy, a piece of r_rem work started at r_start
    # (the task at r_t0) runs at r_rate until r_timer.
    s = ti = base = 0
    rec: dict | None = None
    scale = 1.0
    r_busy = False
    r_rem = r_start = r_rate = r_t0 = 0.0
    r_timer = inf
    # The stream: the op at stream position g (counted over steps), same bookkeeping.
    g = 0
    q_busy = False
    q_rem = q_start = q_rate = q_t0 = 0.0
    q_timer = inf

    while True:
        # Everything that happens at `now` without time passing.
        moved = True
        while moved:
            moved = False
            while not r_busy and s < steps:
                if rec is None:
                    rec = {"start": now, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
                    base = s * n_ops
                    scale = scales[s]
                    for k in at_start:
                        launched[base + k] = True
                if ti == n_tasks:
                    rec["end"] = now
                    records.append(rec)
                    rec = None
                    s += 1
                    ti = 0
                    continue
                w = wait_last[ti]
                if w >= 0 and base + w >= g:  # ops end in stream order: the first g have ended
                    break
                d = durations[ti] * scale
                if d > _EPS_S:
                    r_busy = True
                    r_rem = d
                    r_start = r_t0 = now
                    break
                # No work: the task ends as it starts (and books 0 s).
                spans.append((False, ti, s, now, now))
                if task_is_compute[ti]:
                    busy[s].append((now, now))
                else:
                    comm[s].append((now, now))
                for k in launches[ti]:
                    launched[base + k] = True
                ti += 1
                moved = True
            while not q_busy and g < total_ops and launched[g]:
                k = g % n_ops
                d = op_time[k]
                if stream_mode and not d > _EPS_S:
                    spans.append((True, g, g // n_ops, now, now))
                    (busy if op_is_compute[k] else comm)[g // n_ops].append((now, now))
                    g += 1
                    moved = True
                    continue
                q_busy = True
                q_rem = d
                q_start = q_t0 = now
        # A piece that starts (or was split) now runs at the rate in force once the instant
        # has settled.
        if r_busy and r_start == now:
            r_rate = slow if q_busy else 1.0
            r_timer = now + r_rem / r_rate
        if q_busy and q_start == now:
            if stream_mode:
                q_rate = comm_slow if r_busy else 1.0
                q_timer = now + q_rem / q_rate
            else:
                q_timer = now + q_rem
        t = r_timer if r_busy else inf
        if q_busy and q_timer < t:
            t = q_timer
        if t == inf:
            break
        now = t
        r_fire = r_busy and r_timer == t
        q_fire = q_busy and q_timer == t
        # The other actor's event splits a piece in progress (see the module docstring).
        if r_busy and not r_fire and rank_splits:
            r_rem -= (now - r_start) * r_rate
            r_start = now
            if not r_rem > _EPS_S:
                r_fire = True
        if q_busy and not q_fire and stream_mode:
            q_rem -= (now - q_start) * q_rate
            q_start = now
            if not q_rem > _EPS_S:
                q_fire = True
        if q_fire:
            k, step = g % n_ops, g // n_ops
            spans.append((True, g, step, q_t0, now))
            (busy if op_is_compute[k] else comm)[step].append((q_t0, now))
            g += 1
            q_busy = False
        if r_fire:
            spans.append((False, ti, s, r_t0, now))
            if task_is_compute[ti]:
                busy[s].append((r_t0, now))
            else:
                comm[s].append((r_t0, now))
            rec[bucket_of[ti]] += now - r_t0
            for k in launches[ti]:
                launched[base + k] = True
            ti += 1
            r_busy = False

    if s < steps:  # a StepProgram cannot deadlock (every wait is on an op launched before it)
        raise RuntimeError(f"step program deadlocks: step {s} stops before task {tasks[ti].name!r}")
    comm_s = sum(comm_time)
    timings = tuple(step_timing([records[k]], busy[k], comm[k], comm_s, played=stream_mode) for k in range(steps))
    return SimulationResult(steps=timings, trace=PlayedTrace(functools.partial(_trace, spans, program), len(spans)))


def _comm_times(program: StepProgram, collectives: CollectiveModel) -> list[float]:
    """Each comm op's duration (:func:`~dpsim.engine.simulate.comm_op_time_s`), costed once per
    distinct message: a DDP step repeats one bucket size hundreds of times."""
    played = getattr(collectives, "played_time_s", None) is not None  # per op, not per message
    memo: dict = {}
    out = []
    for c in program.comms:
        key = c if played else (c.group, c.op, c.size_bytes)
        t = memo.get(key)
        if t is None:
            t = memo[key] = comm_op_time_s(collectives, c)
        out.append(t)
    return out


class PlayedTrace(Sequence):
    """The trace of a played run, as a sequence of TraceEvents built when first read.

    A prediction's trace is read only to draw its timeline; building thousands of events
    for every sweep point would be half of the player's time. Equal to (and pickled as)
    the tuple of its events. ``build()`` returns that tuple (``length`` events); the pipeline
    engine's trace is one too.
    """

    __slots__ = ("_build", "_events", "_length")

    def __init__(self, build: Callable[[], tuple[TraceEvent, ...]], length: int):
        self._build: Callable[[], tuple[TraceEvent, ...]] | None = build
        self._length = length
        self._events: tuple[TraceEvent, ...] | None = None

    def _built(self) -> tuple[TraceEvent, ...]:
        if self._events is None:
            self._events = self._build()
            self._build = None
            assert len(self._events) == self._length
        return self._events

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index):
        return self._built()[index]

    def __iter__(self):
        return iter(self._built())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (tuple, PlayedTrace)):
            return self._built() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._built())

    def __repr__(self) -> str:
        return repr(self._built())

    def __reduce__(self):
        return tuple, (self._built(),)


_new = object.__new__


def _trace(spans: list[tuple[bool, int, int, float, float]], program: StepProgram) -> tuple[TraceEvent, ...]:
    """The spans as the engine's TraceEvents.

    Filling a new event's ``__dict__`` builds exactly the object the frozen dataclass's
    ``__init__`` would (``TraceEvent`` has no ``__post_init__``), four times faster.
    """
    tasks, comms, order = program.tasks, program.comms, program.launch_order
    n_ops = len(comms)
    out = []
    for is_comm, j, step, a, b in spans:
        e = _new(TraceEvent)
        if is_comm:
            i = order[j % n_ops]
            c = comms[i]
            e.__dict__.update(rank=0, step=step, kind=c.kind, name=c.name, start_s=a, end_s=b, bucket=i)
        else:
            task = tasks[j]
            e.__dict__.update(rank=0, step=step, kind=task.kind, name=task.name, start_s=a, end_s=b, bucket=None)
        out.append(e)
    return tuple(out)
