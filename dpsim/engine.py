"""The SimPy engine: one data-parallel training step, layer by layer.

Per rank: forward layer by layer, then backward in reverse; when a layer's backward
ends its parameters' gradients are ready, and a bucket becomes ready with its last
gradient. Buckets are launched in bucket order onto one FIFO communication stream
(as DDP's reducer does); a collective starts once every rank has launched it and the
stream is free, and lasts what the collective model says. The optimizer waits for all
buckets. While a collective runs, compute progresses ``1 + overlap_slowdown`` times
slower (communication kernels take SMs, or CPU threads for gloo).

Identical ranks are one rank: the engine simulates one process per *distinct* rank
(``rank_compute_scale``), so a homogeneous 65,536-GPU job costs what one rank costs.

Bucket rebuild: the buckets given are DDP's steady state (rebuilt after the first
iteration in gradient-ready order); the first iteration's single-bucket layout is not
modelled, so every simulated step is a steady-state step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import simpy

from dpsim.collectives import CollectiveModel
from dpsim.errors import ConfigError
from dpsim.workload.buckets import BucketPlan
from dpsim.workload.compute import ComputeProfile


@dataclass(frozen=True, kw_only=True)
class TraceEvent:
    """One interval of activity on one rank."""

    rank: int
    """Rank group index (0 for a homogeneous job)."""
    step: int
    """Training step index."""
    kind: str
    """``forward``, ``backward``, ``allreduce`` or ``optimizer``."""
    name: str
    """Layer name, or ``bucket <i>``."""
    start_s: float
    """Start time."""
    end_s: float
    """End time."""
    bucket: int | None = None
    """Bucket index for communication events."""


@dataclass(frozen=True, kw_only=True)
class StepTiming:
    """Timing of one simulated step (rank 0's view; collectives are global)."""

    step_time_s: float
    """From forward start to optimizer end."""
    forward_s: float
    """Forward pass (wall time, slowdown included)."""
    backward_s: float
    """Backward pass (wall time, slowdown included)."""
    optimizer_s: float
    """Optimizer step."""
    comm_s: float
    """Sum of the collectives' durations."""
    exposed_comm_s: float
    """Time in which a collective ran and rank 0 computed nothing."""


@dataclass(frozen=True, kw_only=True)
class SimulationResult:
    """All steps of a simulation plus its trace."""

    steps: tuple[StepTiming, ...]
    """One entry per simulated step."""
    trace: tuple[TraceEvent, ...]
    """Every interval, for timelines."""


class _Rank:
    """A rank's compute, slowed while communication is active."""

    def __init__(self, env: simpy.Environment, slowdown: float):
        self.env, self.slowdown = env, slowdown
        self.comm_active = False
        self._changed: simpy.Event | None = None

    def compute(self, duration_s: float):
        """Generator: run ``duration_s`` of compute, re-rating whenever comm starts or stops."""
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


def simulate(
    compute: ComputeProfile,
    buckets: BucketPlan,
    collectives: CollectiveModel,
    *,
    steps: int = 1,
    overlap: bool = True,
    overlap_slowdown: float = 0.0,
    rank_compute_scale: Sequence[float] = (1.0,),
) -> SimulationResult:
    """Simulate ``steps`` training steps of data-parallel training."""
    if steps < 1:
        raise ConfigError(f"--steps: {steps} is not valid; expected an integer >= 1")
    if overlap_slowdown < 0:
        raise ConfigError(f"--overlap-slowdown: {overlap_slowdown} is not valid; expected a number >= 0")
    env = simpy.Environment()
    trace: list[TraceEvent] = []
    n_buckets = len(buckets.buckets)
    comm_time = [collectives.time("all_reduce", b.size_bytes).time_s for b in buckets.buckets]
    # Which buckets each layer's backward completes, in launch order.
    owner = {name: i for i, layer in enumerate(compute.layers) for name in layer.param_names}
    last_layer = []
    for b in buckets.buckets:
        layers = [owner[name] for name in b.param_names if name in owner]
        if len(layers) != len(b.param_names):
            missing = sorted(set(b.param_names) - set(owner))
            raise ConfigError(f"bucket {b.index}: parameters {missing[:3]} belong to no layer")
        # Backward runs layers in reverse, so the lowest layer index finishes last.
        last_layer.append(min(layers))
    ranks = [_Rank(env, overlap_slowdown) for _ in rank_compute_scale]
    # launch[s][i][r]: rank r has launched bucket i of step s; done[s]: all buckets reduced.
    launch = [[[env.event() for _ in ranks] for _ in range(n_buckets)] for _ in range(steps)]
    done = [env.event() for _ in range(steps)]
    step_records: list[dict] = []

    def rank_process(r: int, scale: float):
        rank = ranks[r]
        for s in range(steps):
            rec = {"start": env.now}
            for layer in compute.layers:
                t0 = env.now
                yield from rank.compute(layer.forward_s * scale)
                trace.append(TraceEvent(rank=r, step=s, kind="forward", name=layer.name, start_s=t0, end_s=env.now))
            rec["forward_end"] = env.now
            next_bucket = 0
            for idx in range(len(compute.layers) - 1, -1, -1):
                layer = compute.layers[idx]
                t0 = env.now
                yield from rank.compute(layer.backward_s * scale)
                trace.append(TraceEvent(rank=r, step=s, kind="backward", name=layer.name, start_s=t0, end_s=env.now))
                # Buckets launch in order, each once its last gradient is ready.
                while overlap and next_bucket < n_buckets and last_layer[next_bucket] >= idx:
                    launch[s][next_bucket][r].succeed()
                    next_bucket += 1
            rec["backward_end"] = env.now
            for i in range(next_bucket, n_buckets):
                launch[s][i][r].succeed()
            yield done[s]
            rec["comm_end"] = env.now
            t0 = env.now
            yield from rank.compute(compute.optimizer_s * scale)
            trace.append(TraceEvent(rank=r, step=s, kind="optimizer", name="optimizer", start_s=t0, end_s=env.now))
            rec["end"] = env.now
            if r == 0:
                step_records.append(rec)

    def comm_process():
        # One FIFO stream: collective i starts when every rank launched it and i-1 ended.
        for s in range(steps):
            for i in range(n_buckets):
                yield simpy.AllOf(env, launch[s][i])
                start = env.now
                for rank in ranks:
                    rank.set_comm(True)
                yield env.timeout(comm_time[i])
                for rank in ranks:
                    rank.set_comm(False)
                trace.append(TraceEvent(rank=0, step=s, kind="allreduce", name=f"bucket {i}",
                                        start_s=start, end_s=env.now, bucket=i))
            done[s].succeed()

    for r, scale in enumerate(rank_compute_scale):
        ranks[r].process = env.process(rank_process(r, scale))
    env.process(comm_process())
    env.run()
    return _summarise(step_records, trace, comm_time)


def _summarise(records: list[dict], trace: list[TraceEvent], comm_time: list[float]) -> SimulationResult:
    timings = []
    for s, rec in enumerate(records):
        busy = sorted((e.start_s, e.end_s) for e in trace if e.rank == 0 and e.step == s and e.kind != "allreduce")
        comm = sorted((e.start_s, e.end_s) for e in trace if e.step == s and e.kind == "allreduce")
        timings.append(StepTiming(
            step_time_s=rec["end"] - rec["start"],
            forward_s=rec["forward_end"] - rec["start"],
            backward_s=rec["backward_end"] - rec["forward_end"],
            optimizer_s=rec["end"] - rec["comm_end"],
            comm_s=sum(comm_time),
            exposed_comm_s=_uncovered(comm, busy),
        ))
    return SimulationResult(steps=tuple(timings), trace=tuple(trace))


def _uncovered(intervals: list[tuple[float, float]], cover: list[tuple[float, float]]) -> float:
    """Length of the union of ``intervals`` not covered by the union of ``cover``."""
    def union(iv):
        out: list[list[float]] = []
        for a, b in sorted(iv):
            if out and a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        return out
    total = 0.0
    covered = union(cover)
    for a, b in union(intervals):
        length = b - a
        for c, d in covered:
            length -= max(0.0, min(b, d) - max(a, c))
        total += length
    return total
