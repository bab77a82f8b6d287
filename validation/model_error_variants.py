"""Leave-one-system-out scores of the model-error interval variants registered on 2026-12-06
(interval2; issue 25): quantile rules for the regime band, prediction ranks, two-system regimes,
asymmetric margins, CQR's CV+ form and the layout rows' scores on the intervals their queries get.

Each variant is registered, with its reason and the rule for keeping it, in
``validation/large_model_runs.md`` ("Model-error intervals: quantile rules and margins registered
before scoring"; interval3's W1-W5, W1+-W5+, X1, X1+ and the reported-only X1J under "regime cells,
shrinkage and calibration groups registered before scoring"); none was kept by its keep rule.
X1J, reported only there, is the module's rule since interval4 (the lead's decision, post hoc,
with ``--nested`` as the evidence): its band and mapping here call
:func:`dpsim.predict.model_error._shortest_window` and ``_mapped``, and X1J through this code must
read as :func:`dpsim.predict.model_error.loso_coverage`; V0 and W0 re-read the rule shipped before
it (the regime's p10-p90 with a margin per pool). This script puts each in place of the module's
functions for the length of one :func:`loso_coverage` and prints the figures the module docstring's tried list quotes:

    python validation/model_error_variants.py            # every V variant
    python validation/model_error_variants.py V1 V11 W4 X1J   # some
    python validation/model_error_variants.py --nested W0 X1 X1J   # the rule chosen per left-out system
    python validation/model_error_variants.py --gather Y0 Y1 Y2 Y3 Y4 Y5 Y6 Z1 Z2 W0   # width's, on the rows gathered now
    python validation/model_error_variants.py --rows PATH --nested Y0 Y1 Y3   # on rows stored by --rows-out PATH
    python validation/model_error_variants.py --gather R0 R1 R2 R3 R4 R5 R6   # regime's query-time features

width's Y variants (2026-12-07) were registered here with a reason each before any was scored on
the rows whose large-model residuals are their leave-one-system-out ones.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from functools import lru_cache
from operator import attrgetter
from pathlib import Path

import numpy as np

from dpsim.predict import model_error as me

ALPHA = 1 - me.COVERAGE
"""Miscoverage of the p10-p90 interval."""


def _order_statistic(values, levels) -> np.ndarray:
    return np.quantile(values, levels, method="inverted_cdf")


def _hyndman_fan(method: str) -> Callable:
    """numpy's name for a Hyndman-Fan (1996) rule: ``median_unbiased`` is their type 8, ``linear`` type 7."""
    return lambda values, levels: np.quantile(values, levels, method=method)


def _prediction_ranks(values, levels) -> np.ndarray:
    """The distribution-free 80 % prediction interval of exchangeable values: the ``j``-th smallest
    and ``j``-th largest with ``j = floor(0.1 (n + 1))`` (at least 1); the median as shipped."""
    v = np.sort(np.asarray(values, dtype=float))
    n = len(v)
    out = []
    for level in levels:
        if level == 0.5:
            out.append(_order_statistic(v, (0.5,))[0])
            continue
        j = max(1, math.floor(min(level, 1 - level) * (n + 1)))
        out.append(v[j - 1] if level < 0.5 else v[n - j])
    return np.array(out)


def _p10_p90(rows, regime, knobs) -> tuple[float, float, float]:
    """The regime's signed p10, median and p90 by the (installed) ``_order_statistics``: the band of
    the rule shipped until interval4 (2026-12-06), which the V variants vary; the module's own
    :func:`dpsim.predict.model_error._band` is now the shortest window (X1J)."""
    chosen, _ = me._select(rows, regime, knobs.keys, knobs.min_rows)
    low, centre, high = me._order_statistics([r.log_ratio for r in chosen], (me._TAILS[0], 0.5, me._TAILS[1]))
    return float(low), float(centre), float(high)


def _select_two_systems(rows, regime, keys_in_order, minimum):
    """:func:`dpsim.predict.model_error._select`, a regime also needing rows of two systems."""
    target = tuple(getattr(regime, k) for k in keys_in_order)
    for keep in range(len(keys_in_order), -1, -1):
        chosen = [r for r in rows if tuple(getattr(r, k) for k in keys_in_order[:keep]) == target[:keep]]
        if (len(chosen) >= minimum and len({r.system for r in chosen}) >= 2) or keep == 0:
            return chosen, dict(zip(keys_in_order[:keep], target[:keep]))
    raise AssertionError("unreachable")


def _scored_rows(pool_rows, knobs) -> list[tuple[str, float, float]]:
    """Each row's system and two one-sided CQR scores (how far the lower / upper end must move out
    to hold it) against its regime's band without its system, in units of the unwidened band (as
    shipped: the symmetric score is their maximum)."""
    out = []
    for others, extent, mine in me._held_out(pool_rows):
        for r in mine:
            low, centre, high = _p10_p90(others, r, knobs)
            factor = me.WIDEN_PER_EXTRAPOLATION ** len(me._extrapolations(others, r, r.pool, extent))
            out.append((r.system, (centre - r.log_ratio) / factor - (centre - low),
                        (r.log_ratio - centre) / factor - (high - centre)))
    return out


def _side_scores(pool_rows, knobs) -> tuple[np.ndarray, np.ndarray]:
    scored = _scored_rows(pool_rows, knobs)
    return np.array([lo for _, lo, _ in scored]), np.array([hi for _, _, hi in scored])


def _rank(scores: np.ndarray, level: float) -> float:
    """The ``ceil(level (n + 1))``-th smallest score (the largest when that rank exceeds ``n``)."""
    n = len(scores)
    return float(_order_statistic(scores, (min(1.0, level * (n + 1) / n),))[0])


def _margins(mode: str) -> Callable:
    """A pool's (lower, upper) margins: ``sym`` as shipped (the symmetric score at the 80 % rank,
    ``sym-hf8`` the same by type 8), ``asym`` one per side at the 90 % rank (Romano et al. 2019,
    Theorem 2), ``sign`` the 20 % shared between the sides as the pool's binding sides fall."""

    @lru_cache(maxsize=4096)
    def margins(pool_rows, knobs) -> tuple[float, float]:
        lows, highs = _side_scores(pool_rows, knobs)
        if not len(lows):
            return 0.0, 0.0
        if mode in ("sym", "sym-hf8"):
            s = np.maximum(lows, highs)
            level = min(1.0, (1 - ALPHA) * (len(s) + 1) / len(s))
            m = _rank(s, 1 - ALPHA) if mode == "sym" else float(np.quantile(s, level, method="median_unbiased"))
            return m, m
        if mode == "asym":
            return _rank(lows, 1 - ALPHA / 2), _rank(highs, 1 - ALPHA / 2)
        if mode == "sign":
            share_low = float(np.mean(lows > highs))
            return _rank(lows, 1 - ALPHA * share_low), _rank(highs, 1 - ALPHA * (1 - share_low))
        raise ValueError(mode)

    return margins


def _pool_samples(rows, regime, pool, knobs, matched, ids, widened) -> np.ndarray:
    """The pool samples of the rule shipped until interval4 (the regime's rows about their median,
    moved out by the pool's own margin), with a margin per side (``me._margin`` as installed: a
    pair, or one value for both)."""
    knobs = knobs[pool]
    pool_rows = tuple(r for r in rows if r.pool == pool)
    chosen, keys = me._select(list(pool_rows), regime, knobs.keys, knobs.min_rows)
    matched[pool] = keys
    widened += me._extrapolations(list(pool_rows), regime, pool)
    ids += [r.id for r in chosen]
    values = np.array([r.log_ratio for r in chosen])
    centre = float(me._order_statistics(values, (0.5,))[0])
    m = me._margin(pool_rows, knobs)
    m_low, m_high = m if isinstance(m, tuple) else (m, m)
    d = values - centre
    return centre + np.where(d < 0, -np.maximum(-d + m_low, 0.0), np.where(d > 0, np.maximum(d + m_high, 0.0), 0.0))


def _one_pool(regime, rows) -> str | None:
    """The one pool a query's interval comes from, or None where several add (as log_interval decides)."""
    share = regime.exposed_share if regime.fabric else 0.0
    if share > 0 and "layout" in regime.pools and regime.fabric in {r.fabric for r in rows if r.pool == "layout"}:
        share = 0.0
    if len(regime.pools) == 1 and share == 0:
        return regime.pools[0]
    if not regime.pools and share == 1.0:
        return me.COLLECTIVE_POOL
    return None


def _cv_plus(shipped_log_interval: Callable) -> Callable:
    """V8: CQR's CV+ form over systems (Barber, Candes, Ramdas and Tibshirani 2021, "Predictive
    inference with the jackknife+", Ann. Statist. 49(1)): row i's symmetric score added to the
    query's band built without row i's system, the ends the ``floor(0.2 (n + 1))``-th smallest of
    the lower ends and the ``ceil(0.8 (n + 1))``-th of the upper. A query that adds pools (five
    layout rows) keeps the shipped form."""

    @lru_cache(maxsize=4096)
    def scores(pool_rows, knobs) -> tuple[tuple[str, float], ...]:
        return tuple((system, max(lo, hi)) for system, lo, hi in _scored_rows(pool_rows, knobs))

    def log_interval(regime, rows=None, knobs=None):
        rows = me.load_rows()[0] if rows is None else rows
        knobs = me.KNOBS if knobs is None else knobs
        pool = _one_pool(regime, rows)
        if pool is None:
            return shipped_log_interval(regime, rows, knobs)
        pool_rows = tuple(r for r in rows if r.pool == pool)
        bands: dict[str, tuple[float, float, float, float]] = {}
        lows, highs = [], []
        for system, score in scores(pool_rows, knobs[pool]):
            if system not in bands:
                rest = [r for r in pool_rows if r.system != system]
                low, centre, high = _p10_p90(rest, regime, knobs[pool])
                ways = len(me._extrapolations(rest, regime, pool)) + len(regime.unvalidated_fabric)
                bands[system] = low, centre, high, me.WIDEN_PER_EXTRAPOLATION ** ways
            low, centre, high, factor = bands[system]
            lows.append(centre - (centre - low + score) * factor)
            highs.append(centre + (high - centre + score) * factor)
        n = len(lows)
        k_low, k_high = math.floor(ALPHA * (n + 1)), math.ceil((1 - ALPHA) * (n + 1))
        low = np.sort(lows)[k_low - 1] if k_low >= 1 else -math.inf
        high = np.sort(highs)[k_high - 1] if k_high <= n else math.inf
        return float(low), float(high), {}, (), ()

    return log_interval


def _query_form_margin(shipped_margin: Callable) -> Callable:
    """V11: the layout pool's margin with each row scored on the interval its query gets (widened
    for a fabric no collective measurement validated, the collective pool's error added where no
    other system's layout row crossed its fabric): the smallest margin whose interval holds the
    row, by bisection; the shipped closed form elsewhere (which is that smallest margin there)."""
    rows, classes = me.load_rows()
    collectives = [r for r in rows if r.pool == me.COLLECTIVE_POOL]

    def interval_at(regime, layout_rows, margin: float) -> tuple[float, float]:
        knobs = me.KNOBS["layout"]
        chosen, _ = me._select(list(layout_rows), regime, knobs.keys, knobs.min_rows)
        widened = list(regime.unvalidated_fabric) + me._extrapolations(list(layout_rows), regime, "layout")
        values = np.array([r.log_ratio for r in chosen])
        centre = float(me._order_statistics(values, (0.5,))[0])
        step = centre + np.sign(values - centre) * np.maximum(np.abs(values - centre) + margin, 0.0)
        share = regime.exposed_share if regime.fabric else 0.0
        if regime.fabric in {r.fabric for r in layout_rows}:
            share = 0.0
        if share > 0:
            coll = me._pool_samples(collectives, regime, me.COLLECTIVE_POOL, me.KNOBS, {}, [], widened)
            step = np.log(np.add.outer((1 - share) * np.expm1(step), share * np.expm1(coll)).ravel() + 1.0)
        low, centre, high = me._order_statistics(step, (me._TAILS[0], 0.5, me._TAILS[1]))
        factor = me.WIDEN_PER_EXTRAPOLATION ** len(widened)
        return centre - (centre - low) * factor, centre + (high - centre) * factor

    @lru_cache(maxsize=4096)
    def margin(pool_rows, knobs) -> float:
        if not pool_rows or pool_rows[0].pool != "layout":
            return shipped_margin(pool_rows, knobs)
        scores = []
        for others, extent, mine in me._held_out(pool_rows):
            fabrics = {r.fabric for r in others}
            for r in mine:
                unvalidated = (f"fabric {r.fabric!r}",) if r.fabric and r.fabric not in classes else ()
                if not unvalidated and not (r.exposed_share > 0 and r.fabric and r.fabric not in fabrics):
                    low, centre, high = _p10_p90(others, r, knobs)
                    factor = me.WIDEN_PER_EXTRAPOLATION ** len(me._extrapolations(others, r, r.pool, extent))
                    scores.append(max((centre - r.log_ratio) / factor - (centre - low),
                                      (r.log_ratio - centre) / factor - (high - centre)))
                    continue
                regime = me.Regime(pools=("layout",), gpu_arch=r.gpu_arch, model_family=r.model_family,
                                   params=r.params, gpus=r.gpus, fabric=r.fabric, exposed_share=r.exposed_share,
                                   unvalidated_fabric=unvalidated, message_bytes=r.message_bytes,
                                   layout_kind=r.layout_kind)

                def holds(m: float) -> bool:
                    low, high = interval_at(regime, others, m)
                    return low <= r.log_ratio <= high

                lo, hi = -1.0, 2.0  # ln units: a margin of -1 collapses every band to its median
                if holds(lo):
                    scores.append(lo)
                    continue
                for _ in range(40):
                    mid = (lo + hi) / 2
                    lo, hi = (lo, mid) if holds(mid) else (mid, hi)
                scores.append(hi)
        return _rank(np.array(scores), me.COVERAGE)

    return margin


@dataclasses.dataclass(frozen=True, kw_only=True)
class Variant:
    """One registered variant: what it puts in place of the module's functions."""

    label: str
    band: Callable = _order_statistic
    margin: str = "sym"
    two_systems: bool = False
    min_rows: int | None = None
    cv_plus: bool = False
    query_form: bool = False


VARIANTS = {
    "V0": Variant(label="the rule shipped until interval4 (must read as W0)"),
    "V1": Variant(label="band by Hyndman-Fan type 8", band=_hyndman_fan("median_unbiased")),
    "V2": Variant(label="band by Hyndman-Fan type 7 (reported only)", band=_hyndman_fan("linear")),
    "V3": Variant(label="band and margin by type 8 (reported only)", band=_hyndman_fan("median_unbiased"),
                  margin="sym-hf8"),
    "V4": Variant(label="band at the prediction ranks", band=_prediction_ranks),
    "V5": Variant(label="regimes of two systems or more", two_systems=True),
    "V6": Variant(label="one margin per side at 90 %", margin="asym"),
    "V7": Variant(label="20 % split by the binding side", margin="sign"),
    "V8": Variant(label="CV+ over systems (not registered beforehand)", cv_plus=True),
    "V9": Variant(label="MIN_ROWS 11 (inverted CDF ends not the extremes)", min_rows=11),
    "V10": Variant(label="type-8 band, MIN_ROWS 7 (its ends inside)", band=_hyndman_fan("median_unbiased"),
                   min_rows=7),
    "V11": Variant(label="layout scores on their queries' intervals", query_form=True),
}


@contextlib.contextmanager
def installed(variant: Variant) -> Iterator[None]:
    """The module with ``variant``'s functions in place of its own, restored on exit."""
    names = ("_order_statistics", "_select", "_margin", "_pool_samples", "log_interval", "KNOBS")
    saved = {name: getattr(me, name) for name in names}
    try:
        me._order_statistics = variant.band
        if variant.two_systems:
            me._select = _select_two_systems
        if variant.min_rows is not None:
            me.KNOBS = {pool: dataclasses.replace(k, min_rows=variant.min_rows) for pool, k in saved["KNOBS"].items()}
        # the rule shipped until interval4 (per-pool margins on the p10-p90), which V0 re-reads
        me._pool_samples = _pool_samples
        if variant.query_form:
            me._margin = _query_form_margin(_margins("sym"))
        else:
            me._margin = _margins(variant.margin)
        if variant.cv_plus:
            me.log_interval = _cv_plus(saved["log_interval"])
        yield
    finally:
        for name, value in saved.items():
            setattr(me, name, value)


# --- interval3 (2026-12-06): regime cells, shrinkage and calibration groups, registered before
# scoring in validation/large_model_runs.md ("Model-error intervals: regime cells, shrinkage and
# calibration groups registered before scoring"), W1-W5 and each with V11's repair (W1+-W5+).

SHRINK_PRIOR_SYSTEMS = 1
"""W1's ``k0``: the parent regime counts as one system's worth of evidence about the cell."""

MONDRIAN_CUT = 3
"""W2's and W3's systems: from three exchangeable systems on, a new one's bias falls between
the others' smallest and largest with probability ``(k - 1) / (k + 1)`` >= 1/2."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class WVariant:
    """One of interval3's registered variants: the band rule, the fewest systems a regime keeps,
    the calibration groups of the margin and whether V11's repair is on."""

    label: str
    """What the table calls it."""
    band: str = "shipped"
    """``shipped`` (signed p10 / median / p90), ``shrink`` (W1), ``centred`` (W4), ``shortest`` (X1) or
    ``shortest-n1`` (Y4, Y5: the shortest window of ``ceil(0.8 (n + 1))`` rows, at most ``n``)."""
    systems: int = 1
    """Fewest distinct systems a regime keeps before a key is dropped (W3: 3)."""
    margin: str = "pool"
    """``pool`` (one per pool), ``mondrian`` (W2: by the band's systems), ``joint`` (W5: all pools),
    ``extrap`` (Y2: all pools, apart for queries that extrapolate and those that do not) or
    ``pool-extrap`` (Y3: per pool, so split, a group of fewer than :data:`MIN_ROWS` scores taking
    its pool's) or ``scale`` (Z1, Z2: all pools, by the query's scale band; the joint margin where
    that band has fewer than :data:`MIN_ROWS` scores)."""
    query_form: bool = False
    """V11's repair: the five layout rows scored on the intervals their queries get."""
    feature: str = ""
    """regime's R variants: with ``margin="feature"``, the query-time feature (a row / regime attribute,
    :data:`dpsim.predict.model_error.FEATURES` or ``coarse``) whose values calibrate apart (all pools'
    scores of rows with the query's value; the joint margin where fewer than :data:`MIN_ROWS`)."""
    layout_key: str = ""
    """regime's R variants: a query-time feature kept in the layout pool's regime keys right after the
    layout kind."""


class _W:
    """The installed W variant's state: the variant, caches, and the layout margin that V11's
    bisection tries (``None`` outside it)."""

    variant: WVariant = WVariant(label="")
    override: float | None = None
    scores: dict = {}
    joint: dict = {}


def _w_select(rows, regime, keys, minimum) -> tuple[list, int]:
    """The regime's rows and the keys kept: dropped from the last until ``minimum`` rows of at
    least the variant's systems remain."""
    target = tuple(getattr(regime, k) for k in keys)
    # attrgetter (C) reads the keys of a few hundred rows per band; --nested builds tens of thousands
    values = list(map(attrgetter(*keys), rows)) if len(keys) > 1 else [(getattr(r, keys[0]),) for r in rows]
    for keep in range(len(keys), -1, -1):
        chosen = [r for r, v in zip(rows, values) if v[:keep] == target[:keep]]
        if (len(chosen) >= minimum and len({r.system for r in chosen}) >= _W.variant.systems) or keep == 0:
            return chosen, keep
    raise AssertionError("unreachable")


def _stats(values) -> tuple[float, float, float]:
    lo, c, hi = _order_statistic(values, (me._TAILS[0], 0.5, me._TAILS[1]))
    return float(lo), float(c), float(hi)


def _w_band(rows, regime, knobs) -> tuple[float, float, float, int, list]:
    """``(p10, centre, p90, systems, chosen rows)`` of the regime by the variant's band rule."""
    keys = knobs.keys
    chosen, keep = _w_select(rows, regime, keys, knobs.min_rows)
    values = [r.log_ratio for r in chosen]
    k = len({r.system for r in chosen})
    lo, c, hi = _stats(values)
    if _W.variant.band == "shrink" and keep > 0:
        target = tuple(getattr(regime, key) for key in keys[:keep - 1])
        parent = [r.log_ratio for r in rows if tuple(getattr(r, key) for key in keys[:keep - 1]) == target]
        plo, pc, phi = _stats(parent)
        w = k / (k + SHRINK_PRIOR_SYSTEMS)
        lo, c, hi = w * lo + (1 - w) * plo, w * c + (1 - w) * pc, w * hi + (1 - w) * phi
    elif _W.variant.band == "shortest":
        lo, hi = me._shortest_window(values)  # the module's band since interval4
    elif _W.variant.band == "shortest-n1":
        lo, hi = _shortest_window_n1(values)
    elif _W.variant.band == "centred":
        d = float(_order_statistic(np.abs(np.array(values) - c), (me.COVERAGE,))[0])
        lo, hi = c - d, c + d
    return lo, c, hi, k, chosen


def _shortest_window_n1(values) -> tuple[float, float]:
    """Y4 / Y5's band: the narrowest window of ``min(n, ceil(0.8 (n + 1)))`` consecutive sorted
    values, the rank at which a window of a regime's ``n`` exchangeable rows holds a new one with
    probability >= 80 % (the small-sample correction split conformal makes to its own quantile)."""
    v = np.sort(np.asarray(values, dtype=float))
    width = min(len(v), math.ceil(me.COVERAGE * (len(v) + 1)))
    spans = v[width - 1:] - v[:len(v) - width + 1]
    start = int(np.argmin(spans))
    return float(v[start]), float(v[start + width - 1])


def _w_closed_scores(pool_rows, knobs) -> list[tuple[float, int, str, int]]:
    """Each row's shipped (closed-form) score against its band without its system, that band's
    systems, the row's id and the ways it extrapolates from the others."""
    key = ("closed", tuple(pool_rows), knobs)
    if key in _W.scores:
        return _W.scores[key]
    out = []
    for others, extent, mine in me._held_out(pool_rows):
        bands: dict[tuple, tuple] = {}  # one band per regime key of the system's rows, as me._scores
        for r in mine:
            key = tuple(getattr(r, name) for name in knobs.keys)
            if key not in bands:
                bands[key] = _w_band(others, r, knobs)
            lo, c, hi, k, _ = bands[key]
            ways = len(me._extrapolations(others, r, r.pool, extent))
            factor = me.WIDEN_PER_EXTRAPOLATION ** ways
            out.append((max((c - r.log_ratio) / factor - (c - lo), (r.log_ratio - c) / factor - (hi - c)), k, r.id,
                        ways))
    _W.scores[key] = out
    return out


def _w_scores(pool_rows, knobs) -> list[tuple[float, int, int]]:
    """The pool's scores with the band's systems and the ways each row extrapolates; with V11's
    repair, the layout rows whose query adds the collective pool's error or widens for an unvalidated fabric scored by bisection on
    the layout margin through the variant's own interval (the other pools' margins as the variant
    gives them without the repair, as V11 took the collective pool's as shipped)."""
    key = (pool_rows, knobs)
    if key in _W.scores:
        return _W.scores[key]
    closed = _w_closed_scores(pool_rows, knobs)
    if not (_W.variant.query_form and pool_rows and pool_rows[0].pool == "layout"):
        _W.scores[key] = [(s, k, w) for s, k, _, w in closed]
        return _W.scores[key]
    all_rows, classes = me.load_rows()
    collectives = [r for r in all_rows if r.pool == me.COLLECTIVE_POOL]
    by_id = {rid: (s, k, w) for s, k, rid, w in closed}
    out = []
    for r in pool_rows:
        others = [o for o in pool_rows if o.system != r.system]
        if not others:
            continue
        unvalidated = (f"fabric {r.fabric!r}",) if r.fabric and r.fabric not in classes else ()
        if not unvalidated and not (r.exposed_share > 0 and r.fabric and r.fabric not in {o.fabric for o in others}):
            out.append(by_id[r.id])
            continue
        regime = me.Regime(pools=("layout",), gpu_arch=r.gpu_arch, model_family=r.model_family, params=r.params,
                           gpus=r.gpus, fabric=r.fabric, exposed_share=r.exposed_share,
                           unvalidated_fabric=unvalidated, message_bytes=r.message_bytes, layout_kind=r.layout_kind)

        def holds(m: float) -> bool:
            saved, _W.override = _W.override, m
            try:
                low, high, _, _, _ = me.log_interval(regime, others + collectives, me.KNOBS)
            finally:
                _W.override = saved
            return low <= r.log_ratio <= high

        lo, hi = -1.0, 2.0  # ln units, as V11
        if holds(lo):
            out.append((lo, *by_id[r.id][1:]))
            continue
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if holds(mid) else (mid, hi)
        out.append((hi, *by_id[r.id][1:]))
    _W.scores[key] = out
    return out


def _w_margin(rows, pool_rows, knobs, k: int, ways: int = 0, scale: str = "", group=None) -> float:
    """The margin of a band of ``k`` systems in ``pool``, for a query that extrapolates in ``ways``
    ways on GPUs of scale band ``scale`` with the value ``group`` of the variant's feature, by the
    variant's calibration groups."""
    pool = pool_rows[0].pool
    if _W.override is not None and pool == "layout":
        return _W.override
    inside_bisection = _W.override is not None
    if _W.variant.margin == "feature" and not inside_bisection:
        key = (tuple(rows), "feature", group)
        if key not in _W.joint:
            scores = []
            for p in (*me.POOLS, me.COLLECTIVE_POOL):
                pr = tuple(r for r in rows if r.pool == p)
                if pr:
                    value_of = {r.id: getattr(r, _W.variant.feature) for r in pr}
                    scores += [sc for sc, _, rid, _ in _w_closed_scores(pr, me.KNOBS[p]) if value_of[rid] == group]
            _W.joint[key] = _rank(np.array(scores), me.COVERAGE) if len(scores) >= me.MIN_ROWS else None
        if _W.joint[key] is not None:
            return _W.joint[key]
        _W.variant = dataclasses.replace(_W.variant, margin="joint")  # too few: the joint margin
        try:
            return _w_margin(rows, pool_rows, knobs, k, ways, scale, group)
        finally:
            _W.variant = dataclasses.replace(_W.variant, margin="feature")
    if _W.variant.margin == "scale" and not inside_bisection:
        key = (tuple(rows), "scale", scale)
        if key not in _W.joint:
            scores = []
            for p in (*me.POOLS, me.COLLECTIVE_POOL):
                pr = tuple(r for r in rows if r.pool == p)
                if pr:
                    band_of = {r.id: r.scale_band for r in pr}
                    scores += [sc for sc, _, rid, _ in _w_closed_scores(pr, me.KNOBS[p]) if band_of[rid] == scale]
            _W.joint[key] = _rank(np.array(scores), me.COVERAGE) if len(scores) >= me.MIN_ROWS else None
        if _W.joint[key] is not None:
            return _W.joint[key]
        _W.variant = dataclasses.replace(_W.variant, margin="joint")  # too few: the joint margin
        try:
            return _w_margin(rows, pool_rows, knobs, k, ways, scale)
        finally:
            _W.variant = dataclasses.replace(_W.variant, margin="scale")
    if _W.variant.margin in ("joint", "extrap"):
        group = _W.variant.margin == "extrap" and ways > 0
        key = (tuple(rows), inside_bisection, group)
        if key not in _W.joint:
            scores = []
            for p in (*me.POOLS, me.COLLECTIVE_POOL):
                pr = tuple(r for r in rows if r.pool == p)
                if pr:
                    scored = ([(s, kk, w) for s, kk, _, w in _w_closed_scores(pr, me.KNOBS[p])] if inside_bisection
                              else _w_scores(pr, me.KNOBS[p]))
                    scores += [s[0] for s in scored if _W.variant.margin == "joint" or (s[2] > 0) == group]
            _W.joint[key] = _rank(np.array(scores), me.COVERAGE) if scores else 0.0
        return _W.joint[key]
    scored = ([(s, kk, w) for s, kk, _, w in _w_closed_scores(pool_rows, knobs)] if inside_bisection
              else _w_scores(pool_rows, knobs))
    if not scored:
        return 0.0
    if _W.variant.margin == "pool-extrap":
        group = [s for s, _, w in scored if (w > 0) == (ways > 0)]
        if len(group) >= me.MIN_ROWS:
            return _rank(np.array(group), me.COVERAGE)
    if _W.variant.margin == "mondrian":
        group = [s for s, kk, _ in scored if (kk >= MONDRIAN_CUT) == (k >= MONDRIAN_CUT)]
        if len(group) >= me.MIN_ROWS:
            return _rank(np.array(group), me.COVERAGE)
    return _rank(np.array([s for s, _, _ in scored]), me.COVERAGE)


def _w_pool_samples(rows, regime, pool, knobs, matched, ids, widened) -> np.ndarray:
    """:func:`dpsim.predict.model_error._pool_samples` by the variant: the regime's rows mapped
    piecewise-linearly onto the variant's p10 / median / p90 (ten points at those where a side of
    the rows has no spread to map), each moved away from the centre by the variant's margin."""
    knobs = knobs[pool]
    pool_rows = tuple(r for r in rows if r.pool == pool)
    lo, c, hi, k, chosen = _w_band(list(pool_rows), regime, knobs)
    matched[pool] = {}
    widened += me._extrapolations(list(pool_rows), regime, pool)
    ids += [r.id for r in chosen]
    samples = me._mapped(np.array([r.log_ratio for r in chosen]), lo, c, hi)
    m = _w_margin(rows, pool_rows, knobs, k, len(me._extrapolations(list(pool_rows), regime, pool)),
                  regime.scale_band, getattr(regime, _W.variant.feature) if _W.variant.feature else None)
    return c + np.sign(samples - c) * np.maximum(np.abs(samples - c) + m, 0.0)


W_VARIANTS = {
    "W0": WVariant(label="the rule shipped until interval4, through W's code"),
    "W1": WVariant(label="bands shrunk toward the parent by systems", band="shrink"),
    "W2": WVariant(label="margin within bands of 1-2 / 3+ systems", margin="mondrian"),
    "W3": WVariant(label="regimes of three systems or more", systems=MONDRIAN_CUT),
    "W4": WVariant(label="bias-centred symmetric bands (80 % |r - median|)", band="centred"),
    "W5": WVariant(label="one margin for all pools", margin="joint"),
    # second registration, after W1-W5(+) were scored (validation/large_model_runs.md)
    "X1": WVariant(label="shortest window of 80 % of the regime's rows", band="shortest"),
    # shipped by interval4 (post hoc; the nested check below is its evidence): must read as the module
    "X1J": WVariant(label="X1 with one margin for all pools (shipped since interval4)", band="shortest",
                    margin="joint"),
}
W_VARIANTS.update({f"{name}+": dataclasses.replace(v, label=v.label + ", with V11", query_form=True)
                   for name, v in list(W_VARIANTS.items())})
# --- width (2026-12-07): registered here, each with its reason, before any was scored on the rows
# whose large-model residuals are their leave-one-system-out ones (issue 25 item 1; X1 and X1J
# re-read on them, W0 too). Scored by `python validation/model_error_variants.py --gather Y0 ...`.
# Keep rule, written before scoring: of Y1-Y6, those reading >= 80 % inside, half-width / error <= 2
# and every pool >= 75 % are eligible, the smallest half-width / error among them wins (the criterion
# --nested applies per left-out system), and it ships only if `--nested` over Y0-Y6 also meets both
# bars; otherwise nothing but the LOSO residuals ships.
Y_VARIANTS = {
    # the shipped rule (X1J) as the baseline on the new residuals
    "Y0": WVariant(label="X1J re-read on the LOSO residuals", band="shortest", margin="joint"),
    # a pool's scores are evidence about its own queries: heavy-tailed pools do not widen light ones
    "Y1": WVariant(label="shortest window, one margin per pool (X1)", band="shortest", margin="pool"),
    # a query knows whether it leaves the validated ground; the heavy tail is the left-out novelty
    "Y2": WVariant(label="shortest window, one margin for extrapolating and one for other queries",
                   band="shortest", margin="extrap"),
    # Y1 and Y2 together: per pool, extrapolating queries calibrated apart where >= MIN_ROWS scores
    "Y3": WVariant(label="shortest window, margin per pool and extrapolation", band="shortest",
                   margin="pool-extrap"),
    # the band is itself a prediction set for a new row: its small-sample rank is ceil(0.8 (n + 1))
    "Y4": WVariant(label="shortest window of ceil(0.8 (n + 1)) rows, margin per pool", band="shortest-n1",
                   margin="pool"),
    # the same band with the shipped joint margin (which of the two the correction helps)
    "Y5": WVariant(label="shortest window of ceil(0.8 (n + 1)) rows, one margin", band="shortest-n1",
                   margin="joint"),
    # a band from one system's rows is that system's bias, not a spread across systems
    "Y6": WVariant(label="shortest window, margin per pool, regimes of two systems or more",
                   band="shortest", margin="pool", systems=2),
}
# Second round, registered after Y0-Y6 were scored (none met both bars), before its own scores:
# the one query-time split the brief names that this round had not tried, the scale band.
Y_VARIANTS.update({
    # a job across nodes meets the network's exposed communication, stragglers and topology, which
    # dpsim models more coarsely than one GPU's or one node's step: its errors' law is not theirs
    "Z1": WVariant(label="Y5's band, one margin per scale band (all pools; joint under 9 scores)",
                   band="shortest-n1", margin="scale"),
    "Z2": WVariant(label="shortest window, one margin per scale band (all pools; joint under 9 scores)",
                   band="shortest", margin="scale"),
})
W_VARIANTS.update(Y_VARIANTS)
# --- regime (2026-12-07): query-time features, registered here, each with its reason, and committed
# before any was scored (issue 25; the width helper found that what sets the median half-width is each
# left-out system's own bias, so a feature known at query time that separates the steps dpsim prices
# coarsely from the ones it prices well could give the latter narrow intervals and the former wide
# ones). Each feature is read from the prediction's own configuration
# (:func:`dpsim.predict.model_error.query_features`; ``coarse`` is its composite). Scored by
# `python validation/model_error_variants.py --gather R0 R1 R2 R3 R4 R5 R6` and `--nested R0 ... R6`.
# Keep rule, written before scoring: of R1-R6, those reading >= 80 % inside, half-width / error <= 2
# and every pool >= 75 % are eligible, the smallest half-width / error among them wins, and it ships
# only if `--nested` over R0-R6 also meets both bars; otherwise the shipped rule stays.
R_VARIANTS = {
    # the shipped rule (X1J) as the baseline on the rows with their features (must read as Y0)
    "R0": WVariant(label="X1J as shipped, the baseline", band="shortest", margin="joint"),
    # parameters gathered per unit or state offloaded, long context, or experts: the steps priced by
    # the parts dpsim models most coarsely (gathers hidden behind layers and host transfers, context
    # exchanges and attention at long sequence, all-to-alls and expert load), whose errors' law need not
    # be the others': calibrate the margin apart for them (Mondrian, by a query-time group)
    "R1": WVariant(label="X1J, margin apart for coarse steps (sharded/offload, long context, MoE)",
                   band="shortest", margin="feature", feature="coarse"),
    # the same split as a regime key after the layout kind: a coarse query's band from coarse rows
    "R2": WVariant(label="X1J, coarse as the layout pool's second key", band="shortest", margin="joint",
                   layout_key="coarse"),
    # both: the band from like rows and the margin from like rows' scores
    "R3": WVariant(label="R1 and R2 together", band="shortest", margin="feature", feature="coarse",
                   layout_key="coarse"),
    # parameter gathers per unit (ZeRO-3, FSDP) or host offload alone: the overlap of gathers with
    # compute and the host's transfers are the least validated mechanisms of a data-parallel step
    "R4": WVariant(label="X1J, margin apart for sharded-parameter / offload steps", band="shortest",
                   margin="feature", feature="sharded_state"),
    # long context alone: attention's share and context exchanges grow with the sequence, and few
    # validated kernels ran at 32k tokens or more
    "R5": WVariant(label="X1J, margin apart for long-context steps (cp > 1 or >= 32k tokens)",
                   band="shortest", margin="feature", feature="long_context"),
    # FP8 linears: dpsim prices them at the FP8 rate with cast costs, while TE's scaling and host
    # overheads are read from source, not measured per op: another precision's errors are not theirs
    "R6": WVariant(label="X1J, margin apart for FP8 steps", band="shortest", margin="feature", feature="fp8"),
}
W_VARIANTS.update(R_VARIANTS)
W_VARIANTS["W0+"] = dataclasses.replace(W_VARIANTS["W0+"], label="V11 through W's code (must read as V11)")
W_VARIANTS["X1J"] = dataclasses.replace(W_VARIANTS["X1J"], label="as shipped since interval4 through W's code (X1J)")


@contextlib.contextmanager
def installed_w(variant: WVariant) -> Iterator[None]:
    """The module with a W variant's interval in place of its own, restored on exit."""
    saved, saved_knobs = me._pool_samples, me.KNOBS
    _W.variant, _W.override, _W.scores, _W.joint = variant, None, {}, {}
    try:
        me._pool_samples = _w_pool_samples
        if variant.layout_key:
            me.KNOBS = {**saved_knobs, "layout": me.Knobs(keys=("layout_kind", variant.layout_key, *me.REGIME_KEYS),
                                                          min_rows=me.MIN_ROWS)}
        yield
    finally:
        me._pool_samples, me.KNOBS = saved, saved_knobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help=f"variants to score, of {', '.join(VARIANTS)} (default: all)")
    parser.add_argument("--nested", action="store_true",
                        help="choose among the named W variants per left-out system on the others' rows")
    parser.add_argument("--rows", type=Path, metavar="PATH",
                        help="score these rows (``validation/model_error.py --rows-out PATH``), not the shipped ones")
    parser.add_argument("--gather", action="store_true",
                        help="score the rows the validation scripts give now (``validation/model_error.py``'s "
                             "gathering, minutes), not the shipped ones: one command after accuracy changes")
    args = parser.parse_args()
    if args.gather:
        import json
        import sys
        import tempfile

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import model_error as script

        args.rows = Path(tempfile.mkdtemp()) / "model_error_rows.json"
        args.rows.write_text(json.dumps(script.gather(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"# rows gathered into {args.rows}")
    if args.rows is not None:
        me.ROWS_FILE = args.rows
        me.forget_loaded()
        print(f"# scoring {len(me.load_rows()[0])} rows from {args.rows}")
    names = args.variants or list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS and n not in W_VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; expected some of "
                     f"{', '.join([*VARIANTS, *W_VARIANTS])}")
    if args.nested:
        nested(names)
        return
    print("| variant | inside | half-width / error | compute | ddp | layout | collective |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        variant = VARIANTS.get(name) or W_VARIANTS[name]
        with installed(variant) if name in VARIANTS else installed_w(variant):
            cov = me.loso_coverage()
        a = cov["all"]
        pools = " | ".join(f"{c.fraction:.1%}, {c.median_half_width / c.median_abs_error:.2f}"
                           for p, c in cov.items() if p != "all")
        print(f"| {name} {variant.label} | {a.fraction:.1%} ({a.inside}/{a.rows}) | "
              f"{a.median_half_width:.2%} / {a.median_abs_error:.2%} = {a.median_half_width / a.median_abs_error:.3f}"
              f" | {pools} |", flush=True)



def nested(names: list[str]) -> None:
    """For each system, the rule among ``names`` (W variants) that the other systems' rows
    choose (>= 80 % inside with every pool >= 75 %, then the smallest half-width / error; else the
    most inside), and that system's rows scored with it without the system; prints the figures
    over all rows and how often each rule was chosen."""
    rows = me.load_rows()[0]
    systems = sorted({r.system for r in rows})
    chosen_by: dict[str, str] = {}
    figures: dict[tuple[str, str], tuple] = {}
    scored: dict[tuple[str, str], list] = {}
    for name in names:
        with installed_w(W_VARIANTS[name]):
            for system in systems:
                rest = tuple(r for r in rows if r.system != system)
                cov = me.loso_coverage(rest)
                a = cov["all"]
                figures[name, system] = (a.fraction >= me.COVERAGE and all(c.fraction >= 0.75 for c in cov.values()),
                                         a.median_half_width / a.median_abs_error, a.fraction)
                scored[name, system] = [me._scored(r, list(rest), me.KNOBS) for r in rows if r.system == system]
    items = []
    for system in systems:
        ok = [n for n in names if figures[n, system][0]]
        pick = (min(ok, key=lambda n: figures[n, system][1]) if ok
                else max(names, key=lambda n: figures[n, system][2]))
        chosen_by[system] = pick
        items += scored[pick, system]
    c = me._coverage("all", items)
    print(f"nested over {', '.join(names)}: {c.fraction:.1%} ({c.inside}/{c.rows}) | "
          f"{c.median_half_width:.2%} / {c.median_abs_error:.2%} = {c.median_half_width / c.median_abs_error:.3f}")
    for name in names:
        print(f"  {name} chosen for {sum(v == name for v in chosen_by.values())} of {len(systems)} systems: "
              f"{', '.join(s for s, v in chosen_by.items() if v == name)}")


if __name__ == "__main__":
    main()
