"""Stragglers and variability: per-rank stochastic steps, Monte-Carlo statistics.

A collective completes only when its slowest participant has joined it, so with
per-rank compute noise the step is paced by the *maximum* of N draws and the expected
step time grows with N even at fixed per-rank noise. This module draws per-rank,
per-step compute factors (noise, persistent stragglers, transient hiccups), plays them
through the engine's step semantics exactly, and summarises many steps and seeds
(mean, p50, p90, p99 step time, a confidence interval on throughput).

Exact and fast (:func:`simulate_ranks`)
---------------------------------------
It plays a :class:`~dpsim.engine.StepProgram` with the semantics of
:func:`dpsim.engine.run_program` (same comm FIFO, same "a collective starts once every
rank launched it and the stream is free", same compute slowdown while a collective
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
* **Identical ranks are one rank.** Without random components (only persistent
  stragglers) ranks with equal factors are collapsed into one group: a 1,024-GPU job
  with one slow node costs two ranks.

A homogeneous run (no noise, no stragglers, no hiccups) never comes here: ``predict``
keeps its single-rank engine path and identical results. Link degradation is not
per-rank: it scales the capacity of the named links in the NCCL model's flow network
(:func:`degradation_scale`, used by :class:`~dpsim.algorithms.nccl.NcclCollectives`),
so a degraded step is costed by the same collective model as a healthy one, and keeps
the fast path.

Default noise
-------------
The default comes from the measured step-time spread: ``dpsim calibrate --model`` records
the coefficient of variation of the forward+backward time over its timed repeats
(``ModelStep.step_time_cv``), and ``predict --calibration`` uses it when ``--noise-cv`` is
not given (``noise_source`` says so in the table and the JSON). An explicit
``--noise-cv`` (0 included) wins; without such a profile the default is *no noise*.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from dpsim.collectives import CollectiveModel
from dpsim.engine import StepProgram, comm_op_time_s
from dpsim.errors import ConfigError
from dpsim.topology import Topology

NOISE_DISTRIBUTIONS = ("normal", "lognormal")
"""Per-rank compute-noise distributions (both with mean 1 and the given CV)."""

MIN_COMPUTE_FACTOR = 0.01
"""Normal noise is clipped below at this factor (a rank never computes 100x faster);
with a CV under 0.3 the clip is hit with probability < 1e-3."""

DEFAULT_SAMPLES = 10
"""Monte-Carlo samples (independent seeds) of a stochastic prediction."""

DEFAULT_STOCHASTIC_STEPS = 50
"""Steps per sample when variability is on and ``--steps`` is not given."""

DEFAULT_CONFIDENCE = 0.95
"""Confidence level of the throughput interval."""

MAX_NOISE_CV = 1.0


# ----------------------------------------------------------------------------- inputs

@dataclass(frozen=True, kw_only=True)
class Straggler:
    """A persistently slow GPU or node."""

    target: str
    """``node`` (all GPUs of one server) or ``gpu`` (one rank)."""
    index: int
    """Node index, or global GPU (rank) index, from 0."""
    factor: float
    """Compute-time multiplier (1.3 = 30 % slower); factors on one rank multiply."""

    @property
    def label(self) -> str:
        """The flag value that describes it, e.g. ``node3:1.3x``."""
        return f"{self.target}{self.index}:{self.factor:g}x"


@dataclass(frozen=True, kw_only=True)
class LinkDegradation:
    """A link, or a class of links, running below its capacity."""

    link: str
    """``node<K>.nic<J>`` (NIC J of node K and its cable to the leaf), ``node<K>.gpu<J>``
    (GPU J's NVLink/PCIe link inside node K) or a link class (``ethernet``, ``infiniband``,
    ``nvlink``, ``pcie``, ``leaf-spine``, ``nvlink-fabric``: every link of that class)."""
    capacity_fraction: float
    """Share of the healthy capacity left, in (0, 1] (``50%`` -> 0.5)."""

    @property
    def label(self) -> str:
        """The flag value that describes it, e.g. ``node3.nic0:50%``."""
        return f"{self.link}:{100 * self.capacity_fraction:g}%"


@dataclass(frozen=True, kw_only=True)
class VariabilitySpec:
    """Everything that makes ranks differ from one another, or steps from one another."""

    noise_cv: float = 0.0
    """Coefficient of variation of each rank's per-step compute time (0.05 = 5 %);
    i.i.d. over ranks and steps. 0: no noise (the default without a calibration profile
    that records the measured spread)."""
    noise_distribution: str = "normal"
    """``normal`` (1 + cv*Z, clipped at :data:`MIN_COMPUTE_FACTOR`) or ``lognormal``
    (mean 1, the same CV)."""
    stragglers: tuple[Straggler, ...] = ()
    """Persistently slow GPUs or nodes."""
    degradations: tuple[LinkDegradation, ...] = ()
    """Links running below capacity (change the collectives' network, not per-rank)."""
    hiccup_rate_per_s: float = 0.0
    """Transient stalls per GPU per second of wall time (Poisson)."""
    hiccup_s: float = 0.0
    """Duration of one stall: the rank's compute in that step grows by this much."""
    seed: int = 0
    """Seed of every random draw: the same seed gives the same numbers."""
    samples: int = DEFAULT_SAMPLES
    """Independent Monte-Carlo samples (seeds derived from ``seed``)."""
    confidence: float = DEFAULT_CONFIDENCE
    """Confidence level of the throughput interval."""
    noise_source: str | None = None
    """Where ``noise_cv`` came from when not given (e.g. a calibration profile); ``None``: given."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.noise_cv) and 0 <= self.noise_cv <= MAX_NOISE_CV):
            raise ConfigError(f"--noise-cv: {self.noise_cv} is not valid; expected a number in [0, {MAX_NOISE_CV:g}]")
        if self.noise_distribution not in NOISE_DISTRIBUTIONS:
            raise ConfigError(f"--noise-dist: {self.noise_distribution!r} is not valid; "
                              f"choose one of {', '.join(NOISE_DISTRIBUTIONS)}")
        if not (math.isfinite(self.hiccup_rate_per_s) and self.hiccup_rate_per_s >= 0):
            raise ConfigError(f"--hiccup-rate-per-s: {self.hiccup_rate_per_s} is not valid; expected a number >= 0")
        if not (math.isfinite(self.hiccup_s) and self.hiccup_s >= 0):
            raise ConfigError(f"--hiccup-s: {self.hiccup_s} is not valid; expected a duration >= 0")
        if (self.hiccup_rate_per_s > 0) != (self.hiccup_s > 0):
            raise ConfigError(
                f"--hiccup-rate-per-s / --hiccup-s: {self.hiccup_rate_per_s:g} / {self.hiccup_s:g} is not valid; "
                "give both a rate > 0 and a duration > 0 (or neither)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"--seed: {self.seed!r} is not valid; expected an integer >= 0")
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 1:
            raise ConfigError(f"--mc-samples: {self.samples!r} is not valid; expected an integer >= 1")
        if not (0 < self.confidence < 1):
            raise ConfigError(f"confidence: {self.confidence} is not valid; expected a number in (0, 1)")

    @property
    def per_rank(self) -> bool:
        """True when ranks differ (noise, stragglers or hiccups): the per-rank path is needed."""
        return self.noise_cv > 0 or bool(self.stragglers) or self.hiccup_rate_per_s > 0

    @property
    def random(self) -> bool:
        """True when factors are drawn at random (noise or hiccups), not just fixed."""
        return self.noise_cv > 0 or self.hiccup_rate_per_s > 0

    @property
    def active(self) -> bool:
        """True when anything differs from a homogeneous, healthy cluster."""
        return self.per_rank or bool(self.degradations)


_FACTOR = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"


def parse_straggler(raw: str) -> Straggler:
    """Parse ``node3:1.3x``, ``gpu12:2x`` (``rank12`` is the same as ``gpu12``)."""
    m = re.fullmatch(r"\s*(node|gpu|rank)(\d+)\s*:\s*" + _FACTOR + r"\s*x?\s*", str(raw))
    if not m or not (math.isfinite(float(m.group(3))) and float(m.group(3)) > 0):
        raise ConfigError(
            f"--straggler: {raw!r} is not valid; expected node<K>:<factor>x or gpu<K>:<factor>x "
            "with a factor > 0, e.g. node3:1.3x")
    target = "node" if m.group(1) == "node" else "gpu"
    return Straggler(target=target, index=int(m.group(2)), factor=float(m.group(3)))


def parse_degradation(raw: str) -> LinkDegradation:
    """Parse ``node3.nic0:50%``, ``node0.gpu2:25%`` or ``ethernet:50%`` (capacity left)."""
    m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*:\s*" + _FACTOR + r"\s*%\s*", str(raw))
    pct = float(m.group(2)) if m else math.nan
    if not m or not (0 < pct <= 100):
        raise ConfigError(
            f"--degrade: {raw!r} is not valid; expected LINK:PCT% with PCT in (0, 100] the capacity left, "
            "LINK being node<K>.nic<J>, node<K>.gpu<J> or a link class (e.g. ethernet:50%)")
    return LinkDegradation(link=m.group(1).lower(), capacity_fraction=pct / 100)


def rank_factors(stragglers: Sequence[Straggler], n_ranks: int, gpus_per_node: int) -> np.ndarray:
    """Persistent compute factor of every rank (rank r lives on node r // gpus_per_node)."""
    factors = np.ones(n_ranks)
    n_nodes = math.ceil(n_ranks / gpus_per_node)
    for s in stragglers:
        if s.target == "node":
            if s.index >= n_nodes:
                raise ConfigError(f"--straggler: {s.label!r} names node {s.index}, but there are "
                                  f"{n_nodes} nodes (node0..node{n_nodes - 1})")
            factors[s.index * gpus_per_node:(s.index + 1) * gpus_per_node] *= s.factor
        else:
            if s.index >= n_ranks:
                raise ConfigError(f"--straggler: {s.label!r} names GPU {s.index}, but there are "
                                  f"{n_ranks} GPUs (gpu0..gpu{n_ranks - 1})")
            factors[s.index] *= s.factor
    return factors


_NAMED_LINK = re.compile(r"node(\d+)\.(nic|gpu)(\d+)")


def degradation_scale(network, degradations: Sequence[LinkDegradation], *, strict: bool = True) -> np.ndarray:
    """Capacity multiplier of every link of ``network`` (a :class:`~dpsim.network.tiers.TierNetwork`)
    under ``degradations``: 1 where healthy; degradations of one link multiply.

    ``node<K>`` counts the servers of the network's cluster (with ``--jobs``, every job's
    servers, as placed). ``node<K>.nic<J>`` scales both directions of that NIC's cable to
    its leaf (with more NICs than GPUs, NICs are merged per GPU: one NIC of a bundle of
    ``p`` scales the bundle's link to ``(p - 1 + f) / p``); ``node<K>.gpu<J>`` both
    directions of that GPU's NVLink/PCIe link to its server's hub; a link class every link
    of that class. A name that matches no link of the network is an error.

    ``strict=False`` skips link classes the network lacks (a hybrid-sharding
    communicator's network, whose names :func:`communicator_degradations` mapped).
    """
    scale = np.ones(network.n_links)
    spec = network.spec
    n_nodes = network.n_nodes
    for deg in degradations:
        f = deg.capacity_fraction
        m = _NAMED_LINK.fullmatch(deg.link)
        if m:
            node, kind, j = int(m.group(1)), m.group(2), int(m.group(3))
            if node >= n_nodes:
                raise ConfigError(f"--degrade: {deg.label!r} names node {node}, but there are "
                                  f"{n_nodes} nodes (node0..node{n_nodes - 1})")
            if kind == "nic":
                ports = network.layout.ports_per_nic
                nics = network.layout.nic_nodes * ports if network.nic_kind else 0
                if j >= nics:
                    allowed = (("nic0" if nics == 1 else f"nic0..nic{nics - 1}") if nics
                               else "no NIC carrying traffic between servers")
                    raise ConfigError(f"--degrade: {deg.label!r} names NIC {j}; {spec.name} with "
                                      f"{n_nodes} node(s) has {allowed}")
                scale[network.server_nic_links(node, j // ports)] *= (ports - 1 + f) / ports
            else:
                if j >= network.gpn:
                    raise ConfigError(f"--degrade: {deg.label!r} names GPU {j}; nodes have "
                                      f"gpu0..gpu{network.gpn - 1}")
                scale[network.server_gpu_links(node, j)] *= f
        elif deg.link in network.class_names:
            scale[network.class_links(deg.link)] *= f
        elif strict:
            raise ConfigError(
                f"--degrade: {deg.link!r} is not a link of {spec.name}; use node<K>.nic<J>, node<K>.gpu<J> "
                f"or a link class present here: {', '.join(sorted(network.class_names)) or 'none'}")
    return scale


def same_numbering(job: Topology, group: Topology) -> bool:
    """True when ``group``'s servers and GPUs are numbered like ``job``'s (the names apply as they are)."""
    return group.n_nodes == job.n_nodes and group.gpus_per_node == job.gpus_per_node


def communicator_degradations(degradations: Sequence[LinkDegradation], job: Topology,
                              group: Topology) -> tuple[LinkDegradation, ...]:
    """``degradations`` named on ``job``'s cluster, as seen by a hybrid-sharding communicator.

    - ``intra`` (one server standing for every server's group, which all run at once):
      ``node<K>.gpu<J>`` becomes ``node0.gpu<J>`` (the slowest server paces the step);
      NICs carry no intra-server traffic and are dropped.
    - ``inter`` (one GPU per server with its share of the server's NICs, standing for the
      ``gpus_per_node`` replica groups): ``node<K>.gpu<J>`` becomes ``node<K>.gpu0`` and
      ``node<K>.nic<J>`` ``node<K>.nic0`` at the share left to the GPUs behind that NIC
      (their slowest group paces the step).

    Link classes are kept as they are.
    """
    if group.n_gpus <= 1:
        return ()
    if same_numbering(job, group):
        return tuple(degradations)
    intra = group.n_nodes == 1
    gpn = job.gpus_per_node
    fabric = job.spec.fabric
    nics = fabric.nics_per_node if fabric is not None and fabric.kind != "nvlink" else 0
    out = []
    for d in degradations:
        m = _NAMED_LINK.fullmatch(d.link)
        if not m:
            out.append(d)
            continue
        node, kind, j = int(m.group(1)), m.group(2), int(m.group(3))
        f = d.capacity_fraction
        if intra:
            if kind == "gpu":
                out.append(LinkDegradation(link=f"node0.gpu{j}", capacity_fraction=f))
        elif kind == "gpu":
            out.append(LinkDegradation(link=f"node{node}.gpu0", capacity_fraction=f))
        else:
            per_gpu = nics / gpn if nics > gpn else 1.0  # NICs behind one GPU
            out.append(LinkDegradation(link=f"node{node}.nic0", capacity_fraction=(per_gpu - 1 + f) / per_gpu))
    return tuple(out)


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


@dataclass(frozen=True, kw_only=True)
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
        What every rank does in one step (e.g. :func:`dpsim.engine.ddp_program`).
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


# ----------------------------------------------------------------------------- drawing factors

def _noise(rng: np.random.Generator, spec: VariabilitySpec, n: int) -> np.ndarray:
    if spec.noise_cv == 0:
        return np.ones(n)
    z = rng.standard_normal(n)
    if spec.noise_distribution == "lognormal":
        sigma2 = math.log1p(spec.noise_cv ** 2)
        return np.exp(math.sqrt(sigma2) * z - sigma2 / 2)
    return np.maximum(1.0 + spec.noise_cv * z, MIN_COMPUTE_FACTOR)


def factor_sampler(spec: VariabilitySpec, persistent: np.ndarray, *, sample_ids: Sequence[int],
                   compute_s: float, exposure_s: float) -> Callable[[int], np.ndarray]:
    """``f(step) -> (len(sample_ids), ranks)`` compute factors, reproducible per sample.

    Factor = persistent straggler factor x noise + hiccups x ``hiccup_s`` / ``compute_s``:
    a hiccup stalls the rank for ``hiccup_s``, spread over that step's compute (so the
    step's compute grows by ``hiccup_s``, a little more where it overlaps a collective).
    Hiccups per rank and step are Poisson with mean ``hiccup_rate_per_s x exposure_s``
    (``exposure_s``: the noise-free step time). Sample k always uses the k-th child of
    ``SeedSequence(seed)``, so results do not depend on how samples are batched.
    """
    children = np.random.SeedSequence(spec.seed).spawn(max(sample_ids) + 1)
    rngs = [np.random.default_rng(children[i]) for i in sample_ids]
    n = len(persistent)
    hiccup_mean = spec.hiccup_rate_per_s * exposure_s
    hiccup_scale = spec.hiccup_s / compute_s if compute_s > 0 else 0.0

    def draw(step: int) -> np.ndarray:
        rows = []
        for rng in rngs:
            row = persistent * _noise(rng, spec, n)
            if hiccup_mean > 0:
                row = row + rng.poisson(hiccup_mean, n) * hiccup_scale
            rows.append(row)
        return np.stack(rows)

    return draw


# ----------------------------------------------------------------------------- statistics

def expected_max_normal(n: int) -> float:
    """E[max of n i.i.d. standard normals], by numerical integration (error < 1e-9).

    E[M] = integral of (1 - Phi(x)^n) over x > 0 minus integral of Phi(x)^n over x < 0.
    """
    if n < 1:
        raise ConfigError(f"n: {n} is not valid; expected an integer >= 1")
    x = np.linspace(0.0, 12.0, 240_001)
    dx = x[1] - x[0]
    upper = 1.0 - (0.5 * (1.0 + _erf(x / math.sqrt(2.0)))) ** n  # smooth on each half: trapezoids
    lower = (0.5 * (1.0 + _erf(-x / math.sqrt(2.0)))) ** n
    trap = lambda y: float(np.sum((y[1:] + y[:-1]) / 2.0) * dx)  # noqa: E731
    return trap(upper) - trap(lower)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(x).astype(float)


def t_quantile(p: float, dof: int) -> float:
    """Student-t quantile (Cornish-Fisher expansion in 1/dof; < 1e-3 relative for dof >= 3)."""
    z = statistics.NormalDist().inv_cdf(p)
    if dof <= 0:
        return math.inf
    if dof == 1:
        return math.tan(math.pi * (p - 0.5))
    if dof == 2:
        q = 2 * p - 1
        return q * math.sqrt(2.0 / (1.0 - q * q))
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / dof + g2 / dof ** 2 + g3 / dof ** 3 + g4 / dof ** 4


def mean_confidence_interval(values: Sequence[float], confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval on the mean of ``values`` (i.i.d.)."""
    v = np.asarray(values, dtype=float)
    mean = float(v.mean())
    if len(v) < 2:
        return mean, mean, mean
    half = t_quantile(0.5 + confidence / 2, len(v) - 1) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return mean, mean - half, mean + half


@dataclass(frozen=True, kw_only=True)
class StepStatistics:
    """Monte-Carlo summary of step times and throughput."""

    samples: int
    """Independent samples (seeds)."""
    steps: int
    """Steps per sample."""
    n_ranks: int
    """Data-parallel ranks."""
    mean_s: float
    """Mean step time (time between consecutive step completions)."""
    std_s: float
    """Standard deviation of the step time."""
    p50_s: float
    """Median step time."""
    p90_s: float
    """90th percentile."""
    p99_s: float
    """99th percentile."""
    mean_ci_s: tuple[float, float]
    """Confidence interval on the mean step time."""
    samples_per_s: float
    """Throughput: global batch / mean step time."""
    samples_per_s_ci: tuple[float, float]
    """Confidence interval on the throughput."""
    confidence: float
    """Level of both intervals."""
    ci_method: str
    """``samples`` (t interval over per-sample means) or ``steps`` (over steps, 1 sample)."""
    nominal_step_s: float
    """The same job without per-rank variability (the plain prediction)."""
    slowdown: float
    """mean_s / nominal_step_s."""
    ranks_simulated: int
    """Distinct rank columns played (collapsed when identical)."""
    max_front: int
    """Most ranks played through the middle of one step (Pareto front)."""
    seed: int
    """Seed used."""

    def to_dict(self) -> dict:
        """JSON-able dict (seconds, samples/s)."""
        return {
            "samples": self.samples, "steps": self.steps, "n_ranks": self.n_ranks,
            "mean_step_s": self.mean_s, "std_step_s": self.std_s, "p50_step_s": self.p50_s,
            "p90_step_s": self.p90_s, "p99_step_s": self.p99_s, "mean_step_ci_s": list(self.mean_ci_s),
            "samples_per_s": self.samples_per_s, "samples_per_s_ci": list(self.samples_per_s_ci),
            "confidence": self.confidence, "ci_method": self.ci_method,
            "nominal_step_s": self.nominal_step_s, "slowdown": self.slowdown,
            "ranks_simulated": self.ranks_simulated, "max_front": self.max_front, "seed": self.seed,
        }


def summarise(intervals: np.ndarray, *, global_batch: float, nominal_step_s: float, confidence: float,
              n_ranks: int, ranks_simulated: int, max_front: int, seed: int) -> StepStatistics:
    """Statistics of a (samples, steps) array of step intervals."""
    samples, steps = intervals.shape
    flat = intervals.ravel()
    if samples >= 2:
        per_sample = intervals.mean(axis=1)
        mean, lo, hi = mean_confidence_interval(per_sample, confidence)
        method = "samples"
    else:
        mean, lo, hi = mean_confidence_interval(flat, confidence)
        method = "steps"
    p50, p90, p99 = (float(x) for x in np.percentile(flat, [50, 90, 99]))
    return StepStatistics(
        samples=samples, steps=steps, n_ranks=n_ranks, mean_s=mean,
        std_s=float(flat.std(ddof=1)) if flat.size > 1 else 0.0,
        p50_s=p50, p90_s=p90, p99_s=p99, mean_ci_s=(lo, hi),
        samples_per_s=global_batch / mean,
        samples_per_s_ci=(global_batch / hi if hi > 0 else math.inf, global_batch / lo if lo > 0 else math.inf),
        confidence=confidence, ci_method=method, nominal_step_s=nominal_step_s,
        slowdown=mean / nominal_step_s if nominal_step_s > 0 else math.nan,
        ranks_simulated=ranks_simulated, max_front=max_front, seed=seed,
    )


def monte_carlo(
    program: StepProgram,
    collectives: CollectiveModel,
    spec: VariabilitySpec,
    *,
    n_ranks: int,
    gpus_per_node: int,
    steps: int,
    overlap_slowdown: float,
    nominal_step_s: float,
    global_batch: float,
    max_batch_elements: int = 2_000_000,
) -> StepStatistics:
    """Step-time statistics of ``program`` on ``n_ranks`` ranks under ``spec``.

    Without random components (stragglers only) one sample is played with identical
    ranks collapsed; otherwise ``spec.samples`` samples of ``steps`` steps, batched so
    that one batch holds at most ``max_batch_elements`` rank-samples.
    """
    persistent = rank_factors(spec.stragglers, n_ranks, gpus_per_node)
    compute_s = sum(t.duration_s for t in program.tasks)
    if not spec.random:
        groups, inverse = np.unique(persistent, return_inverse=True)
        run = simulate_ranks(program, collectives, np.broadcast_to(groups, (steps, len(groups))),
                             overlap_slowdown=overlap_slowdown)
        return summarise(run.step_interval_s, global_batch=global_batch, nominal_step_s=nominal_step_s,
                         confidence=spec.confidence, n_ranks=n_ranks, ranks_simulated=len(groups),
                         max_front=run.max_front, seed=spec.seed)
    per_batch = max(1, max_batch_elements // n_ranks)
    intervals = []
    max_front = 0
    for lo in range(0, spec.samples, per_batch):
        ids = list(range(lo, min(spec.samples, lo + per_batch)))
        draw = factor_sampler(spec, persistent, sample_ids=ids, compute_s=compute_s, exposure_s=nominal_step_s)
        run = simulate_ranks(program, collectives, draw, steps=steps, overlap_slowdown=overlap_slowdown)
        intervals.append(run.step_interval_s)
        max_front = max(max_front, run.max_front)
    return summarise(np.concatenate(intervals), global_batch=global_batch, nominal_step_s=nominal_step_s,
                     confidence=spec.confidence, n_ranks=n_ranks, ranks_simulated=n_ranks,
                     max_front=max_front, seed=spec.seed)


# ----------------------------------------------------------------------------- with predict

@dataclass(frozen=True, kw_only=True)
class DegradationEffect:
    """What degraded links do to the noise-free step (same collective model as the healthy one)."""

    healthy_step_s: float
    """Step time with every link healthy."""
    step_s: float
    """Step time with the degraded links."""
    healthy_comm_s: float
    """Collective time per step (sum of durations) with every link healthy."""
    comm_s: float
    """Collective time per step with the degraded links."""
    bottleneck_class: str | None
    """Class of the busiest link with the degraded links (``None`` without a link report)."""
    bottleneck_links: tuple[str, ...]
    """A few of the links tied for busiest, ``u -> v``."""
    bottleneck_count: int
    """How many links tie for busiest."""

    def to_dict(self) -> dict:
        """JSON-able dict (seconds)."""
        return {"healthy_step_s": self.healthy_step_s, "step_s": self.step_s,
                "healthy_comm_s": self.healthy_comm_s, "comm_s": self.comm_s,
                "bottleneck_class": self.bottleneck_class, "bottleneck_links": list(self.bottleneck_links),
                "bottleneck_count": self.bottleneck_count}


@dataclass(frozen=True, kw_only=True)
class VariabilityReport:
    """What variability does to a prediction."""

    spec: VariabilitySpec
    """What was asked."""
    degradation: DegradationEffect | None
    """Healthy against degraded step (``None`` without degraded links)."""
    statistics: StepStatistics | None
    """Monte-Carlo step statistics (``None`` when ranks do not differ)."""

    def to_dict(self) -> dict:
        """JSON-able dict (schema ``dpsim.variability/2``)."""
        s = self.spec
        return {
            "schema": "dpsim.variability/2",
            "noise_cv": s.noise_cv, "noise_distribution": s.noise_distribution, "noise_source": s.noise_source,
            "stragglers": [x.label for x in s.stragglers],
            "degradations": [x.label for x in s.degradations],
            "hiccup_rate_per_s": s.hiccup_rate_per_s, "hiccup_s": s.hiccup_s, "seed": s.seed,
            "degradation": self.degradation.to_dict() if self.degradation else None,
            "statistics": self.statistics.to_dict() if self.statistics else None,
        }


def predict_with_variability(config, spec: VariabilitySpec, *, steps: int | None = None):
    """(prediction, report): ``predict(config)`` with degraded links, plus step statistics.

    The prediction itself is the noise-free, straggler-free step, degraded links included:
    the same collective model as a healthy ``predict`` (NCCL's choice with the config's
    ``--algo/--proto/--jobs/--placement``, :func:`dpsim.predict.build_collectives`) with
    those links' capacities scaled, on the engine's homogeneous fast path. The report
    compares it with the healthy step and replays the same step program with per-rank
    factors over ``steps`` steps (default :data:`DEFAULT_STOCHASTIC_STEPS`) and
    ``spec.samples`` seeds.
    """
    from dpsim.predict import predict, resolve_topology

    if spec.per_rank:
        steps = DEFAULT_STOCHASTIC_STEPS if steps is None else steps
        if steps < 1:
            raise ConfigError(f"--steps: {steps} is not valid; expected an integer >= 1")
    prediction = predict(config, degradations=spec.degradations)
    effect = None
    if spec.degradations:
        healthy = predict(config)
        links = prediction.links
        effect = DegradationEffect(
            healthy_step_s=healthy.step_time_s, step_s=prediction.step_time_s,
            healthy_comm_s=healthy.comm_s, comm_s=prediction.comm_s,
            bottleneck_class=links.bottleneck_class if links is not None else None,
            bottleneck_links=tuple(f"{u.link[0]} -> {u.link[1]}" for u in links.bottleneck) if links else (),
            bottleneck_count=links.bottleneck_count if links is not None else 0)
    stats = None
    if spec.per_rank:
        topology = resolve_topology(config)
        stats = monte_carlo(
            prediction.program, prediction.collectives, spec, n_ranks=topology.n_gpus,
            gpus_per_node=topology.gpus_per_node, steps=steps, overlap_slowdown=config.overlap_slowdown,
            nominal_step_s=prediction.step_time_s, global_batch=config.micro_batch * config.grad_accum * topology.n_gpus,
        )
    return prediction, VariabilityReport(spec=spec, degradation=effect, statistics=stats)


def variability_table(report: VariabilityReport):
    """The report as a rich table (step-time percentiles and the throughput interval)."""
    from rich.markup import escape
    from rich.table import Table

    from dpsim.units import format_seconds

    spec = report.spec
    what = []
    if spec.noise_cv:
        source = f", from {spec.noise_source}" if spec.noise_source else ""
        what.append(f"noise {100 * spec.noise_cv:g} % CV ({spec.noise_distribution}{source})")
    what += [f"straggler {s.label}" for s in spec.stragglers]
    if spec.hiccup_rate_per_s:
        what.append(f"hiccups {spec.hiccup_rate_per_s:g}/s/GPU x {format_seconds(spec.hiccup_s)}")
    what += [f"degraded {d.label}" for d in spec.degradations]
    table = Table(title=escape("variability: " + ", ".join(what)), header_style="bold")
    table.add_column("step", justify="left")
    table.add_column("value", justify="right")
    d = report.degradation
    if d is not None:
        ratio = lambda a, b: f", x{a / b:.3f}" if b > 0 else ""  # noqa: E731
        table.add_row("step, degraded links", f"{format_seconds(d.step_s)} (healthy "
                      f"{format_seconds(d.healthy_step_s)}{ratio(d.step_s, d.healthy_step_s)})")
        table.add_row("communication / step", f"{format_seconds(d.comm_s)} (healthy "
                      f"{format_seconds(d.healthy_comm_s)}{ratio(d.comm_s, d.healthy_comm_s)})")
        if d.bottleneck_class is not None:
            more = d.bottleneck_count - len(d.bottleneck_links)
            table.add_row("bottleneck", escape(f"{d.bottleneck_class}: {', '.join(d.bottleneck_links)}"
                                               + (f" (+{more} tied)" if more > 0 else "")))
    s = report.statistics
    if s is not None:
        pct = f"{100 * s.confidence:g} %"
        rows = [
            ("noise-free step", format_seconds(s.nominal_step_s)),
            ("mean step", f"{format_seconds(s.mean_s)} (x{s.slowdown:.3f}; {pct} CI "
                          f"{format_seconds(s.mean_ci_s[0])} .. {format_seconds(s.mean_ci_s[1])})"),
            ("p50 / p90 / p99 step", " / ".join(format_seconds(x) for x in (s.p50_s, s.p90_s, s.p99_s))),
            ("throughput", f"{s.samples_per_s:,.6g} samples/s ({pct} CI {s.samples_per_s_ci[0]:,.6g} .. "
                           f"{s.samples_per_s_ci[1]:,.6g})"),
            ("Monte Carlo", f"{s.samples} sample(s) x {s.steps} steps, seed {s.seed}; "
                            f"{s.ranks_simulated} distinct rank(s), front <= {s.max_front}"),
        ]
        for name, value in rows:
            table.add_row(name, value)
    return table


def print_variability(report: VariabilityReport, console=None) -> None:
    """Print :func:`variability_table`."""
    from rich.console import Console

    (console or Console()).print(variability_table(report))
