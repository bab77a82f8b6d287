"""Several distinct stage programs joined by point-to-point transfers: one pipeline-parallel step.

A :class:`PipelineProgram` has one :class:`StageProgram` per pipeline stage. Each stage runs
its compute ops in order on one compute stream; an op starts once the stage's previous op
has ended, every transfer it needs has arrived and every collective it waits for has
finished. When an op ends it

- *sends* transfers to other stages (activations forward, gradients backward): each
  ordered pair of stages is one FIFO channel, and a transfer lasts what the collective
  model says for its message on its communicator (a point-to-point message costed as a
  two-rank ``broadcast``: ``S/B`` plus latency);
- *launches* collectives on its stage's communication stream (FIFO, in launch order). A
  collective may belong to several stages (the tied-embedding all-reduce of the first
  and last stage): it starts when every one of them has launched it and it heads each
  of their streams.

While a collective runs on a stage, that stage's compute runs ``1 + overlap_slowdown``
times slower (communication kernels take SMs), exactly as in
:mod:`dpsim.engine.simulate`: a one-stage program runs here as a :class:`StepProgram`
runs there (tested). Transfers do not slow compute.

The other way round, with a calibration's measured ``comm_slowdown``, a collective
progresses ``1 + comm_slowdown`` times slower while any stage it belongs to computes
(:func:`~dpsim.engine.simulate.comm_rate`, the rule the data-parallel engines apply), and
is re-rated whenever one of them starts or ends an op: the data-parallel gradient
reductions overlapped with the last micro-batch's backward, the parameter gathers and the
tied-embedding all-reduce. Transfers are not slowed: in the programs ``predict`` plays, an
exchange blocks both stages (a rendezvous, ``blocking_p2p`` in
:func:`dpsim.strategies.pipeline.build_pipeline_program`, Megatron's default), so no compute
of theirs runs beside it; the non-blocking variant (a test's bound, not a prediction) keeps
the link's rate too, so it is optimistic by up to that slowdown. Tensor-parallel collectives are not ops of this engine: they are inside a stage
op's duration (:func:`dpsim.strategies.layout.layer_work`), where the overlapped ones get
the same slowdown.

Every data-parallel replica and every tensor-parallel rank of a stage does the same
work, so one rank per stage is simulated. The simulation is event-driven (a heap of
op ends, collective ends and arrivals; compute re-rated when a stage's collectives
start or stop): the largest layouts of the accuracy set (gpt-1t, 64 stages) take about
3 s each since transfers block both sides (a rendezvous per exchange; 2.8-3.0 s whole
prediction, 2026-12-01, shared 2-core machine), about half a second before
(``python tests/benchmarks/bench_plan.py``); 1.7-2.2 s since the per-op bookkeeping was cut
and the trace is built only when read (3.1-3.3 s before, same run, 2026-12-04).
"""

from __future__ import annotations

import functools
import gc
import heapq
import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import field

from dpsim.engine.play import PlayedTrace
from dpsim.engine.program import CommOp, StepProgram
from dpsim.engine.simulate import (
    TraceEvent,
    check_comm_slowdown,
    comm_op_time_s,
    comm_rate,
    uncovered_s,
)
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass


@frozen_dataclass
class StageOp:
    """One piece of compute a stage runs, in program order."""

    kind: str
    """``forward``, ``backward``, ``recompute``, ``optimizer``..."""
    name: str
    """For the trace."""
    duration_s: float
    """Time on an unslowed rank."""
    needs: tuple[int, ...] = ()
    """Transfers that must have arrived before it starts."""
    sends: tuple[int, ...] = ()
    """Transfers it sends when it ends."""
    waits: tuple[int, ...] = ()
    """Collectives (indices into :attr:`PipelineProgram.comms`) that must have finished first."""
    launches: tuple[int, ...] = ()
    """Collectives it launches on its stage's stream when it ends, in this order."""
    micro_batch: int | None = None
    """Micro-batch index (forward/backward ops)."""
    chunk: int | None = None
    """Model chunk (virtual stage) of its stage."""


@frozen_dataclass
class Transfer:
    """A point-to-point message from one stage to another."""

    name: str
    """For the trace."""
    src: int
    """Sending stage."""
    dst: int
    """Receiving stage."""
    size_bytes: float
    """Bytes per GPU."""
    kind: str = "p2p"
    """Trace category."""
    group: str = "pp"
    """Communicator that costs it."""
    op: str = "broadcast"
    """How the collective model costs it (a two-rank broadcast is one send)."""


@frozen_dataclass
class StageProgram:
    """What one stage runs."""

    ops: tuple[StageOp, ...]
    """Compute ops in execution order."""
    comms_at_start: tuple[int, ...] = ()
    """Collectives launched before the first op (e.g. a steady-state parameter all-gather)."""


@frozen_dataclass
class PipelineProgram:
    """One step of every stage."""

    stages: tuple[StageProgram, ...]
    """Per stage, first to last."""
    comms: tuple[CommOp, ...] = ()
    """Collectives, indexed by ``waits``/``launches``."""
    comm_stages: tuple[tuple[int, ...], ...] = ()
    """Stages each collective belongs to (default: the one stage that launches it)."""
    transfers: tuple[Transfer, ...] = ()
    """Point-to-point messages, indexed by ``needs``/``sends``."""

    def __post_init__(self) -> None:
        launcher: dict[int, set[int]] = {}
        for s, st in enumerate(self.stages):
            for c in st.comms_at_start:
                launcher.setdefault(c, set()).add(s)
            for op in st.ops:
                for c in op.launches:
                    launcher.setdefault(c, set()).add(s)
        assert set(launcher) == set(range(len(self.comms))), "every collective is launched"
        if not self.comm_stages:
            object.__setattr__(self, "comm_stages", tuple(tuple(sorted(launcher[c])) for c in range(len(self.comms))))
        assert len(self.comm_stages) == len(self.comms)
        for c, members in enumerate(self.comm_stages):
            assert launcher[c] == set(members), f"collective {c} is launched by {launcher[c]}, not {members}"
        sent = [t for st in self.stages for op in st.ops for t in op.sends]
        assert sorted(sent) == list(range(len(self.transfers))), "every transfer is sent exactly once"


@frozen_dataclass
class StageTiming:
    """One stage's step."""

    end_s: float
    """When its last op ended (the step starts at 0)."""
    busy_s: float
    """Wall time of its compute ops (slowdown included)."""
    by_kind_s: dict = field(default_factory=dict)
    """Wall time per op kind."""
    comm_s: float = 0.0
    """Time its collectives ran."""
    exposed_comm_s: float = 0.0
    """Time a collective of this stage ran while the stage computed nothing."""
    wait_transfer_s: float = 0.0
    """Idle time that ended when a transfer arrived: waiting for another stage (the pipeline
    bubble: fill, drain, transfers on the critical path)."""
    wait_comm_s: float = 0.0
    """Idle time that ended when one of its collectives finished (a parameter gather before
    a forward, the gradient reductions before the optimizer)."""


@frozen_dataclass
class PipelineResult:
    """A simulated pipeline step."""

    step_time_s: float
    """From the start to the last stage's end."""
    stages: tuple[StageTiming, ...]
    """Per stage."""
    trace: Sequence[TraceEvent]
    """Every op (``rank`` = stage), collective and transfer (``rank`` = the sending stage), by start
    (a :class:`~dpsim.engine.play.PlayedTrace`: built when first read)."""
    transfer_s: float = 0.0
    """Summed duration of the transfers of the step."""


CostFn = Callable[[str, str, float], float]
"""``cost(group, op, size_bytes)`` -> seconds."""


def collective_cost(collectives) -> CostFn:
    """A cost function over a collective model (:class:`~dpsim.collectives.groups.GroupCollectives`),
    memoised: a step repeats the same few messages thousands of times."""
    memo: dict[tuple[str, str, float], float] = {}

    def cost(group: str, op: str, size_bytes: float) -> float:
        key = (group, op, size_bytes)
        t = memo.get(key)
        if t is None:
            t = memo[key] = comm_op_time_s(collectives, CommOp(name="", op=op, size_bytes=size_bytes, group=group))
        return t

    return cost


def from_step_program(program: StepProgram) -> PipelineProgram:
    """A data-parallel :class:`StepProgram` as a one-stage pipeline (same ops, same stream)."""
    ops = tuple(StageOp(kind=t.kind, name=t.name, duration_s=t.duration_s, waits=t.wait_for,
                        launches=t.launch_after) for t in program.tasks)
    return PipelineProgram(stages=(StageProgram(ops=ops, comms_at_start=program.launch_at_start),),
                           comms=program.comms)


def gc_paused(fn):
    """``fn`` run with Python's cyclic garbage collector paused (and resumed after, if it ran).

    Building and playing a large pipeline creates hundreds of thousands of objects (ops, heap
    entries, trace events), none in a reference cycle: every few hundred of them the collector
    walks all that are alive and frees none, a third of the time of the largest layouts.
    Results are unchanged (nothing is freed later than it would be by reference counting)."""
    @functools.wraps(fn)
    def paused(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return paused


@gc_paused
def run_pipeline(program: PipelineProgram, cost: CostFn, *, overlap_slowdown: float = 0.0,
                 comm_slowdown: float = 0.0, trace: bool = True) -> PipelineResult:
    """Simulate one step of ``program`` (see the module docstring).

    ``cost(group, op, size_bytes)`` gives each collective's and transfer's duration
    (:func:`collective_cost` over a job's collective models). ``comm_slowdown``: a
    collective runs ``1 + comm_slowdown`` times slower while a stage it belongs to computes
    (0: every collective lasts what ``cost`` says, and the step is played exactly as
    without the argument).
    """
    if not overlap_slowdown >= 0:
        raise ConfigError(f"--overlap-slowdown: {overlap_slowdown} is not valid; expected a number >= 0")
    check_comm_slowdown(comm_slowdown)
    stream_mode = comm_slowdown > 0
    n = len(program.stages)
    stage_ops = [st.ops for st in program.stages]
    n_ops = [len(ops) for ops in stage_ops]
    transfers = program.transfers
    n_comms = len(program.comms)
    comm_time = [cost(c.group, c.op, c.size_bytes) for c in program.comms]
    xfer_time = [cost(t.group, t.op, t.size_bytes) for t in transfers]
    # Each ordered pair of stages is one FIFO channel: its index per transfer, looked up once.
    channel_of: dict[tuple[int, int], int] = {}
    xfer_channel = [channel_of.setdefault((t.src, t.dst), len(channel_of)) for t in transfers]
    channel_free = [0.0] * len(channel_of)
    members = program.comm_stages
    slow = 1.0 / (1.0 + overlap_slowdown)

    heap: list[tuple[float, int, int, int, int]] = []  # (time, seq, kind, a, b)
    heappush, heappop = heapq.heappush, heapq.heappop
    next_seq = itertools.count(1).__next__  # ties end in push order
    OP_END, COMM_END, ARRIVE = 0, 1, 2

    pos = [0] * n
    running = [False] * n
    remaining = [0.0] * n
    rate = [1.0] * n
    since = [0.0] * n
    started_at = [0.0] * n
    version = [0] * n
    active = [0] * n  # collectives running on the stage
    queue: list[list[int]] = [[] for _ in range(n)]  # launched, not started, in launch order
    stream_busy = [False] * n
    launched = [0] * n_comms
    comm_started = [False] * n_comms
    comm_done = [False] * n_comms
    # With a comm_slowdown, each running collective's progress, re-rated as its stages'
    # compute starts and stops (the compute re-rating below, the other way round).
    comm_rem = [0.0] * n_comms
    comm_speed = [1.0] * n_comms
    comm_since = [0.0] * n_comms
    comm_t0 = [0.0] * n_comms
    comm_version = [0] * n_comms
    on_stream: list[int | None] = [None] * n  # the collective running on each stage's stream
    arrived = [False] * len(transfers)
    waiting_comm: dict[int, list[int]] = {}
    waiting_xfer: list[list[int] | None] = [None] * len(transfers)
    busy = [0.0] * n
    idle_since = [0.0] * n  # when the stage's compute stream last went idle
    woken_by_comm = [False] * n
    wait_transfer = [0.0] * n
    wait_comm = [0.0] * n
    by_kind: list[dict[str, float]] = [{} for _ in range(n)]
    end_s = [0.0] * n
    comm_intervals: list[list[tuple[float, float]]] = [[] for _ in range(n)]
    busy_intervals: list[list[tuple[float, float]]] = [[] for _ in range(n)]
    # (start_s, rank, kind, name, end_s, bucket): TraceEvents are built once, after sorting.
    events: list[tuple] = []
    now = 0.0

    def push(t: float, kind: int, a: int, b: int = 0) -> None:
        heappush(heap, (t, next_seq(), kind, a, b))

    def rerate(s: int) -> None:
        new = slow if active[s] else 1.0
        if running[s]:
            remaining[s] -= (now - since[s]) * rate[s]
            since[s] = now
            version[s] += 1
            rate[s] = new
            push(now + max(0.0, remaining[s]) / new, OP_END, s, version[s])
        else:
            rate[s] = new

    def comm_pace(c: int) -> float:
        return comm_rate(comm_slowdown, any(running[m] for m in members[c]))

    def rerate_comm(s: int) -> None:
        """Stage ``s`` started or ended an op: its running collective's new pace."""
        c = on_stream[s]
        if c is None:
            return
        new = comm_pace(c)
        if new == comm_speed[c]:
            return
        comm_rem[c] -= (now - comm_since[c]) * comm_speed[c]
        comm_since[c] = now
        comm_speed[c] = new
        comm_version[c] += 1
        push(now + max(0.0, comm_rem[c]) / new, COMM_END, c, comm_version[c])

    def try_start(s: int) -> None:
        if running[s] or pos[s] >= n_ops[s]:
            return
        op = stage_ops[s][pos[s]]
        for t in op.needs:
            if not arrived[t]:
                waiting = waiting_xfer[t]
                if waiting is None:
                    waiting_xfer[t] = [s]
                else:
                    waiting.append(s)
                return
        for c in op.waits:
            if not comm_done[c]:
                waiting_comm.setdefault(c, []).append(s)
                return
        waited = now - idle_since[s]
        if waited > 0:
            if woken_by_comm[s]:
                wait_comm[s] += waited
            else:
                wait_transfer[s] += waited
        running[s] = True
        r = remaining[s] = op.duration_s
        rt = rate[s] = slow if active[s] else 1.0
        since[s] = started_at[s] = now
        v = version[s] = version[s] + 1
        heappush(heap, (now + r / rt, next_seq(), OP_END, s, v))
        if stream_mode:
            rerate_comm(s)

    def try_comm(c: int) -> None:
        stages = members[c]
        if comm_started[c] or launched[c] < len(stages):
            return
        if any(stream_busy[s] or not queue[s] or queue[s][0] != c for s in stages):
            return
        comm_started[c] = True
        for s in stages:
            queue[s].pop(0)
            stream_busy[s] = True
            active[s] += 1
            rerate(s)
        if stream_mode:
            for s in stages:
                on_stream[s] = c
            comm_rem[c] = comm_time[c]
            comm_since[c] = comm_t0[c] = now
            comm_speed[c] = comm_pace(c)
            push(now + comm_rem[c] / comm_speed[c], COMM_END, c, comm_version[c])
            return  # traced when it ends: its duration is known then
        push(now + comm_time[c], COMM_END, c, 0)
        if trace:
            op = program.comms[c]
            events.append((now, stages[0], op.kind, op.name, now + comm_time[c], c))
        for s in stages:
            comm_intervals[s].append((now, now + comm_time[c]))

    def launch(c: int, s: int) -> None:
        launched[c] += 1
        queue[s].append(c)
        try_comm(c)

    for s, st in enumerate(program.stages):
        for c in st.comms_at_start:
            launch(c, s)
    for s in range(n):
        try_start(s)

    while heap:
        now, _, kind, a, b = heappop(heap)
        if kind == OP_END:
            s = a
            if b != version[s] or not running[s]:
                continue
            op = stage_ops[s][pos[s]]
            running[s] = False
            if stream_mode:
                rerate_comm(s)
            t0 = started_at[s]
            wall = now - t0
            busy[s] += wall
            kinds = by_kind[s]
            kinds[op.kind] = kinds.get(op.kind, 0.0) + wall
            busy_intervals[s].append((t0, now))
            if trace:
                events.append((t0, s, op.kind, op.name, now, None))
            pos[s] += 1
            end_s[s] = now
            idle_since[s] = now
            for t in op.sends:
                ch = xfer_channel[t]
                free = channel_free[ch]
                start = now if now >= free else free
                done = channel_free[ch] = start + xfer_time[t]
                heappush(heap, (done, next_seq(), ARRIVE, t, 0))
                if trace:
                    tr = transfers[t]
                    events.append((start, tr.src, tr.kind, tr.name, done, None))
            for c in op.launches:
                launch(c, s)
            try_start(s)
        elif kind == COMM_END:
            c = a
            if stream_mode:
                if b != comm_version[c] or comm_done[c]:
                    continue
                for s in members[c]:
                    on_stream[s] = None
                if trace:
                    op = program.comms[c]
                    events.append((comm_t0[c], members[c][0], op.kind, op.name, now, c))
                for s in members[c]:
                    comm_intervals[s].append((comm_t0[c], now))
            comm_done[c] = True
            for s in members[c]:
                stream_busy[s] = False
                active[s] -= 1
                rerate(s)
            for s in waiting_comm.pop(c, []):
                woken_by_comm[s] = True
                try_start(s)
            for s in members[c]:
                if queue[s]:
                    try_comm(queue[s][0])
        else:
            arrived[a] = True
            waiting = waiting_xfer[a]
            if waiting is not None:
                waiting_xfer[a] = None
                for s in waiting:
                    woken_by_comm[s] = False
                    try_start(s)

    stuck = [s for s in range(n) if pos[s] < n_ops[s]]
    if stuck:
        s = stuck[0]
        raise RuntimeError(f"pipeline program deadlocks: stage {s} stops before op "
                           f"{program.stages[s].ops[pos[s]].name!r}")
    timings = []
    for s in range(n):
        comm = sum(b - a for a, b in comm_intervals[s])
        timings.append(StageTiming(end_s=end_s[s], busy_s=busy[s], by_kind_s=dict(by_kind[s]), comm_s=comm,
                                   exposed_comm_s=uncovered_s(comm_intervals[s], busy_intervals[s]),
                                   wait_transfer_s=wait_transfer[s], wait_comm_s=wait_comm[s]))
    return PipelineResult(step_time_s=max(end_s) if n else 0.0, stages=tuple(timings),
                          trace=PlayedTrace(functools.partial(_trace_events, events), len(events)),
                          transfer_s=sum(xfer_time))


_by_start_and_rank = operator.itemgetter(0, 1)
_new = object.__new__


@gc_paused
def _trace_events(events: list[tuple]) -> tuple[TraceEvent, ...]:
    """``(start_s, rank, kind, name, end_s, bucket)`` as TraceEvents in order of start and rank
    (stable: ties keep the order they happened in). Filling a new event's ``__dict__`` builds
    exactly the object the frozen dataclass's ``__init__`` would (``TraceEvent`` has no
    ``__post_init__``; :func:`dpsim.engine.play._trace` does the same), several times faster on
    the hundred thousand events of a large pipeline."""
    out = []
    for start, rank, kind, name, end, bucket in sorted(events, key=_by_start_and_rank):
        e = _new(TraceEvent)
        e.__dict__.update(rank=rank, step=0, kind=kind, name=name, start_s=start, end_s=end, bucket=bucket)
        out.append(e)
    return tuple(out)
