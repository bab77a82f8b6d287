"""A layout through failures: its checkpoint cost, expected time to train, spares and checkpoint interval.

``dpsim plan --rank goodput`` and ``dpsim goodput`` share this: a layout's checkpoint is costed
here, and its failures by :mod:`dpsim.plan.reliability` (the same closed form ``goodput`` checks
by simulation).

**Blast radius.** Synchronous data-parallel and 3D training stop whole: any GPU, node or link
failure stops every rank of the job, whatever the layout, and the job restarts from its last
checkpoint. The layout decides what a checkpoint and a restart cost.

**Checkpoint.** The state saved is one replica's weights and optimizer state. Who writes it
depends on the layout: replicated state (``ddp``) is written by one data-parallel replica
(the ``tp x pp`` ranks of data-parallel index 0, as Megatron-LM saves without its distributed
optimizer), sharded state (ZeRO, FSDP) by every rank of a shard group, each its own shard. Each
node writes its ranks' shares in parallel at ``node_bandwidth`` bytes/s, so the write takes as
long as the busiest node (ranks in Megatron-LM's order: tensor fastest, then data, then
pipeline; whole nodes of ``gpus_per_node`` consecutive ranks). A restart reads the checkpoint
back: every node reads the distinct bytes its ranks need, which are the bytes its busiest
writer wrote (a replicated shard is read once per node), so the read takes as long as the write.

**Spares.** A failed node goes to repair for ``replace_s``; nodes in repair are then an
M/G/inf queue whose count is Poisson with mean ``replace_s / M`` whatever the repair-time
distribution (Palm's theorem; e.g. Kleinrock 1975, *Queueing Systems* vol. 1, sec. 3.8 / the
Erlang loss formula's limit). A failure finds all ``s`` spares in repair with probability
``P(count >= s)`` (Poisson arrivals see time averages); the recommended spares are the fewest
``s`` that make it at most ``spare_risk``. Such a failure waits at most ``replace_s``, which the
expected time charges in full (an upper bound).

**Straggler tail.** A synchronous step waits for its slowest rank: with per-rank compute noise
(``--noise-cv``) or persistently slow GPUs or nodes (``--straggler``) every step's compute is
stretched by the expected largest factor over the job's ranks, drawn by the variability engine
(:func:`~dpsim.variability.monte_carlo.factor_sampler`, :data:`TAIL_STEPS` steps), so the time to
train grows by ``1 + (tail - 1) x compute / step`` (:func:`straggler_tail`; communication is not
noisy). The expected maximum grows with the ranks, so a bigger layout pays more. The engine's
full replay (``predict --noise-cv``) also credits slack a rank's lateness can hide in (a bucket's
all-reduce overlapped with backward, a pipeline bubble); this closed form does not, so it is the
larger of the two, and costs one draw per GPU count, not one simulation per layout.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict

import numpy as np

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_FAILURES_PER_RUN, MAX_RECOVERY_S
from dpsim.plan.reliability import (
    DEFAULT_CHECKPOINT_BYTES_PER_S,
    DEFAULT_RESTART_S,
    CheckpointPolicy,
    ClusterShape,
    FailureRates,
    TrainingJob,
    continuous_optimum_s,
    daly_interval_s,
    expected_wall_time_s,
    model_optimum_s,
    young_interval_s,
)
from dpsim.variability.layout import block_maxima
from dpsim.variability.spec import VariabilitySpec, rank_factors
from dpsim.workload.precision import Precision, optimizer_state_bytes_per_param

DEFAULT_SPARE_RISK = 0.01
"""Chance that a failure finds every spare in repair that the recommended spare count accepts."""
TAIL_STEPS = 200
"""Steps drawn for the straggler tail: the mean of their slowest factors (its standard error is a
few per cent of the noise's own spread)."""


@frozen_dataclass
class CheckpointCost:
    """What saving and restoring one checkpoint of a layout costs."""

    state_bytes: float
    """Bytes of one replica's weights and optimizer state (the checkpoint)."""
    sharded: bool
    """Every rank of a shard group writes its shard (ZeRO, FSDP); else one replica writes."""
    writers: int
    """Ranks writing a share."""
    node_bytes: float
    """Bytes the busiest node writes (and reads back at a restart)."""
    write_s: float
    """Blocking write: the busiest node's bytes at the node bandwidth, seconds."""
    read_s: float
    """Read at a restart, seconds (as long as the write: the same bytes per node)."""

    def to_dict(self) -> dict:
        """JSON-able form (its fields, all plain values)."""
        return asdict(self)


def state_bytes(param_count: int, precision: Precision, optimizer: str) -> float:
    """Bytes of one replica's checkpoint: weights in the parameter dtype and the optimizer state
    (master copy included), as :func:`~dpsim.memory.memory_breakdown` counts them."""
    return float(param_count * (precision.weight_bytes + optimizer_state_bytes_per_param(precision, optimizer)))


def checkpoint_cost(*, state_bytes: float, gpus_per_node: int, tp: int = 1, pp: int = 1, dp: int = 1,
                    shard_group: int = 1,
                    node_bandwidth_bytes_per_s: float = DEFAULT_CHECKPOINT_BYTES_PER_S) -> CheckpointCost:
    """The checkpoint of a ``tp x pp x dp`` layout whose optimizer state is sharded over
    ``shard_group`` data-parallel ranks (1: replicated), each node writing at
    ``node_bandwidth_bytes_per_s`` (see the module docstring)."""
    if not (node_bandwidth_bytes_per_s > 0 and math.isfinite(node_bandwidth_bytes_per_s)):
        raise ConfigError(f"--checkpoint-bandwidth: {node_bandwidth_bytes_per_s!r} B/s is not valid; expected a "
                          f"finite bandwidth > 0, e.g. 10GB/s")
    g = max(1, min(shard_group, dp))
    writers = tp * pp * g
    per_writer = state_bytes / writers
    # Writers: data-parallel indices [0, g) of every stage, i.e. ranks s*tp*dp + [0, tp*g).
    per_node: dict[int, int] = {}
    for s in range(pp):
        start = s * tp * dp
        first, last = start // gpus_per_node, (start + tp * g - 1) // gpus_per_node
        for node in range(first, last + 1):
            lo, hi = max(start, node * gpus_per_node), min(start + tp * g, (node + 1) * gpus_per_node)
            per_node[node] = per_node.get(node, 0) + hi - lo
    node_bytes = max(per_node.values()) * per_writer
    write_s = node_bytes / node_bandwidth_bytes_per_s
    return CheckpointCost(state_bytes=state_bytes, sharded=g > 1, writers=writers, node_bytes=node_bytes,
                          write_s=write_s, read_s=write_s)


def spares_for(replace_s: float, mtbf_s: float, risk: float = DEFAULT_SPARE_RISK, *,
               max_spares: int = 1_000_000) -> tuple[int, float]:
    """``(spare nodes, expected wait per failure with them)`` for a job failing every ``mtbf_s``
    whose failed node is back after ``replace_s`` (see the module docstring); at most ``max_spares``
    (a job whose nodes are mostly in repair gets that many, and waits)."""
    if not 0 < risk < 1:
        raise ConfigError(f"spare risk: {risk!r} is not valid; expected a probability in (0, 1)")
    if replace_s <= 0 or math.isinf(mtbf_s):
        return 0, 0.0
    mean = replace_s / mtbf_s
    # Poisson(mean): the fewest s with P(count >= s) = 1 - P(count <= s - 1) within the risk
    # (terms in logs: e^-mean underflows past mean ~ 745).
    s, below = 0, 0.0
    while 1.0 - below > risk and s < max_spares:
        below += math.exp(-mean + s * math.log(mean) - math.lgamma(s + 1))
        s += 1
    return s, replace_s * max(0.0, 1.0 - below)


@frozen_dataclass
class FailureInputs:
    """What failures and checkpoints cost, apart from the layout (``plan --rank goodput``'s flags)."""

    rates: FailureRates = FailureRates()
    """Component MTBFs."""
    restart_s: float = DEFAULT_RESTART_S
    """Relaunch and initialisation after a failure, before the checkpoint is read, seconds."""
    replace_s: float = 0.0
    """Time until a failed node is back (repair or replacement), seconds; sizes the spares."""
    node_bandwidth_bytes_per_s: float = DEFAULT_CHECKPOINT_BYTES_PER_S
    """Checkpoint write (and read) bandwidth of one node, bytes/s."""
    spare_risk: float = DEFAULT_SPARE_RISK
    """Accepted chance that a failure finds every spare in repair."""
    variability: VariabilitySpec | None = None
    """Per-rank noise and stragglers whose slowest rank stretches every step (``None``: none)."""

    def __post_init__(self) -> None:
        CheckpointPolicy(interval_s=3600.0, write_s=0.0, restart_s=self.restart_s)  # its checks, one line
        if not self.restart_s <= MAX_RECOVERY_S:  # CheckpointPolicy's bound also holds the checkpoint's read back
            raise ConfigError(f"--restart: {self.restart_s:g} s is not valid; expected a duration >= 0 and <= "
                              f"{MAX_RECOVERY_S:g} s (a year)")
        if not (self.replace_s >= 0 and self.replace_s <= MAX_RECOVERY_S):
            raise ConfigError(f"--replace: {self.replace_s!r} s is not valid; expected a duration >= 0 and <= "
                              f"{MAX_RECOVERY_S:g} s (a year)")
        checkpoint_cost(state_bytes=0.0, gpus_per_node=1, node_bandwidth_bytes_per_s=self.node_bandwidth_bytes_per_s)
        spares_for(0.0, math.inf, self.spare_risk)


@frozen_dataclass
class LayoutGoodput:
    """A layout's training run through failures (closed form, policy ``wait``)."""

    work_s: float
    """Failure-free time to train, seconds."""
    blast_radius_gpus: int
    """GPUs one failure stops: the whole synchronous job."""
    mtbf_s: float
    """Mean time between failures of the job, seconds."""
    checkpoint: CheckpointCost
    """Checkpoint write and read."""
    restart_s: float
    """Restart after a failure: relaunch and init plus the checkpoint read, seconds."""
    interval_s: float
    """Recommended checkpoint interval: the one maximising expected goodput, seconds."""
    young_s: float
    """Young (1974): sqrt(2 C M)."""
    daly_s: float
    """Daly (2006), higher order."""
    spares: int
    """Recommended spare nodes."""
    spare_gpus: int
    """GPUs of the spare nodes."""
    down_s: float
    """Expected wait for a node per failure with the recommended spares, seconds."""
    expected_wall_s: float
    """Expected time to train through failures, seconds."""
    expected_wall_no_spares_s: float
    """The same without spares (every failure waits ``replace_s``), seconds."""
    straggler_tail: float = 1.0
    """Expected compute factor of each step's slowest rank (:func:`straggler_tail`; 1: none), already in
    :attr:`work_s`."""

    @property
    def goodput(self) -> float:
        """Failure-free time / expected wall time."""
        return self.work_s / self.expected_wall_s if self.expected_wall_s > 0 else 0.0

    def job(self, cluster: ClusterShape, rates: FailureRates) -> TrainingJob:
        """The :class:`TrainingJob` ``dpsim goodput`` simulates for this layout (the recommended interval
        and spares)."""
        return TrainingJob(work_s=self.work_s, cluster=cluster, rates=rates, replace_s=self.down_s,
                           checkpoint=CheckpointPolicy(interval_s=self.interval_s, write_s=self.checkpoint.write_s,
                                                       restart_s=self.restart_s))

    def to_dict(self) -> dict:
        """JSON-able form (seconds)."""
        return {"work_s": self.work_s, "blast_radius_gpus": self.blast_radius_gpus, "mtbf_s": self.mtbf_s,
                "checkpoint": self.checkpoint.to_dict(), "restart_s": self.restart_s,
                "checkpoint_interval_s": self.interval_s, "young_s": self.young_s, "daly_s": self.daly_s,
                "spares": self.spares, "spare_gpus": self.spare_gpus, "down_s": self.down_s,
                "expected_wall_s": self.expected_wall_s, "expected_wall_no_spares_s": self.expected_wall_no_spares_s,
                "straggler_tail": self.straggler_tail, "goodput": self.goodput}


@functools.lru_cache(maxsize=256)  # one draw per GPU count, however many layouts share it
def straggler_tail(spec: VariabilitySpec | None, *, n_gpus: int, gpus_per_node: int) -> float:
    """Expected compute factor of a step's slowest rank among ``n_gpus`` under ``spec``'s noise and
    stragglers (1 with neither; see the module docstring)."""
    if spec is None or not spec.per_rank:
        return 1.0
    if spec.hiccup_rate_per_s > 0:
        raise ConfigError("--hiccup-rate-per-s: not in plan --rank goodput's straggler tail; give --noise-cv or "
                          "--straggler")
    persistent = rank_factors(spec.stragglers, n_gpus, gpus_per_node)
    if not spec.random:
        return float(persistent.max())
    # One block of every rank: the layout closed form's per-step maxima (dpsim.variability.layout).
    return float(np.mean(block_maxima(spec, persistent, block=n_gpus, steps=TAIL_STEPS, sample_ids=[0],
                                      compute_s=1.0, exposure_s=0.0)))


def layout_goodput(*, work_s: float, cluster: ClusterShape, checkpoint: CheckpointCost,
                   failures: FailureInputs, compute_fraction: float = 1.0) -> LayoutGoodput:
    """Expected time to train ``work_s`` of failure-free training on ``cluster`` through failures,
    with the interval and spares recommended for it. ``compute_fraction``: the share of a step its
    compute takes, which the straggler tail stretches (:func:`straggler_tail`)."""
    tail = straggler_tail(failures.variability, n_gpus=cluster.n_nodes * cluster.gpus_per_node,
                          gpus_per_node=cluster.gpus_per_node)
    work_s *= 1.0 + (tail - 1.0) * min(max(compute_fraction, 0.0), 1.0)
    m = cluster.mtbf_s(failures.rates)
    restart = failures.restart_s + checkpoint.read_s
    spares, down = spares_for(failures.replace_s, m, failures.spare_risk, max_spares=cluster.n_nodes)
    # The wall time is at least the work: past MAX_FAILURES_PER_RUN failures in the work alone, the run never
    # finishes whatever the interval (below), and the interval search (tens of ms a layout) is skipped: plan
    # --rank goodput --mtbf-node 1s took 30 s over gpt2's 1,212 layouts to refuse them all.
    hopeless = not work_s / m <= MAX_FAILURES_PER_RUN
    tau = continuous_optimum_s(checkpoint.write_s, m) if hopeless else model_optimum_s(
        work_s, checkpoint.write_s, restart, m, down)
    if not (math.isfinite(tau) and tau > 0 and math.isfinite(work_s / tau)):
        # A subnormal MTBF (--mtbf-gpu 1e-308s) made the optimum so short that work / interval overflowed
        # (OverflowError in expected_wall_time_s's segment count); such a job never finishes at any interval.
        tau = work_s
    wall = expected_wall_time_s(work_s, tau, checkpoint.write_s, restart, m, down)
    bare = expected_wall_time_s(work_s, tau, checkpoint.write_s, restart, m, failures.replace_s)
    # As dpsim goodput refuses such a job: past MAX_FAILURES_PER_RUN expected failures a run never
    # finishes (infinite: ranked last, or the search refused when no layout finishes). The closed form's
    # finite 6e173 s went into plan --rank goodput's JSON and tables as a time to train.
    wall, bare = (math.inf if not x / m <= MAX_FAILURES_PER_RUN else x for x in (wall, bare))
    return LayoutGoodput(
        work_s=work_s, blast_radius_gpus=cluster.n_nodes * cluster.gpus_per_node, mtbf_s=m, checkpoint=checkpoint,
        restart_s=restart, interval_s=tau, young_s=young_interval_s(checkpoint.write_s, m),
        daly_s=daly_interval_s(checkpoint.write_s, m), spares=spares, spare_gpus=spares * cluster.gpus_per_node,
        down_s=down, expected_wall_s=wall, expected_wall_no_spares_s=bare, straggler_tail=tail)
