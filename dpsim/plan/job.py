"""A training job through failures: its predicted throughput, checkpoints, goodput and the best interval.

:func:`goodput` is ``dpsim goodput`` as a function (the command parses its flags and prints the
:class:`GoodputReport`): the job's step is :func:`~dpsim.predict.run.predict`'s, its checkpoint
is its weights and optimizer state, and failures are simulated by :mod:`dpsim.plan.goodput`.
"""

from __future__ import annotations

import math
from dataclasses import field, replace
from typing import Any

from dpsim.api_args import checked_arguments
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.limits import (
    MAX_FAILURES_PER_RUN,
    MAX_GOODPUT_RUNS,
    MAX_MC_STEPS,
    MAX_GPUS,
    MAX_RECOVERY_S,
    MAX_SEED,
    MAX_SPAN_S,
    MAX_TOKENS,
    MIN_CHECKPOINT_INTERVAL_S,
    check_int,
    check_number,
    plain_number,
    short,
)
from dpsim.plan.cost import parse_count
from dpsim.plan.layout_goodput import checkpoint_cost, state_bytes
from dpsim.plan.goodput import GoodputStats, IntervalStudy, elastic_choice, interval_study, simulate_goodput
from dpsim.plan.reliability import (
    DAY_S,
    DEFAULT_CHECKPOINT_BYTES_PER_S,
    DEFAULT_RESTART_S,
    POLICIES,
    CheckpointPolicy,
    ClusterShape,
    FailureRates,
    TrainingJob,
    model_optimum_s,
    parse_long_duration_s,
)
from dpsim.predict.config import SETTINGS, PredictConfig
from dpsim.predict.model_error import ModelErrorInterval
from dpsim.predict.resolve import resolve
from dpsim.predict.result import Prediction
from dpsim.predict.run import predict_resolved, resolve_topology
from dpsim.profile.once import reads_profiles_once
from dpsim.strategies.registry import zero_shard_group
from dpsim.units import parse_bandwidth_bytes_per_s, seconds_in_words
from dpsim.variability.run import VariabilityReport, predict_with_variability
from dpsim.variability.spec import DEFAULT_SAMPLES, NOISE_DISTRIBUTIONS, VariabilitySpec
from dpsim.wording import canonical_choice
from dpsim.workload.precision import get_precision

VARIABILITY_FLAGS = ("--noise-cv, --noise-dist, --straggler, --degrade, --hiccup-rate-per-s, --hiccup-s, "
                     "--mc-samples, --mc-steps")
"""predict's variability flags, which goodput takes too (:func:`goodput`'s ``variability``)."""
def _spec_flags(spec: Any, mc_steps: int | None) -> str:
    """The flags of what a variability spec sets away from its defaults (the API's spec named all eight flags,
    ``VariabilitySpec(noise_cv=0.05)`` included); all of them if it sets none."""
    fields = (("--noise-cv", "noise_cv", 0.0), ("--noise-dist", "noise_distribution", NOISE_DISTRIBUTIONS[0]),
              ("--straggler", "stragglers", ()), ("--degrade", "degradations", ()),
              ("--hiccup-rate-per-s", "hiccup_rate_per_s", 0.0), ("--hiccup-s", "hiccup_s", 0.0),
              ("--mc-samples", "samples", DEFAULT_SAMPLES))
    # noise_cv None: left out (a calibration profile's CV, else none), as 0.
    given = [flag for flag, name, default in fields if getattr(spec, name, default) not in (default, None)]
    given += ["--mc-steps"] if mc_steps is not None else []
    return ", ".join(given) or VARIABILITY_FLAGS


VARIABILITY_NEEDS_TOKENS = ("{flag}: stretches the time to train a token budget (each step waits for its "
                            "slowest rank); give --tokens, or leave it out (--duration is a time already)")
"""The one line that refuses a variability flag without ``--tokens`` (``{flag}``: the flag given)."""

DEFAULT_WORK_S = 30 * DAY_S
"""Failure-free training time when neither a token budget nor a duration is given."""
DEFAULT_CHECKPOINT_BANDWIDTH_BYTES_PER_S = DEFAULT_CHECKPOINT_BYTES_PER_S
"""Checkpoint write bandwidth of one node when neither it nor the write time is given
(:data:`~dpsim.plan.reliability.DEFAULT_CHECKPOINT_BYTES_PER_S`)."""


@frozen_dataclass
class GoodputReport:
    """``dpsim goodput``'s result (schema ``dpsim.goodput/1``)."""

    prediction: Prediction = field(repr=False)
    """The job's predicted step (throughput, memory, model error)."""
    n_gpus: int
    """GPUs of the job."""
    n_nodes: int
    """Nodes of the job."""
    topology: str
    """The topology's name."""
    tokens: float | None
    """Token budget, when the work is one (``None``: a duration)."""
    work_s: float
    """Failure-free training time, seconds."""
    mtbf_s: float
    """Mean time between failures of the whole job, seconds."""
    failure_rates_per_s: dict[str, float]
    """Failure rate of the job by component (gpu, node, link), per second."""
    checkpoint_bytes: float
    """Bytes a checkpoint writes (weights and optimizer state)."""
    job: TrainingJob
    """What was simulated: work, cluster, rates, policy and checkpoints."""
    seed: int
    """Seed of the failure draws."""
    result: GoodputStats
    """The job under its own policy."""
    interval_study: IntervalStudy
    """Goodput against the checkpoint interval (policy wait)."""
    elastic: dict[str, GoodputStats]
    """The job under each policy (wait, shrink)."""
    variability: VariabilityReport | None = None
    """What the step's variability did (``predict``'s report); ``None``: none asked for."""

    @property
    def work_model_error(self) -> ModelErrorInterval | None:
        """The model-error interval of the failure-free time to train (the step's, scaled to the work);
        the confidence intervals of :attr:`result` are the run-to-run variability of failures.

        ``None`` when the work was given as ``--duration``: that time is the user's, no prediction is in
        it, so the step's error does not apply (it printed "54.00 d (model error p10-p90 58.22 d ..
        67.77 d)" for ``--duration 54d``, an interval that did not contain the figure it qualified)."""
        p = self.prediction
        if self.tokens is None or not p.model_error:
            return None
        return p.model_error.scaled(self.work_s / p.step_time_s)

    @property
    def better(self) -> str:
        """The policy with the higher goodput."""
        return max(self.elastic.values(), key=lambda g: g.goodput).policy

    def to_dict(self) -> dict[str, Any]:
        """``dpsim goodput --json``."""
        p, c = self.prediction, self.job.checkpoint
        error = self.work_model_error
        return {
            "schema": "dpsim.goodput/1",
            "n_gpus": self.n_gpus, "n_nodes": self.n_nodes, "topology": self.topology, "model": p.model,
            "tokens_per_s": p.tokens_per_s, "samples_per_s": p.samples_per_s, "work_s": self.work_s,
            "tokens": self.tokens,
            "mtbf_s": self.mtbf_s, "failure_rates_per_s": self.failure_rates_per_s,
            "checkpoint_bytes": self.checkpoint_bytes, "checkpoint_interval_s": c.interval_s,
            "checkpoint_write_s": c.write_s, "restart_s": c.restart_s, "replace_s": self.job.replace_s,
            "seed": self.seed,
            "result": self.result.to_dict(),
            "work_model_error": error.to_dict() if error else None,
            "interval_study": self.interval_study.to_dict(),
            "elastic": {"wait": self.elastic["wait"].to_dict(), "shrink": self.elastic["shrink"].to_dict(),
                        "better": self.better},
            # Only when asked for: a job without variability keeps its document as it was.
            **({"variability": self.variability.to_dict()} if self.variability is not None else {}),
        }


_TEXT_FLAGS = {"duration_s": "--duration", "checkpoint_interval_s": "--checkpoint-interval",
               "checkpoint_write_s": "--checkpoint-write", "restart_s": "--restart", "replace_s": "--replace"}


def _parse_text(**values: Any) -> tuple:
    """:func:`goodput`'s numbers given as the command line's text, read by the command line's own parsers: the
    API refused ``tokens="1B"`` and ``duration_s="30d"`` while ``dpsim.sweep(tokens="1B")`` and every command's
    ``--tokens 1B``/``--duration 30d`` took them (one rule for a budget or a duration, text or number)."""
    out = []
    for name, value in values.items():
        if isinstance(value, str):
            if name == "tokens":
                value = parse_count(value, "--tokens")
            elif name == "checkpoint_bandwidth_bytes_per_s":
                value = parse_bandwidth_bytes_per_s(value, "--checkpoint-bandwidth")
            else:
                value = parse_long_duration_s(value, _TEXT_FLAGS[name])
        out.append(value)
    return tuple(out)


def _check_numbers(*, tokens: Any, duration_s: Any, rates: Any, checkpoint_interval_s: Any, checkpoint_write_s: Any,
                   checkpoint_bandwidth_bytes_per_s: Any, restart_s: Any, replace_s: Any) -> None:
    """The types of :func:`goodput`'s numbers, for callers from Python (the CLI parses them first):
    ``tokens=nan`` reached ``int(nan)``, ``tokens="1T"``, ``restart_s=None`` and ``rates=None`` were
    TypeErrors and AttributeErrors. Their ranges are checked where they are used, naming the flag."""
    def number(value: Any) -> bool:
        return not isinstance(value, bool) and isinstance(value, (int, float))

    if tokens is not None:  # at least one token, as the command line's parse_count takes a budget
        check_number(tokens, "--tokens", 1, MAX_TOKENS)
    for flag, value, optional in (("--duration", duration_s, True), ("--checkpoint-interval", checkpoint_interval_s, True),
                                  ("--checkpoint-write", checkpoint_write_s, True),
                                  ("--checkpoint-bandwidth", checkpoint_bandwidth_bytes_per_s, False),
                                  ("--restart", restart_s, False), ("--replace", replace_s, False)):
        if not (value is None and optional) and not (number(value) and not math.isnan(value)):
            unit = "bytes per second" if flag == "--checkpoint-bandwidth" else "seconds"
            raise ConfigError(f"{flag}: {short(value)} is not valid; expected a number of {unit}")
    if not isinstance(rates, FailureRates):
        raise ConfigError(f"--mtbf-gpu/--mtbf-node/--mtbf-link: {short(rates)} is not valid; expected a FailureRates "
                          f"(dpsim.plan.reliability)")


def _checkpoint_shard_group(config: PredictConfig, strategy: str, dp: int, gpus_per_node: int) -> int:
    """Data-parallel ranks the checkpointed optimizer state is sharded over: the strategy's group, or
    ``--zero-group`` (InternLM's zero1 and HSDP shard the state within groups of that many consecutive ranks
    and replicate it across them, so one group writes it all; dpsim/strategies/zero.py, sharded.py)."""
    group = config.value_of("zero_group")
    if group is not None and strategy == "fsdp-hybrid" and config.parallelism.layout_active:
        group *= config.parallelism.cp  # HSDP's shard group holds its data-parallel ranks' context-parallel ones
    return zero_shard_group(strategy, dp, gpus_per_node, group)


@reads_profiles_once
@checked_arguments("dpsim.goodput", config_settings=SETTINGS)
def goodput(config: PredictConfig, *, tokens: float | None = None, duration_s: float | None = None,
            rates: FailureRates = FailureRates(), checkpoint_interval_s: float | None = None,
            checkpoint_write_s: float | None = None,
            checkpoint_bandwidth_bytes_per_s: float = DEFAULT_CHECKPOINT_BANDWIDTH_BYTES_PER_S,
            restart_s: float = DEFAULT_RESTART_S, replace_s: float = 0.0, policy: str = "wait",
            min_nodes: int = 1, runs: int = 100, seed: int = 0, variability: VariabilitySpec | None = None,
            mc_steps: int | None = None) -> GoodputReport:
    """Simulate ``config``'s training through failures.

    The work is ``tokens`` at the predicted tokens/s, or ``duration_s`` of failure-free training
    (default :data:`DEFAULT_WORK_S`). A checkpoint writes the weights and optimizer state at
    ``checkpoint_bandwidth_bytes_per_s`` per node as :func:`~dpsim.plan.layout_goodput.checkpoint_cost`
    lays it out (one replica writes replicated state, every rank its shard of sharded state) unless
    ``checkpoint_write_s`` is given, every ``checkpoint_interval_s`` (default: the interval that
    maximises expected goodput). After a failure the job restarts in ``restart_s`` plus the
    checkpoint's read (as long as its write); a failed node is replaced after ``replace_s``, and
    ``policy`` ``wait`` waits for it while ``shrink`` continues on fewer nodes (down to
    ``min_nodes``). ``runs`` Monte-Carlo runs from ``seed``.

    Each budget and duration takes the command line's text as well as a number: ``tokens="1B"`` (its
    ``--tokens``, :func:`~dpsim.plan.cost.parse_count`), ``duration_s="30d"``, ``checkpoint_interval_s="1h"``,
    ``checkpoint_write_s``, ``restart_s``, ``replace_s`` (``--duration`` and the rest,
    :func:`~dpsim.plan.reliability.parse_long_duration_s`: text carries its unit) and
    ``checkpoint_bandwidth_bytes_per_s="2GB/s"``; a number is tokens, seconds or bytes/s.

    ``variability`` (``predict``'s noise, stragglers, degraded links, hiccups, MoE routing load; ``mc_steps``
    its steps per sample): the token budget is trained at the mean step the variability engine draws
    (:func:`~dpsim.variability.run.predict_with_variability`, ``predict``'s own), so the failure-free time
    grows by mean step / its plain step (degraded links: by the degraded step). It needs ``tokens``: a
    ``duration_s`` is a time already, which no step variability changes. ``None`` (the default): the
    plain step, as before.
    """
    if tokens is not None and duration_s is not None:
        raise ConfigError("--tokens and --duration: give one amount of work, not both")
    tokens, duration_s, checkpoint_interval_s, checkpoint_write_s, checkpoint_bandwidth_bytes_per_s, restart_s, \
        replace_s = _parse_text(tokens=tokens, duration_s=duration_s, checkpoint_interval_s=checkpoint_interval_s,
                                checkpoint_write_s=checkpoint_write_s,
                                checkpoint_bandwidth_bytes_per_s=checkpoint_bandwidth_bytes_per_s,
                                restart_s=restart_s, replace_s=replace_s)
    tokens, duration_s, checkpoint_interval_s, checkpoint_write_s, checkpoint_bandwidth_bytes_per_s, restart_s, \
        replace_s = (plain_number(v, float) for v in (tokens, duration_s, checkpoint_interval_s, checkpoint_write_s,
                                                      checkpoint_bandwidth_bytes_per_s, restart_s, replace_s))
    _check_numbers(tokens=tokens, duration_s=duration_s, rates=rates, checkpoint_interval_s=checkpoint_interval_s,
                   checkpoint_write_s=checkpoint_write_s, checkpoint_bandwidth_bytes_per_s=checkpoint_bandwidth_bytes_per_s,
                   restart_s=restart_s, replace_s=replace_s)
    policy = canonical_choice(policy, POLICIES)
    if policy not in POLICIES:
        raise ConfigError(f"--elastic: {policy!r} is not valid; choose one of {', '.join(POLICIES)}")
    # Taken as Python's numbers (numpy's scalars from np.arange or a DataFrame were refused "np.int64(3) is not
    # valid"), as PredictConfig takes them.
    runs = check_int(runs, "--runs", 1, MAX_GOODPUT_RUNS)
    seed = check_int(seed, "--seed", 0, MAX_SEED)
    min_nodes = check_int(min_nodes, "--min-nodes", 1, MAX_GPUS)
    if min_nodes != 1 and policy != "shrink":
        # The floor of a shrinking job: under wait every failure waits for its replacement, and --min-nodes 4 was
        # taken and dropped in silence (the same numbers as without it).
        raise ConfigError(f"--min-nodes: {min_nodes} is the node count below which a shrinking job waits, and "
                          f"--elastic is {policy} (every failure waits for its replacement); add --elastic shrink "
                          f"or leave --min-nodes out")
    if checkpoint_interval_s is not None and not checkpoint_interval_s <= MAX_SPAN_S:
        raise ConfigError(f"--checkpoint-interval: {checkpoint_interval_s:g} s is not valid; expected at most "
                          f"{MAX_SPAN_S:g} s (a century)")
    if mc_steps is not None:  # its own range before the rules between arguments, as the command line
        mc_steps = check_int(mc_steps, "--mc-steps", 1, MAX_MC_STEPS)
    if variability is not None and tokens is None:
        raise ConfigError(VARIABILITY_NEEDS_TOKENS.format(flag=_spec_flags(variability, mc_steps)))
    if variability is None and mc_steps is not None:
        # As the command line refuses --mc-steps without a variability flag: goodput(mc_steps=5) with no
        # variability= spec sampled nothing and dropped it in silence.
        raise ConfigError(f"--mc-steps: {short(mc_steps)} only applies with variability (the variability= spec: "
                          f"noise, stragglers, hiccups or MoE routing load); give one, or leave mc_steps out")
    resolved = resolve(config)
    topology = resolve_topology(resolved.config)
    variable = None
    if variability is None:
        p = predict_resolved(resolved)
    else:
        p, variable = predict_with_variability(config, variability, steps=mc_steps)
    if tokens is not None:
        if p.tokens_per_s is None:
            raise ConfigError(f"--tokens: {p.model} is not a token model; give --duration instead")
        work_s = tokens / p.tokens_per_s
        if variable is not None and variable.statistics is not None:
            # Each step waits for its slowest rank: the budget's steps at the engine's mean step.
            work_s *= variable.statistics.mean_s / p.step_time_s
    else:
        work_s = DEFAULT_WORK_S if duration_s is None else duration_s
        if not (0 < work_s <= MAX_SPAN_S):  # 1e30d printed 31-digit days in every table
            raise ConfigError(f"--duration: {work_s:g} s is not valid; expected a duration > 0 and <= "
                              f"{MAX_SPAN_S:g} s (a century), e.g. 30d")
    # p.layout is the layout's report; its .layout holds the sizes (reading tp off the report was an
    # AttributeError traceback for every goodput with --tp or --pp). The data-parallel ranks include the
    # context-parallel ones, which hold the same state (as the planner's dp x cp).
    tp, pp = (p.layout.layout.tp, p.layout.layout.pp) if p.layout is not None else (1, 1)
    dp = topology.n_gpus // (tp * pp)
    ck = checkpoint_cost(
        state_bytes=state_bytes(p.param_count, get_precision(resolved.config.execution.precision),
                                resolved.config.workload.optimizer),
        gpus_per_node=topology.gpus_per_node, tp=tp, pp=pp, dp=dp,
        shard_group=_checkpoint_shard_group(resolved.config, p.strategy, dp, topology.gpus_per_node),
        node_bandwidth_bytes_per_s=checkpoint_bandwidth_bytes_per_s)
    checkpoint_bytes = ck.state_bytes
    if checkpoint_write_s is None:
        checkpoint_write_s = ck.write_s
        if not checkpoint_write_s <= MAX_RECOVERY_S:
            # The restart below adds the write (its read back), and would be blamed for a bandwidth given here.
            raise ConfigError(f"--checkpoint-bandwidth: {checkpoint_bandwidth_bytes_per_s:g} B/s is not valid; writing "
                              f"the busiest node's {ck.node_bytes:.3g} bytes of checkpoint would take "
                              f"{seconds_in_words(checkpoint_write_s)}, over {MAX_RECOVERY_S:g} s (a year); give a larger "
                              f"bandwidth")
    elif not 0 <= checkpoint_write_s <= MAX_RECOVERY_S:
        # Checked here, not only in CheckpointPolicy: the restart below adds it, and would be blamed for it.
        raise ConfigError(f"--checkpoint-write: {checkpoint_write_s!r} s is not valid; expected a duration >= 0 and "
                          f"<= {MAX_RECOVERY_S:g} s (a year)")
    if not 0 <= restart_s <= MAX_RECOVERY_S:
        # Checked as given: past the sum below, --restart 1e9h was refused as "3600000000000.1494 s", the
        # checkpoint's read back added to what the user wrote.
        raise ConfigError(f"--restart: {restart_s:g} s is not valid; expected a duration >= 0 and <= "
                          f"{MAX_RECOVERY_S:g} s (a year)")
    # A restart reads the checkpoint back, as long as writing it (the same bytes per node).
    restart_s = restart_s + checkpoint_write_s
    cluster = ClusterShape.from_topology(topology)
    if cluster.links_per_node == 0 and math.isfinite(rates.link_mtbf_s):
        # A job on one server has no inter-node link to fail: --mtbf-link 1min was taken and dropped in silence
        # (the link's failure rate 0, the same numbers as without it), as --min-nodes was without shrink.
        raise ConfigError(f"--mtbf-link: {rates.link_mtbf_s:g} s is the MTBF of an inter-node link (NIC, cable, "
                          f"switch port), and this job's {cluster.gpus_per_node * cluster.n_nodes} GPUs sit on one "
                          f"node with none; leave --mtbf-link out (or give more --gpus than a node holds)")
    mtbf = cluster.mtbf_s(rates)
    if checkpoint_interval_s is None:
        # As layout_goodput skips it: a job failing past MAX_FAILURES_PER_RUN times in its work alone is refused
        # by the simulation below, and the search overflowed on it (--mtbf-gpu 1e-308s: an infinite count of
        # intervals).
        hopeless = not work_s / mtbf <= MAX_FAILURES_PER_RUN
        interval_s = work_s if hopeless else model_optimum_s(work_s, checkpoint_write_s, restart_s, mtbf, replace_s)
        if not math.isfinite(interval_s) or interval_s <= 0:
            interval_s = work_s
        # A near-free write puts the optimum under a second; the user gave no interval to blame for it.
        interval_s = max(interval_s, MIN_CHECKPOINT_INTERVAL_S)
    else:
        # The user's own interval goes to CheckpointPolicy's check as given (0 or inf used to become "never").
        interval_s = checkpoint_interval_s
    # A failed node stops its whole model replica under shrink: the tensor x pipeline x context x
    # expert-parallel ranks of one replica hold different shards (experts are sharded over ep data-
    # parallel ranks), on as many whole nodes as they fill.
    par = resolved.config.parallelism
    replica_gpus = tp * pp * par.cp * par.ep
    replica_nodes = min(topology.n_nodes, -(-replica_gpus // topology.gpus_per_node))
    job = TrainingJob(work_s=work_s, cluster=cluster, rates=rates, policy=policy, replace_s=replace_s,
                      min_nodes=min_nodes, replica_nodes=replica_nodes,
                      checkpoint=CheckpointPolicy(interval_s=interval_s, write_s=checkpoint_write_s,
                                                  restart_s=restart_s))
    return GoodputReport(
        prediction=p, n_gpus=topology.n_gpus, n_nodes=topology.n_nodes, topology=topology.spec.name,
        tokens=float(tokens) if tokens is not None else None, work_s=work_s, mtbf_s=mtbf,
        failure_rates_per_s=cluster.rates_per_s(rates), checkpoint_bytes=checkpoint_bytes, job=job, seed=seed,
        variability=variable, result=simulate_goodput(job, runs=runs, seed=seed),
        interval_study=interval_study(replace(job, policy="wait"), runs=runs, seed=seed),
        elastic=elastic_choice(job, runs=runs, seed=seed))
