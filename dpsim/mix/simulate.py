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
component state. A job's flows that cross the same links are solved as one weighted class, and its
servers' own links that repeat another of its links' classes are left out: the rates are exactly
those of the flows one by one (``tests/test_mix.py``), the solve about half the size. Classes on
private links only that no other class reaches (a ring's hops inside a server) are solved once per
placement. A group one job away from a kept one takes its shares without a solve where that is
exact (:meth:`MixSimulation.shared_from`).

**Fast-forward.** Between two arrivals or departures the mix is a fixed set of periodic jobs;
with ``sample_steps`` set, once every running job has completed that many steps in the interval
the rest of it runs at the mean step time measured (``None``: every step is simulated). An event
that leaves the jobs that can slow each other down as they were measured (an arrival elsewhere, a
checkpoint written and resumed) does not call for measuring them again. A failure-handling event
that changes none of the jumping jobs (a free server failing, a cable nobody crosses) lets the jump
go on at once as if uncut. A jump starts where one job completes a step: the others keep the part
of their step in progress they had run (after fresh measurements, or back to the means of a jump an
arrival, a departure or a checkpoint cut short).

**Failures** (a mix with ``failures:``): checkpoints, failures, spares and repairs stop and restart
jobs, whose traffic leaves the links while they are stopped (:class:`_Failures`). Cables between
switches that fail stop nobody: the links they belong to lose capacity until the repair
(:mod:`dpsim.mix.outages`) and the jobs crossing them are routed again on the narrower network.
"""

from __future__ import annotations

import functools
import gc
import heapq
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from dpsim.collectives.algorithms import ALGORITHMS
from dpsim.collectives.nccl import NcclCollectives
from dpsim.errors import ConfigError, DpsimError
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_RECOVERY_S, MIN_CHECKPOINT_INTERVAL_S
from dpsim.mix.clock import Pace
from dpsim.mix.outages import FabricOutages, LinkOutage, ports_per_nic
from dpsim.mix.placement import check_nodes, place
from dpsim.mix.pool import GroupPool
from dpsim.mix.spec import (MAX_NETWORK_JOBS, MAX_SIMULATED_CHECKPOINTS, DrawnFailures, JobSpec, MixSpec,
                            predict_flag_to_field)
from dpsim.network import maxmin_jit
from dpsim.network.maxmin import max_min_sparse
from dpsim.network.tiers import TierNetwork
from dpsim.plan.reliability import ClusterShape, model_optimum_s
from dpsim.predict import PredictConfig, predict
from dpsim.profile.once import reads_profiles_once
from dpsim.topology import Topology
from dpsim.topology.load import load_cluster_spec
from dpsim.units import format_bytes_against

DEFAULT_SAMPLE_STEPS = 20
"""Steps every job completes in an interval between arrivals/departures before it is fast-forwarded."""

_SATURATED = 1e-9
"""Relative slack under which a link counts as full (max-min's saturated links)."""

_KEEP_LOADS = 512

_SET_COMPONENTS = 64
"""Up to this many running jobs a group is grown on Python sets, above it on bit sets (the same groups)."""


def _bits(x: int) -> list[int]:
    """The positions of the 1 bits of ``x >= 0``, lowest first."""
    raw = np.frombuffer(x.to_bytes((x.bit_length() + 7) // 8, "little"), dtype=np.uint8)
    return np.unpackbits(raw, bitorder="little").nonzero()[0].tolist()
"""Groups whose shared links' load is kept for the no-solve shortcuts (the latest; others solve)."""


@frozen_dataclass
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


@frozen_dataclass
class Stretch:
    """A stretch of time a job spent in one state on a set of servers (for timelines)."""

    phase: str
    """``trained``, ``checkpoint`` (writing), ``restart`` or ``down`` (waiting for a repair)."""
    start_s: float
    """Its start."""
    end_s: float
    """Its end."""
    servers: tuple[int, ...]
    """The servers the job held then."""

    def to_dict(self) -> dict:
        return {"phase": self.phase, "start_s": self.start_s, "end_s": self.end_s, "servers": list(self.servers)}


@frozen_dataclass
class FailureRecord:
    """A failure that struck during the mix."""

    at_s: float
    """When."""
    server: int
    """The server (or the server whose NIC link) that failed."""
    component: str
    """``node``, ``link`` or ``gpu``."""
    job: str | None
    """The job it stopped (``None``: a free server or a spare, or one already down)."""

    def to_dict(self) -> dict:
        return {"at_s": self.at_s, "server": self.server, "component": self.component, "job": self.job}


@frozen_dataclass
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
    timeline: tuple[Stretch, ...] = ()
    """What it did when, on which servers."""
    failures: int = 0
    """Failures of its servers or their links that stopped it."""
    restarts: int = 0
    """Restarts from a checkpoint it completed."""
    lost_s: float = 0.0
    """Training time thrown away by failures (the work since the last completed checkpoint)."""
    lost_steps: float = 0.0
    """Steps thrown away by failures (:attr:`steps` counts only those kept)."""
    checkpoint_s: float = 0.0
    """Time writing checkpoints (an interrupted write included)."""
    restart_s: float = 0.0
    """Time restarting."""
    down_s: float = 0.0
    """Time stopped waiting for a failed server's repair (no spare free)."""
    checkpoint_interval_s: float = math.inf
    """Training time between its checkpoints (``inf``: none; no checkpoints without failures)."""
    checkpoint_write_s: float = 0.0
    """One checkpoint's blocking write."""
    goodput: float = 1.0
    """Training time kept (not lost) over the time it held its servers."""
    fabric_slowdown: float = 1.0
    """Step time over its step time in the same mix whose failed cables (switch uplinks, NIC ports of a
    bundle) never narrow the network (1: none failed, or none slowed it; below 1 when another job they
    slowed left it more bandwidth)."""

    @property
    def slowdown(self) -> float:
        """``step_time_s / alone_step_time_s`` (1: unaffected by the other jobs)."""
        return self.step_time_s / self.alone_step_time_s if self.alone_step_time_s > 0 else 1.0

    def to_dict(self) -> dict:
        return {"name": self.name, "model": self.model, "gpus": self.gpus, "servers": list(self.servers),
                "placement": self.placement, "algorithm": self.algorithm, "start_s": self.start_s,
                "end_s": self.end_s, "steps": self.steps, "step_time_s": self.step_time_s,
                "alone_step_time_s": self.alone_step_time_s, "reference_step_time_s": self.reference_step_time_s,
                "slowdown": self.slowdown, "bottlenecks": [b.to_dict() for b in self.bottlenecks],
                "failures": self.failures, "restarts": self.restarts, "lost_s": self.lost_s,
                "lost_steps": self.lost_steps, "checkpoint_s": self.checkpoint_s, "restart_s": self.restart_s,
                "down_s": self.down_s, "checkpoint_interval_s": self.checkpoint_interval_s if math.isfinite(
                    self.checkpoint_interval_s) else None, "checkpoint_write_s": self.checkpoint_write_s,
                "goodput": self.goodput, "fabric_slowdown": self.fabric_slowdown,
                "timeline": [s.to_dict() for s in self.timeline]}


@frozen_dataclass
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
    gpu_lost_to_failures: float = 0.0
    """GPU-seconds held by jobs but lost to failures (work thrown away, restarts, waits for repair)
    over the cluster's GPU-seconds."""
    gpu_checkpointing: float = 0.0
    """GPU-seconds held by jobs writing checkpoints over the cluster's GPU-seconds."""
    failures: tuple[FailureRecord, ...] = ()
    """Every failure, in time order."""
    spares: tuple[int, ...] = ()
    """Servers held back as spares at the start."""
    link_outages: tuple[LinkOutage, ...] = ()
    """Cables between switches (and NIC ports of a bundle) that were down, in time order."""

    def to_dict(self) -> dict:
        return {"topology": self.topology, "cluster_gpus": self.cluster_gpus, "horizon_s": self.horizon_s,
                "gpu_allocation": self.gpu_allocation, "gpu_busy": self.gpu_busy,
                "gpu_lost_to_failures": self.gpu_lost_to_failures, "gpu_checkpointing": self.gpu_checkpointing,
                "spares": list(self.spares), "failures": [f.to_dict() for f in self.failures],
                "link_outages": [o.to_dict() for o in self.link_outages],
                "evaluations": self.evaluations, "events": self.events, "sample_steps": self.sample_steps,
                "jobs": [j.to_dict() for j in self.jobs]}


@dataclass(kw_only=True)
class _Traffic:
    """One placed job's communication on the cluster's links, its flows merged into classes of
    flows that cross the same links (:func:`_flow_classes`)."""

    flow_of: np.ndarray
    """Class of each incidence (grouped by class)."""
    local: np.ndarray
    """Link of each incidence in a group's solve (a class's links in its first worst flow's route
    order): a shared link's cluster index less the private links, or (where ``own``) the index
    among the job's own solved private links (:meth:`MixSimulation.speeds` shifts them)."""
    own: np.ndarray
    """1 where ``local`` is one of the job's private links, else 0."""
    own_capacity: np.ndarray
    """Capacity of the job's own solved private links."""
    shared_solved: np.ndarray
    """The shared links in ``local`` (sorted)."""
    fraction: np.ndarray
    """Largest message fraction a flow of each class carries."""
    weight: np.ndarray
    """Flows in each class."""
    start: np.ndarray
    """Class ``c``'s incidences are ``start[c]:start[c + 1]`` (grouped by class, in route order)."""
    links: np.ndarray
    bound: np.ndarray
    """Most bytes/s it can put on each of ``links`` (each flow at its route's smallest capacity)."""
    link_set: frozenset = field(default=frozenset())
    detached: np.ndarray | None = None
    """Classes left out of the groups' solves (only on private links no solved class crosses); their
    incidences are not in ``flow_of``."""
    detached_rate: np.ndarray | None = None
    """Their max-min rates (bytes/s per flow), the same in any group."""
    alone_load: np.ndarray | None = None
    """Bytes/s it puts on each of ``links`` running alone (max-min among its own flows)."""
    alone_speed: float = math.nan
    """Bytes of message per second it progresses at alone."""
    shared: np.ndarray | None = None
    """Those of ``links`` other jobs may cross too (not its servers' own), numbered as a group's solve
    numbers shared links (less the private links)."""
    shared_load: np.ndarray | None = None
    """``alone_load`` on ``shared``."""
    slot: tuple[int, int] = (-1, -1)
    """(generation, slot) of its arrays in the mix's :class:`~dpsim.mix.pool.GroupPool` (-1: not laid out)."""


class _Modes(dict):
    """Each running job's phase (``compute``, ``comm``, ``solo``), with the set of the communicating
    ones kept alongside (a group grows by set operations on it, not by reading each job's phase), and
    the arrays the event loop steps every job with at once (:class:`~dpsim.mix.clock.Pace`)."""

    def __init__(self, pace: Pace):
        super().__init__()
        self.comm: set[int] = set()
        self.pace = pace

    def __setitem__(self, i: int, phase: str) -> None:
        was = super().get(i)
        super().__setitem__(i, phase)
        if phase == "comm":
            self.comm.add(i)
        else:
            self.comm.discard(i)
        self.pace.set_phase(i, phase)
        if phase == "solo" or was is None or was == "solo":
            self.pace.version += 1

    def __delitem__(self, i: int) -> None:
        super().__delitem__(i)
        self._gone(i)

    def pop(self, i: int, *default):
        out = super().pop(i, *default)
        self._gone(i)
        return out

    def _gone(self, i: int) -> None:
        self.comm.discard(i)
        self.pace.set_phase(i, None)
        self.pace.version += 1

    def update(self, *args, **kwargs) -> None:
        raise NotImplementedError("set phases one by one (the communicating set follows them)")


class _Left:
    """:attr:`~dpsim.mix.clock.Pace.left` read and written one job at a time as Python floats (the events'
    own arithmetic)."""

    __slots__ = ("a",)

    def __init__(self, a: np.ndarray):
        self.a = a

    def __getitem__(self, i: int) -> float:
        return float(self.a[i])

    def __setitem__(self, i: int, value: float) -> None:
        self.a[i] = value


class _Running(set):
    """The running jobs, counting changes (the live jobs are listed again only when it or a phase changed)."""

    version = 0

    def add(self, i: int) -> None:
        super().add(i)
        self.version += 1

    def discard(self, i: int) -> None:
        super().discard(i)
        self.version += 1


def _flow_classes(flow_of: np.ndarray, link_of: np.ndarray, fraction: np.ndarray, n_flows: int) -> dict:
    """A job's flows merged into classes of flows that cross the same links (``_Traffic``'s fields).

    Max-min gives flows on the same links one rate, so a class of weight ``w`` is solved as one
    flow (:func:`~dpsim.network.maxmin.max_min_sparse`'s ``weight``): a ring over spread servers
    has about half as many classes as flows. Classes are ordered by the first flow carrying their
    largest fraction, so the first slowest class holds the first slowest flow (the same binding
    link as flow by flow).
    """
    order = np.lexsort((link_of, flow_of))
    sorted_links = link_of[order]
    bounds = np.searchsorted(flow_of[order], np.arange(n_flows + 1))
    ids: dict[bytes, int] = {}
    cls = np.fromiter((ids.setdefault(sorted_links[a:b].tobytes(), len(ids)) for a, b in zip(bounds[:-1], bounds[1:])),
                      dtype=np.int64, count=n_flows)
    n = len(ids)
    top = np.full(n, -np.inf)
    np.maximum.at(top, cls, fraction)
    first = np.full(n, n_flows, dtype=np.int64)
    worst = np.flatnonzero(fraction == top[cls])
    np.minimum.at(first, cls[worst], worst)
    rank = np.argsort(first)
    renumber = np.full(n_flows, -1, dtype=np.int64)
    renumber[first[rank]] = np.arange(n)
    mine = renumber[flow_of] >= 0
    return dict(flow_of=renumber[flow_of[mine]], link_of=link_of[mine], fraction=top[rank],
                weight=np.bincount(cls, minlength=n)[rank].astype(float))


def _drop_private_repeats(flow_of: np.ndarray, link_of: np.ndarray, capacity: np.ndarray,
                          private: int) -> dict:
    """Of a job's private links (below ``private``: no other job crosses them) that carry the same
    flows, only the one of least capacity (the first such) can saturate first, so the others never
    freeze a flow: dropping them leaves every max-min rate as it was, and about halves the solve."""
    mine = np.flatnonzero(link_of < private)
    order = mine[np.lexsort((flow_of[mine], link_of[mine]))]
    links_sorted = link_of[order]
    starts = np.flatnonzero(np.r_[True, links_sorted[1:] != links_sorted[:-1]])
    ends = np.r_[starts[1:], len(order)]
    best: dict[bytes, int] = {}
    for a, b in zip(starts.tolist(), ends.tolist()):
        link = int(links_sorted[a])
        key = flow_of[order[a:b]].tobytes()
        if key not in best or capacity[link] < capacity[best[key]]:
            best[key] = link
    drop = np.ones(len(capacity) if private else 0, dtype=bool)
    drop[list(best.values())] = False
    keep = np.ones(len(link_of), dtype=bool)
    keep[mine] = ~drop[link_of[mine]]
    return dict(flow_of=flow_of[keep], link_of=link_of[keep])


def _group_max_min(flow_of: np.ndarray, link_of: np.ndarray, capacity: np.ndarray, n_flows: int,
                   weight: np.ndarray) -> np.ndarray:
    """A group's max-min rates: compiled where numba is installed (:mod:`dpsim.network.maxmin_jit`: the
    same rates bit for bit, for the classes' whole-number weights), else numpy's."""
    fast = maxmin_jit.compiled()
    if fast is not None and len(weight) and bool(np.all(weight >= 1)) and bool(np.all(weight == np.floor(weight))):
        return fast(flow_of, link_of, capacity, n_flows, weight)
    return max_min_sparse(flow_of, link_of, capacity, n_flows, weight)


_CLUSTER_FIELDS = {"--gpus": "cluster.gpus", "--link": "cluster.link", "--topology": "cluster.topology"}
"""The flags the topology loaders name -> the mix file's fields they were given as."""


def cluster_topology(spec: MixSpec) -> Topology:
    """The mix's whole cluster (an error names the mix file's ``cluster.*`` field, not a flag it has none of)."""
    try:
        design = load_cluster_spec(spec.topology_file, spec.link)
        gpn = design.node.gpus_per_node
        if spec.cluster_gpus > gpn and spec.cluster_gpus % gpn:
            # The servers' size comes with the fabric the file names: the mix has no --gpus-per-node.
            fabric = (f"cluster.topology {spec.topology_file!r}" if spec.topology_file
                      else f"cluster.link {spec.link!r}")
            raise ConfigError(f"cluster.gpus: {spec.cluster_gpus} is not whole servers of the {gpn} GPUs per server "
                              f"of {fabric}; use a multiple of {gpn} (e.g. {math.ceil(spec.cluster_gpus / gpn) * gpn}) "
                              f"or name a cluster.topology whose servers hold another count")
        return Topology(spec=design, n_gpus=spec.cluster_gpus)
    except DpsimError as exc:
        text = str(exc)
        for flag, name in _CLUSTER_FIELDS.items():
            if text.startswith(f"{flag}:") or text.startswith(f"{flag} "):
                raise type(exc)(name + text[len(flag):]) from None
        raise


@frozen_dataclass
class SoloRun:
    """A job's prediction alone on its GPUs: what the mix's events read of it."""

    model: str
    """The model the job trains, as ``predict`` names it."""
    step_s: float
    """Its step time alone on the cluster."""
    comm_s: float
    """The part of the step that is communication (at most the step)."""
    algorithm: str
    """The all-reduce algorithm the job's prediction chose (``ring`` where none of the mix's)."""
    phase: object
    """The all-reduce plan's phase that moves the most bytes per flow: it stands for the job's
    traffic on the shared network (``None``: a job on one GPU or without communication)."""
    state_bytes: float
    """Checkpoint bytes per GPU: weights and optimizer state, as ``dpsim goodput`` writes them."""
    fits: bool
    """Whether the job fits in its GPUs' memory."""
    memory_bytes: float
    """Memory it needs per GPU."""
    usable_bytes: float
    """Memory usable per GPU."""


@lru_cache(maxsize=256)
def _solo(design, gpus: int, fields: tuple) -> SoloRun:
    """The job's solo prediction on ``gpus`` GPUs of ``design`` with its ``predict`` fields."""
    topology = Topology(spec=design, n_gpus=gpus)
    # A profile's servers are the cluster's (a topology file is no preset to look its layout up in).
    layout = {"gpus_per_node": design.node.gpus_per_node} if "calibration" in dict(fields) else {}
    p = predict(PredictConfig(gpus=gpus, link=design.name, **layout, **dict(fields)), topology=topology)
    algorithm = p.ring.algorithm if p.ring is not None and p.ring.algorithm in ALGORITHMS else "ring"
    # A mixture of experts' all-to-alls stay in the job's own part of the step, as before predict
    # reported them as communication: their flows (often within a server) are not the all-reduce
    # phase the shared links are loaded with here.
    a2a_s = p.layout.ep_comm_s + p.layout.etp_comm_s if p.layout is not None else 0.0
    # Tensor- and context-parallel collectives stay inside a server while their groups fit one
    # (consecutive ranks, tp-cp-dp-pp: dpsim.collectives.groups.layout_communicators): they never load
    # the links jobs share, so they are the job's own time too (a Llama-3-70B tp8 pp4 job carried 3.6 s
    # of NVLink all-reduces into its 3.7 s network phase).
    gpn = design.node.gpus_per_node
    if p.layout is not None and p.layout.layout.tp <= gpn:
        a2a_s += p.layout.tp_comm_s
        if p.layout.layout.tp * p.layout.layout.cp <= gpn:
            a2a_s += p.layout.cp_comm_s
    comm_s = min(max(0.0, p.comm_s - a2a_s), p.step_time_s)
    phase = None
    if gpus > 1 and comm_s > 0:
        plan = ALGORITHMS[algorithm].plan("all_reduce", NcclCollectives(topology).cluster)
        # The phase that moves the most bytes per flow stands for the collective.
        phase = max(plan.phases, key=lambda ph: ph.repeat * float(ph.fraction.max()))
    return SoloRun(model=p.model, step_s=p.step_time_s, comm_s=comm_s, algorithm=algorithm, phase=phase,
                   state_bytes=p.memory.weights_bytes + p.memory.optimizer_bytes, fits=p.memory.fits,
                   memory_bytes=p.memory.total_bytes, usable_bytes=p.memory.usable_bytes)


class MixSimulation:
    """The event loop of a mix (see the module docstring); :func:`simulate_mix` runs it."""

    def __init__(self, spec: MixSpec, *, sample_steps: int | None = DEFAULT_SAMPLE_STEPS,
                 network=None, topology: Topology | None = None, narrowing: bool = True,
                 progress: Callable[[float, int, int], None] | None = None):
        self.spec = spec
        # Told (simulated seconds, jobs finished, jobs) every 512 events: a contended day runs for
        # seconds to minutes, and the CLI shows how far it has got.
        self.progress = progress
        # False: failed cables are logged but leave the network as it was (the run fabric_slowdown compares with).
        self.narrowing = narrowing
        self.topology = topology or cluster_topology(spec)
        self.design = self.topology.spec
        self.net = network if network is not None else TierNetwork(self.topology)
        self.capacity = self.net.capacity_bytes_per_s
        self.sample_steps = sample_steps
        self.gpn = self.design.node.gpus_per_node
        self.n_servers = self.topology.n_nodes
        self.evaluations = 0
        self._cache: dict[frozenset, dict] = {}
        self._speeds: dict[frozenset, dict] = {}  # each cached group's speeds alone (set in one update)
        self._solved: dict[frozenset, tuple] = {}
        self._on_links: list[frozenset] = []  # the jobs of a cached group on one of its binding links, numbered
        self._on_link_number: dict[frozenset, int] = {}
        self._bound = np.zeros(len(self.capacity))
        # Which jobs' traffic is on each link now (link -> jobs), and the links array each was added
        # with: a job's possible neighbours are read from the links it makes fillable instead of
        # testing every running job (4,096 jobs were 8 million tests, minutes of a mix).
        self._on_link: dict[int, set[int]] = {}
        self._added: dict[int, np.ndarray] = {}
        self._nic = np.zeros(len(self.capacity), dtype=bool)
        self._nic[self.net.nic_links()] = True
        # Links of one server: only the job placed there crosses them (another network: none known).
        self._private_links = int(getattr(self.net, "server_links", lambda: 0)())
        # A group's solve numbers the shared links as they are (less the private ones), then each
        # job's own solved private links after them: no renumbering of the cluster's links per solve.
        self._shared_capacity = self.capacity[self._private_links:]
        self._shared_over = self._shared_capacity * (1 + _SATURATED)
        self._pairs: list[tuple[int, int]] = []
        kernels = maxmin_jit.group_kernels()
        # Compiled group solves over pooled arrays where numba is installed (the same numbers), else numpy's.
        self._pool = GroupPool(kernels, len(self._shared_capacity)) if kernels is not None else None
        self.solo = {}
        if spec.spares >= self.n_servers:
            raise ConfigError(f"spares: {spec.spares} is not valid; the cluster has {self.n_servers} servers, keep "
                              "some for jobs")
        first_spare = self.n_servers - spec.spares
        spanning = [i for i, job in enumerate(spec.jobs) if job.gpus > self.gpn]
        if len(spanning) > MAX_NETWORK_JOBS:
            raise ConfigError(
                f"jobs: {len(spanning):,} of the {len(spec.jobs):,} jobs span more than one server of {self.gpn} GPUs "
                f"(their collectives cross the network); expected at most {MAX_NETWORK_JOBS:,}: every arrival measures "
                f"again each running job it shares links with, so the time grows with the square of their number "
                f"(512 such jobs took a minute of CPU here, {MAX_NETWORK_JOBS:,} four); split the mix "
                f"(a shorter horizon, fewer jobs) or run it as several mixes")
        for i, job in enumerate(spec.jobs):
            spare = [x for x in job.nodes or () if first_spare <= x < self.n_servers]
            if spare:
                raise ConfigError(f"jobs[{i}].nodes: server {spare[0]} is one of the {spec.spares} spares (servers "
                                  f"{first_spare}..{self.n_servers - 1}); name others or hold back fewer spares")
            if job.gpus > self.gpn and job.gpus % self.gpn:
                raise ConfigError(f"jobs[{i}].gpus: {job.gpus} is not whole servers of {self.gpn} GPUs; "
                                  f"use a multiple of {self.gpn}")
            # Before the run, as the spares above: a server past the cluster was refused only when the job arrived.
            check_nodes(job, i, max(1, math.ceil(job.gpus / self.gpn)), self.n_servers)
            try:
                self.solo[job.name] = _solo(self.design, job.gpus, job.predict)
            except DpsimError as exc:
                # Worded with the file's fields: the job has no flags.
                text = predict_flag_to_field(str(exc), f"jobs[{i}]")
                # ": " ends the field (a colon alone may be the model's own: transformers:GPT2Config(...)).
                head, sep, rest = text.partition(": ")
                if text.startswith(f"jobs[{i}].") and sep:
                    raise type(exc)(f"{head} ({job.name}): {rest}") from None
                raise type(exc)(f"jobs[{i}] ({job.name}): {text}") from None
            solo = self.solo[job.name]
            if not solo.fits:  # a job that cannot start would share the network as if it ran
                need, usable = format_bytes_against(solo.memory_bytes, solo.usable_bytes)
                raise ConfigError(f"jobs[{i}] ({job.name}): does not fit in memory on {job.gpus} GPUs: "
                                  f"{need} per GPU of {usable} usable; give more gpus, a "
                                  f"sharded strategy (fsdp, zero3) or a smaller micro_batch (dpsim predict with "
                                  f"the job's flags says what fits)")
            ck = job.checkpoint
            if spec.failures is not None and ck.write_s is None:
                # The write time follows from the bandwidth only now (it needs the job's state bytes);
                # refused as dpsim goodput refuses it: a write past a year made the interval's optimum NaN.
                write_s = solo.state_bytes / ck.bandwidth_bytes_per_s
                if not write_s <= MAX_RECOVERY_S:
                    raise ConfigError(f"jobs[{i}] ({job.name}): checkpoint.bandwidth: {ck.bandwidth_bytes_per_s:g} "
                                      f"B/s is not valid; writing its {solo.state_bytes:.3g} bytes of "
                                      f"checkpoint would take {write_s:.3g} s, over {MAX_RECOVERY_S:g} s (a year); "
                                      f"give a larger bandwidth")

    def set_capacity(self, capacity: np.ndarray) -> None:
        """Links' capacities from now on (switch cables down or back: :mod:`dpsim.mix.outages`); the
        callers route the jobs crossing the changed links again."""
        self.capacity = capacity
        self._shared_capacity = capacity[self._private_links:]
        self._shared_over = self._shared_capacity * (1 + _SATURATED)

    def healthy_traffic(self, job: JobSpec, servers: list[int]) -> _Traffic | None:
        """:meth:`traffic` on the network with every link in service (a job's reference and alone
        speeds do not count failed cables: their cost is reported apart)."""
        now = self.capacity
        if now is self.net.capacity_bytes_per_s:
            return self.traffic(job, servers)
        self.set_capacity(self.net.capacity_bytes_per_s)
        try:
            return self.traffic(job, servers)
        finally:
            self.set_capacity(now)

    # ------------------------------------------------------------------ traffic
    def traffic(self, job: JobSpec, servers: list[int]) -> _Traffic | None:
        """The job's dominant phase placed on ``servers`` and routed on the cluster's network."""
        phase = self.solo[job.name].phase
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
        fraction = np.asarray(phase.fraction, float)
        rates = max_min_sparse(flow_of, local, self.capacity[links], n_flows)
        classes = _flow_classes(flow_of, link_of, fraction, n_flows)
        classes.update(_drop_private_repeats(classes["flow_of"], classes["link_of"], self.capacity,
                                             self._private_links))
        by_class = np.argsort(classes["flow_of"], kind="stable")
        c_flow, c_link = classes["flow_of"][by_class], classes["link_of"][by_class]
        detached, detached_rate = self._detached(c_flow, c_link, classes["weight"])
        keep = np.ones(len(classes["weight"]), dtype=bool)
        keep[detached] = False
        c_flow, c_link = c_flow[keep[c_flow]], c_link[keep[c_flow]]
        own = c_link < self._private_links
        own_links, own_local = np.unique(c_link[own], return_inverse=True)
        c_local = c_link - self._private_links
        c_local[own] = own_local
        t = _Traffic(flow_of=c_flow, fraction=classes["fraction"], weight=classes["weight"], local=c_local,
                     own=own.astype(np.int64), own_capacity=self.capacity[own_links],
                     shared_solved=np.unique(c_local[~own]), links=links, bound=bound,
                     start=np.searchsorted(c_flow, np.arange(len(classes["weight"]) + 1)),
                     link_set=frozenset(links.tolist()), detached=detached, detached_rate=detached_rate)
        t.alone_load = np.bincount(local, weights=rates[flow_of], minlength=len(links))
        t.alone_speed = 1.0 / float(np.max(fraction / rates))
        public = links >= self._private_links
        t.shared, t.shared_load = links[public] - self._private_links, t.alone_load[public]
        return t

    def _detached(self, flow_of: np.ndarray, link_of: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A job's classes that cross only its private links and share none with a class that reaches
        a shared link, even through other such classes (a ring's hops inside a server), and their
        max-min rates: no other job can change them, so they are solved once, not in every group."""
        own = link_of < self._private_links
        n = len(weight)
        attached = np.zeros(n, dtype=bool)
        attached[flow_of[~own]] = True
        links, on = np.unique(link_of[own], return_inverse=True)
        mine = flow_of[own]
        while True:
            reached = np.zeros(len(links), dtype=bool)
            reached[on[attached[mine]]] = True
            grown = attached.copy()
            grown[mine[reached[on]]] = True
            if (grown == attached).all():
                break
            attached = grown
        apart = ~attached[mine]
        rates = max_min_sparse(mine[apart], on[apart], self.capacity[links], n, weight)
        detached = np.flatnonzero(~attached)
        return detached, rates[detached]

    def speeds(self, traffic: list[_Traffic]) -> tuple[np.ndarray, list[int | None]]:
        """Bytes of message per second of each job when all of ``traffic`` runs at once, and the
        link binding each one's slowest flow that other jobs cross too (``None``: none such)."""
        out, binding, _, _ = self.solve(traffic)
        return out, binding

    def solve(self, traffic: list[_Traffic]) -> tuple[np.ndarray, list[int | None], np.ndarray, np.ndarray]:
        """:meth:`speeds`, with the load the jobs put on the shared links (numbered as ``_Traffic.shared``)
        and whether each job crosses a full shared link another job crosses too (``contested``: only
        such a job's leaving can speed the others up)."""
        n_shared = len(self._shared_capacity)
        if len(traffic) == 1:
            load = np.zeros(n_shared)
            load[traffic[0].shared] = traffic[0].shared_load
            return np.array([traffic[0].alone_speed]), [None], load, np.zeros(1, dtype=bool)
        # When every job's alone allocation fits together, it is the max-min of them all (each flow
        # keeps a full link no other job crosses as its bottleneck): no solve needed.
        # (A job's private links carry only its own alone load: only the others can be over.)
        if self._pool is not None:
            slots = self._pool.slots(traffic, self._shared_capacity)
            load, over = self._pool.alone_load(slots, self._shared_over)
        else:
            load = self._alone_load(traffic)
            over = bool((load > self._shared_over).any())
        if not over:
            # Each at its most: whichever leaves, the others stay so (none contested).
            return (np.array([t.alone_speed for t in traffic]), [None] * len(traffic), load,
                    np.zeros(len(traffic), dtype=bool))
        if self._pool is not None:
            ok, speed, bind, load, crosses = self._pool.solve(slots, 1 - _SATURATED)
            if ok:
                self.evaluations += 1
                return (speed, [b + self._private_links if b >= 0 else None for b in bind.tolist()], load,
                        crosses)
        offsets = np.cumsum([0] + [len(t.fraction) for t in traffic])
        # Each job's arrays joined once, then shifted by its offsets repeated over its incidences (a
        # few numpy calls per solve, not a few per job).
        per_job = [len(t.flow_of) for t in traffic]
        flow_of = np.concatenate([t.flow_of for t in traffic]) + np.repeat(offsets[:-1], per_job)
        weight = np.concatenate([t.weight for t in traffic])
        # Shared links as numbered (few: the switch tiers), each job's own private links after them
        # (the solver's work follows the flows, not the cluster's 100,000s of server links).
        base = n_shared + np.cumsum([0] + [len(t.own_capacity) for t in traffic])
        own = np.concatenate([t.own for t in traffic])
        local = np.concatenate([t.local for t in traffic]) + np.repeat(base[:-1], per_job) * own
        capacity = np.concatenate([self._shared_capacity] + [t.own_capacity for t in traffic])
        users = np.ones(len(capacity), dtype=np.int64)
        solved = np.concatenate([t.shared_solved for t in traffic])
        users[:n_shared] = np.bincount(solved, minlength=n_shared)
        rates = _group_max_min(flow_of, local, capacity, int(offsets[-1]), weight)
        self.evaluations += 1
        load = np.bincount(local, weights=(rates * weight)[flow_of], minlength=len(capacity))
        full = load >= capacity * (1 - _SATURATED)
        contested = full & (users > 1)
        for t, o in zip(traffic, offsets.tolist()):
            if len(t.detached):
                rates[o + t.detached] = t.detached_rate
        # Each job's slowest class (the first of equals, as argmax), all jobs at once.
        ratio = np.concatenate([t.fraction for t in traffic]) / rates
        top = np.maximum.reduceat(ratio, offsets[:-1])
        at = np.flatnonzero(ratio == np.repeat(top, np.diff(offsets)))
        worst = (at[np.searchsorted(at, offsets[:-1])] - offsets[:-1]).tolist()
        # The first contested shared link on each job's worst class's route, all jobs at once.
        first = np.cumsum([0] + per_job)[:-1]
        a = first + np.array([t.start[w] for t, w in zip(traffic, worst)])
        n_on = first + np.array([t.start[w + 1] for t, w in zip(traffic, worst)]) - a
        idx = np.repeat(a - np.cumsum(n_on) + n_on, n_on) + np.arange(int(n_on.sum()))
        hit = np.flatnonzero((own[idx] == 0) & contested[local[idx]])
        seg = np.cumsum(n_on) - n_on
        at_hit = np.searchsorted(hit, seg)
        found = at_hit < len(hit)
        found[found] = hit[at_hit[found]] < (seg + n_on)[found]
        links_hit = local[idx[hit[np.minimum(at_hit, len(hit) - 1)]]] if len(hit) else np.zeros(len(a), np.int64)
        binding = [int(b) + self._private_links if f else None for b, f in zip(links_hit.tolist(), found.tolist())]
        crosses = np.repeat(np.arange(len(traffic)), [len(t.shared_solved) for t in traffic])
        return (1.0 / top, binding, load[:n_shared],
                np.bincount(crosses, weights=contested[solved], minlength=len(traffic)) > 0)

    def shared_from(self, key: frozenset, traffic: dict, entered: int | None, left: int | None) -> tuple | None:
        """The shares of the communicating jobs ``key`` from those of the same group but one job, without
        a solve, where that is exact (``None``: solve). A job that stopped communicating and crossed no
        full link another job crossed leaves the others' allocation max-min (each keeps its bottleneck);
        a job that started and fits at its alone allocation on top of the others' (:meth:`add_alone`)
        joins them at it. Returns ({job: (speed, binding link)}, the shared links' load or ``None``,
        contested jobs, whether every job runs at its alone allocation) as :meth:`solve` would."""
        if left is not None:
            before = self._solved.get(key | {left})
            if before is None or left in before[1]:
                return None
            if not before[2] and not self._overfilled([traffic[j] for j in sorted(key)]):
                return None  # the others fit at their alone allocations: reported as a solve would
            shares = self._cache[key | {left}]
            # The others' load is not kept (no subtraction's rounding): a later arrival here solves.
            return {j: shares[j][:2] for j in key}, None, before[1], before[2]
        if entered is None or entered not in key or traffic[entered] is None:
            return None
        before = self._solved.get(key - {entered})
        if before is None or before[0] is None:
            return None
        t = traffic[entered]
        load = self.add_alone(before[0], t)
        if load is None:
            return None
        if not before[2] and ((load[t.shared] >= self._shared_capacity[t.shared] * (1 - _SATURATED))
                              & (before[0][t.shared] > 0)).any():
            return None  # a link it fills with another job would bind (as a solve reports it)
        shares = self._cache[key - {entered}]
        out = {j: shares[j][:2] for j in key - {entered}}
        out[entered] = (t.alone_speed, None)
        return out, load, before[1], before[2]

    def _alone_load(self, traffic: list[_Traffic]) -> np.ndarray:
        """The shared links' load of the jobs each at its alone allocation (bincount adds in the jobs'
        order, as one by one would: the same sums)."""
        if self._pool is not None:
            return self._pool.alone_load(self._pool.slots(traffic, self._shared_capacity), self._shared_over)[0]
        return np.bincount(np.concatenate([t.shared for t in traffic]),
                           weights=np.concatenate([t.shared_load for t in traffic]),
                           minlength=len(self._shared_over))

    def _overfilled(self, traffic: list[_Traffic]) -> bool:
        """Whether the jobs' alone allocations together overfill a shared link (else they are the
        max-min of them all)."""
        if self._pool is not None:
            return self._pool.alone_load(self._pool.slots(traffic, self._shared_capacity), self._shared_over)[1]
        return bool((self._alone_load(traffic) > self._shared_over).any())

    def _remember(self, key: frozenset, load: np.ndarray | None, contested: frozenset, alone: bool) -> None:
        """Keep a group's shared links' load, contested jobs and whether all run at their alone allocation,
        for :meth:`shared_from` (the latest few: each load is a vector over the shared links)."""
        self._solved[key] = (load, contested, alone)
        if len(self._solved) > _KEEP_LOADS:
            del self._solved[next(iter(self._solved))]

    def add_alone(self, load: np.ndarray, t: _Traffic) -> np.ndarray | None:
        """The shared links' load when a job joins others (``load``: theirs, max-min among them) at its
        alone allocation, or ``None`` when that overfills a link. Where it fits, the others' allocation
        with the newcomer's alone one is the max-min of them all, exactly: every flow keeps its
        bottleneck, full as before and crossed by no new flow (the newcomer's bottlenecks are links
        only it crosses), so no solve is needed."""
        on = load[t.shared] + t.shared_load
        if (on > self._shared_over[t.shared]).any():
            return None
        load = load.copy()
        load[t.shared] = on
        return load

    # ------------------------------------------------------------------ loop
    def run(self) -> MixResult:
        # The loop keeps its groups' shares (millions of small tuples in a contended day) and makes no
        # reference cycles to speak of: the cyclic collector's full passes over them cost a sixth of
        # the run and free nothing, so it pauses while the loop runs (what it left is collected after).
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if collecting:
                gc.enable()

    def _run(self) -> MixResult:
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
        alone_first = {}
        pace = Pace(n)
        mode = _Modes(pace)
        communicating = mode.comm
        left = _Left(pace.left)
        steps = [0.0] * n
        start = [jobs[i].start_s for i in range(n)]
        end = [math.nan] * n
        blame: dict[int, dict] = {i: {} for i in range(n)}
        # Contended time and the time on the binding link of the blame entry each job is adding to now
        # are added to with the clock (the entry's own count is written back when the job's link changes).
        on_entry = pace.on_entry
        entry_of: list = [None] * n  # the blame entry each job's on_entry counts for
        entry_link, entry_others = pace.entry_link, pace.entry_others
        completions: dict[int, list[float]] = {}
        neighbours: dict[int, set[int]] = {}
        now = 0.0
        events = 0
        k = 0  # next arrival
        running: set[int] = _Running()
        for s in range(self.n_servers - spec.spares, self.n_servers):
            free[s] = False  # held back as spares
        failures = _Failures(self, free) if spec.failures is not None else None

        def component(i: int) -> set[int]:
            # Grown a frontier at a time with set operations only (a contended group links every job to
            # most others): the neighbours reached, less those seen, among the communicating ones.
            if len(running) > _SET_COMPONENTS or neighbours[i].isdisjoint(communicating):
                return component_bits(i)
            comp, frontier = {i}, {i}
            while frontier and len(comp) < len(communicating):  # (all reached: none left to find)
                frontier = set().union(*(neighbours[j] for j in frontier)) - comp
                frontier &= communicating
                comp |= frontier
            return comp

        near_bits = [0] * n  # each job's neighbours as the bits of an integer (for component_bits)

        def component_bits(i: int) -> set[int]:
            """:func:`component` on bit sets: among hundreds of jobs that each neighbour most others, a
            frontier's neighbours are an OR of one integer per job (a few machine words), where the union
            of their sets inserted every neighbour of every job again (O(jobs^2) an event)."""
            if neighbours[i].isdisjoint(communicating):
                return {i}
            comm = int.from_bytes(np.packbits(pace.comm, bitorder="little").tobytes(), "little")
            comp = frontier = 1 << i
            while frontier:
                reach = near_bits[i] if frontier == comp else functools.reduce(
                    operator.or_, map(near_bits.__getitem__, _bits(frontier)), 0)
                frontier = reach & comm & ~comp
                comp |= frontier
                if comp == comm:  # every communicating job reached (a contended group: at once)
                    return set(communicating)
            return set(_bits(comp))

        crossers: dict[int, frozenset] = {}  # the jobs whose traffic crosses a link (emptied when one is routed)

        def crossing(b: int) -> frozenset:
            got = crossers.get(b)
            if got is None:
                got = crossers[b] = frozenset(m for m, t in traffic.items() if t is not None and b in t.link_set)
            return got

        def reshare(touched: set[int], entered: int | None = None, left: int | None = None) -> None:
            """New speeds for the communicating jobs linked to ``touched`` (``entered``: the job that just
            started communicating, ``left``: the one that just stopped, for the shortcuts of
            :meth:`MixSimulation.shared_from`)."""
            done: set[int] = set()
            for i in touched:
                if i in done or mode.get(i) != "comm":
                    continue
                comp = component(i)
                done |= comp
                key = frozenset(comp)
                if key not in self._cache:
                    order = sorted(comp)
                    got = self.shared_from(key, traffic, entered, left)
                    if got is None:
                        evaluations = self.evaluations
                        sp, bind, load, contested = self.solve([traffic[j] for j in order])
                        got = dict(zip(order, zip(sp.tolist(), bind))), load, frozenset(
                            j for j, c in zip(order, contested) if c), self.evaluations == evaluations
                    shares, load, contested, alone = got
                    on_link: dict[int | None, frozenset] = {None: frozenset()}  # the group's jobs on a binding link
                    for b in {b for _, b in shares.values() if b is not None}:
                        on_link[b] = key & crossing(b)
                    # (speed, binding link, the jobs on it, whether it shares the group): the loop's blame
                    # state is the entry itself (no tuple built per job per event). The jobs on a link are
                    # one set for all of them (each job's own name is left out of its blame at the end).
                    shared = len(key) > 1
                    self._cache[key] = {j: (s, b, on_link[b], shared) for j, (s, b) in shares.items()}
                    number = {}
                    for b, jobs_on in on_link.items():
                        # One number per set of jobs: a job whose entry has merged them has nothing to merge.
                        number[b] = self._on_link_number.setdefault(jobs_on, len(self._on_links))
                        if number[b] == len(self._on_links):
                            self._on_links.append(jobs_on)
                    size = len(shares)
                    self._speeds[key] = (np.fromiter(shares, dtype=np.int64, count=size),
                                         np.fromiter((s for s, _ in shares.values()), dtype=float, count=size),
                                         np.fromiter((-1 if b is None else b for _, b in shares.values()),
                                                     dtype=np.int64, count=size),
                                         np.full(size, shared),
                                         np.fromiter((number[b] for _, b in shares.values()), dtype=np.int64,
                                                     count=size))
                    self._remember(key, load, contested, alone)
                pace.set_group(*self._speeds[key])


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
            changed()
            mode[i] = "solo"

        def solo_position(i: int) -> tuple[float, str, float]:
            """(steps, mode, time or bytes left) a job running solo has reached now."""
            t = alone_step(i)
            done = (now - solo_t0[i]) / t if t > 0 else 0.0
            whole = math.floor(done + 1e-12)
            pos = max(done - whole, 0.0) * t
            if pos < compute_s[i] or traffic[i] is None:
                return solo_steps[i] + whole, "compute", compute_s[i] - pos
            return solo_steps[i] + whole, "comm", work[i] - (pos - compute_s[i]) * alone_speed[i]

        def from_solo(i: int) -> None:
            steps[i], mode[i], left[i] = solo_position(i)
            changed()
            if mode[i] == "comm":
                reshare({i}, entered=i)
            completions[i] = []

        def enter_network(i: int) -> None:
            """Job ``i`` (its mode and position set) starts training: its links, its neighbours."""
            neighbours[i] = set()
            near_bits[i] = 0
            changed()
            running.add(i)
            completions[i] = []
            if traffic[i] is not None:
                self._pairs = []
                pairs = [(i, m) for m in self._link_neighbours(i, traffic, running, +1)]
                for a, b in pairs + self._pairs:
                    if b not in neighbours[a]:
                        neighbours[a].add(b)
                        neighbours[b].add(a)
                        near_bits[a] |= 1 << b
                        near_bits[b] |= 1 << a
                        for m in (a, b):
                            if mode[m] == "solo":
                                from_solo(m)
            if not neighbours[i]:
                to_solo(i)
            elif mode[i] == "comm":
                reshare({i}, entered=i)

        def leave_network(i: int) -> None:
            """Job ``i`` stops training (leaves, fails or checkpoints): its traffic leaves its links."""
            changed()
            running.discard(i)
            if mode[i] == "solo":
                steps[i], mode[i], left[i] = solo_position(i)
            was = mode.pop(i)
            if traffic[i] is not None:
                self._link_neighbours(i, traffic, running, -1)
            near_bits[i] = 0
            for m in neighbours.pop(i, set()):
                neighbours[m].discard(i)
                near_bits[m] &= ~(1 << i)
                if not neighbours[m] and mode[m] != "solo":
                    to_solo(m)
            if was == "comm":
                reshare({m for m in running if mode.get(m) == "comm"}, left=i)

        def depart(i: int, t: float) -> None:
            end[i] = t
            if i in running:
                if mode[i] == "solo":
                    steps[i] = solo_steps[i] + (t - solo_t0[i]) / alone_step(i) if alone_step(i) > 0 else 0.0
                    if jobs[i].steps is not None:
                        steps[i] = min(steps[i], float(jobs[i].steps))
                    mode[i] = "compute"  # its steps are counted: leave_network must not recount them
                leave_network(i)
            if failures is not None:
                failures.release(i, now)
            for s in servers[i]:
                free[s] = True
            changed()

        dirty = [True]  # deadlines change only when a job arrives, leaves or changes mode
        changes = [0]  # counts those changes (and re-routings): the live jobs' state is kept between them
        jumped = None  # the last fast-forward: (its jobs' state, their mean step times, its end, its step-counted
        # jobs' last step ends)

        def changed() -> None:
            dirty.append(True)
            changes[0] += 1

        kept_state: list = [None, None]
        kept_live: list = [None, None]

        def live_jobs() -> list[int]:
            """The running jobs that are not solo, in ``running``'s order (listed again only after a change)."""
            key = (changes[0], pace.version, running.version)
            if kept_live[0] != key:
                kept_live[:] = [key, [j for j in running if mode[j] != "solo"]]
            return kept_live[1]

        def state() -> frozenset:
            """What sets the live jobs' pace: each one's traffic and the jobs that can slow it down."""
            key = (changes[0], pace.version, running.version)
            if kept_state[0] != key:
                got = frozenset((j, id(traffic[j]), frozenset(neighbours[j])) for j in live_jobs())
                hash(got)  # kept: a later comparison with another state is then one hash comparison
                kept_state[:] = [key, got]
            return kept_state[1]

        unmeasured = [None]  # a live job with too few steps for a jump, while it is one (checked first)

        def measured() -> bool:
            """Whether every live job completed more than ``sample_steps`` steps since its last reset."""
            j = unmeasured[0]
            if j is not None and j in running and mode.get(j) != "solo" and len(completions[j]) <= self.sample_steps:
                return False
            # The one with the fewest steps: it stays the witness longest.
            fewest = min(live_jobs(), key=lambda m: len(completions[m]), default=None)
            unmeasured[0] = fewest if fewest is not None and len(completions[fewest]) <= self.sample_steps else None
            return unmeasured[0] is None

        def next_phase_end() -> tuple[float, int | None]:
            """The first phase end of a running job (not solo), and whose: the first such in ``running``'s
            order when several end at once, as a scan of the jobs one by one finds it."""
            if ordered[0] != running.version:
                pace.set_order(running)
                ordered[0] = running.version
            t_first, at = pace.next_end(now)
            return (t_first, at) if at >= 0 else (math.inf, None)

        ordered = [-1]  # the running set's version pace.rank was set from

        def reblame() -> None:
            """The blame state of the jobs whose phase or group changed: which link's entry each adds its
            communication time to from now on, and the jobs it shares it with (merged into that entry)."""
            for i in pace.reblame().tolist():
                b, number = int(pace.bind[i]), int(pace.others[i])
                if entry_link[i] != b:
                    if entry_of[i] is not None:
                        entry_of[i][0] = float(on_entry[i])
                    entry = blame[i].get(b)
                    if entry is None:
                        entry = blame[i][b] = [0.0, set(), -1]
                    entry_of[i], entry_link[i], on_entry[i] = entry, b, entry[0]
                entry = entry_of[i]
                if entry[2] != number:  # the same cached group's jobs: already counted
                    entry[1].update(self._on_links[number])
                    entry[2] = number
                entry_others[i] = number
        t_dead = math.inf

        def deadline(i: int) -> float:
            d = jobs[i].duration_s
            t = min(horizon, start[i] + d) if d is not None else horizon
            if mode.get(i) == "solo" and jobs[i].steps is not None:
                t = min(t, solo_t0[i] + (jobs[i].steps - solo_steps[i]) * alone_step(i))
            return t

        def retraffic(i: int) -> None:
            """Job ``i``'s servers changed (a spare replaced a failed one): route its traffic again."""
            traffic[i] = self.traffic(jobs[i], servers[i])
            crossers.clear()
            changes[0] += 1
            self._cache.clear()  # cached shares are by job: this job's links changed
            self._speeds.clear()
            self._solved.clear()
            if traffic[i] is not None:
                alone_speed[i] = traffic[i].alone_speed

        def recapacity(links: np.ndarray) -> None:
            """Switch cables failed or came back: the jobs crossing ``links`` are routed on the new
            capacities, each from the point of its step it had reached."""
            hit = failures.crossing(set(links.tolist()))
            moving = [i for i in hit if i in running]
            at = {}
            for i in moving:
                at[i] = solo_position(i) if mode[i] == "solo" else (steps[i], mode[i], left[i])
                leave_network(i)
            self.set_capacity(failures.outages.capacity())
            for i in hit:
                retraffic(i)
            for i in moving:
                steps[i], mode[i], left[i] = at[i]
                enter_network(i)

        def jump(live: list[int], before: tuple | None, going_on: bool = False) -> tuple:
            """Fast-forward ``live`` to the next event (``before``: the last jump, whose means still hold;
            ``going_on``: this jump goes on with that one, cut short here)."""
            nonlocal now
            bound = min([t_arrive, failures.next_s() if failures is not None else math.inf]
                        + [deadline(j) for j in (failures.held if failures is not None else running)])
            # A jump starts where one job completed a step and the others are mid-step (after fresh
            # measurements, or back to the means of a jump an arrival, a departure or a checkpoint cut
            # short): the part of its step each has run is done, not restarted.
            partial = {} if going_on else {
                j: steps_at((steps[j], mode[j], left[j]), compute_s[j], work.get(j), alone_speed.get(j),
                            alone_step(j)) - steps[j] for j in live}
            now, finished, mean, ends = self._fast_forward(
                now, live, completions, steps, jobs, horizon, bound, deadline, mode, left, compute_s,
                partial, mean=None if before is None else before[1],
                ends=before[3] if going_on else None)
            got = state(), mean, now, ends
            for j in finished:
                depart(j, now)
            reshare(set(running))
            return got

        if failures is not None:
            failures.bind(servers=servers, running=running, mode=mode, left=left, steps=steps,
                          alone_step=alone_step, compute_s=compute_s, work=work, alone_speed=alone_speed,
                          traffic=traffic, leave=leave_network, enter=enter_network, retraffic=retraffic,
                          solo_position=solo_position, recapacity=recapacity)

        while True:
            if failures is not None and k >= n and not failures.held:
                break  # every job has left: later failures hit nobody
            # Next event: a phase end, an arrival, a deadline, a failure/repair/checkpoint.
            t_next, who = next_phase_end()
            t_arrive = jobs[arrivals[k]].start_s if k < n else math.inf
            held = failures.held if failures is not None else running
            if dirty:
                t_dead = min((deadline(i) for i in held), default=math.inf)
                dirty.clear()
            t_ctl = failures.next_s() if failures is not None else math.inf
            t = min(t_next, t_arrive, t_dead, t_ctl, horizon)
            if t == math.inf:
                break
            dt = t - now
            if pace.any_touched:
                reblame()
            pace.advance(dt)
            now = t
            if now >= horizon:
                break
            events += 1
            if self.progress is not None and not events % 512:
                self.progress(now, sum(1 for x in end if x == x), n)
            if t == t_dead and t_dead <= t_next:
                for i in [i for i in held if deadline(i) <= now]:
                    depart(i, now)
                continue
            if t == t_ctl and t_ctl <= t_next:
                failures.handle(now)
                live = live_jobs()
                if jumped is not None and jumped[2] == now and live and jumped[0] == state():
                    # The event cut a jump short and changed none of its jobs (a free server failed, a
                    # cable nobody crosses): the jump goes on as if uncut, from where each job was.
                    jumped = jump(live, jumped, going_on=True)
                continue
            if t == t_arrive and t_arrive <= t_next:
                i = arrivals[k]
                k += 1
                job = jobs[i]
                need = max(1, math.ceil(job.gpus / self.gpn))
                healthy = free if failures is None else failures.healthy(free, now)
                try:
                    servers[i] = place(job, need, healthy, self.design, at_s=now, index=i)
                except ConfigError:
                    if healthy is free:
                        raise
                    # Not enough servers in service: take failed ones too and wait for their repair.
                    servers[i] = place(job, need, free, self.design, at_s=now, index=i)
                for s in servers[i]:
                    free[s] = False
                solo = self.solo[job.name]
                step_s, comm_s = solo.step_s, solo.comm_s
                traffic[i] = self.traffic(job, servers[i])
                crossers.clear()
                compute_s[i] = step_s - comm_s
                if traffic[i] is not None:
                    ref = self.healthy_traffic(job, list(range(len(servers[i]))))
                    work[i] = comm_s * ref.alone_speed
                    alone_speed[i] = traffic[i].alone_speed
                alone_first[i] = alone_step(i)
                if traffic[i] is not None and self.capacity is not self.net.capacity_bytes_per_s:
                    alone_first[i] = compute_s[i] + work[i] / self.healthy_traffic(job, servers[i]).alone_speed
                mode[i], left[i] = "compute", compute_s[i]
                enter_network(i)
                if failures is not None:
                    failures.arrive(i, now)
                continue
            i = who
            if mode[i] == "compute" and traffic[i] is not None:
                mode[i], left[i] = "comm", work[i]
                reshare({i}, entered=i)
                continue
            # A step completes.
            steps[i] += 1
            was_comm = mode[i] == "comm"
            mode[i], left[i] = "compute", compute_s[i]
            if was_comm:
                reshare(neighbours[i], left=i)
            completions[i].append(now)
            if jobs[i].steps is not None and steps[i] >= jobs[i].steps:
                depart(i, now)
                continue
            if self.sample_steps is None:
                continue
            live = live_jobs()
            if not live:
                continue
            every = measured()
            # A jump stopped by an event that left the live jobs as they were when their means were
            # measured (the same jobs, traffic and neighbours: an arrival elsewhere, a checkpoint
            # written and resumed) is the same periodic system: the means still hold.
            same = not every and jumped is not None and jumped[0] == state()
            if every or same:
                jumped = jump(live, None if every else jumped)
        now = min(now, horizon)
        for i in sorted(failures.held if failures is not None else running):
            depart(i, now)
        for entry, time_s in zip(entry_of, on_entry.tolist()):
            if entry is not None:
                entry[0] = time_s  # each entry's count, from the clock's array
        contended = pace.contended.tolist()
        results = []
        gpu_s = busy_s = lost_gpu_s = ckpt_gpu_s = 0.0
        for i, job in enumerate(jobs):
            solo = self.solo[job.name]
            model, step_s, comm_s, algorithm = solo.model, solo.step_s, solo.comm_s, solo.algorithm
            if i not in servers:
                raise ConfigError(f"jobs[{i}] ({job.name}): starts at {job.start_s:g} s, after the horizon")
            alone = alone_first[i]
            held_s = end[i] - start[i]
            gpu_s += held_s * job.gpus
            busy_s += steps[i] * alone * job.gpus
            total = contended[i] or 1.0
            bl = sorted(blame[i].items(), key=lambda kv: (-kv[1][0], kv[0]))[:3]
            extra = {}
            if failures is not None:
                a = failures.account[i]
                ran = steps[i] + a["lost_steps"]
                mine = a["trained_s"] / ran if ran > 0 else math.inf
                lost_gpu_s += (a["lost_s"] + a["restart_s"] + a["down_s"]) * job.gpus
                ckpt_gpu_s += a["checkpoint_s"] * job.gpus
                extra = dict(failures=a["failures"], restarts=a["restarts"], lost_s=a["lost_s"],
                             lost_steps=a["lost_steps"], checkpoint_s=a["checkpoint_s"], restart_s=a["restart_s"],
                             down_s=a["down_s"], checkpoint_interval_s=failures.interval[i],
                             checkpoint_write_s=failures.write[i],
                             goodput=(a["trained_s"] - a["lost_s"]) / held_s if held_s > 0 else 1.0,
                             timeline=tuple(failures.segments[i]))
            else:
                mine = held_s / steps[i] if steps[i] > 0 else math.inf
                extra = dict(timeline=(Stretch(phase="trained", start_s=start[i], end_s=end[i],
                                                servers=tuple(servers[i])),))
            results.append(JobResult(
                name=job.name, model=model, gpus=job.gpus, servers=tuple(servers[i]), placement=job.placement,
                algorithm=algorithm if traffic[i] is not None else "none", start_s=start[i], end_s=end[i],
                steps=steps[i], step_time_s=mine, alone_step_time_s=alone, reference_step_time_s=step_s,
                bottlenecks=tuple(LinkBlame(link=self.net.link_name(b), link_class=self.net.link_classes[
                    int(self.net.link_class_id[b])], share=v[0] / total, with_jobs=tuple(jobs[m].name for m in
                                                                                          sorted(v[1] - {i})))
                                  for b, v in bl), **extra))
        span = max(r.end_s for r in results) if spec.horizon_s is None else spec.horizon_s
        cluster = self.topology.n_gpus * span
        return MixResult(topology=self.design.name, cluster_gpus=self.topology.n_gpus, horizon_s=span,
                         jobs=tuple(results), gpu_allocation=gpu_s / cluster, gpu_busy=busy_s / cluster,
                         evaluations=self.evaluations, events=events, sample_steps=self.sample_steps,
                         gpu_lost_to_failures=lost_gpu_s / cluster, gpu_checkpointing=ckpt_gpu_s / cluster,
                         failures=tuple(failures.log) if failures is not None else (),
                         link_outages=tuple(failures.outages.log) if failures is not None and failures.outages else (),
                         spares=tuple(range(self.n_servers - spec.spares, self.n_servers)))

    def _link_neighbours(self, i: int, traffic: dict, running: set[int], sign: int) -> set[int]:
        """Add (``sign`` 1) or remove (-1) job ``i``'s traffic bound on the cluster's links; when
        adding, the running jobs that cross a link with ``i`` which their bounds together could
        fill. A link no mix of flows can fill never binds max-min, so jobs that share only such
        links cannot slow each other down (exactly) and are evaluated apart."""
        t = traffic[i]
        self._bound[t.links] += sign * t.bound
        for link in self._added.pop(i, np.empty(0, dtype=int)).tolist():
            self._on_link[link].discard(i)
        if sign < 0:
            return set()
        self._added[i] = t.links
        for link in t.links.tolist():
            self._on_link.setdefault(link, set()).add(i)
        hot = t.links[self._bound[t.links] > self.capacity[t.links] * (1 - _SATURATED)]
        if not len(hot):
            return set()
        on_hot = set().union(*(self._on_link.get(link, ()) for link in hot.tolist()))
        crossing = {}
        for m in running:  # (in running's order, as the pairs below were always made)
            if m != i and traffic.get(m) is not None:
                # A job indexed with its current links crosses a hot link only if the index says so;
                # one whose links are not the indexed ones (rerouted since) is tested as before.
                if self._added.get(m) is traffic[m].links and m not in on_hot:
                    continue
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
                      compute_s, partial, mean=None, ends=None) -> tuple[float, list[int], dict, dict]:
        """Jump to the next arrival or departure at each job's measured mean step time (``mean``: the
        means measured before a previous jump, still valid; ``ends``: the step-counted
        jobs' last step ends of a jump this one goes on with; ``partial``: the part of its step in
        progress each job has run, counted as done); returns the means and ends used."""
        if mean is None:
            mean = {}
            for j in running:
                c = completions[j][-self.sample_steps - 1:]
                mean[j] = (c[-1] - c[0]) / (len(c) - 1)
        target = min(t_arrive, horizon, min(deadline(j) for j in running))
        if ends is None:
            # Its last step's end, counted from the part of its step in progress it has run.
            ends = {j: now + (jobs[j].steps - steps[j] - partial.get(j, 0.0)) * mean[j]
                    for j in running if jobs[j].steps is not None}
        for t_done in ends.values():
            target = min(target, max(t_done, now))
        finished = []
        for j in running:
            steps[j] += partial.get(j, 0.0) + ((target - now) / mean[j] if mean[j] > 0 else 0.0)
            mode[j], left[j] = "compute", compute_s[j]
            completions[j] = []
            if jobs[j].steps is not None and steps[j] >= jobs[j].steps - 1e-9:
                steps[j] = float(jobs[j].steps)
                finished.append(j)
        return target, finished, mean, ends


def steps_at(pos: tuple, compute_s: float, work: float | None, alone_speed: float | None, step_s: float) -> float:
    """Steps done at a position (steps, mode, time or bytes left), counting the part of the step in
    progress as the share of the job's alone step it has run."""
    steps, mode, left = pos
    if step_s <= 0:
        return steps
    into = compute_s - left if mode == "compute" else compute_s + (work - left) / alone_speed
    return steps + into / step_s


class _Failures:
    """Failures, repairs, spares and checkpoints of a mix's jobs, for :meth:`MixSimulation.run`.

    A job trains in stretches between checkpoints: after ``interval`` of training it stops for a
    blocking write, then goes on (:class:`~dpsim.plan.reliability.CheckpointPolicy`'s terms; the
    interval defaults to :func:`~dpsim.plan.reliability.model_optimum_s` for the job's own MTBF).
    A failure of one of its servers (or of a server's NIC link) stops it: the training since its
    last completed checkpoint is lost (an interrupted write with it), it takes a healthy spare if
    one is free (a hot spare: no wait) or waits for the server's repair, then restarts
    (``restart``, itself interruptible) from that checkpoint. The job's traffic leaves its links
    while it is stopped, so the others speed up. A repaired server that was swapped out joins the
    spares. Random failures are a Poisson process over all servers, each at the rate
    :meth:`~dpsim.plan.reliability.ClusterShape.rates_per_s` gives one server (its GPUs, host and
    NIC links), from one seeded generator.

    Checkpoint writes go to one storage (:attr:`~dpsim.mix.spec.MixSpec.storage_bytes_per_s`): the
    writes under way share its bandwidth max-min, each at most its own write rate (its state bytes
    over its write time alone), and every write's end is moved whenever a write starts, ends or is
    cut by a failure. Without a storage bandwidth each job writes at its own rate, unslowed. The
    storage's own network path is not modelled: the bandwidth is the narrowest of the storage system
    and the links to it.
    """

    def __init__(self, sim: MixSimulation, free: list[bool]):
        spec, f = sim.spec, sim.spec.failures
        self.sim, self.jobs, self.free, self.repair_s = sim, spec.jobs, free, f.repair_s
        n_srv = sim.n_servers
        self.spare = [s >= n_srv - spec.spares for s in range(n_srv)]
        self.owner: list[int | None] = [None] * n_srv
        self.down_until = [0.0] * n_srv
        self.queue: list[tuple] = []  # (time, order, server, component, random, repair, NIC)
        nics = ClusterShape.from_topology(sim.topology).links_per_node
        for k, e in enumerate(f.events):
            if e.server >= n_srv:
                raise ConfigError(f"failures.events[{k}].{e.component}: {e.server} is not valid; the cluster has "
                                  f"servers 0..{n_srv - 1}")
            if e.nic is not None and e.nic >= nics:
                raise ConfigError(f"failures.events[{k}].nic: {e.nic} is not valid; the servers have "
                                  + (f"NICs 0..{nics - 1}" if nics else "no NIC link"))
            heapq.heappush(self.queue, (e.at_s, k, e.server, e.component, False,
                                        e.repair_s if e.repair_s is not None else f.repair_s, e.nic or 0))
        self.order = len(f.events)
        self.repairs: list[tuple[float, int]] = []
        self.shape = ClusterShape.from_topology(sim.topology)
        self.rates = f.rates
        per_server = self.shape.rates_per_s(f.rates, nodes=1)
        self.classes = list(per_server)
        self.cumulative = np.cumsum([per_server[c] for c in self.classes])
        self.rate = float(self.cumulative[-1]) * n_srv
        self.rng = np.random.default_rng(f.seed)
        self.ports = ports_per_nic(sim.net)
        given = [f"failures.mtbf_{c}" for c in ("gpu", "node", "link") if math.isfinite(getattr(f.rates, f"{c}_mtbf_s"))]
        self.drawn = DrawnFailures(self.rate, spec.horizon_s, "/".join(given) or "failures", "servers")
        self._draw(0.0)
        links_fail = any(e.component == "link" for e in f.events) or math.isfinite(f.rates.link_mtbf_s)
        self.outages = FabricOutages(sim.net, f, sim.capacity, spec.horizon_s) \
            if f.uplink_events or f.uplink_mtbf_s or (self.ports > 1 and links_fail) else None
        self.log: list[FailureRecord] = []
        self.held: set[int] = set()
        self.paused: dict[int, list] = {}      # job -> [phase, until]
        self.pos: dict[int, tuple] = {}        # (steps, mode, left) it resumes from
        self.last_ck: dict[int, tuple] = {}
        self.ck_due: dict[int, float] = {}
        self.since_ck: dict[int, float] = {}
        self.waiting: dict[int, set[int]] = {}
        self.seg: dict[int, tuple[str, float]] = {}
        self.segments: dict[int, list[Stretch]] = {}
        self.account: dict[int, dict] = {}
        self.interval: dict[int, float] = {}
        self.write: dict[int, float] = {}
        self.restart: dict[int, float] = {}
        self.storage_bytes_per_s = spec.storage_bytes_per_s
        self.write_rate: dict[int, float] = {}  # bytes/s a job's write gets alone
        self.state_bytes: dict[int, float] = {}
        self.writing: dict[int, list[float]] = {}  # job -> [bytes left, bytes/s, since]

    def bind(self, **loop) -> None:
        """The event loop's state and its network entry and exit (closures of :meth:`MixSimulation.run`)."""
        for key, value in loop.items():
            setattr(self, key, value)

    def _draw(self, now: float) -> None:
        if self.rate > 0:
            self.drawn.count()
            t = now + float(self.rng.exponential(1.0 / self.rate))
            server = int(self.rng.integers(self.sim.n_servers))
            u = float(self.rng.random()) * float(self.cumulative[-1])
            cls = self.classes[min(int(np.searchsorted(self.cumulative, u, side="right")), len(self.classes) - 1)]
            # Which NIC matters only where several share a bundle (the other streams stay as they were).
            nic = int(self.rng.integers(self.shape.links_per_node)) if cls == "link" and self.ports > 1 else 0
            heapq.heappush(self.queue, (t, self.order, server, cls, True, self.repair_s, nic))
            self.order += 1

    def healthy(self, free: list[bool], now: float) -> list[bool]:
        """Free servers that are in service."""
        return [f and d <= now for f, d in zip(free, self.down_until)]

    def next_s(self) -> float:
        """Time of the next failure, repair, checkpoint or end of a stop."""
        t = min(self.queue[0][0] if self.queue else math.inf, self.repairs[0][0] if self.repairs else math.inf)
        if self.outages is not None:
            t = min(t, self.outages.next_s())
        for i in self.held:
            t = min(t, self.paused[i][1] if i in self.paused else self.ck_due[i])
        return t

    # ------------------------------------------------------------------ a job's phases
    def _close(self, i: int, now: float) -> None:
        phase, t0 = self.seg[i]
        if now > t0:
            self.segments[i].append(Stretch(phase=phase, start_s=t0, end_s=now, servers=tuple(self.servers[i])))
            self.account[i][f"{phase}_s"] += now - t0
            if phase == "trained":
                self.since_ck[i] += now - t0

    def _open(self, i: int, phase: str, now: float, until: float = math.inf) -> None:
        self.seg[i] = (phase, now)
        if phase == "trained":
            self.paused.pop(i, None)
        else:
            self.paused[i] = [phase, until]

    def _suspend(self, i: int, now: float, phase: str, until: float) -> None:
        if self.mode[i] == "solo":
            self.steps[i], self.mode[i], self.left[i] = self.solo_position(i)
        self.pos[i] = (self.steps[i], self.mode[i], self.left[i])
        self.leave(i)
        self._close(i, now)
        self._open(i, phase, now, until)

    def _resume(self, i: int, now: float) -> None:
        self._close(i, now)
        self._open(i, "trained", now)
        self.steps[i], self.mode[i], self.left[i] = self.pos.pop(i)
        self.ck_due[i] = now + self.interval[i]
        self.enter(i)

    def _steps_at(self, i: int, pos: tuple) -> float:
        """Steps done at a saved position, counting the part of the step in progress."""
        return steps_at(pos, self.compute_s[i], self.work.get(i), self.alone_speed.get(i), self.alone_step(i))

    def arrive(self, i: int, now: float) -> None:
        """Job ``i`` has been placed and started training: its checkpoint policy, its servers' health."""
        job = self.jobs[i]
        ck = job.checkpoint
        write = ck.write_s if ck.write_s is not None else self.sim.solo[job.name].state_bytes / ck.bandwidth_bytes_per_s
        if job.steps is not None:
            work = job.steps * self.alone_step(i)
        else:
            work = min(job.duration_s if job.duration_s is not None else math.inf,
                       (self.sim.spec.horizon_s or math.inf) - now)
        shape = ClusterShape(n_nodes=len(self.servers[i]), gpus_per_node=self.shape.gpus_per_node,
                             links_per_node=self.shape.links_per_node)
        interval = ck.interval_s
        if interval is None:
            mtbf = shape.mtbf_s(self.rates)
            interval = model_optimum_s(work, write, ck.restart_s, mtbf) if math.isfinite(mtbf) else math.inf
            interval = max(interval, self.alone_step(i))  # a checkpoint at most every step
        interval = max(interval, MIN_CHECKPOINT_INTERVAL_S)
        self.interval[i] = interval if interval < work else math.inf  # one at the end saves nothing
        if work / interval > MAX_SIMULATED_CHECKPOINTS:
            raise ConfigError(f"jobs[{i}] ({job.name}): a checkpoint every {interval:g} s over its {work:.3g} s of "
                              f"training is {work / interval:.3g} writes to simulate; expected at most "
                              f"{MAX_SIMULATED_CHECKPOINTS:,}: give a longer checkpoint.interval, or less work (steps, "
                              f"duration or the horizon)")
        self.write[i], self.restart[i] = write, ck.restart_s
        self.state_bytes[i] = float(self.sim.solo[job.name].state_bytes)
        self.write_rate[i] = self.state_bytes[i] / write if write > 0 else math.inf
        self.account[i] = dict(trained_s=0.0, lost_s=0.0, lost_steps=0.0, checkpoint_s=0.0, restart_s=0.0,
                               down_s=0.0, failures=0, restarts=0)
        self.segments[i], self.waiting[i] = [], set()
        self.last_ck[i] = (self.steps[i], "compute", self.compute_s[i])
        self.since_ck[i] = 0.0
        self.ck_due[i] = now + self.interval[i]
        self.held.add(i)
        self._open(i, "trained", now)
        for s in self.servers[i]:
            self.owner[s] = i
        for s in list(self.servers[i]):
            if self.down_until[s] > now:
                self._hit(i, s, now, counted=False)
        self._seen(i)

    def release(self, i: int, now: float) -> None:
        """Job ``i`` leaves (already out of the network)."""
        self._stop_write(i, now)
        if i in self.paused:  # stopped: it keeps the work up to where it stopped (its checkpoint after a failure)
            self.steps[i] = self._steps_at(i, self.pos[i])
        self._close(i, now)
        self.seg[i] = ("gone", now)
        self.paused.pop(i, None)
        self.held.discard(i)
        for s in self.servers[i]:
            self.owner[s] = None

    # ------------------------------------------------------------------ events
    def handle(self, now: float) -> None:
        """Everything due at ``now``: repairs, failures, ends of stops, checkpoints."""
        self._progress(now)
        if self.outages is not None:
            links = self.outages.handle(now, self._crossing)
            if len(links) and self.sim.narrowing:
                self.recapacity(links)
        while self.repairs and self.repairs[0][0] <= now:
            _, s = heapq.heappop(self.repairs)
            if self.down_until[s] <= now:
                self._repaired(s, now)
        while self.queue and self.queue[0][0] <= now:
            _, _, s, cls, drawn, repair, nic = heapq.heappop(self.queue)
            if drawn:
                self._draw(now)
            if cls == "link" and self.outages is not None:
                links = self.outages.fail_port(s, nic, now, repair, drawn, self._crossing)
                if len(links):
                    if self.sim.narrowing:
                        self.recapacity(links)  # one port of a bundle: the job goes on, narrower
                    continue
            self._strike(s, cls, now, repair)
        for i in sorted(self.held):
            if i in self.paused:
                phase, until = self.paused[i]
                if until <= now:
                    if phase == "checkpoint":
                        self.last_ck[i], self.since_ck[i] = self.pos[i], 0.0
                        self.writing.pop(i, None)
                    else:
                        self.account[i]["restarts"] += 1
                    self._resume(i, now)
            elif self.ck_due[i] <= now:
                self._suspend(i, now, "checkpoint", now + self.write[i])
                if self.storage_bytes_per_s is not None:
                    self.writing[i] = [self.state_bytes[i], 0.0, now]
        self._share_storage(now)

    def _seen(self, i: int) -> None:
        if self.outages is not None and self.traffic.get(i) is not None:
            self.outages.seen(self.jobs[i].name, self.traffic[i].link_set)

    def crossing(self, links: set[int]) -> list[int]:
        """The jobs holding servers whose flows cross ``links``."""
        return [i for i in sorted(self.held) if self.traffic.get(i) is not None
                and not self.traffic[i].link_set.isdisjoint(links)]

    def _crossing(self, links: set[int]) -> list[str]:
        return [self.jobs[i].name for i in self.crossing(links)]

    # ------------------------------------------------------------------ the shared storage
    def _progress(self, now: float) -> None:
        """Bytes written by every write under way until ``now``, at the rates they had."""
        for w in self.writing.values():
            w[0] = max(0.0, w[0] - w[1] * (now - w[2]))
            w[2] = now

    def _share_storage(self, now: float) -> None:
        """Max-min shares of the storage for the writes under way, each capped at its own rate, and
        the time each write now ends (the end of its checkpoint stop)."""
        if not self.writing:
            return
        left, n = self.storage_bytes_per_s, len(self.writing)
        for i in sorted(self.writing, key=lambda j: (self.write_rate[j], j)):
            rate = min(self.write_rate[i], left / n)
            left, n = left - rate, n - 1
            w = self.writing[i]
            w[1] = rate
            self.paused[i][1] = now + w[0] / rate if rate > 0 else math.inf

    def _stop_write(self, i: int, now: float) -> None:
        """A write cut short (a failure, or the job leaving): the others share what it used."""
        if i in self.writing:
            self._progress(now)
            del self.writing[i]
            self._share_storage(now)

    def _strike(self, s: int, cls: str, now: float, repair_s: float) -> None:
        i = self.owner[s]
        was_down = self.down_until[s] > now
        self.log.append(FailureRecord(at_s=now, server=s, component=cls,
                                      job=self.jobs[i].name if i is not None and not was_down else None))
        self.down_until[s] = max(self.down_until[s], now + repair_s)
        heapq.heappush(self.repairs, (self.down_until[s], s))
        if i is not None and not was_down:
            self._hit(i, s, now)

    def _hit(self, i: int, s: int, now: float, counted: bool = True) -> None:
        a = self.account[i]
        a["failures"] += counted
        self._stop_write(i, now)
        if i in self.paused:
            self._close(i, now)
        else:
            self._suspend(i, now, "down", math.inf)
        # The training since the last completed checkpoint is lost (an interrupted write with it).
        a["lost_s"] += self.since_ck[i]
        a["lost_steps"] += self._steps_at(i, self.pos[i]) - self._steps_at(i, self.last_ck[i])
        self.since_ck[i], self.pos[i] = 0.0, self.last_ck[i]
        spare = next((x for x, ok in enumerate(self.spare) if ok and self.owner[x] is None
                      and self.down_until[x] <= now), None)
        if spare is not None:
            self.servers[i][self.servers[i].index(s)] = spare
            self.owner[spare], self.spare[spare] = i, False
            self.owner[s], self.spare[s] = None, True  # once repaired, a spare
            self.retraffic(i)
            self._seen(i)
        else:
            self.waiting[i].add(s)
        if self.waiting[i]:
            self._open(i, "down", now)
        elif counted:
            self._open(i, "restart", now, now + self.restart[i])
        else:
            self._resume(i, now)  # placed on a failed server at its arrival, swapped for a spare: it starts

    def _repaired(self, s: int, now: float) -> None:
        i = self.owner[s]
        if i is not None and s in self.waiting[i]:
            self.waiting[i].discard(s)
            if not self.waiting[i] and self.paused.get(i, [None])[0] == "down":
                if self.account[i]["failures"] == 0:
                    self._resume(i, now)  # it arrived on failed servers: it starts, nothing to restart
                else:
                    self._close(i, now)
                    self._open(i, "restart", now, now + self.restart[i])


@reads_profiles_once
def simulate_mix(spec: MixSpec, *, sample_steps: int | None = DEFAULT_SAMPLE_STEPS, network=None,
                 progress: Callable[[float, int, int], None] | None = None) -> MixResult:
    """Run a job mix (:class:`~dpsim.mix.spec.MixSpec`) on its cluster.

    ``sample_steps``: steps each job completes between two arrivals/departures before the rest of
    that interval runs at the measured mean (``None``: every step simulated). ``network``: a
    :class:`~dpsim.network.model.NetworkModel` of the whole cluster with ``routes`` (default its
    :class:`~dpsim.network.tiers.TierNetwork`). ``progress``: called now and then with the simulated
    seconds reached, the jobs finished and the jobs (the CLI's progress line).

    When cables failed (switch uplinks, NIC ports of a bundle), the mix runs a second time with the same
    failures but cables that never narrow the network, and each job's :attr:`JobResult.fabric_slowdown`
    is its step time over that run's.
    """
    if sample_steps is not None and (isinstance(sample_steps, bool) or not isinstance(sample_steps, int)
                                     or sample_steps < 1):
        # The CLI refuses it first; from Python -1 or 2.5 ran with a meaningless sample window.
        raise ConfigError(f"--sample-steps: {sample_steps!r} is not valid; expected an integer >= 1, or None "
                          f"(every step simulated)")
    result = MixSimulation(spec, sample_steps=sample_steps, network=network, progress=progress).run()
    if not result.link_outages:
        return result
    base = MixSimulation(spec, sample_steps=sample_steps, network=network, narrowing=False, progress=progress).run()
    jobs = tuple(replace(j, fabric_slowdown=j.step_time_s / b.step_time_s)
                 if 0 < b.step_time_s < math.inf and j.step_time_s < math.inf else j
                 for j, b in zip(result.jobs, base.jobs))
    return replace(result, jobs=jobs)
