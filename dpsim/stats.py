"""Small statistics shared by the Monte-Carlo tools: Student-t intervals, the expected maximum of normals.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

import numpy as np

DEFAULT_CONFIDENCE = 0.95
"""Confidence level of the throughput interval."""
from dpsim.errors import ConfigError

# ----------------------------------------------------------------------------- statistics

def expected_max_normal(n: int) -> float:
    """E[max of n i.i.d. standard normals], by numerical integration (error < 1e-9).

    E[M] = integral of (1 - Phi(x)^n) over x > 0 minus integral of Phi(x)^n over x < 0.
    """
    if n < 1:
        raise ConfigError(f"n: {n} is not valid; expected an integer >= 1")
    x = np.linspace(0.0, 12.0, 240_001)
    dx = x[1] - x[0]
    upper = 1.0 - (0.5 * (1.0 + _erf(x / math.sqrt(2.0)))) ** n  # smooth on each half: trapezoids
    lower = (0.5 * (1.0 + _erf(-x / math.sqrt(2.0)))) ** n
    trap = lambda y: float(np.sum((y[1:] + y[:-1]) / 2.0) * dx)  # noqa: E731
    return trap(upper) - trap(lower)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(x).astype(float)


def t_quantile(p: float, dof: int) -> float:
    """Student-t quantile (Cornish-Fisher expansion in 1/dof; < 1e-3 relative for dof >= 3)."""
    z = statistics.NormalDist().inv_cdf(p)
    if dof <= 0:
        return math.inf
    if dof == 1:
        return math.tan(math.pi * (p - 0.5))
    if dof == 2:
        q = 2 * p - 1
        return q * math.sqrt(2.0 / (1.0 - q * q))
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / dof + g2 / dof ** 2 + g3 / dof ** 3 + g4 / dof ** 4


def mean_confidence_interval(values: Sequence[float], confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval on the mean of ``values`` (i.i.d.)."""
    v = np.asarray(values, dtype=float)
    mean = float(v.mean())
    if len(v) < 2:
        return mean, mean, mean
    half = t_quantile(0.5 + confidence / 2, len(v) - 1) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return mean, mean - half, mean + half


def fixed(value: float, spec: str) -> str:
    """``format(value, spec)``, except that a value that rounds to zero never reads ``-0.0``
    (a rounding speck below zero, or IEEE negative zero); a real negative stays negative."""
    text = format(value, spec)
    if text.lstrip().startswith("-") and math.isfinite(value) and float(text) == 0:
        return format(0.0, spec)
    return text
