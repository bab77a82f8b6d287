"""Printed and golden-tested numbers take their transcendental functions from the C library (Python's
``math``), not from numpy's ufuncs: numpy dispatches exp/log/log1p/expm1/power to SIMD kernels chosen by the
CPU (its own AVX-512F exp and log, SVML's log1p/expm1/power on AVX-512), whose results can differ in the
last digit from an AVX2 host's and moved a golden once (dpsim/predict/model_error.py ``_expm1``).

Each check below runs the function with numpy's kernels made to raise: it fails on a path that still calls
one. (The zipf shares' power, numpy's ``**`` before, has no attribute to patch; it is Python's now.)
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsim.profile.fit import log_r2
from dpsim.variability.monte_carlo import _noise
from dpsim.variability.spec import VariabilitySpec
from dpsim.workload import routing


@pytest.fixture
def no_numpy_transcendentals(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a numpy transcendental (its CPU-chosen SIMD kernel) on a printed path")

    for name in ("exp", "log", "log1p", "expm1", "power"):
        monkeypatch.setattr(np, name, refuse)


def test_routing_shares_and_inclusions(no_numpy_transcendentals):
    routing._inclusion_cached.cache_clear()
    shares = routing.expert_shares(routing.parse_routing("maxvio:0.3"), 8, top_k=2)
    assert shares.sum() == pytest.approx(1.0) and shares[0] > shares[1]
    pi = routing.inclusion_probabilities(routing.expert_shares(routing.parse_routing("zipf:1.2"), 8), 2)
    assert pi.sum() == pytest.approx(2.0) and np.all(np.diff(pi) < 0)
    draws = routing._gini_inclusions(0.4, 8, 2, 5, np.random.default_rng(0))
    assert draws.shape == (5, 8) and np.allclose(draws.sum(axis=1), 2.0)


def test_lognormal_noise_and_profile_r2(no_numpy_transcendentals):
    spec = VariabilitySpec(noise_cv=0.1, noise_distribution="lognormal")
    factors = _noise(np.random.default_rng(7), spec, 16)
    assert factors.shape == (16,) and np.all(factors > 0)
    y = np.array([1e-5, 2e-5, 4e-5, 9e-5])
    assert log_r2(y, y * 1.01) == pytest.approx(1.0, abs=1e-3)
    assert math.isfinite(log_r2(y, np.array([1e-5, 2.2e-5, 3.9e-5, 9e-5])))
