"""Mixture-of-experts routing: how a router's choices load the expert-parallel ranks.

Each token picks ``top_k`` distinct experts, drawn without replacement in proportion to the
experts' shares (:func:`expert_shares`: balanced, Zipf(s) over the expert index, or a measured
histogram). Zipf ranks experts by index, so its most popular experts share the first rank: the
worst contiguous placement (a measured histogram gives a real one). Experts sit contiguously on the ``ep`` ranks of the expert-parallel group,
``experts / ep`` each, so a rank's load is the (token, expert) pairs routed to its experts: the
busiest rank paces the expert GEMMs and its all-to-all (:func:`rank_load`), and the pairs each
rank sends to each other rank form the dispatch's traffic (:func:`traffic_matrix`; the combine
sends the same bytes back).

**Top-k without replacement.** Drawing in proportion to shares and without replacement is an
exponential race (Plackett-Luce): expert ``e`` draws a clock ``X_e ~ Exp(p_e)`` and the token
takes the ``k`` first. An expert is picked when its clock beats the k-th arrival; over many
experts that time concentrates on a constant ``t``, so the chance a token includes ``e`` is
``pi_e = 1 - exp(-p_e t)`` with ``t`` such that the ``pi_e`` sum to ``k`` (exact for ``k = 1``
where ``pi = p``, and for equal shares, ``pi = k / E``; ``tests/test_routing.py`` checks it
against direct per-token draws).

**Per-step variation.** A step routes ``ep x tokens_per_rank`` tokens; its (token, expert) pairs
are a multinomial draw of ``tokens x top_k`` over ``pi / k``, so the busiest rank's excess
shrinks as the tokens grow (one vectorised draw for all steps, deterministic for a seed).

**Auxiliary-loss-balanced routers (``maxvio:V``).** A router trained with a load-balancing
auxiliary loss is not balanced: Wang et al., "Auxiliary-Loss-Free Load Balancing Strategy for
Mixture-of-Experts" (arXiv:2408.15664, sec. 4.1 eq. 4, Table 2) measure the maximal violation
``MaxVio = max_i Load_i / mean Load - 1`` of each MoE layer (averaged over layers) for routers
trained with the GShard/Switch auxiliary loss: 0.72 (1B model) and 0.52 (3B), with 64 routed
experts, top-6, sigmoid gate, coefficient 1e-3; 0.937 with a softmax gate at 3e-4 (their
Appendix C, Table 6). ``MaxVio_global`` counts the loads over the whole validation set, so it is
the expert popularity every batch inherits; their Fig. 5 finds the auxiliary-loss router's
per-computation-batch MaxVio staying at about that level as the batch grows (a persistent skew,
not sampling noise). Only the maximum is published, so ``maxvio:V`` gives the busiest expert
``(1 + V) x`` the mean load and the other experts the rest equally (the least spread that reaches
that maximum: a lower estimate of what the statistic implies). The loads are set on the inclusion
probabilities (a token's chance of picking the expert, summing to ``top_k``), and the shares are
the race's inverse, ``p_e`` proportional to ``-ln(1 - pi_e)`` (``pi`` itself for top-1), so that
the top-k draw reproduces them exactly. **Expert to rank:** the hot expert sits on one rank with ``experts / ep - 1``
ordinary ones, so that rank's excess over the mean rank is about ``V / (experts / ep)``: large
for few experts per rank (ep 32 of 128 experts: 4 each, +13 % at V = 0.52), diluted for many
(ep 8: 16 each, +3 %). **Per micro-batch:** the persistent loads are what every dispatch
inherits; each micro-batch's (token, expert) pairs are then a multinomial draw over them as for
the other kinds (the per-step variation above), while a micro-batch's own topical skew beyond
the global one (the paper's MaxVio_batch curves, published only as figures) is not modelled.

**Per-layer expert popularity from a Gini coefficient (``gini:G``).** A trained router's
experts differ in popularity layer by layer: Ma et al., "Diagnosing Overhead in Dispatch Operations:
Cross-architecture Observatory" (DODOCO, arXiv:2605.20982v1, abstract) instrument five MoE
checkpoints on H100 with real text and report the Gini coefficient of the per-expert token counts:
0.105 (DeepSeek-MoE-16B, MHA) and 0.150 (Nemotron-30B, Mamba-2) on wikitext, above 0.24 on every
real-text condition for MLA (DeepSeek-V2-Lite) and GDN (Qwen3.5-35B), Qwen3-30B-A3B (GQA) "the
intermediate case"; and scaling EP from 4 to 32 ranks moves the per-expert max/mean token ratio by
at most 5 %: the skew is the router's, not the placement's. ``gini:G`` draws each dispatch's expert
loads log-normal with that Gini coefficient (``sigma = 2 erfinv(G)``, the log-normal's
``G = erf(sigma / 2)``): deepseek-ai/DeepEP pull 393 (description) recorded DeepSeek-V3's per-rank
token counts layer by layer on MMLU-Pro and found the log-normal the best fit of the distributions it
tried. Which experts are popular differs from layer to layer (each layer has its own router), so each
draw places the popular experts independently of the ranks' contiguous blocks; a rank's load is
the sum of its experts', and the busiest rank of every dispatch paces it (each MoE layer's
all-to-all waits for every rank of the group), so the factor is the mean over dispatches of each
dispatch's maximum, not the maximum of the ranks' mean loads (which would be about 1). The
multinomial draw of each micro-batch's (token, expert) pairs follows as for the other kinds. The
expected load of every expert (and so every rank, and the traffic matrix) is the balanced one: only
the busiest rank's factor grows; no bytes are added.

**Capacity factor.** GShard's and Switch Transformer's expert capacity: an expert takes at most
``capacity_factor x tokens x top_k / experts`` (token, expert) pairs in a step and drops the rest
(Lepikhin et al., "GShard", arXiv:2006.16668, sec. 2.2 "expert capacity"; Fedus et al., "Switch
Transformers", arXiv:2101.03961, sec. 2.2: "expert capacity = (tokens per batch / number of
experts) x capacity factor", k pairs per token for top-k). ``None``: dropless.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import numpy as np

from dpsim.errors import ConfigError
from dpsim.files import read_text_capped
from dpsim.frozen import frozen_dataclass

ROUTING_KINDS: dict[str, str] = {
    "balanced": "every expert gets the same share of tokens (an ideal load-balanced router)",
    "zipf": "zipf:S - expert i (0-based) gets a share proportional to (i + 1)^-S; S = 0 is balanced",
    "histogram": "histogram:PATH.json - a measured JSON list of per-expert token counts or shares",
    "maxvio": "maxvio:V - an auxiliary-loss-balanced router: the busiest expert gets (1 + V) times the mean "
              "expert load, the others the rest equally (MaxVio, arXiv:2408.15664); V = 0 is balanced",
    "gini": "gini:G - a trained router's per-layer expert popularity: each dispatch's expert loads log-normal "
            "with Gini coefficient G (0 <= G < 1; DODOCO, arXiv:2605.20982), popular experts on any rank; "
            "G = 0 is balanced",
}
"""The routing kinds ``--moe-routing`` takes, and what each means."""

_FLAG = "--moe-routing"
_PAD_FLAG = "--moe-pad-to-capacity"


@frozen_dataclass
class Routing:
    """How a router spreads tokens over experts."""

    kind: str
    """``balanced``, ``zipf``, ``histogram``, ``maxvio`` or ``gini`` (:data:`ROUTING_KINDS`)."""
    zipf_s: float = 0.0
    """Zipf exponent S of ``zipf`` (expert i's share proportional to (i + 1)^-S)."""
    shares: tuple[float, ...] = ()
    """``histogram``: the token share of each expert, normalised to sum to 1."""
    max_violation: float = 0.0
    """``maxvio``: V, the busiest expert's load over the mean expert load, less 1 (>= 0)."""
    gini: float = 0.0
    """``gini``: G, the Gini coefficient of each dispatch's per-expert loads (0 <= G < 1)."""

    @property
    def uniform(self) -> bool:
        """Every expert gets the same share in every dispatch: ``balanced``, ``zipf:0``, ``maxvio:0`` or
        ``gini:0`` (a histogram is taken as measured, even if its counts are equal)."""
        return (self.kind == "balanced" or (self.kind == "zipf" and self.zipf_s == 0)
                or (self.kind == "maxvio" and self.max_violation == 0)
                or (self.kind == "gini" and self.gini == 0))


@frozen_dataclass
class RankLoad:
    """How unevenly routing loads the expert-parallel ranks."""

    mean_busiest_factor: float
    """Mean over steps of the busiest EP rank's routed (token, expert) pairs over the mean rank's
    (>= 1): what the expert compute and the all-to-all are slowed by."""
    step_factors: tuple[float, ...]
    """That factor in each sampled step (for the variability engine)."""
    dropped_fraction: float
    """Fraction of (token, expert) pairs dropped by the capacity factor (0 when dropless)."""
    padded_rows_factor: float | None = None
    """With every expert's input padded to its capacity (Megatron-Core's
    ``--moe-pad-expert-input-to-capacity``): each expert's rows are its capacity whatever the router sent, so
    every rank computes and exchanges ``capacity x experts`` rows, this many times the routed pairs of a
    balanced rank (about the capacity factor: above 1 pads, the dropped pairs included); ``None``: unpadded."""

    @property
    def row_scale(self) -> float:
        """A rank's expert rows (GEMM rows, all-to-all rows) per routed (token, expert) pair before capacity:
        the kept fraction, or the padded capacity's rows when padded."""
        return self.padded_rows_factor if self.padded_rows_factor is not None else 1.0 - self.dropped_fraction


def _routing_error(text: str, why: str) -> ConfigError:
    return ConfigError(f"{_FLAG}: {text!r} {why}; expected balanced, zipf:S (S >= 0), histogram:PATH.json, "
                             f"maxvio:V (V >= 0) or gini:G (0 <= G < 1)")


def parse_routing(text: str) -> Routing:
    """The routing ``text`` names: ``balanced``, ``zipf:S``, ``histogram:PATH.json``, ``maxvio:V`` or
    ``gini:G``."""
    if not isinstance(text, str):
        raise _routing_error(str(text), "is not text")
    kind, _, arg = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind == "balanced" and not arg:
        return Routing(kind="balanced")
    if kind == "zipf":
        return Routing(kind="zipf", zipf_s=_non_negative(text, arg, "zipf", "a Zipf exponent"))
    if kind == "maxvio":
        return Routing(kind="maxvio", max_violation=_non_negative(text, arg, "maxvio", "a maximal violation"))
    if kind == "gini":
        g = _non_negative(text, arg, "gini", "a Gini coefficient")
        if g >= 1.0:  # G = 1 is one expert taking every token: no log-normal reaches it
            raise _routing_error(text, "has a Gini coefficient that is not below 1")
        return Routing(kind="gini", gini=g)
    if kind == "histogram" and arg:
        return Routing(kind="histogram", shares=_read_histogram(text, Path(arg)))
    raise _routing_error(text, "is not a routing")


def _non_negative(text: str, arg: str, kind: str, what: str) -> float:
    """The number after ``kind:`` in ``text``: finite and >= 0."""
    try:
        value = float(arg)
    except ValueError:
        raise _routing_error(text, f"has no number after {kind}:") from None
    if not math.isfinite(value) or value < 0:
        raise _routing_error(text, f"has {what} that is not a finite number >= 0")
    return value


def _read_histogram(text: str, path: Path) -> tuple[float, ...]:
    # Capped and regular files only: /dev/zero would be read until memory runs out, a FIFO
    # would block for ever (read_text_capped's one-line errors name the flag and the path).
    try:
        raw = read_text_capped(path, _FLAG, ConfigError, what="histogram JSON file")
    except ConfigError as e:  # say it as every other --moe-routing error: the text given, why, what is allowed
        why = str(e).removeprefix(f"{_FLAG}: ").removeprefix(f"cannot read {str(path)!r}: ")
        raise _routing_error(text, f"cannot be read ({why})") from None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # a number past 4,300 digits; nesting past the recursion limit
        raise _routing_error(text, "is not valid JSON") from None
    return _normalise(text, data)


def _normalise(text: str, data) -> tuple[float, ...]:
    if not isinstance(data, list) or not data or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in data):
        raise _routing_error(text, "must hold a non-empty JSON list of per-expert counts or shares")
    try:
        arr = np.asarray(data, dtype=float)
    except OverflowError:  # an integer count past a float's range (1.8e308)
        raise _routing_error(text, "has a per-expert count too large for a float (over 1.8e308)") from None
    if not np.isfinite(arr).all() or (arr < 0).any() or arr.max() <= 0:
        raise _routing_error(text, "has negative, non-finite or all-zero per-expert counts")
    # Scaled by the largest count first: a sum of counts near 1e308 would overflow to inf
    # (and every share become 0), and subnormal counts would lose their ratios.
    arr = arr / arr.max()
    return tuple(float(x) for x in arr / arr.sum())


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ConfigError(f"{name}: {value!r} is not valid; expected an integer >= {low}")
    return int(value)


def _maxvio_shares(v: float, experts: int, top_k: int) -> np.ndarray:
    """Shares whose top-``top_k`` race gives expert 0 ``(1 + v) x`` the mean load and the others
    the rest equally (module docstring, ``maxvio``)."""
    hot = (1.0 + v) * top_k / experts  # expert 0's inclusion probability
    if experts == 1:
        raise ConfigError(f"{_FLAG}: maxvio:{v:g} skews one expert over the others, but the model has a single "
                          f"expert; expected maxvio:0 or balanced")
    if hot >= 1.0:
        limit = experts / top_k - 1.0
        raise ConfigError(f"{_FLAG}: maxvio:{v:g} would send every token to the busiest of {experts} experts "
                          f"(top-{top_k}); expected a maximal violation below {limit:g}")
    pi = np.full(experts, (top_k - hot) / (experts - 1))
    pi[0] = hot
    if top_k == 1:  # a single pick takes each expert with its share
        return pi
    # The exponential race's inverse: 1 - exp(-w) = pi. By the C library, element by element: numpy's log1p is
    # a SIMD kernel chosen by the CPU (SVML on AVX-512), whose last digit differs between hosts and moves goldens.
    w = np.array([-math.log1p(-x) for x in pi.tolist()])
    return w / w.sum()


def gini_sigma(g: float) -> float:
    """The log-normal's sigma whose Gini coefficient is ``g``: ``G = erf(sigma / 2)`` (bisection on
    erf, which increases; 0 <= g < 1)."""
    if not (math.isfinite(g) and 0.0 <= g < 1.0):
        raise ConfigError(f"{_FLAG}: gini:{g!r} is not valid; expected a Gini coefficient 0 <= G < 1")
    lo, hi = 0.0, 1.0
    while math.erf(hi / 2.0) < g:  # erf reaches 1 in float at about 6, so this stops for g < 1
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if math.erf(mid / 2.0) < g:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _gini_inclusions(g: float, experts: int, top_k: int, steps: int, rng: np.random.Generator) -> np.ndarray:
    """``steps`` draws of the experts' inclusion probabilities (each row sums to ``top_k``) whose
    loads are log-normal with Gini coefficient ``g``, each draw's popular experts on any rank
    (module docstring, ``gini``). A probability is at most 1 (an expert is picked at most once per
    token): any excess is shared among the others in proportion to their loads."""
    # exp by the C library (see _maxvio_shares): steps x experts draws, thousands, not millions.
    z = gini_sigma(g) * rng.standard_normal((steps, experts))
    w = np.array([math.exp(x) for x in z.ravel().tolist()]).reshape(z.shape)
    pi = w * (top_k / w.sum(axis=1, keepdims=True))
    for _ in range(experts):
        over = pi > 1.0
        if not over.any():
            break
        free = np.where(over, 0.0, pi)
        excess = np.where(over, pi - 1.0, 0.0).sum(axis=1, keepdims=True)
        pi = np.where(over, 1.0, pi + free * excess / np.maximum(free.sum(axis=1, keepdims=True), 1e-300))
    return pi


def expert_shares(routing: Routing, experts: int, top_k: int = 1) -> np.ndarray:
    """The share of tokens each of ``experts`` experts would get (sums to 1); ``top_k`` is the
    experts each token picks (only ``maxvio`` depends on it: it sets the loads after the top-k
    draw)."""
    experts = _check_int("experts", experts, 1)
    top_k = _check_int("top_k", top_k, 1)
    if routing.kind == "balanced":
        return np.full(experts, 1.0 / experts)
    if routing.kind == "zipf":
        # Python's float power (the C library's pow), not numpy's, which runs SVML's on AVX-512 hosts.
        w = np.array([float(k) ** -routing.zipf_s for k in range(1, experts + 1)])
        return w / w.sum()
    if routing.kind == "histogram":
        if len(routing.shares) != experts:
            raise ConfigError(f"{_FLAG}: the histogram has {len(routing.shares)} experts but the model has "
                              f"{experts}; give one count per expert")
        w = np.asarray(routing.shares, dtype=float)
        return w / w.sum()
    if routing.kind == "maxvio":
        if routing.uniform:
            return np.full(experts, 1.0 / experts)
        return _maxvio_shares(routing.max_violation, experts, top_k)
    if routing.kind == "gini":
        # Each dispatch's popular experts land on any rank (module docstring), so every expert's
        # expected share is the balanced one; the per-dispatch spread is drawn in rank_load.
        return np.full(experts, 1.0 / experts)
    raise ConfigError(f"{_FLAG}: kind {routing.kind!r} is not known; choose one of {', '.join(ROUTING_KINDS)}")


@lru_cache(maxsize=256)
def _inclusion_cached(shares: tuple[float, ...], top_k: int) -> np.ndarray:
    p = np.asarray(shares, dtype=float)
    live = p > 0
    if top_k == 1:
        return p.copy()
    if top_k >= int(live.sum()):
        return live.astype(float)
    if np.allclose(p[live], p[live][0], rtol=0, atol=1e-15):
        return np.where(live, top_k / live.sum(), 0.0)
    # The exponential race's k-th arrival t: sum(1 - exp(-p t)) = k, increasing in t (bisection
    # on a bracket that doubles until it holds k).
    # exp by the C library, expert by expert (see _maxvio_shares): a last digit of numpy's CPU-chosen kernel
    # could turn a bisection step, and the shares feed every printed MoE time.
    shares = p.tolist()

    def picked(t: float) -> np.ndarray:
        return np.array([1 - math.exp(-x * t) for x in shares])

    lo, hi = 0.0, float(top_k) / p[live].max()
    while picked(hi).sum() < top_k:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if picked(mid).sum() < top_k:
            lo = mid
        else:
            hi = mid
    pi = picked(0.5 * (lo + hi))
    return pi * (top_k / pi.sum())


def inclusion_probabilities(shares: np.ndarray, top_k: int) -> np.ndarray:
    """The chance a token's ``top_k`` experts include each expert (sums to ``top_k``; see the module
    docstring)."""
    return _inclusion_cached(tuple(float(x) for x in shares), int(top_k)).copy()


_CAPACITY_FLAG = "--moe-capacity-factor"
"""The flag a capacity too small to keep one (token, expert) pair is refused under."""


def _check_moe(experts: int, ep: int, top_k: int, tokens_per_rank: int, capacity_factor: float | None,
               shares: np.ndarray) -> None:
    _check_int("ep", ep, 1)
    _check_int("tokens_per_rank", tokens_per_rank, 0)
    _check_int("top_k", top_k, 1)
    if experts % ep:
        raise ConfigError(f"--ep: {ep} does not divide the {experts} experts; choose an ep that divides them")
    served = int((shares > 0).sum())
    if top_k > served and top_k <= experts:
        # The routing's fault, not the model's (a histogram of zeros, or zipf:1e308 whose shares underflow):
        # name the flag the user gave, not the model's top_k.
        raise ConfigError(f"{_FLAG}: gives tokens to only {served} of the {experts} experts (the others' shares "
                          f"are 0), fewer than the {top_k} each token is routed to (the model's top_k); give a "
                          f"routing that spreads tokens over at least {top_k} experts")
    if top_k > served:
        raise ConfigError(f"top_k: {top_k} is more than the {served} experts that get tokens; "
                          f"expected at most that many")
    if capacity_factor is not None and not (isinstance(capacity_factor, (int, float))
                                            and math.isfinite(capacity_factor) and capacity_factor > 0):
        raise ConfigError(f"capacity_factor: {capacity_factor!r} is not valid; expected a number > 0 or none (dropless)")
    pairs = tokens_per_rank * ep * top_k
    if capacity_factor is not None and pairs and math.floor(capacity_factor * pairs / experts) < 1:
        # An expert capacity under one pair dropped every token: the expert GEMMs and all-to-alls
        # vanished and --moe-capacity-factor 1e-300 reported an MFU of 108 %.
        raise ConfigError(f"{_CAPACITY_FLAG}: {capacity_factor:g} gives each of the {experts} experts a capacity of "
                          f"{capacity_factor * pairs / experts:.3g} of the {pairs:,} (token, expert) pairs a step "
                          f"routes, under one, so every token would be dropped; expected at least "
                          f"{experts / pairs:.3g}")


def rank_load(routing: Routing, *, experts: int, ep: int, tokens_per_rank: int, top_k: int,
              capacity_factor: float | None = None, steps: int = 64, seed: int = 0,
              pad_to_capacity: bool = False) -> RankLoad:
    """How the busiest of ``ep`` ranks is loaded when each of them routes ``tokens_per_rank``
    tokens to ``top_k`` of ``experts`` experts per step (``steps`` steps sampled with ``seed``);
    ``pad_to_capacity`` (with a ``capacity_factor``) fills every expert's input to its capacity
    (:attr:`RankLoad.padded_rows_factor`): every rank then carries the same rows.
    Kept per argument values (the sampling is seeded, so a repeat is the same figure): a plan asks
    for each expert split's load several times, and its verification once per simulated layout."""
    key = (routing, experts, ep, tokens_per_rank, top_k, capacity_factor, steps, seed, pad_to_capacity)
    try:
        hash(key)
    except TypeError:  # a malformed argument: refused below as before, not by the memo
        return _rank_load(*key)
    return _rank_load_kept(*key)


def _rank_load(routing: Routing, experts: int, ep: int, tokens_per_rank: int, top_k: int,
               capacity_factor: float | None, steps: int, seed: int, pad_to_capacity: bool = False) -> RankLoad:
    shares = expert_shares(routing, experts, _check_int("top_k", top_k, 1))
    _check_moe(experts, ep, top_k, tokens_per_rank, capacity_factor, shares)
    steps = _check_int("steps", steps, 1)
    if pad_to_capacity is not False and (pad_to_capacity is not True or capacity_factor is None):
        raise ConfigError(f"{_PAD_FLAG}: {pad_to_capacity!r} needs a capacity to pad to; give --moe-capacity-factor "
                          f"(dropless experts have none), or leave it out")
    pairs = tokens_per_rank * ep * top_k
    if pairs == 0:
        return RankLoad(mean_busiest_factor=1.0, step_factors=(1.0,) * steps, dropped_fraction=0.0)
    rng = np.random.default_rng(seed)
    if routing.kind == "gini" and not routing.uniform:
        # A fresh popularity per dispatch (each layer's own router), then that dispatch's pairs.
        per_step = _gini_inclusions(routing.gini, experts, top_k, steps, rng)
        counts = rng.multinomial(pairs, per_step / top_k).astype(float)  # steps x experts
    else:
        pi = inclusion_probabilities(shares, top_k)
        counts = rng.multinomial(pairs, pi / top_k, size=steps).astype(float)  # steps x experts
    dropped = 0.0
    if capacity_factor is not None:
        cap = math.floor(capacity_factor * pairs / experts)
        kept = np.minimum(counts, cap)
        dropped = float((counts - kept).sum() / (pairs * steps))
        counts = kept
    if pad_to_capacity:
        # Megatron-Core's drop-and-pad (megatron/core/transformer/moe/moe_utils.py: get_capacity, and the
        # alltoall dispatcher's num_out_tokens = capacity x experts): each expert gets exactly its capacity of
        # rows, the dropped pairs gone and the short experts filled, so no rank is busier than another and
        # every one computes and sends capacity x experts / ep rows (the capacity here is the group's, as the
        # drops above; Megatron rounds each rank's share up: a row or so per expert).
        return RankLoad(mean_busiest_factor=1.0, step_factors=(1.0,) * steps, dropped_fraction=dropped,
                        padded_rows_factor=cap * experts / pairs)
    per_rank = counts.reshape(steps, ep, experts // ep).sum(axis=2)
    mean = per_rank.mean(axis=1)
    factors = np.where(mean > 0, per_rank.max(axis=1) / np.where(mean > 0, mean, 1.0), 1.0)
    return RankLoad(mean_busiest_factor=float(factors.mean()), step_factors=tuple(float(f) for f in factors),
                    dropped_fraction=dropped)


# typed: 2 and 2.0 (or True) are told apart, so that a value _check_int refuses is never answered from the memo.
_rank_load_kept = lru_cache(maxsize=256, typed=True)(_rank_load)


def traffic_matrix(routing: Routing, *, experts: int, ep: int, tokens_per_rank: int, top_k: int,
                   bytes_per_token: float, capacity_factor: float | None = None) -> np.ndarray:
    """Expected bytes each of ``ep`` ranks sends each other in one dispatch: rank ``i``'s tokens
    go to rank ``j`` in proportion to the chance they include one of ``j``'s experts (the diagonal
    stays local); with a capacity factor an expert's expected overflow is dropped."""
    shares = expert_shares(routing, experts, _check_int("top_k", top_k, 1))
    _check_moe(experts, ep, top_k, tokens_per_rank, capacity_factor, shares)
    if not (isinstance(bytes_per_token, (int, float)) and math.isfinite(bytes_per_token) and bytes_per_token >= 0):
        raise ConfigError(f"bytes_per_token: {bytes_per_token!r} is not valid; expected a finite number >= 0")
    pi = inclusion_probabilities(shares, top_k)
    expected = pi * tokens_per_rank * ep  # pairs per expert from the whole group
    if capacity_factor is not None:
        cap = capacity_factor * tokens_per_rank * ep * top_k / experts
        keep = np.where(expected > 0, np.minimum(expected, cap) / np.where(expected > 0, expected, 1.0), 0.0)
        pi = pi * keep
    to_rank = pi.reshape(ep, experts // ep).sum(axis=1) * tokens_per_rank * float(bytes_per_token)
    return np.tile(to_rank, (ep, 1))
