"""Monte-Carlo step statistics: per-rank compute factors drawn per step, replayed exactly.

A collective completes only when its slowest participant has joined it, so with
per-rank compute noise the step is paced by the *maximum* of N draws and the expected
step time grows with N even at fixed per-rank noise. Factors (noise, persistent
stragglers, transient hiccups) are drawn here and played through the engine's step
semantics by :func:`dpsim.engine.replay.simulate_ranks`; many steps and seeds are
summarised (mean, p50, p90, p99 step time, a confidence interval on throughput).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from dpsim.collectives.ops import CollectiveModel
from dpsim.engine.program import StepProgram
from dpsim.engine.replay import simulate_ranks
from dpsim.frozen import frozen_dataclass
from dpsim.stats import mean_confidence_interval
from dpsim.variability.spec import MIN_COMPUTE_FACTOR, VariabilitySpec, rank_factors

# ----------------------------------------------------------------------------- drawing factors

def _noise(rng: np.random.Generator, spec: VariabilitySpec, n: int) -> np.ndarray:
    if not spec.noise_cv:
        return np.ones(n)
    z = rng.standard_normal(n)
    if spec.noise_distribution == "lognormal":
        sigma2 = math.log1p(spec.noise_cv ** 2)
        # exp by the C library, rank by rank: numpy's exp is a SIMD kernel chosen by the CPU (AVX-512F has its
        # own), whose last digit differs between hosts, and the step statistics are printed (and golden-tested)
        # in full. One row is the job's distinct ranks, so this is no large array.
        return np.array([math.exp(x) for x in (math.sqrt(sigma2) * z - sigma2 / 2).tolist()])
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


@frozen_dataclass
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
    step_extra_s: float = 0.0,
) -> StepStatistics:
    """Step-time statistics of ``program`` on ``n_ranks`` ranks under ``spec``.

    Without random components (stragglers only) one sample is played with identical
    ranks collapsed; otherwise ``spec.samples`` samples of ``steps`` steps, batched so
    that one batch holds at most ``max_batch_elements`` rank-samples. ``step_extra_s`` is added
    to every step, as the prediction adds it (a calibrated step's extra time after waiting on
    the network: :class:`dpsim.predict.provenance.AfterComm`).
    """
    persistent = rank_factors(spec.stragglers, n_ranks, gpus_per_node)
    compute_s = sum(t.duration_s for t in program.tasks)
    if not spec.random:
        groups, inverse = np.unique(persistent, return_inverse=True)
        run = simulate_ranks(program, collectives, np.broadcast_to(groups, (steps, len(groups))),
                             overlap_slowdown=overlap_slowdown)
        return summarise(run.step_interval_s + step_extra_s, global_batch=global_batch, nominal_step_s=nominal_step_s,
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
    return summarise(np.concatenate(intervals) + step_extra_s, global_batch=global_batch, nominal_step_s=nominal_step_s,
                     confidence=spec.confidence, n_ranks=n_ranks, ranks_simulated=n_ranks,
                     max_front=max_front, seed=spec.seed)
