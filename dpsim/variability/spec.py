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
(:func:`degradation_scale`, used by :class:`~dpsim.collectives.nccl.NcclCollectives`),
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
from typing import Sequence

import numpy as np

from dpsim.api_args import checked_constructor
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.limits import (
    MAX_HICCUP_FRACTION,
    MAX_HICCUP_RATE_PER_S,
    MAX_HICCUP_S,
    MAX_MC_RANK_STEPS,
    MAX_MC_SAMPLE_STEPS,
    MAX_MC_SAMPLES,
    MAX_MC_STEPS,
    MAX_SEED,
    MAX_STRAGGLER_FACTOR,
    MAX_TEXT_CHARS,
    MIN_STRAGGLER_FACTOR,
    check_int,
    check_number,
    is_finite,
    plain_number,
    short,
)
from dpsim.network.degrade import LinkDegradation, check_degradations, check_parsed_items
from dpsim.stats import DEFAULT_CONFIDENCE
from dpsim.units import NUMBER_PATTERN as _FACTOR
from dpsim.wording import canonical_choice, index_range, there_are

NOISE_DISTRIBUTIONS = ("normal", "lognormal")
"""Per-rank compute-noise distributions (both with mean 1 and the given CV)."""

MIN_COMPUTE_FACTOR = 0.01
"""Normal noise is clipped below at this factor (a rank never computes 100x faster);
with a CV under 0.3 the clip is hit with probability < 1e-3."""

DEFAULT_SAMPLES = 10
"""Monte-Carlo samples (independent seeds) of a stochastic prediction."""

DEFAULT_STOCHASTIC_STEPS = 50
"""Steps per sample when variability is on and ``--steps`` is not given."""

MAX_NOISE_CV = 1.0


# ----------------------------------------------------------------------------- inputs

@frozen_dataclass
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


@checked_constructor("dpsim.VariabilitySpec")
@frozen_dataclass
class VariabilitySpec:
    """Everything that makes ranks differ from one another, or steps from one another."""

    noise_cv: float | None = None
    """Coefficient of variation of each rank's per-step compute time (0.05 = 5 %);
    i.i.d. over ranks and steps. 0: no noise. ``None``: the step-time spread the calibration
    profile recorded, else 0 (:func:`dpsim.variability.run.predict_with_variability` reads it);
    no noise wherever no profile is in play."""
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
        # numpy's scalars as Python's numbers, as PredictConfig takes them (samples=np.int64(3) was refused).
        for name, kind in (("noise_cv", float), ("hiccup_rate_per_s", float), ("hiccup_s", float), ("seed", int),
                           ("samples", int), ("confidence", float)):
            object.__setattr__(self, name, plain_number(getattr(self, name), kind))
        # In any letter case, as every choice flag takes it (--noise-dist LogNormal was refused).
        object.__setattr__(self, "noise_distribution", canonical_choice(self.noise_distribution, NOISE_DISTRIBUTIONS))
        if self.noise_cv is not None and not (is_finite(self.noise_cv) and 0 <= self.noise_cv <= MAX_NOISE_CV):
            raise ConfigError(f"--noise-cv: {short(self.noise_cv)} is not valid; expected a number >= 0 and "
                              f"<= {MAX_NOISE_CV:g}")
        if self.noise_distribution not in NOISE_DISTRIBUTIONS:
            raise ConfigError(f"--noise-dist: {short(self.noise_distribution)} is not valid; "
                              f"choose one of {', '.join(NOISE_DISTRIBUTIONS)}")
        check_number(self.hiccup_rate_per_s, "--hiccup-rate-per-s", 0, MAX_HICCUP_RATE_PER_S)
        check_number(self.hiccup_s, "--hiccup-s", 0, MAX_HICCUP_S)
        if (self.hiccup_rate_per_s > 0) != (self.hiccup_s > 0):
            raise ConfigError(
                f"--hiccup-rate-per-s / --hiccup-s: {self.hiccup_rate_per_s:g} / {self.hiccup_s:g} is not valid; "
                "give both a rate > 0 and a duration > 0 (or neither)")
        if self.hiccup_rate_per_s * self.hiccup_s > MAX_HICCUP_FRACTION:
            raise ConfigError(
                f"--hiccup-rate-per-s x --hiccup-s: {self.hiccup_rate_per_s:g} x {self.hiccup_s:g} s = "
                f"{self.hiccup_rate_per_s * self.hiccup_s:g} s of stalls per second of work is not valid; "
                f"expected at most {MAX_HICCUP_FRACTION:g}")
        check_int(self.seed, "--seed", 0, MAX_SEED)
        check_int(self.samples, "--mc-samples", 1, MAX_MC_SAMPLES)
        if not (is_finite(self.confidence) and 0 < self.confidence < 1):
            raise ConfigError(f"confidence: {short(self.confidence)} is not valid; expected a number in (0, 1)")
        check_parsed_items(self.stragglers, "--straggler", Straggler, "parse_straggler('gpu0:2x')")
        check_degradations(self.degradations)
        # The table and the JSON print it as the noise's origin: noise_source=5 was taken and printed "from 5".
        if self.noise_source is not None and not (isinstance(self.noise_source, str) and self.noise_source.strip()
                                                  and len(self.noise_source) <= MAX_TEXT_CHARS):
            raise ConfigError(f"noise_source: {short(self.noise_source)} is not valid; expected None (noise_cv given) "
                              f"or a non-empty text of at most {MAX_TEXT_CHARS:,} characters naming where noise_cv "
                              f"came from (e.g. \"calibration profile 'a100' step_time_cv\")")

    @property
    def per_rank(self) -> bool:
        """True when ranks differ (noise, stragglers or hiccups): the per-rank path is needed."""
        return bool(self.noise_cv) or bool(self.stragglers) or self.hiccup_rate_per_s > 0

    @property
    def random(self) -> bool:
        """True when factors are drawn at random (noise or hiccups), not just fixed."""
        return bool(self.noise_cv) or self.hiccup_rate_per_s > 0

    @property
    def active(self) -> bool:
        """True when anything differs from a homogeneous, healthy cluster."""
        return self.per_rank or bool(self.degradations)




def parse_straggler(raw: str) -> Straggler:
    """Parse ``node3:1.3x``, ``gpu12:2x`` (``rank12`` is the same as ``gpu12``)."""
    m = re.fullmatch(r"\s*(node|gpu|rank)(\d{1,9})\s*:\s*" + _FACTOR + r"\s*x?\s*", str(raw)[:MAX_TEXT_CHARS])
    if not m or not MIN_STRAGGLER_FACTOR <= float(m.group(3)) <= MAX_STRAGGLER_FACTOR:
        raise ConfigError(
            f"--straggler: {short(raw)} is not valid; expected node<K>:<factor>x or gpu<K>:<factor>x "
            f"with a factor >= {MIN_STRAGGLER_FACTOR:g} and <= {MAX_STRAGGLER_FACTOR:g}, e.g. node3:1.3x")
    target = "node" if m.group(1) == "node" else "gpu"
    return Straggler(target=target, index=int(m.group(2)), factor=float(m.group(3)))


def rank_factors(stragglers: Sequence[Straggler], n_ranks: int, gpus_per_node: int) -> np.ndarray:
    """Persistent compute factor of every rank (rank r lives on node r // gpus_per_node)."""
    factors = np.ones(n_ranks)
    n_nodes = math.ceil(n_ranks / gpus_per_node)
    for s in stragglers:
        if s.target == "node":
            if s.index >= n_nodes:
                raise ConfigError(f"--straggler: {s.label!r} names node {s.index}, but "
                                  f"{there_are(n_nodes, 'node')} ({index_range('node', n_nodes)})")
            factors[s.index * gpus_per_node:(s.index + 1) * gpus_per_node] *= s.factor
        else:
            if s.index >= n_ranks:
                raise ConfigError(f"--straggler: {s.label!r} names GPU {s.index}, but "
                                  f"{there_are(n_ranks, 'GPU')} ({index_range('gpu', n_ranks)})")
            factors[s.index] *= s.factor
    extreme = float(factors.max()) if factors.max() > 1 / factors.min() else float(factors.min())
    if not MIN_STRAGGLER_FACTOR <= extreme <= MAX_STRAGGLER_FACTOR:
        rank = int(np.argmax(factors == extreme))
        raise ConfigError(f"--straggler: the factors on gpu{rank} multiply to {extreme:.3g}x; expected at least "
                          f"{MIN_STRAGGLER_FACTOR:g}x and at most {MAX_STRAGGLER_FACTOR:g}x per GPU")
    return factors


def check_monte_carlo_size(n_ranks: int, samples: int, steps: int) -> None:
    """Refuse a Monte-Carlo run larger than :mod:`dpsim.limits` allows (time and memory grow with the product)."""
    check_int(steps, "--mc-steps", 1, MAX_MC_STEPS)
    if samples * steps > MAX_MC_SAMPLE_STEPS:
        raise ConfigError(f"--mc-samples x --mc-steps: {samples:,} x {steps:,} = {samples * steps:,} is not valid; "
                          f"expected at most {MAX_MC_SAMPLE_STEPS:,}")
    if n_ranks * samples * steps > MAX_MC_RANK_STEPS:
        raise ConfigError(f"--mc-samples x --mc-steps: {samples:,} x {steps:,} on {n_ranks:,} GPUs is "
                          f"{n_ranks * samples * steps:.3g} rank-steps; expected at most {MAX_MC_RANK_STEPS:.3g} "
                          f"(lower --mc-samples or --mc-steps)")
