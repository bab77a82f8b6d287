"""A job mix on one cluster: each job's steps on its own clock, collectives sharing links max-min.

**A job's step.** Each job is predicted alone (:func:`dpsim.predict.predict` on a cluster of its
own size of the same design): its step time ``T`` and the time its collectives take ``C``. In
the mix a step is a compute block of ``max(T - C, 0)`` followed by a communication block that
moves the traffic of the collective NCCL chose for its gradients (the plan of
:mod:`dpsim.collectives.algorithms`, its dominant phase, placed on the job's servers). Alone on
its reference servers that block takes ``C``; so the network sees the job's true duty cycle,
and what contention stretches is added to the step (overlap with backward is not credited
again: a conservative slowdown).

**Sharing.** While several jobs communicate at once their flows share links max-min fairly:
the existing flow model (routes from the cluster's :class:`~dpsim.network.model.NetworkModel`,
rates from :func:`~dpsim.network.maxmin.max_min_sparse`). A job's collective progresses at
``1 / max_f(fraction_f / rate_f)`` bytes of message per second (its slowest flow binds). The
loop is event-driven: rates are re-evaluated only when the set of communicating jobs changes,
only for the jobs that share links with the one that changed (a *component*), and cached per
component state.

**Fast-forward.** Between two arrivals or departures the mix is a fixed set of periodic jobs;
with ``sample_steps`` set, once every running job has completed that many steps in the interval
the rest of it runs at the mean step time measured (``None``: every step is simulated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from dpsim.collectives.algorithms import ALGORITHMS
from dpsim.collectives.nccl import NcclCollectives
from dpsim.errors import ConfigError, DpsimError
from dpsim.mix.placement import place
from dpsim.mix.spec import JobSpec, MixSpec
from dpsim.network.maxmin import max_min_sparse
from dpsim.network.tiers import TierNetwork
from dpsim.predict import PredictConfig, predict
from dpsim.topology import Topology, load_preset, load_topology_file

DEFAULT_SAMPLE_STEPS = 20
"""Steps every job completes in an interval between arrivals/departures before it is fast-forwarded."""

_SATURATED = 1e-9
"""Relative slack under which a link counts as full (max-min's saturated links)."""


@dataclass(frozen=True, kw_only=True)
class LinkBlame:
    """A link that slowed a job down in the mix."""

    link: tuple[str, str]
    """Graph edge (source, target)."""
    link_class: str
    """``infiniband``, ``leaf-spine``, ``spine-core``..."""
    share: float
    """Fraction of the job's contended communication time this link bound its slowest flow."""
    with_jobs: tuple[str, ...]
    """Other jobs whose flows crossed it then."""

    def to_dict(self) -> dict:
        return {"link": f"{self.link[0]} -> {self.link[1]}", "class": self.link_class, "share": self.share,
                "with_jobs": list(self.with_jobs)}


@dataclass(frozen=True, kw_only=True)
class JobResult:
    """One job of the mix."""

    name: str
    """As in the mix file."""
    model: str
    """Its model."""
    gpus: int
    """Its GPUs."""
    servers: tuple[int, ...]
    """Cluster servers it ran on, in rank order."""
    placement: str
    """The policy that chose them (``nodes``: the user's)."""
    algorithm: str
    """The all-reduce algorithm its traffic follows."""
    start_s: float
    """Arrival."""
    end_s: float
    """Departure (its last step, its duration, or the horizon)."""
    steps: float
    """Steps completed (fractional when fast-forwarded)."""
    step_time_s: float
    """Mean step time in the mix."""
    alone_step_time_s: float
    """Step time running alone on the same servers."""
    reference_step_time_s: float
    """Step time of the solo prediction (its own cluster of its size)."""
    bottlenecks: tuple[LinkBlame, ...] = ()
    """Links that bound it while shared with other jobs, most binding first."""

    @property
    def slowdown(self) -> float:
        """``step_time_s / alone_step_time_s`` (1: unaffected by the other jobs)."""
        return self.step_time_s / self.alone_step_time_s if self.alone_step_time_s > 0 else 1.0

    def to_dict(self) -> dict:
        return {"name": self.name, "model": self.model, "gpus": self.gpus, "servers": list(self.servers),
                "placement": self.placement, "algorithm": self.algorithm, "start_s": self.start_s,
                "end_s": self.end_s, "steps": self.steps, "step_time_s": self.step_time_s,
                "alone_step_time_s": self.alone_step_time_s, "reference_step_time_s": self.reference_step_time_s,
                "slowdown": self.slowdown, "bottlenecks": [b.to_dict() for b in self.bottlenecks]}


@dataclass(frozen=True, kw_only=True)
class MixResult:
    """What a mix did on its cluster."""

    topology: str
    """Cluster design name."""
    cluster_gpus: int
    """GPUs of the cluster."""
    horizon_s: float
    """Cluster time simulated."""
    jobs: tuple[JobResult, ...]
    """Every job, in the mix file's order."""
    gpu_allocation: float
    """GPU-seconds held by jobs over the cluster's GPU-seconds."""
    gpu_busy: float
    """GPU-seconds of useful steps at their alone speed over the cluster's GPU-seconds
    (allocation less what contention cost)."""
    evaluations: int
    """Max-min evaluations run (cache misses)."""
    events: int
    """Phase changes simulated."""
    sample_steps: int | None = None
    """Fast-forward setting (``None``: every step simulated)."""

    def to_dict(self) -> dict:
        return {"topology": self.topology, "cluster_gpus": self.cluster_gpus, "horizon_s": self.horizon_s,
                "gpu_allocation": self.gpu_allocation, "gpu_busy": self.gpu_busy,
                "evaluations": self.evaluations, "events": self.events, "sample_steps": self.sample_steps,
                "jobs": [j.to_dict() for j in self.jobs]}


@dataclass(kw_only=True)
class _Traffic:
    """One placed job's communication on the cluster's links."""

    flow_of: np.ndarray
    link_of: np.ndarray
    fraction: np.ndarray
    links: np.ndarray
    bound: np.ndarray
    """Most bytes/s it can put on each of ``links`` (each flow at its route's smallest capacity)."""
    link_set: frozenset = field(default=frozenset())
    alone_load: np.ndarray | None = None
    """Bytes/s it puts on each of ``links`` running alone (max-min among its own flows)."""
    alone_speed: float = math.nan
    """Bytes of message per second it progresses at alone."""


def cluster_topology(spec: MixSpec) -> Topology:
    """The mix's whole cluster."""
    design = load_topology_file(spec.topology_file) if spec.topology_file else load_preset(spec.link)
    return Topology(spec=design, n_gpus=spec.cluster_gpus)


@lru_cache(maxsize=256)
def _solo(design, gpus: int, fields: tuple) -> tuple:
    """Solo prediction of a job: (model, step s, comm s, algorithm, its plan's dominant phase)."""
    topology = Topology(spec=design, n_gpus=gpus)
    p = predict(PredictConfig(gpus=gpus, link=design.name, **dict(fields)), topology=topology)
    algorithm = p.ring.algorithm if p.ring is not None and p.ring.algorithm in ALGORITHMS else "ring"
    comm_s = min(p.comm_s, p.step_time_s)
    phase = None
    if gpus > 1 and comm_s > 0:
        plan = ALGORITHMS[algorithm].plan("all_reduce", NcclCollectives(topology).cluster)
        # The phase that moves the most bytes per flow stands for the collective.
        phase = max(plan.phases, key=lambda ph: ph.repeat * float(ph.fraction.max()))
    return p.model, p.step_time_s, comm_s, algorithm, phase


class MixSimulation:
    """The event loop of a mix (see the module docstring); :func:`simulate_mix` runs it."""

    def __init__(self, spec: MixSpec, *, sample_steps: int | None = DEFAULT_SAMPLE_STEPS,
                 network=None, topology: Topology | None = None):
        self.spec = spec
        self.topology = topology or cluster_topology(spec)
        self.design = self.topology.spec
        self.net = network if network is not None else TierNetwork(self.topology)
        self.capacity = self.net.capacity_bytes_per_s
        self.sample_steps = sample_steps
        self.gpn = self.design.node.gpus_per_node
        self.n_servers = self.topology.n_nodes
        self.evaluations = 0
        self._cache: dict[frozenset, dict] = {}
        self._bound = np.zeros(len(self.capacity))
        self._nic = np.zeros(len(self.capacity), dtype=bool)
        self._remap = np.zeros(len(self.capacity), dtype=np.int64)
        self._scratch = np.zeros(len(self.capacity))
        self._nic[self.net.nic_links()] = True
        self._pairs: list[tuple[int, int]] = []
        self.solo = {}
        for i, job in enumerate(spec.jobs):
            if job.gpus > self.gpn and job.gpus % self.gpn:
                raise ConfigError(f"jobs[{i}].gpus: {job.gpus} is not whole servers of {self.gpn} GPUs; "
                                  f"use a multiple of {self.gpn}")
            try:
                self.solo[job.name] = _solo(self.design, job.gpus, job.predict)
            except DpsimError as exc:
                raise type(exc)(f"jobs[{i}] ({job.name}): {exc}") from None

    # ------------------------------------------------------------------ traffic
    def traffic(self, job: JobSpec, servers: list[int]) -> _Traffic | None:
        """The job's dominant phase placed on ``servers`` and routed on the cluster's network."""
        phase = self.solo[job.name][4]
        if phase is None:
            return None
        place = np.asarray(servers, dtype=np.int64)

        def on_cluster(e: np.ndarray) -> np.ndarray:
            hub = e < 0
            node = np.where(hub, -1 - e, e // self.gpn)
            cnode = place[node]
            return np.where(hub, -1 - cnode, cnode * self.gpn + e % self.gpn)

        flow_of, link_of = self.net.routes(on_cluster(phase.src), on_cluster(phase.dst))
        links, local = np.unique(link_of, return_inverse=True)
        n_flows, n_links = len(phase.fraction), len(self.capacity)
        top = np.full(n_flows, np.inf)
        np.minimum.at(top, flow_of, self.capacity[link_of])
        # Flows through one of the job's own NIC cables share it: together they carry at most its
        # capacity onto any link further on (a much tighter bound than each at its route's minimum).
        nic = self._nic[link_of]
        via = np.full(n_flows, -1, dtype=np.int64)
        np.maximum.at(via, flow_of[nic], link_of[nic])
        grouped = via[flow_of] >= 0
        key = via[flow_of][grouped] * n_links + link_of[grouped]
        keys, inv = np.unique(key, return_inverse=True)
        per = np.minimum(np.bincount(inv, weights=top[flow_of][grouped]), self.capacity[keys // n_links])
        bound = np.bincount(np.searchsorted(links, keys % n_links), weights=per, minlength=len(links)).astype(float)
        bound += np.bincount(local[~grouped], weights=top[flow_of][~grouped], minlength=len(links))
        t = _Traffic(flow_of=flow_of, link_of=link_of, fraction=np.asarray(phase.fraction, float),
                     links=links, bound=bound, link_set=frozenset(links.tolist()))
        rates = max_min_sparse(flow_of, local, self.capacity[links], n_flows)
        t.alone_load = np.bincount(local, weights=rates[flow_of], minlength=len(links))
        t.alone_speed = 1.0 / float(np.max(t.fraction / rates))
        return t

    def speeds(self, traffic: list[_Traffic]) -> tuple[np.ndarray, list[int | None]]:
        """Bytes of message per second of each job when all of ``traffic`` runs at once, and the
        link binding each one's slowest flow that other jobs cross too (``None``: none such)."""
        if len(traffic) == 1:
            return np.array([traffic[0].alone_speed]), [None]
        # When every job's alone allocation fits together, it is the max-min of them all (each flow
        # keeps a full link no other job crosses as its bottleneck): no solve needed.
        load = self._scratch
        for t in traffic:
            load[t.links] += t.alone_load
        over = any((load[t.links] > self.capacity[t.links] * (1 + _SATURATED)).any() for t in traffic)
        for t in traffic:
            load[t.links] = 0.0
        if not over:
            return np.array([t.alone_speed for t in traffic]), [None] * len(traffic)
        offsets = np.cumsum([0] + [len(t.fraction) for t in traffic])
        flow_of = np.concatenate([t.flow_of + o for t, o in zip(traffic, offsets)])
        # Only the links these flows cross: the solver's work follows the flows, not the cluster.
        used = np.unique(np.concatenate([t.links for t in traffic]))
        self._remap[used] = np.arange(len(used))
        local = self._remap[np.concatenate([t.link_of for t in traffic])]
        capacity = self.capacity[used]
        rates = max_min_sparse(flow_of, local, capacity, int(offsets[-1]))
        self.evaluations += 1
        load = np.bincount(local, weights=rates[flow_of], minlength=len(used))
        full = load >= capacity * (1 - _SATURATED)
        users = np.zeros(len(used), dtype=np.int64)
        for t in traffic:
            users[np.searchsorted(used, t.links)] += 1
        out, binding = [], []
        for t, o in zip(traffic, offsets):
            r = rates[o:o + len(t.fraction)]
            worst = int(np.argmax(t.fraction / r))
            out.append(1.0 / float(t.fraction[worst] / r[worst]))
            on = np.searchsorted(used, t.link_of[t.flow_of == worst])
            hit = on[full[on] & (users[on] > 1)]
            binding.append(int(used[hit[0]]) if len(hit) else None)
        return np.array(out), binding

    # ------------------------------------------------------------------ loop
    def run(self) -> MixResult:
        spec = self.spec
        jobs = spec.jobs
        n = len(jobs)
        free = [True] * self.n_servers
        arrivals = sorted(range(n), key=lambda i: (jobs[i].start_s, i))
        horizon = spec.horizon_s if spec.horizon_s is not None else math.inf
        servers: dict[int, list[int]] = {}
        traffic: dict[int, _Traffic | None] = {}
        compute_s = {}
        work = {}
        alone_speed = {}
        mode: dict[int, str] = {}
        left: dict[int, float] = {}
        steps = [0.0] * n
        start = [jobs[i].start_s for i in range(n)]
        end = [math.nan] * n
        speed: dict[int, float] = {}
        blame: dict[int, dict] = {i: {} for i in range(n)}
        contended = [0.0] * n
        completions: dict[int, list[float]] = {}
        neighbours: dict[int, set[int]] = {}
        now = 0.0
        events = 0
        k = 0  # next arrival
        running: set[int] = set()

        def component(i: int) -> set[int]:
            comp, todo = {i}, [i]
            while todo:
                j = todo.pop()
                for m in neighbours[j]:
                    if m not in comp and mode.get(m) == "comm":
                        comp.add(m)
                        todo.append(m)
            return comp

        def reshare(touched: set[int]) -> None:
            done: set[int] = set()
            for i in touched:
                if i in done or mode.get(i) != "comm":
                    continue
                comp = component(i)
                done |= comp
                key = frozenset(comp)
                if key not in self._cache:
                    order = sorted(comp)
                    sp, bind = self.speeds([traffic[j] for j in order])
                    self._cache[key] = {j: (float(s), b, tuple(m for m in order if m != j and b is not None
                                                               and b in traffic[m].link_set))
                                        for j, s, b in zip(order, sp, bind)}
                for j, (s, b, others) in self._cache[key].items():
                    speed[j] = s
                    b_state[j] = (b, others, len(key) > 1)

        b_state: dict[int, tuple] = {}

        solo_t0: dict[int, float] = {}
        solo_steps: dict[int, float] = {}

        def alone_step(i: int) -> float:
            return compute_s[i] + (work[i] / alone_speed[i] if traffic[i] is not None else 0.0)

        def to_solo(i: int) -> None:
            # A job no other job can slow down runs at its alone pace with no events: the point of
            # its step it has reached is kept, so leaving and re-entering this mode is exact.
            pos = compute_s[i] - left[i] if mode[i] == "compute" else \
                compute_s[i] + (work[i] - left[i]) / alone_speed[i]
            solo_t0[i], solo_steps[i] = now - pos, steps[i]
            dirty.append(True)
            mode[i] = "solo"
            speed.pop(i, None)

        def from_solo(i: int) -> None:
            t = alone_step(i)
            done = (now - solo_t0[i]) / t if t > 0 else 0.0
            whole = math.floor(done + 1e-12)
            steps[i] = solo_steps[i] + whole
            dirty.append(True)
            pos = max(done - whole, 0.0) * t
            if pos < compute_s[i] or traffic[i] is None:
                mode[i], left[i] = "compute", compute_s[i] - pos
            else:
                mode[i], left[i] = "comm", work[i] - (pos - compute_s[i]) * alone_speed[i]
                reshare({i})
            completions[i] = []

        def depart(i: int, t: float) -> None:
            dirty.append(True)
            running.discard(i)
            end[i] = t
            for s in servers[i]:
                free[s] = True
            if mode[i] == "solo":
                steps[i] = solo_steps[i] + (t - solo_t0[i]) / alone_step(i) if alone_step(i) > 0 else 0.0
                if jobs[i].steps is not None:
                    steps[i] = min(steps[i], float(jobs[i].steps))
            was = mode.pop(i, None)
            if traffic[i] is not None:
                self._link_neighbours(i, traffic, running, -1)
            for m in neighbours.pop(i, set()):
                neighbours[m].discard(i)
                if not neighbours[m] and mode[m] != "solo":
                    to_solo(m)
            if was == "comm":
                reshare({m for m in running if mode.get(m) == "comm"})

        dirty = [True]  # deadlines change only when a job arrives, leaves or changes mode
        t_dead = math.inf

        def deadline(i: int) -> float:
            d = jobs[i].duration_s
            t = min(horizon, start[i] + d) if d is not None else horizon
            if mode.get(i) == "solo" and jobs[i].steps is not None:
                t = min(t, solo_t0[i] + (jobs[i].steps - solo_steps[i]) * alone_step(i))
            return t

        while True:
            # Next event: a phase end, an arrival, a deadline.
            t_next, who = math.inf, None
            for i in running:
                if mode[i] == "solo":
                    continue
                dt = left[i] if mode[i] == "compute" else left[i] / speed[i]
                if now + dt < t_next:
                    t_next, who = now + dt, i
            t_arrive = jobs[arrivals[k]].start_s if k < n else math.inf
            if dirty:
                t_dead = min((deadline(i) for i in running), default=math.inf)
                dirty.clear()
            t = min(t_next, t_arrive, t_dead, horizon)
            if t == math.inf:
                break
            dt = t - now
            for i in running:
                if mode[i] == "solo":
                    continue
                if mode[i] == "compute":
                    left[i] -= dt
                else:
                    left[i] -= dt * speed[i]
                    b, others, shared = b_state.get(i, (None, (), False))
                    if shared:
                        contended[i] += dt
                        if b is not None:
                            entry = blame[i].setdefault(b, [0.0, set()])
                            entry[0] += dt
                            entry[1].update(others)
            now = t
            if now >= horizon:
                break
            events += 1
            if t == t_dead and t_dead <= t_next:
                for i in [i for i in running if deadline(i) <= now]:
                    depart(i, now)
                continue
            if t == t_arrive and t_arrive <= t_next:
                i = arrivals[k]
                k += 1
                job = jobs[i]
                need = max(1, math.ceil(job.gpus / self.gpn))
                servers[i] = place(job, need, free, self.design, at_s=now)
                for s in servers[i]:
                    free[s] = False
                model, step_s, comm_s, _, _ = self.solo[job.name]
                traffic[i] = self.traffic(job, servers[i])
                compute_s[i] = step_s - comm_s
                if traffic[i] is not None:
                    ref = self.traffic(job, list(range(len(servers[i]))))
                    work[i] = comm_s * ref.alone_speed
                    alone_speed[i] = traffic[i].alone_speed
                neighbours[i] = set()
                dirty.append(True)
                running.add(i)
                mode[i], left[i] = "compute", compute_s[i]
                completions[i] = []
                if traffic[i] is not None:
                    self._pairs = []
                    pairs = [(i, m) for m in self._link_neighbours(i, traffic, running, +1)]
                    for a, b in pairs + self._pairs:
                        if b not in neighbours[a]:
                            neighbours[a].add(b)
                            neighbours[b].add(a)
                            for m in (a, b):
                                if mode[m] == "solo":
                                    from_solo(m)
                if not neighbours[i]:
                    to_solo(i)
                continue
            i = who
            if mode[i] == "compute" and traffic[i] is not None:
                mode[i], left[i] = "comm", work[i]
                reshare({i})
                continue
            # A step completes.
            steps[i] += 1
            was_comm = mode[i] == "comm"
            mode[i], left[i] = "compute", compute_s[i]
            if was_comm:
                reshare(neighbours[i])
            completions[i].append(now)
            if jobs[i].steps is not None and steps[i] >= jobs[i].steps:
                depart(i, now)
                continue
            live = [j for j in running if mode[j] != "solo"]
            if self.sample_steps is not None and live and \
                    all(len(completions[j]) > self.sample_steps for j in live):
                bound = min([t_arrive] + [deadline(j) for j in running])
                now, finished = self._fast_forward(now, live, completions, steps, jobs, horizon, bound,
                                                   deadline, mode, left, compute_s)
                for j in finished:
                    depart(j, now)
                reshare(set(running))
        now = min(now, horizon)
        for i in list(running):
            depart(i, now)
        results = []
        gpu_s = busy_s = 0.0
        for i, job in enumerate(jobs):
            model, step_s, comm_s, algorithm, _ = self.solo[job.name]
            if i not in servers:
                raise ConfigError(f"jobs[{i}] ({job.name}): starts at {job.start_s:g} s, after the horizon")
            alone = compute_s[i] + (work[i] / alone_speed[i] if traffic[i] is not None else 0.0)
            held = end[i] - start[i]
            mine = held / steps[i] if steps[i] > 0 else math.inf
            gpu_s += held * job.gpus
            busy_s += steps[i] * alone * job.gpus
            total = contended[i] or 1.0
            bl = sorted(blame[i].items(), key=lambda kv: (-kv[1][0], kv[0]))[:3]
            results.append(JobResult(
                name=job.name, model=model, gpus=job.gpus, servers=tuple(servers[i]), placement=job.placement,
                algorithm=algorithm if traffic[i] is not None else "none", start_s=start[i], end_s=end[i],
                steps=steps[i], step_time_s=mine, alone_step_time_s=alone, reference_step_time_s=step_s,
                bottlenecks=tuple(LinkBlame(link=self.net.link_name(b), link_class=self.net.link_classes[
                    int(self.net.link_class_id[b])], share=v[0] / total, with_jobs=tuple(jobs[m].name for m in
                                                                                          sorted(v[1])))
                                  for b, v in bl)))
        span = max(r.end_s for r in results) if spec.horizon_s is None else spec.horizon_s
        cluster = self.topology.n_gpus * span
        return MixResult(topology=self.design.name, cluster_gpus=self.topology.n_gpus, horizon_s=span,
                         jobs=tuple(results), gpu_allocation=gpu_s / cluster, gpu_busy=busy_s / cluster,
                         evaluations=self.evaluations, events=events, sample_steps=self.sample_steps)

    def _link_neighbours(self, i: int, traffic: dict, running: set[int], sign: int) -> set[int]:
        """Add (``sign`` 1) or remove (-1) job ``i``'s traffic bound on the cluster's links; when
        adding, the running jobs that cross a link with ``i`` which their bounds together could
        fill. A link no mix of flows can fill never binds max-min, so jobs that share only such
        links cannot slow each other down (exactly) and are evaluated apart."""
        t = traffic[i]
        self._bound[t.links] += sign * t.bound
        if sign < 0:
            return set()
        hot = t.links[self._bound[t.links] > self.capacity[t.links] * (1 - _SATURATED)]
        if not len(hot):
            return set()
        crossing = {}
        for m in running:
            if m != i and traffic.get(m) is not None:
                mask = np.isin(hot, traffic[m].links, assume_unique=True)
                if mask.any():
                    crossing[m] = mask
        out = set(crossing)
        # Jobs other than i sharing a link that i's arrival made fillable are neighbours too.
        ms = list(crossing)
        for a in range(len(ms)):
            for b in range(a + 1, len(ms)):
                if (crossing[ms[a]] & crossing[ms[b]]).any():
                    self._pairs.append((ms[a], ms[b]))
        return out

    def _fast_forward(self, now, running, completions, steps, jobs, horizon, t_arrive, deadline, mode, left,
                      compute_s) -> tuple[float, list[int]]:
        """Jump to the next arrival or departure at each job's measured mean step time."""
        mean = {}
        for j in running:
            c = completions[j][-self.sample_steps - 1:]
            mean[j] = (c[-1] - c[0]) / (len(c) - 1)
        target = min(t_arrive, horizon, min(deadline(j) for j in running))
        for j in list(running):
            if jobs[j].steps is not None:
                # Its last step's end, counted from its last completion.
                t_done = completions[j][-1] + (jobs[j].steps - steps[j]) * mean[j]
                target = min(target, max(t_done, now))
        finished = []
        for j in running:
            steps[j] += (target - now) / mean[j] if mean[j] > 0 else 0.0
            mode[j], left[j] = "compute", compute_s[j]
            completions[j] = []
            if jobs[j].steps is not None and steps[j] >= jobs[j].steps - 1e-9:
                steps[j] = float(jobs[j].steps)
                finished.append(j)
        return target, finished


def simulate_mix(spec: MixSpec, *, sample_steps: int | None = DEFAULT_SAMPLE_STEPS, network=None) -> MixResult:
    """Run a job mix (:class:`~dpsim.mix.spec.MixSpec`) on its cluster.

    ``sample_steps``: steps each job completes between two arrivals/departures before the rest of
    that interval runs at the measured mean (``None``: every step simulated). ``network``: a
    :class:`~dpsim.network.model.NetworkModel` of the whole cluster with ``routes`` (default its
    :class:`~dpsim.network.tiers.TierNetwork`).
    """
    return MixSimulation(spec, sample_steps=sample_steps, network=network).run()
