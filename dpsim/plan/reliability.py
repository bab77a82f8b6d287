"""Failures, checkpoints and goodput of a whole training run.

Synchronous data parallelism stops when any GPU, node or link fails: every rank
restarts from the last checkpoint and the work since then is lost. This module turns
per-component MTBFs into a failure process, plays a training run of a given amount of
work through it (checkpoint every ``interval_s`` of training, each write blocking for
``write_s``, each restart costing ``restart_s``) and reports wall-clock time, goodput
(failure-free time / wall time), lost work, and the checkpoint interval that
maximises goodput, compared with Young's and Daly's approximations.

Model
-----
* **Failures** of each component class are Poisson processes (exponential times
  between failures, i.e. a constant MTBF per component): per GPU, per node (host,
  PSU, software, ...) and per inter-node link (one per NIC -- NIC, cable and switch
  port; one per GPU on an NVLink fabric). The job's failure rate is the sum
  ``n_gpus/MTBF_gpu + n_nodes/MTBF_node + n_links/MTBF_link``. Failures strike while
  the job holds running machines (training, writing a checkpoint, restarting), not
  while it waits for a replacement. Any failure takes its node out of the job.
* **Checkpoint/restart.** Work proceeds in segments of ``interval_s`` of training
  followed by a blocking write of ``write_s`` (none after the last segment). A failure
  loses the segment in progress; the job then waits ``replace_s`` for a replacement
  node (0: a hot spare is at hand), restarts (``restart_s``, itself interruptible) and
  resumes from the last checkpoint.
* **Elastic choice.** ``wait`` (above) or ``shrink``: restart at once on the surviving
  nodes, training at ``n/N`` of full speed (the global batch kept by gradient
  accumulation), while the failed node is replaced in ``replace_s``; returned nodes
  rejoin at the next checkpoint, at the cost of one more restart.

Closed form
-----------
For ``wait`` with exponential failures (rate 1/M) the expected time to get through a
segment of length L that must run uninterrupted is exactly
``M e^{R/M} (e^{L/M} - 1) (1 + D/M)`` (R restart, D replacement wait; Daly 2006,
"A higher order estimate of the optimum checkpoint interval for restart dumps", FGCS
22(3), eq. 13, extended by D), so the expected wall time of a run is a sum over its
segments (:func:`expected_wall_time_s`). Its minimum over the interval is the
*model optimum*; Young (1974) approximates it by ``sqrt(2 delta M)`` and Daly (2006)
by ``sqrt(2 delta M) [1 + sqrt(delta/(2M))/3 + delta/(18M)] - delta`` (delta < 2M).
The simulation (:func:`simulate_run`, a direct event simulation) checks the closed
form and extends it where it has none (``shrink``, replacement waits).

Default MTBFs (:class:`FailureRates`) come from Meta's research clusters (Kokolis et al. 2024,
"Revisiting Reliability in Large-Scale Machine Learning Research Clusters", arXiv:2410.21680,
HPCA 2025): over 11 months RSC-1 (16k A100 GPUs, 8 per node) saw r_f = 6.50 job-interrupting
failures per 1,000 node-days (RSC-2, 8k A100s: 2.34), all causes together (GPU, InfiniBand link,
host, filesystem mount, ...). The paper reports a rate per node, not per component, so the whole
rate is the node class's: 1,000 / 6.50 node-days = 3,692 h per node, and GPUs and links add
nothing by default. On 2,048 nodes (16,384 GPUs) it gives the paper's projected MTTF of 1.8 h.
Your fleet differs: pass your own (``--mtbf-gpu``/``--mtbf-link`` to split it by component).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import field

import numpy as np

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_MTBF_S, MAX_RECOVERY_S, MIN_CHECKPOINT_INTERVAL_S
from dpsim.topology.spec import nvlink_fabric

HOUR_S = 3600.0
DAY_S = 86400.0

_RSC1_FAILURES_PER_NODE_DAY = 6.50 / 1000
"""RSC-1's failure rate r_f (Kokolis et al. 2024, arXiv:2410.21680; see module docstring)."""
DEFAULT_NODE_MTBF_S = DAY_S / _RSC1_FAILURES_PER_NODE_DAY
"""3,692 h per node: RSC-1's 6.50 failures per 1,000 node-days, every cause charged to the node."""
DEFAULT_GPU_MTBF_S = math.inf
"""None by default: the published rate is per node and already counts GPU failures."""
DEFAULT_LINK_MTBF_S = math.inf
"""None by default: the published rate is per node and already counts link failures."""

DEFAULT_RESTART_S = 10 * 60.0
"""Restart after a failure: relaunch, NCCL init (the checkpoint's read is added to it:
:mod:`dpsim.plan.layout_goodput`). An assumption (10 min); measure yours."""
DEFAULT_CHECKPOINT_BYTES_PER_S = 10e9
"""Checkpoint write (and read) bandwidth of one node, used when no write time is given. An assumption
(10 GB/s); measure yours."""

POLICIES = ("wait", "shrink")
"""What the job does after a failure: wait for a replacement, or continue on fewer nodes."""

COMPONENTS = ("gpu", "node", "link")


def _check(flag: str, value: float, *, minimum: float = 0.0, strict: bool = False, allowed: str = "") -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
    ok = ok and (value > minimum if strict else value >= minimum)
    if not ok:
        raise ConfigError(f"{flag}: {value!r} is not valid; expected {allowed or ('a number > ' if strict else 'a number >= ') + f'{minimum:g}'}")
    return float(value)


def parse_long_duration_s(raw: str | float, flag: str) -> float:
    """Parse ``90s``, ``10min``, ``4h``, ``30d`` into seconds (>= 0); a Python number is seconds.

    Text must carry its unit (but ``0``, zero in any unit): ``--mtbf-gpu 80000`` (meant as hours, read as seconds, it makes a
    16,384-GPU job fail every few seconds) is refused with the units to choose from.
    ``none``, ``never`` and ``inf`` give ``inf`` (for an MTBF: never fails).
    """
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value = float(raw)
    else:
        text = str(raw).strip().lower()
        if text in ("none", "never", "inf"):
            return math.inf
        m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*(s|sec|min|m|h|d)?", text)
        if not m:
            raise ConfigError(f"{flag}: {raw!r} is not a duration; use e.g. 90s, 10min, 4h, 30d")
        if m.group(2) is None and float(m.group(1)) != 0:
            raise ConfigError(f"{flag}: {raw!r} has no unit; give one: s, min, h or d (e.g. {m.group(1)}h for "
                              f"hours, {m.group(1)}s for seconds)")
        # A bare 0 is zero in every unit: `--replace 0` (its help's "0 = at once") was refused "'0' has no unit;
        # give one ... (e.g. 0h for hours, 0s for seconds)". Any other bare number still needs its unit.
        value = float(m.group(1)) * {"s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0,
                                     "h": HOUR_S, "d": DAY_S, None: 1.0}[m.group(2)]
        if math.isinf(value):
            # 1e400h overflowed to inf, which an MTBF reads as "never fails": a number given is never none.
            raise ConfigError(f"{flag}: {raw!r} is not valid; the number is too large for a float (over 1.8e308 s)")
    if not (value >= 0) or math.isnan(value):
        raise ConfigError(f"{flag}: {raw!r} is not valid; expected a duration >= 0")
    return value


@frozen_dataclass
class FailureRates:
    """Mean time between failures of each component (``inf``: never fails)."""

    gpu_mtbf_s: float = DEFAULT_GPU_MTBF_S
    """MTBF of one GPU, seconds."""
    node_mtbf_s: float = DEFAULT_NODE_MTBF_S
    """MTBF of one node apart from its GPUs and links (host, PSU, software), seconds."""
    link_mtbf_s: float = DEFAULT_LINK_MTBF_S
    """MTBF of one inter-node link (NIC, cable, switch port), seconds."""

    def __post_init__(self) -> None:
        for flag, v in (("--mtbf-gpu", self.gpu_mtbf_s), ("--mtbf-node", self.node_mtbf_s),
                        ("--mtbf-link", self.link_mtbf_s)):
            _check(flag, v, strict=True, allowed="a duration > 0 (e.g. 80000h) or none")
            if math.isfinite(v) and v > MAX_MTBF_S:
                raise ConfigError(f"{flag}: {v:.4g} s is not valid; expected at most {MAX_MTBF_S:.4g} s (a million "
                                  f"years), or none for a component that never fails")


@frozen_dataclass
class ClusterShape:
    """What can fail: nodes, their GPUs and their inter-node links."""

    n_nodes: int
    """Servers in the job."""
    gpus_per_node: int
    """GPUs per server."""
    links_per_node: int
    """Inter-node links per server (NICs; GPUs on an NVLink fabric; 0 for one node)."""

    def __post_init__(self) -> None:
        if isinstance(self.n_nodes, bool) or not isinstance(self.n_nodes, int) or self.n_nodes < 1:
            raise ConfigError(f"nodes: {self.n_nodes!r} is not valid; expected an integer >= 1")
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 1:
            raise ConfigError(f"--gpus-per-node: {self.gpus_per_node!r} is not valid; expected an integer >= 1")
        if not isinstance(self.links_per_node, int) or self.links_per_node < 0:
            raise ConfigError(f"links per node: {self.links_per_node!r} is not valid; expected an integer >= 0")

    @classmethod
    def from_topology(cls, topology) -> ClusterShape:
        """Shape of a :class:`dpsim.topology.Topology`."""
        fabric = topology.spec.fabric
        if topology.n_nodes == 1 or fabric is None:
            links = 0
        elif nvlink_fabric(fabric):
            links = topology.gpus_per_node
        else:
            links = fabric.nics_per_node
        return cls(n_nodes=topology.n_nodes, gpus_per_node=topology.gpus_per_node, links_per_node=links)

    def rates_per_s(self, rates: FailureRates, nodes: int | None = None) -> dict[str, float]:
        """Failure rate of each component class with ``nodes`` nodes in the job (default all)."""
        n = self.n_nodes if nodes is None else nodes
        return {
            "gpu": n * self.gpus_per_node / rates.gpu_mtbf_s,
            "node": n / rates.node_mtbf_s,
            "link": n * self.links_per_node / rates.link_mtbf_s,
        }

    def mtbf_s(self, rates: FailureRates) -> float:
        """The whole job's mean time between failures."""
        total = sum(self.rates_per_s(rates).values())
        if math.isfinite(total):
            return 1.0 / total if total > 0 else math.inf
        # Scaled by the shortest MTBF where the summed rate overflows: 16 GPUs of 1e-308 s made it inf, and the
        # job's MTBF came out 0 s (goodput's interval search then divided by it).
        n = self.n_nodes
        classes = [(count, mtbf) for count, mtbf in ((n * self.gpus_per_node, rates.gpu_mtbf_s),
                                                     (n, rates.node_mtbf_s),
                                                     (n * self.links_per_node, rates.link_mtbf_s)) if count > 0]
        shortest = min(m for _, m in classes)
        return max(shortest / sum(count * (shortest / m) for count, m in classes), math.ulp(0.0))


@frozen_dataclass
class CheckpointPolicy:
    """How often and at what cost the job saves and restores its state."""

    interval_s: float
    """Training time between the ends of consecutive checkpoints (tau), seconds."""
    write_s: float
    """Blocking checkpoint write (delta), seconds."""
    restart_s: float = DEFAULT_RESTART_S
    """Restart after a failure (R): relaunch, init, checkpoint load, seconds."""

    def __post_init__(self) -> None:
        _check("--checkpoint-interval", self.interval_s, strict=True, allowed="a duration > 0")
        _check("--checkpoint-write", self.write_s, allowed="a duration >= 0")
        _check("--restart", self.restart_s, allowed="a duration >= 0")
        if not (math.isfinite(self.interval_s) and self.interval_s >= MIN_CHECKPOINT_INTERVAL_S):
            raise ConfigError(f"--checkpoint-interval: {self.interval_s!r} s is not valid; expected a finite duration "
                              f">= {MIN_CHECKPOINT_INTERVAL_S:g} s")
        # The relaunch (--restart, at most a year) plus the checkpoint's read back (as long as its write, at most a
        # year): bounded by the one-year limit alone, --restart 365d was refused as "31536000.149 s".
        if not self.restart_s <= 2 * MAX_RECOVERY_S:
            raise ConfigError(f"--restart: {self.restart_s!r} s is not valid; expected a duration <= {MAX_RECOVERY_S:g} s "
                              "(a year) and a checkpoint read back of at most as long")


@frozen_dataclass
class TrainingJob:
    """A training run to get through failures."""

    work_s: float
    """Failure-free training time at full size (token budget / tokens per second), seconds."""
    cluster: ClusterShape
    """What can fail."""
    rates: FailureRates = field(default_factory=FailureRates)
    """Component MTBFs."""
    checkpoint: CheckpointPolicy
    """Checkpoint interval, write and restart costs."""
    policy: str = "wait"
    """``wait`` for a replacement node, or ``shrink`` and continue on fewer nodes."""
    replace_s: float = 0.0
    """Time until a failed node is replaced (0: hot spare), seconds."""
    min_nodes: int = 1
    """``shrink``: below this many nodes the job waits for a replacement."""
    replica_nodes: int = 1
    """``shrink``: the nodes a failure takes out of training at once, a whole model replica (its
    tensor x pipeline x context x expert-parallel ranks hold different shards, so the survivors
    of a replica that lost one cannot train). The job trains on whole replicas of the nodes it
    has, and waits for a replacement below one replica."""

    @property
    def training_nodes_floor(self) -> int:
        """``shrink``: below this many nodes the job waits (``min_nodes``, at least one replica)."""
        return max(self.min_nodes, self.replica_nodes)

    def __post_init__(self) -> None:
        _check("--duration/--tokens", self.work_s, strict=True, allowed="failure-free training time > 0")
        if not math.isfinite(self.work_s):
            raise ConfigError(f"--duration/--tokens: {self.work_s!r} is not valid; expected a finite amount of work")
        if self.policy not in POLICIES:
            raise ConfigError(f"--elastic: {self.policy!r} is not valid; choose one of {', '.join(POLICIES)}")
        _check("--replace", self.replace_s, allowed="a duration >= 0")
        if not (math.isfinite(self.replace_s) and self.replace_s <= MAX_RECOVERY_S):
            raise ConfigError(f"--replace: {self.replace_s!r} s is not valid; expected a duration >= 0 and <= "
                              f"{MAX_RECOVERY_S:g} s (a year)")
        if not (isinstance(self.min_nodes, int) and 1 <= self.min_nodes <= self.cluster.n_nodes):
            raise ConfigError(f"--min-nodes: {self.min_nodes!r} is not valid; expected an integer in "
                              f"[1, {self.cluster.n_nodes}] (the job's nodes)")
        if not (isinstance(self.replica_nodes, int) and 1 <= self.replica_nodes <= self.cluster.n_nodes):
            raise ConfigError(f"replica nodes: {self.replica_nodes!r} is not valid; expected an integer in "
                              f"[1, {self.cluster.n_nodes}] (the job's nodes)")

    @property
    def mtbf_s(self) -> float:
        """Mean time between failures of the full-size job."""
        return self.cluster.mtbf_s(self.rates)


# ----------------------------------------------------------------------------- closed form

def _expm1(x: float) -> float:
    """``e^x - 1``, ``inf`` past the largest double (a job that cannot finish takes forever)."""
    return math.expm1(x) if x < 709.0 else math.inf


def expected_wall_time_s(work_s: float, interval_s: float, write_s: float, restart_s: float, mtbf_s: float,
                         down_s: float = 0.0) -> float:
    """Expected wall time of the ``wait`` policy under exponential failures (exact; ``inf`` when it
    exceeds the largest double).

    Segments of ``interval_s`` training + ``write_s`` write (the last one shorter, no
    write); each needs an uninterrupted run and costs ``M e^{R/M} (e^{L/M} - 1)(1 + D/M)``.
    """
    k = max(1, math.ceil(work_s / interval_s - 1e-12))
    last = work_s - (k - 1) * interval_s
    if math.isinf(mtbf_s):
        return work_s + (k - 1) * write_s
    m = mtbf_s
    per = m * (_expm1(restart_s / m) + 1.0) * (1.0 + down_s / m)
    full = (k - 1) * _expm1((interval_s + write_s) / m) if k > 1 else 0.0  # no 0 x inf
    return per * (full + _expm1(last / m))


def young_interval_s(write_s: float, mtbf_s: float) -> float:
    """Young (1974): tau = sqrt(2 delta M)."""
    return math.sqrt(2.0 * write_s * mtbf_s)


def daly_interval_s(write_s: float, mtbf_s: float) -> float:
    """Daly (2006), higher order: sqrt(2dM)[1 + sqrt(d/2M)/3 + d/(18M)] - d for d < 2M, else M."""
    if write_s >= 2 * mtbf_s:
        return mtbf_s
    x = write_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * write_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - write_s


@functools.lru_cache(maxsize=1024)
def continuous_optimum_s(write_s: float, mtbf_s: float) -> float:
    """Interval minimising (e^{(tau+delta)/M} - 1) / tau, the per-work cost of the closed form.

    The root of e^{(tau+delta)/M} (1 - tau/M) = 1 on (0, M), by bisection.
    """
    if math.isinf(mtbf_s):
        return math.inf
    if write_s == 0:
        return 0.0
    m, d = mtbf_s, write_s
    lo, hi = 0.0, m
    for _ in range(200):
        mid = (lo + hi) / 2
        # e^{(mid+d)/M} (1 - mid/M) > 1, in logs (the exponential overflows when d >> M)
        if mid < m and (mid + d) / m + math.log1p(-mid / m) > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


_MAX_SCANNED = 200_000
"""Most whole-division intervals :func:`model_optimum_s` ranks (a window around the continuous optimum)."""


@functools.lru_cache(maxsize=256)
def model_optimum_s(work_s: float, write_s: float, restart_s: float, mtbf_s: float, down_s: float = 0.0) -> float:
    """Interval minimising :func:`expected_wall_time_s` (the whole run, last segment included).

    Candidates: the continuous optimum, the whole run, and every interval that divides the run
    evenly within a factor 2 of the continuous optimum (tens of thousands for a long run with a
    short interval: ranked with numpy, the best few costed exactly).
    """
    if math.isinf(mtbf_s) or write_s == 0:
        return work_s if math.isinf(mtbf_s) else max(work_s * 1e-9, 1e-9)
    tau_c = min(continuous_optimum_s(write_s, mtbf_s), work_s)
    cost = lambda tau: expected_wall_time_s(work_s, tau, write_s, restart_s, mtbf_s, down_s)  # noqa: E731
    k_c = work_s / tau_c
    # Bounds capped as floats first: an absurd MTBF (1e-300 s) makes k_c too large for an int64 range.
    # At most _MAX_SCANNED intervals around k_c: an MTBF of seconds put millions in [k_c/2, 2 k_c], 0.3 s of
    # numpy per call, so plan --rank goodput --mtbf-node 1s ran for minutes over its layouts. So many
    # segments differ from their neighbours by under 1e-5 of an interval: the best is beside k_c.
    ks = np.arange(max(1, int(min(k_c * 0.5, 10_000_000)), int(min(k_c, 10_000_000)) - _MAX_SCANNED // 2),
                   min(int(min(k_c * 2 + 2, 10_000_000)), int(min(k_c, 10_000_000)) + _MAX_SCANNED // 2))
    tau = work_s / ks
    with np.errstate(over="ignore"):
        # numpy's expm1 (a SIMD kernel the CPU chooses, last digit host-dependent) only ranks the candidates; the
        # interval returned is the best of them by expected_wall_time_s, computed with math. approx is that cost
        # over a constant factor, so a host could differ only if nine candidates lay within ulps of the optimum:
        # the cost is flat there as (dk / k)^2, i.e. dk < 1e-7 k of k <= 1e7, under one whole division. Kept
        # vectorised: up to 200,000 candidates per call, and plan --rank goodput calls it per layout.
        # (k - 1) x e^.. only where k > 1: with a write far past the MTBF the exponential is inf, and
        # 0 x inf would be NaN (a numpy warning on stderr, and a NaN ranked by argsort).
        head = np.expm1((tau + write_s) / mtbf_s)
        approx = np.multiply(ks - 1, head, out=np.zeros_like(head), where=ks > 1) + np.expm1(tau / mtbf_s)
    order = np.argsort(approx, kind="stable")[:8]
    cands = {tau_c, work_s, *(work_s / int(k) for k in ks[order])}
    best = min(sorted(cands), key=cost)
    return best if math.isfinite(cost(best)) else tau_c  # every interval hopeless: the continuous optimum
