"""Least-squares alpha-beta fits of collective timings, piecewise by message size.

A collective of S bytes on a ring of N ranks costs ``T = a + b*S`` (the simulator's
``base + steps*alpha + steps*(S/N)/B``, see :mod:`dpsim.collectives`): ``a`` is the
size-independent latency and ``b`` the seconds per byte, ``b = bus_factor(op, N) / B``
with B the bus bandwidth nccl-tests reports for large S.

Fitting
    Measurements come from a geometric size sweep (8 B .. 1 GiB), whose times span
    five orders of magnitude, so the fit minimises *relative* residuals,
    ``sum(((T_i - a - b*S_i) / T_i)**2)`` (weighted least squares, numpy), with
    ``a >= 0`` and ``b >= 0`` (a negative intercept or slope is refitted with that
    parameter at 0).

Piecewise
    NCCL changes protocol (LL, LL128, Simple) and algorithm (tree, ring, NVLS) with
    the message size, and gloo its algorithm, so one line rarely fits 8 B .. 1 GiB.
    :func:`fit_alpha_beta` fits 1, 2, ... segments (each the optimal split of the sorted
    sizes into contiguous runs of at least ``min_points`` sizes, by dynamic programming)
    and chooses how many:

    Each size's relative residual counts once, or, when the sizes' uncertainties are known
    (``rel_sigma``: dpsim calibrate's 95 % intervals), weighted by the inverse of their
    square, so precise sizes steer the fit and noisy ones barely do.

    - a *dense* sweep (dpsim's own, 2x steps; ``min_points`` 3): the fewest segments
      whose worst relative residual is within :data:`DENSE_TOLERANCE` (2 %), else the
      count with the lowest information criterion of the relative residuals,
      ``n ln(RSS/n) + 2 p ln n`` with ``p = 3k - 1`` parameters (two per segment and a
      break between each pair): the Bayesian criterion with its penalty doubled, because
      the breaks are the best of many placements (with the plain penalty, 3 % white
      noise on 21 sizes split into pieces in about a third of the seeds tried; doubled,
      2 in 120). Measurement noise that is white leaves one line; a
      systematic bend, even 3-6 % at a few sizes (gloo's switch to another algorithm
      near DDP's bucket sizes), buys more segments. The old rule, "the first count within
      10 %", accepted such a bend as one line;
    - a *sparse* sweep (median step >= :data:`SPARSE_STEP`, as in published tables that
      sample every 8x; ``min_points`` 2): a 2-size piece passes through both points, so
      the information criterion cannot judge it; the fewest segments within
      :data:`DEFAULT_TOLERANCE` are kept, else the smallest worst residual. Every fit
      also reports the best single line's quality.

    Each segment reports its worst and root-mean-square relative residual.

Evaluation
    A piece applies over its measured sizes (and beyond, for the first and last
    pieces). Between the last size of one piece and the first of the next, where the
    protocol changes somewhere unmeasured, the time is interpolated geometrically
    (linearly in log size, log time) between the two pieces' values at those sizes, so
    the fitted curve is continuous and never jumps from one line to the other. The
    reported break is the geometric middle of that gap.

Quality
    Each fit reports R² of ``ln T`` (the share of the sweep's variance in log time
    that the fit explains; a log scale because the sweep is geometric) and the worst
    relative residual ``max |T_fit - T| / T``. :attr:`AlphaBetaFit.poor` flags a fit
    whose worst residual exceeds :data:`POOR_WORST_REL`, or whose R² is below
    :data:`POOR_R2` over a sweep whose times span more than :data:`R2_MIN_SPAN`x;
    callers warn.
"""

from __future__ import annotations

import math

import numpy as np

from dpsim.errors import ProfileError
from dpsim.frozen import frozen_dataclass

DEFAULT_TOLERANCE = 0.10
"""Sparse sweeps: worst relative residual below which fewer segments are preferred."""
SIGMA_FLOOR = 0.005
"""Smallest relative uncertainty a point is weighted with (:func:`fit_alpha_beta`'s ``rel_sigma``):
no size is trusted beyond +-0.5 %, whatever its repeats say (systematic effects remain)."""
DENSE_TOLERANCE = 0.02
"""Dense sweeps: a fit whose worst relative residual is within this needs no more segments
(about the repeat-to-repeat noise of a converged measurement, see ``dpsim calibrate``)."""
DEFAULT_MAX_SEGMENTS = 4
"""Most segments a piecewise fit uses."""
DEFAULT_MIN_POINTS = 3
"""Fewest sizes in one segment (two parameters plus one degree of freedom)."""
SPARSE_STEP = 4.0
"""A sweep whose median step between sizes is at least this (published tables often
step 8x) is sparse: a segment may then hold 2 sizes."""
POOR_R2 = 0.98
"""A fit whose R² (of ln T) is below this is flagged poor, when its times span more
than :data:`R2_MIN_SPAN` (over a flat, latency-bound sweep R² only measures noise)."""
R2_MIN_SPAN = 10.0
"""Slowest over fastest measured time above which R² is meaningful."""
POOR_WORST_REL = 0.25
"""A fit whose worst relative residual exceeds this is flagged poor."""


@frozen_dataclass
class Segment:
    """One straight piece ``T = latency_s + seconds_per_byte * S`` fitted over a size range."""

    first_size_bytes: float
    """Smallest measured size in this piece."""
    last_size_bytes: float
    """Largest measured size in this piece."""
    latency_s: float
    """Intercept a: the size-independent time."""
    seconds_per_byte: float
    """Slope b."""
    n_points: int
    """Measurements fitted by this piece."""
    r2: float
    """R² of ln T over this piece's points (``nan`` when its times are all equal)."""
    worst_rel_residual: float
    """max |T_fit - T| / T over this piece's points."""
    rms_rel_residual: float = math.nan
    """Root mean square of (T_fit - T) / T over this piece's points (``nan`` if unknown)."""

    def time_s(self, size_bytes: float) -> float:
        """This piece's time for a ``size_bytes`` message."""
        return self.latency_s + self.seconds_per_byte * size_bytes


def piecewise_time(segments, size_bytes: float, piece_time) -> float:
    """Evaluate pieces at ``size_bytes``: the piece covering it, or log-log interpolation in a gap.

    ``piece_time(segment, size)`` gives one piece's time (callers may rescale it, e.g.
    to another communicator size). The first and last pieces extend to 0 and infinity.
    """
    for i, seg in enumerate(segments):
        if size_bytes <= seg.last_size_bytes or i == len(segments) - 1:
            if i == 0 or size_bytes >= seg.first_size_bytes:
                return piece_time(seg, size_bytes)
            prev = segments[i - 1]
            lo, hi = prev.last_size_bytes, seg.first_size_bytes
            t_lo, t_hi = piece_time(prev, lo), piece_time(seg, hi)
            if t_lo <= 0 or t_hi <= 0:
                return piece_time(seg, size_bytes)
            w = math.log(size_bytes / lo) / math.log(hi / lo)
            return math.exp((1 - w) * math.log(t_lo) + w * math.log(t_hi))
    raise AssertionError("no segments")


@frozen_dataclass
class AlphaBetaFit:
    """A piecewise alpha-beta fit over a size sweep."""

    segments: tuple[Segment, ...]
    """Pieces in increasing size order (measured ranges do not overlap)."""
    r2: float
    """R² of ln T over every point."""
    worst_rel_residual: float
    """Worst relative residual over every point."""
    time_span: float = math.nan
    """Slowest over fastest measured time (``nan`` if unknown)."""

    @property
    def gaps_bytes(self) -> tuple[tuple[float, float], ...]:
        """(last size of one piece, first size of the next): where the behaviour changes."""
        return tuple((a.last_size_bytes, b.first_size_bytes) for a, b in zip(self.segments, self.segments[1:]))

    @property
    def breaks_bytes(self) -> tuple[float, ...]:
        """The geometric middle of each gap between pieces."""
        return tuple(math.sqrt(lo * hi) for lo, hi in self.gaps_bytes)

    @property
    def poor(self) -> bool:
        """True when the fit should be reported with a warning."""
        r2_counts = not math.isnan(self.r2) and not math.isnan(self.time_span) and self.time_span > R2_MIN_SPAN
        return (r2_counts and self.r2 < POOR_R2) or self.worst_rel_residual > POOR_WORST_REL

    def time_s(self, size_bytes: float) -> float:
        """Fitted time of a ``size_bytes`` message."""
        return piecewise_time(self.segments, size_bytes, Segment.time_s)


def _line(x: np.ndarray, y: np.ndarray, wt: np.ndarray | None = None) -> tuple[float, float]:
    """Relative-residual least squares of y = a + b*x with a, b >= 0 (each point weighted by ``wt``)."""
    wt = np.ones_like(y) if wt is None else wt
    r = np.sqrt(wt)
    w = 1.0 / y
    design = np.column_stack([w * r, x * w * r])
    (a, b), *_ = np.linalg.lstsq(design, r, rcond=None)
    if a >= 0 and b >= 0:
        return float(a), float(b)
    candidates = []
    u = x * w  # a = 0: minimise sum wt (1 - b*u)^2
    if np.dot(wt * u, u) > 0:
        candidates.append((0.0, max(0.0, float(np.dot(wt, u) / np.dot(wt * u, u)))))
    candidates.append((float(np.dot(wt, w) / np.dot(wt * w, w)), 0.0))  # b = 0
    return min(candidates, key=lambda ab: float(np.sum(wt * (1 - (ab[0] + ab[1] * x) * w) ** 2)))


def _rel_sse(x: np.ndarray, y: np.ndarray, a: float, b: float, wt: np.ndarray | None = None) -> float:
    sq = ((a + b * x - y) / y) ** 2
    return float(np.sum(sq if wt is None else wt * sq))


def log_r2(y: np.ndarray, fitted: np.ndarray) -> float:
    """R² of ln y against ln fitted (``nan`` when every y is equal)."""
    # ln by the C library, point by point (a sweep's few dozen sizes): numpy's log is a SIMD kernel chosen by the
    # CPU, and R² is written into profiles the shipped ones are compared with.
    ly = np.array([math.log(v) for v in np.asarray(y, dtype=float).tolist()])
    lf = np.array([math.log(max(v, 1e-300)) for v in np.asarray(fitted, dtype=float).tolist()])
    ss_tot = float(np.sum((ly - ly.mean()) ** 2))
    ss_res = float(np.sum((ly - lf) ** 2))
    if ss_tot <= 1e-18 * max(1.0, len(y)):
        return 1.0 if ss_res <= 1e-12 else math.nan
    return 1.0 - ss_res / ss_tot


def _partition(x: np.ndarray, y: np.ndarray, k: int, min_points: int,
               wt: np.ndarray | None = None) -> list[tuple[int, int]] | None:
    """Optimal split of the sorted points into k contiguous runs (DP over weighted relative SSE)."""
    n = len(x)
    if k * min_points > n:
        return None
    cost = {}
    for i in range(n):
        for j in range(i + min_points, n + 1):
            ws = None if wt is None else wt[i:j]
            a, b = _line(x[i:j], y[i:j], ws)
            cost[i, j] = _rel_sse(x[i:j], y[i:j], a, b, ws)
    inf = math.inf
    best = [[inf] * (n + 1) for _ in range(k + 1)]
    back = [[-1] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0.0
    for m in range(1, k + 1):
        for j in range(m * min_points, n + 1):
            for i in range((m - 1) * min_points, j - min_points + 1):
                if best[m - 1][i] < inf and best[m - 1][i] + cost[i, j] < best[m][j]:
                    best[m][j] = best[m - 1][i] + cost[i, j]
                    back[m][j] = i
    if best[k][n] == inf:
        return None
    runs, j = [], n
    for m in range(k, 0, -1):
        i = back[m][j]
        runs.append((i, j))
        j = i
    return runs[::-1]


def _build(x: np.ndarray, y: np.ndarray, runs: list[tuple[int, int]], wt: np.ndarray | None = None) -> AlphaBetaFit:
    segments = []
    for i, j in runs:
        xs, ys = x[i:j], y[i:j]
        a, b = _line(xs, ys, None if wt is None else wt[i:j])
        fitted = a + b * xs
        segments.append(Segment(
            first_size_bytes=float(xs[0]), last_size_bytes=float(xs[-1]), latency_s=a, seconds_per_byte=b,
            n_points=j - i, r2=log_r2(ys, fitted), worst_rel_residual=float(np.max(np.abs(fitted - ys) / ys)),
            rms_rel_residual=float(np.sqrt(np.mean(((fitted - ys) / ys) ** 2))),
        ))
    fit = AlphaBetaFit(segments=tuple(segments), r2=math.nan, worst_rel_residual=math.nan)
    fitted = np.array([fit.time_s(s) for s in x])
    return AlphaBetaFit(segments=fit.segments, r2=log_r2(y, fitted),
                        worst_rel_residual=float(np.max(np.abs(fitted - y) / y)),
                        time_span=float(y.max() / y.min()))


def fit_given_slope(sizes_bytes, times_s, seconds_per_byte: float, *, rel_sigma=None) -> AlphaBetaFit:
    """One line over a sweep with its per-byte cost given: the latency is the (weighted) relative least
    squares with that slope, kept >= 0 (:func:`dpsim.profile.schema.make_op_calibration` takes it for a
    latency-bound sweep, whose times bound the per-byte cost but cannot measure it).

    Examples
    --------
    >>> f = fit_given_slope([1e3, 1e4], [2e-5, 2e-5], 1e-10)
    >>> round(f.segments[0].latency_s * 1e6, 3), f.segments[0].seconds_per_byte
    (19.45, 1e-10)
    """
    x = np.asarray(sizes_bytes, dtype=float)
    y = np.asarray(times_s, dtype=float)
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    wt = np.ones_like(y) if rel_sigma is None else \
        (1.0 / np.maximum(np.asarray(rel_sigma, dtype=float), SIGMA_FLOOR) ** 2)[order]
    w = 1.0 / y
    # minimise sum wt ((a + b x - y) / y)^2 over a: a = sum wt w (1 - b x w) / sum wt w^2
    a = max(0.0, float(np.dot(wt * w, 1.0 - seconds_per_byte * x * w) / np.dot(wt * w, w)))
    fitted = a + seconds_per_byte * x
    segment = Segment(
        first_size_bytes=float(x[0]), last_size_bytes=float(x[-1]), latency_s=a, seconds_per_byte=seconds_per_byte,
        n_points=len(x), r2=log_r2(y, fitted), worst_rel_residual=float(np.max(np.abs(fitted - y) / y)),
        rms_rel_residual=float(np.sqrt(np.mean(((fitted - y) / y) ** 2))),
    )
    return AlphaBetaFit(segments=(segment,), r2=segment.r2, worst_rel_residual=segment.worst_rel_residual,
                        time_span=float(y.max() / y.min()))


def fit_alpha_beta(
    sizes_bytes, times_s, *, tolerance: float | None = None,
    max_segments: int = DEFAULT_MAX_SEGMENTS, min_points: int | None = None,
    what: str = "measurements", rel_sigma=None,
) -> AlphaBetaFit:
    """Fit ``T = a + b*S`` to a size sweep, piecewise where one line does not fit.

    Parameters
    ----------
    sizes_bytes, times_s : sequences of float
        Message sizes (nccl-tests convention) and their measured times (e.g. medians).
        Repeated sizes are allowed; order does not matter.
    tolerance : float, optional
        Worst relative residual at which fewer segments are accepted; given, the old rule
        (the first count within it, else the smallest worst residual) applies to any
        sweep. Default: see "Piecewise" above.
    max_segments, min_points : int
        Most pieces, and fewest sizes per piece (default: 3, or 2 for a sparse sweep,
        see :data:`SPARSE_STEP`).
    what : str
        Names the data in error messages.
    rel_sigma : sequence of float, optional
        Each time's relative uncertainty (e.g. the half-width of its mean's 95 % interval
        over the mean). Given, each point weighs ``1 / max(rel_sigma, SIGMA_FLOOR)**2`` in
        the least squares and the criterion, so a noisy size (small messages under outside
        load, +-30 %) cannot pull the line away from precise ones (large messages, +-1 %,
        where DDP's buckets are). Without it every point weighs the same.

    Raises
    ------
    ProfileError
        Fewer than two distinct sizes, or a size/time that is not a positive number.

    Examples
    --------
    >>> f = fit_alpha_beta([1e3, 1e4, 1e5, 1e6], [2e-5 + 1e-9 * s for s in (1e3, 1e4, 1e5, 1e6)])
    >>> round(f.segments[0].latency_s * 1e6, 6), round(1 / f.segments[0].seconds_per_byte / 1e9, 6)
    (20.0, 1.0)
    """
    x = np.asarray(sizes_bytes, dtype=float)
    y = np.asarray(times_s, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ProfileError(f"{what}: sizes and times differ in length ({x.size} vs {y.size})")
    bad = ~(np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0))
    if bad.any():
        i = int(np.argmax(bad))
        raise ProfileError(f"{what}: size {x[i]!r} B, time {y[i]!r} s is not valid; "
                           "expected positive finite sizes and times")
    if len(np.unique(x)) < 2:
        raise ProfileError(f"{what}: {len(np.unique(x))} distinct size(s); an alpha-beta fit needs at least 2")
    wt = None
    if rel_sigma is not None:
        sig = np.asarray(rel_sigma, dtype=float)
        if sig.shape != x.shape or not np.all(np.isfinite(sig)) or np.any(sig < 0):
            raise ProfileError(f"{what}: relative uncertainties must be one finite number >= 0 per size")
        wt = 1.0 / np.maximum(sig, SIGMA_FLOOR) ** 2
        wt = wt / wt.mean()
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    if wt is not None:
        wt = wt[order]
    if min_points is None:
        distinct = np.unique(x)
        sparse = float(np.median(distinct[1:] / distinct[:-1])) >= SPARSE_STEP
        min_points = 2 if sparse else DEFAULT_MIN_POINTS
    min_points = max(2, min(min_points, len(x)))
    fits: list[AlphaBetaFit] = []
    for k in range(1, max_segments + 1):
        runs = _partition(x, y, k, min_points, wt)
        if runs is None:
            break
        fits.append(_build(x, y, runs, wt))
        if fits[-1].worst_rel_residual <= (tolerance if tolerance is not None
                                          else DEFAULT_TOLERANCE if min_points < DEFAULT_MIN_POINTS
                                          else DENSE_TOLERANCE):
            return fits[-1]
    assert fits
    if min_points < DEFAULT_MIN_POINTS or tolerance is not None:
        best = fits[0]
        for fit in fits[1:]:
            if fit.worst_rel_residual < best.worst_rel_residual * 0.999:
                best = fit
        return best
    return min(fits, key=lambda f: _bic(x, y, f, wt))


def _bic(x: np.ndarray, y: np.ndarray, fit: AlphaBetaFit, wt: np.ndarray | None = None) -> float:
    """Information criterion of a fit's (weighted) relative residuals (lower is better; see "Piecewise")."""
    n = len(x)
    fitted = np.array([fit.time_s(s) for s in x])
    sq = ((fitted - y) / y) ** 2
    rss = max(float(np.sum(sq if wt is None else wt * sq)), n * 1e-12)  # exact data: counts tie at the floor
    k = len(fit.segments)
    return n * math.log(rss / n) + 2 * (3 * k - 1) * math.log(n)
