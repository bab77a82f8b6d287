"""Per-step variability of tensor, pipeline, context and expert layouts: a closed form over per-rank draws.

The data-parallel path replays its step program rank by rank
(:mod:`dpsim.variability.monte_carlo`); a layout's step is played once, on the pipeline engine,
for identical ranks. Its variability is modelled here from the mechanism that makes a slow rank
cost time, with the per-rank factors drawn by the same sampler
(:func:`~dpsim.variability.monte_carlo.factor_sampler`: noise, stragglers, hiccups; one factor per
rank and step, as the replay draws them).

**Who waits for whom (the sync granularity).** Ranks are ordered as Megatron-LM orders them:
tensor fastest, then context, then data, then pipeline stage
(:mod:`dpsim.plan.layout_goodput` places checkpoints on the same order). Within a stage, every
layer ends in a collective over its ``tp x cp`` ranks (the tensor-parallel all-reduce or
all-gather, the context-parallel ring) and, in an MoE layer, the dispatch and combine all-to-alls
over ``etp x ep`` ranks carved out of the stage's ranks in the same order. A collective per layer
is far finer than a per-step factor, so each micro-batch of a stage runs at the pace of the
slowest rank of the smallest block of consecutive ranks those collectives close over:
``lcm(tp x cp, etp x ep)`` ranks (``tp x cp`` for a dense model). A factor is drawn per rank and
step and held for the step, so the same rank is the slowest in every layer: taking the maximum
once per block and step is exact for that draw, whatever the per-layer granularity. A
data-parallel replica's micro-batches then flow through the stages; with stage ``s``'s
micro-batch taking ``W_s``, a step of ``m`` micro-batches takes
``m x max_s W_s + phi x (sum_s W_s - max_s W_s)``: every micro-batch at the pace of the slowest
stage, plus the fill and drain through the others. ``phi`` is the schedule's: 1 for 1F1B (the
classic bound ``(m - 1) max W + sum W``, ``(m + p - 1) W`` for equal stages), ``1 / v`` for the
interleaved schedule over ``v`` chunks, ZB-H1's smaller, each from the schedule's ideal bubble
fraction (:func:`fill_weight`). The
replicas meet in the gradient reduction of every stage, so the job's step is paced by its
slowest replica; each stage's optimizer then runs on its own ranks, so the slowest rank's
stretched optimizer adds to the step.

**What is stretched.** Only the step's change is taken from this bound: a step lasts the
engine's noise-free step (the prediction) plus ``max_r P_r(factors) - P(1)`` plus the
optimizer's stretch, so with every factor at 1 it is the prediction exactly, and the engine's
own schedule (interleaving, zero-bubble splits, DualPipe) keeps its nominal step while its
sensitivity to a slow stage is that bound's. Check (``tests/test_variability_layout.py``): every
rank 1.3x slower, against the engine's own step with every compute time 1.3x longer, agrees
within 0.2 % for 1F1B and GPipe (Llama-2-13B, Mixtral-8x7B), within 1 % for the interleaved schedule,
ZB-H1 and DualPipe (whose stage runs each of its two chunks for half the micro-batches) and with
context parallelism. A rank's factor stretches its
compute; communication is not noisy, as on the data-parallel path: the tensor- and
context-parallel waits and the MoE all-to-alls inside a stage's micro-batch keep their time.

**MoE routing per step.** The prediction costs the busiest expert-parallel rank at the routing's
*mean* busiest-rank factor (:func:`dpsim.predict.layout.expert_load`). Each dispatch (one MoE
layer's forward for one micro-batch, whose counts its combine, its backward exchanges and any
recompute reuse) draws its own routing, so here a block's MoE work in a step is stretched by the
ratio of that step's factor to the mean: the mean over the step's ``D`` dispatches on the stage
(``MoE layers x micro-batches``) of the largest of the block's ``lcm / (etp x ep)`` expert
groups' busiest-rank factors, each resampled from
:attr:`~dpsim.workload.routing.RankLoad.step_factors`. The mean of ``D`` such draws is taken as
normal with their exact mean and variance (computed from the sampled factors; the central limit
theorem, close for the tens to thousands of dispatches of a real step), clipped to the sampled
range, drawn from its own seed stream (the noise's draws do not move when routing is added).
What a routing factor stretches: the MoE layers' compute (their whole forward and backward,
router and norms included, an upper bound on the expert GEMMs' share; a model's shared experts,
which routing does not load, are counted too) and their dispatch/combine all-to-alls and
expert-tensor collectives, the bytes the busiest rank moves. With ``k = 1`` expert group per
block the ratio averages 1; with several, the largest of them paces every layer, and the mean
step grows. Non-balanced routing (``zipf:S``, ``histogram:``, ``maxvio:V``, ``gini:G`` with ``S, V, G > 0``)
shows this distribution even without ``--noise-cv``; balanced routing only with the noise flags
(its per-dispatch spread is sampling noise alone, and the default table stays as it was).

**Against the goodput closed form.** :func:`dpsim.plan.layout_goodput.straggler_tail` is the
special case of one block of every rank, one stage and no routing: both take their per-step
maxima from :func:`block_maxima`.
"""

from __future__ import annotations

import math

import numpy as np

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.strategies.stage_parts import StageParts
from dpsim.variability.monte_carlo import factor_sampler
from dpsim.wording import count

ROUTING_SEED_KEY = 0x524F5554
"""Spawn key of the routing draws' seed stream (``SeedSequence(seed, spawn_key=(key, sample))``),
apart from the noise's children ``spawn_key=(sample,)``."""


# ----------------------------------------------------------------------------- per-step maxima

def block_maxima(spec, persistent: np.ndarray, *, block: int, steps: int, sample_ids,
                 compute_s: float, exposure_s: float) -> np.ndarray:
    """``(samples, steps, ranks // block)``: each step's largest compute factor in every block of
    ``block`` consecutive ranks, drawn by :func:`~dpsim.variability.monte_carlo.factor_sampler`
    (stragglers alone: the persistent factors, every step alike)."""
    n = len(persistent)
    if block < 1 or n % block:
        raise ConfigError(f"block: {block!r} is not valid; expected a divisor of the {count(n, 'rank')}")
    if not spec.random:
        maxima = persistent.reshape(n // block, block).max(axis=1)
        return np.broadcast_to(maxima, (len(sample_ids), steps, n // block)).copy()
    draw = factor_sampler(spec, persistent, sample_ids=sample_ids, compute_s=compute_s, exposure_s=exposure_s)
    out = np.empty((len(sample_ids), steps, n // block))
    for k in range(steps):
        f = draw(k)
        out[:, k, :] = f.reshape(len(sample_ids), n // block, block).max(axis=2)
    return out


# ----------------------------------------------------------------------------- routing

def routing_ratios(step_factors, *, groups: int, dispatches: int, shape: tuple[int, ...], rng: np.random.Generator
                   ) -> np.ndarray:
    """``shape`` draws of one block's routing stretch in a step: the mean over ``dispatches`` of the
    largest of ``groups`` busiest-rank factors, resampled from ``step_factors``, over their mean
    (normal with the exact mean and variance, clipped to the sampled range; module docstring)."""
    values = np.sort(np.asarray(step_factors, dtype=float))
    mean = float(values.mean())
    if dispatches < 1 or mean <= 0 or values[-1] == values[0]:
        return np.ones(shape)
    n = len(values)
    cdf = (np.arange(1, n + 1) / n) ** groups  # P(max of `groups` uniform picks <= values[i])
    pmf = np.diff(np.concatenate(([0.0], cdf)))
    mu = float(pmf @ values)
    sigma = math.sqrt(max(0.0, float(pmf @ values ** 2) - mu * mu) / dispatches)
    draws = np.clip(mu + sigma * rng.standard_normal(shape), values[0], values[-1])
    return draws / mean


# ----------------------------------------------------------------------------- the step

@frozen_dataclass
class LayoutSync:
    """How a layout's ranks wait for each other (module docstring)."""

    block: int
    """Consecutive ranks of a stage whose per-layer collectives close over one another."""
    replicas: int
    """Data-parallel replicas (pipelines) the gradient reduction waits for."""
    stages: int
    """Pipeline stages."""
    micro_batches: int
    """Times a stage runs its micro-batch work (all its chunks) per step: the micro-batches, half
    of them with DualPipe (each direction's through one of a stage's two chunks)."""
    routing: str | None = None
    """``--moe-routing`` whose per-dispatch load is drawn (``None``: dense, or left at its mean)."""
    expert_groups_per_block: int = 1
    """Expert-parallel groups in a block: the largest of their busiest-rank factors paces a layer."""
    dispatches_per_step: tuple[int, ...] = ()
    """MoE dispatches of a step on each stage (MoE layers x micro-batches)."""
    fill_weight: float = 1.0
    """How much of the other stages' micro-batch the schedule's fill and drain wait for (1: 1F1B,
    ``1 / v`` interleaved; :func:`fill_weight`)."""

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {"block_ranks": self.block, "replicas": self.replicas, "stages": self.stages,
                "micro_batches": self.micro_batches, "routing": self.routing,
                "expert_groups_per_block": self.expert_groups_per_block,
                "dispatches_per_step": list(self.dispatches_per_step), "fill_weight": self.fill_weight}


def fill_weight(ideal_bubble_fraction: float, *, stages: int, micro_batches: int) -> float:
    """The schedule's fill and drain in units of ``(p - 1)`` stage micro-batches: with equal stages
    its ideal step is ``m W / (1 - b)`` (``b``: its ideal bubble fraction,
    :func:`~dpsim.strategies.pipeline.bubble_fraction`), so the fill is ``m b / (1 - b)`` micro-batch
    times, ``p - 1`` of them for 1F1B (weight 1), ``(p - 1) / v`` interleaved over ``v`` chunks."""
    b = ideal_bubble_fraction
    if stages <= 1 or not 0 <= b < 1:
        return 1.0 if stages > 1 else 0.0
    return micro_batches * b / ((1 - b) * (stages - 1))


def sync_of(*, tp: int, cp: int, dp: int, pp: int, ep: int, etp: int, micro_batches: int,
            parts: tuple[StageParts, ...], routing: str | None, fill: float = 1.0) -> LayoutSync:
    """The :class:`LayoutSync` of a ``tp x cp x dp x pp`` layout with ``etp x ep`` expert groups
    (``fill``: :func:`fill_weight`)."""
    dense = tp * cp
    experts = ep * etp if routing is not None or any(p.moe_layers for p in parts) else 1
    block = math.lcm(dense, experts) if experts > 1 else dense
    per_stage = dense * dp
    if per_stage % block:  # expert groups that do not tile the stage: the whole stage waits
        block = per_stage
    return LayoutSync(block=block, replicas=dp, stages=pp, micro_batches=micro_batches, routing=routing,
                      expert_groups_per_block=max(1, block // experts) if experts > 1 else 1,
                      dispatches_per_step=tuple(p.moe_layers * micro_batches for p in parts), fill_weight=fill)


def layout_step_intervals(spec, parts: tuple[StageParts, ...], sync: LayoutSync, *, persistent: np.ndarray,
                          nominal_step_s: float, steps: int, step_factors=None) -> np.ndarray:
    """``(spec.samples, steps)`` step times of a layout under ``spec``'s per-rank factors and, with
    ``step_factors`` (:attr:`~dpsim.workload.routing.RankLoad.step_factors`), per-dispatch routing
    load (module docstring). ``persistent``: every rank's straggler factor, in rank order."""
    pp, m, b = sync.stages, sync.micro_batches, sync.block
    n = len(persistent)
    blocks = n // pp // b
    # A block holds whole replicas' ranks of a stage (block >= tp x cp, ranks in Megatron's order),
    # the same block index at every stage: its replicas see the same factors, so one pipeline per
    # block stands for them.
    samples = spec.samples
    ids = list(range(samples))
    mean_compute = float(np.mean([p.compute_s for p in parts])) * m
    if spec.per_rank:
        g = block_maxima(spec, persistent, block=b, steps=steps, sample_ids=ids, compute_s=mean_compute,
                         exposure_s=nominal_step_s).reshape(samples, steps, pp, blocks)
    else:
        g = np.ones((samples, steps, pp, blocks))
    rho = None
    if step_factors is not None:
        rho = np.empty((samples, steps, pp, blocks))
        for k in ids:
            rng = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(ROUTING_SEED_KEY, k)))
            for s, d in enumerate(sync.dispatches_per_step):
                rho[k, :, s, :] = routing_ratios(step_factors, groups=sync.expert_groups_per_block, dispatches=d,
                                                 shape=(steps, blocks), rng=rng)
    slowest = total = None
    for s, part in enumerate(parts):  # m x max_s W_s + phi x (sum_s W_s - max_s W_s), stage by stage
        other = part.work_s - part.compute_s
        if rho is None:
            w = g[:, :, s, :] * part.compute_s + other
        else:
            r = rho[:, :, s, :]
            w = (g[:, :, s, :] * (part.compute_s - part.expert_compute_s + part.expert_compute_s * r)
                 + (other - part.expert_comm_s) + part.expert_comm_s * r)
        slowest = w if slowest is None else np.maximum(slowest, w)
        total = w if total is None else total + w
    phi = sync.fill_weight
    works = [p.work_s for p in parts]
    nominal_p = m * max(works) + phi * (sum(works) - max(works))
    paced = (m * slowest + phi * (total - slowest)).max(axis=-1)
    opt = np.array([p.optimizer_s for p in parts])[:, None]
    opt_stretch = (g * opt).max(axis=(-2, -1)) - float(opt.max())
    return nominal_step_s + (paced - nominal_p) + opt_stretch
