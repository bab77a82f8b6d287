"""``predict`` with variability: degraded links in the collective model, plus Monte-Carlo step statistics.
"""

from __future__ import annotations

from dataclasses import replace

from dpsim.api_args import checked_arguments
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_MC_STEPS, check_int, short
from dpsim.predict.config import SETTINGS
from dpsim.predict.resolve import resolve
from dpsim.predict.extrapolate import full_simulation
from dpsim.predict.run import predict_resolved, refuse_past_full_path, resolve_topology
from dpsim.profile.calibrated import calibrated_noise_cv
from dpsim.profile.schema import Profile
from dpsim.variability.layout import LayoutSync, fill_weight, layout_step_intervals, sync_of
from dpsim.variability.monte_carlo import StepStatistics, monte_carlo, summarise
from dpsim.variability.spec import (DEFAULT_SAMPLES, DEFAULT_STOCHASTIC_STEPS, MAX_NOISE_CV, NOISE_DISTRIBUTIONS,
                                   VariabilitySpec, check_monte_carlo_size, rank_factors)
from dpsim.workload.routing import parse_routing

# ----------------------------------------------------------------------------- with predict

@frozen_dataclass
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


@frozen_dataclass
class VariabilityReport:
    """What variability does to a prediction."""

    spec: VariabilitySpec
    """What was asked."""
    degradation: DegradationEffect | None
    """Healthy against degraded step (``None`` without degraded links)."""
    statistics: StepStatistics | None
    """Monte-Carlo step statistics (``None`` when ranks do not differ)."""
    layout: LayoutSync | None = None
    """A tensor/pipeline/expert layout's step statistics come from the closed form of
    :mod:`dpsim.variability.layout`, with these sync blocks (``None``: the data-parallel replay)."""

    @property
    def routing_only(self) -> bool:
        """Only MoE routing's per-dispatch load varies the steps (no per-rank factor was asked for)."""
        return self.layout is not None and self.layout.routing is not None and not self.spec.per_rank

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
            **({"method": "layout-closed-form", "layout": self.layout.to_dict(), "routing_only": self.routing_only}
               if self.layout is not None else {}),
        }


def profile_noise_cv(profile: Profile | None) -> tuple[float, str | None]:
    """``--noise-cv`` left out: (the profile's measured step-time CV, capped at the largest
    allowed, and where it came from), else ``(0.0, None)``."""
    measured = calibrated_noise_cv(profile) if profile is not None else None
    if not measured:
        return 0.0, None
    capped = " (capped)" if measured > MAX_NOISE_CV else ""
    return min(measured, MAX_NOISE_CV), f"calibration profile {profile.name!r} step_time_cv{capped}"


@checked_arguments("dpsim.predict_with_variability", config_settings=SETTINGS)
def predict_with_variability(config, spec: VariabilitySpec, *, steps: int | None = None):
    """(prediction, report): ``predict(config)`` with degraded links, plus step statistics.

    The prediction itself is the noise-free, straggler-free step, degraded links included:
    the same collective model as a healthy ``predict`` (NCCL's choice with the config's
    ``--algo/--proto/--jobs/--placement``, :func:`dpsim.predict.build_collectives`) with
    those links' capacities scaled, on the engine's homogeneous fast path. The report
    compares it with the healthy step and replays the same step program with per-rank
    factors over ``steps`` steps (default :data:`DEFAULT_STOCHASTIC_STEPS`) and
    ``spec.samples`` seeds.

    The config is resolved against its calibration profile, read once
    (:mod:`dpsim.predict.resolve`), and a ``spec.noise_cv`` left at ``None`` becomes the
    profile's measured step-time spread. When nothing then varies, the report is ``None`` and
    the prediction is :func:`~dpsim.predict.run.predict`'s (``dpsim predict`` runs this); when
    nothing spreads the steps (no per-rank factor, no MoE routing load), a ``seed``, ``samples``,
    ``noise_distribution`` or ``steps`` away from its default is refused, never dropped.
    """
    resolved = resolve(config)
    config = resolved.config
    if not isinstance(spec, VariabilitySpec):
        # A dict or None reached spec.noise_cv: an AttributeError traceback.
        raise ConfigError(f"spec: {short(spec)} is not valid; expected a dpsim.VariabilitySpec (e.g. "
                          f"VariabilitySpec(noise_cv=0.05))")
    if spec.noise_cv is None:
        noise_cv, source = profile_noise_cv(resolved.profile)
        spec = replace(spec, noise_cv=noise_cv, noise_source=source)
    if steps is not None:
        steps = check_int(steps, "--mc-steps", 1, MAX_MC_STEPS)
    routing = _routing_varies(config) if config.parallelism.layout_active and config.parallelism.ep > 1 else None
    if not spec.per_rank and routing is None:
        _refuse_sampling_flags(spec, steps)
    if spec.per_rank:
        steps = DEFAULT_STOCHASTIC_STEPS if steps is None else steps
        check_monte_carlo_size(config.cluster.gpus, spec.samples, steps)
    if spec.per_rank or routing is not None:
        # Random draws per rank, step and dispatch: the steady state does not repeat, so the step is simulated
        # micro-batch by micro-batch (dpsim.predict.extrapolate) within the full path's limit.
        refuse_past_full_path(config, "--noise-cv, --straggler, --hiccup-rate-per-s or a varying --moe-routing "
                                      "draws per rank and step (its steady state does not repeat)")
        with full_simulation():
            return _predict_with_variability(resolved, spec, steps, routing)
    return _predict_with_variability(resolved, spec, steps, routing)


def _predict_with_variability(resolved, spec: VariabilitySpec, steps: int | None, routing: str | None):
    """:func:`predict_with_variability` once its arguments are checked."""
    config = resolved.config
    if config.parallelism.layout_active:
        return _layout_with_variability(resolved, spec, steps, routing)
    if not spec.active:
        return predict_resolved(resolved), None  # a homogeneous, healthy cluster: the engine's one-rank fast path
    prediction = predict_resolved(resolved, degradations=spec.degradations)
    effect = _degradation_effect(resolved, prediction) if spec.degradations else None
    stats = None
    if spec.per_rank:
        topology = resolve_topology(config)
        stats = monte_carlo(
            prediction.program, prediction.collectives, spec, n_ranks=topology.n_gpus,
            gpus_per_node=topology.gpus_per_node, steps=steps, overlap_slowdown=config.calibration.overlap_slowdown,
            nominal_step_s=prediction.step_time_s, global_batch=config.workload.micro_batch * config.workload.grad_accum
            * topology.n_gpus,
            step_extra_s=prediction.provenance.after_comm.charged_s if prediction.provenance.after_comm else 0.0,
        )
    return prediction, VariabilityReport(spec=spec, degradation=effect, statistics=stats)


SAMPLING_FLAGS_NEED = ("--noise-cv, --straggler, --hiccup-rate-per-s, a --calibration profile with a "
                       "step_time_cv, or a non-balanced --moe-routing (with --ep above 1)")
"""What turns the step statistics on: the flags a refused sampling flag names."""


def _refuse_sampling_flags(spec: VariabilitySpec, steps: int | None) -> None:
    """Nothing varies (no per-rank factor, no routing load): the sampling flags would change
    nothing, so one given away from its default is an error, not silently dropped."""
    given = (("--noise-dist", spec.noise_distribution, spec.noise_distribution != NOISE_DISTRIBUTIONS[0]),
             ("--seed", spec.seed, spec.seed != 0),
             ("--mc-samples", spec.samples, spec.samples != DEFAULT_SAMPLES),
             ("--mc-steps", steps, steps is not None))
    for flag, value, set_ in given:
        if set_:
            raise ConfigError(f"{flag}: {short(value)} only applies with variability, and nothing here spreads the "
                              f"step times (--degrade alone does not); turn it on with {SAMPLING_FLAGS_NEED}, "
                              f"or leave {flag} out")


def _degradation_effect(resolved, prediction) -> DegradationEffect:
    """The degraded ``prediction`` against the same config's healthy one."""
    healthy = predict_resolved(resolved)
    links = prediction.links
    return DegradationEffect(
        healthy_step_s=healthy.step_time_s, step_s=prediction.step_time_s,
        healthy_comm_s=healthy.comm_s, comm_s=prediction.comm_s,
        bottleneck_class=links.bottleneck_class if links is not None else None,
        bottleneck_links=tuple(f"{u.link[0]} -> {u.link[1]}" for u in links.bottleneck) if links else (),
        bottleneck_count=links.bottleneck_count if links is not None else 0)


def _routing_varies(config) -> str | None:
    """``--moe-routing`` when it is not uniform (its per-dispatch load is then shown), else ``None``."""
    text = config.parallelism.moe_routing
    return None if parse_routing(text).uniform else text


def _layout_with_variability(resolved, spec: VariabilitySpec, steps: int | None, routing: str | None):
    """:func:`predict_with_variability` of a tensor/pipeline/context/expert layout: the step played
    once on the pipeline engine, its per-step distribution from :mod:`dpsim.variability.layout`
    (per-rank factors and, for a mixture of experts, each dispatch's routing load; ``routing``:
    :func:`_routing_varies`, already read)."""
    config = resolved.config
    par = config.parallelism
    degradations = spec.degradations
    if not spec.active and routing is None:
        return predict_resolved(resolved), None
    # Degraded links scale the capacities the layout's communicators are costed on
    # (dpsim.network.degrade.communicator_degradations); the per-step spread is drawn on that step.
    prediction = predict_resolved(resolved, degradations=degradations)
    effect = _degradation_effect(resolved, prediction) if degradations else None
    if not spec.per_rank and routing is None:
        return prediction, VariabilityReport(spec=spec, degradation=effect, statistics=None)
    report = prediction.layout
    load = report.expert_load
    if load is not None and par.ep > 1 and routing is None:
        routing = par.moe_routing  # balanced routing's per-dispatch sampling spread, with the noise
    steps = DEFAULT_STOCHASTIC_STEPS if steps is None else steps  # the per-rank draws' size was checked above
    topology = resolve_topology(config)
    lay = report.layout
    # A stage's micro-batch (all its chunks) runs once per micro-batch, but DualPipe feeds half of
    # them from each end, each through one of a stage's two chunks.
    passes = lay.micro_batches // 2 if lay.schedule == "dualpipe" else lay.micro_batches
    sync = sync_of(tp=lay.tp, cp=lay.cp, dp=lay.dp, pp=lay.pp, ep=lay.ep, etp=lay.etp, micro_batches=passes,
                   parts=report.stage_parts, routing=routing,
                   fill=fill_weight(report.ideal_bubble_fraction, stages=lay.pp, micro_batches=passes))
    persistent = rank_factors(spec.stragglers, topology.n_gpus, topology.gpus_per_node)
    intervals = layout_step_intervals(spec, report.stage_parts, sync, persistent=persistent,
                                      nominal_step_s=prediction.step_time_s, steps=steps,
                                      step_factors=load.step_factors if routing is not None else None)
    stats = summarise(intervals, global_batch=lay.global_batch, nominal_step_s=prediction.step_time_s,
                      confidence=spec.confidence, n_ranks=topology.n_gpus, ranks_simulated=topology.n_gpus,
                      max_front=0, seed=spec.seed)
    effect = _degradation_effect(resolved, prediction) if degradations else None
    return prediction, VariabilityReport(spec=spec, degradation=effect, statistics=stats, layout=sync)
