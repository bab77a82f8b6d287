"""Alpha-beta fitting: known parameters are recovered, breaks are found, quality is honest."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsim.errors import ProfileError
from dpsim.profile.fit import POOR_WORST_REL, fit_alpha_beta, piecewise_time

SIZES = [2.0**k for k in range(10, 31)]  # 1 KiB .. 1 GiB, doubling: a dpsim/nccl-tests sweep


@pytest.mark.parametrize("alpha_s, busbw", [(20e-6, 100e9), (5e-6, 400e9), (300e-6, 5e9)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recovers_known_alpha_beta_from_noisy_data(alpha_s, busbw, seed):
    rng = np.random.default_rng(seed)
    beta = 1.75 / busbw  # all-reduce on 8 ranks: T = a + 2(N-1)/N * S / B
    truth = np.array([alpha_s + beta * s for s in SIZES])
    noisy = truth * rng.lognormal(0.0, 0.03, size=truth.size)  # 3 % multiplicative noise
    fit = fit_alpha_beta(SIZES, noisy)
    assert len(fit.segments) == 1, "one line fits an alpha-beta sweep"
    seg = fit.segments[0]
    assert seg.latency_s == pytest.approx(alpha_s, rel=0.06)
    assert seg.seconds_per_byte == pytest.approx(beta, rel=0.04)
    assert fit.r2 > 0.999
    assert fit.worst_rel_residual < 0.1
    assert not fit.poor


def test_exact_data_is_exact():
    fit = fit_alpha_beta(SIZES, [7e-6 + s / 50e9 for s in SIZES])
    assert fit.segments[0].latency_s == pytest.approx(7e-6, rel=1e-9)
    assert fit.segments[0].seconds_per_byte == pytest.approx(1 / 50e9, rel=1e-9)
    assert fit.r2 == pytest.approx(1.0) and fit.worst_rel_residual < 1e-9


def test_protocol_switch_gives_two_pieces_with_the_break_between_them():
    # LL-like below 64 KiB (low latency, low bandwidth), Simple-like above.
    def t(s):
        return 5e-6 + s / 5e9 if s <= 65536 else 40e-6 + s / 150e9
    fit = fit_alpha_beta(SIZES, [t(s) for s in SIZES])
    assert len(fit.segments) == 2
    assert fit.gaps_bytes == ((65536.0, 131072.0),)
    assert 65536 < fit.breaks_bytes[0] < 131072
    low, high = fit.segments
    assert low.latency_s == pytest.approx(5e-6, rel=1e-6) and 1 / low.seconds_per_byte == pytest.approx(5e9)
    assert high.latency_s == pytest.approx(40e-6, rel=1e-6) and 1 / high.seconds_per_byte == pytest.approx(150e9)
    assert fit.worst_rel_residual < 1e-6


def test_gap_between_pieces_is_interpolated_continuously():
    def t(s):
        return 5e-6 + s / 5e9 if s <= 65536 else 40e-6 + s / 150e9
    fit = fit_alpha_beta(SIZES, [t(s) for s in SIZES])
    lo, hi = fit.gaps_bytes[0]
    inside = np.geomspace(lo, hi, 50)
    values = [fit.time_s(s) for s in inside]
    assert values[0] == pytest.approx(t(lo)) and values[-1] == pytest.approx(t(hi))
    assert all(min(t(lo), t(hi)) * 0.999 <= v <= max(t(lo), t(hi)) * 1.001 for v in values)
    # log-log linear: the geometric middle of the gap is the geometric mean of the ends
    assert fit.time_s(math.sqrt(lo * hi)) == pytest.approx(math.sqrt(t(lo) * t(hi)))


def test_extrapolation_uses_the_outer_pieces():
    fit = fit_alpha_beta(SIZES, [3e-6 + s / 80e9 for s in SIZES])
    assert fit.time_s(2**40) == pytest.approx(3e-6 + 2**40 / 80e9, rel=1e-9)
    assert fit.time_s(1) == pytest.approx(3e-6 + 1 / 80e9, rel=1e-9)


def test_negative_intercept_is_clamped_to_zero():
    # pure bandwidth with a slight concavity would give a < 0 unconstrained
    fit = fit_alpha_beta([1e6, 2e6, 4e6, 8e6], [1.0e-4, 1.9e-4, 3.9e-4, 8.2e-4], max_segments=1)
    assert fit.segments[0].latency_s >= 0 and fit.segments[0].seconds_per_byte > 0


def test_flat_latency_bound_sweep_is_not_flagged_by_r2_alone():
    rng = np.random.default_rng(3)
    times = 200e-6 * rng.lognormal(0, 0.02, size=8)  # latency-bound: R² means little here
    fit = fit_alpha_beta([2.0**k for k in range(10, 18)], times)
    assert fit.worst_rel_residual < POOR_WORST_REL
    assert not fit.poor


def test_poor_fit_is_flagged():
    times = [1e-5 + s / 1e10 for s in SIZES]
    times = [t * (3.0 if i % 2 else 0.4) for i, t in enumerate(times)]  # wild alternation
    fit = fit_alpha_beta(SIZES, times)
    assert fit.poor


def test_sparse_published_tables_may_use_two_point_pieces():
    # A100 8-GPU node, stas00/ml-engineering (calibration/reference rows C001..C007)
    sizes = [32768, 1048576, 8388608, 67108864, 268435456, 1073741824, 17179869184]
    times_us = [43.83, 101.9, 133.5, 684.6, 2420.6, 8203.9, 127997]
    fit = fit_alpha_beta(sizes, [t * 1e-6 for t in times_us])
    single = fit_alpha_beta(sizes, [t * 1e-6 for t in times_us], max_segments=1)
    assert single.worst_rel_residual > 0.3  # one line misses 1 MiB by ~40 %
    assert fit.worst_rel_residual < 0.05
    assert len(fit.segments) <= 3


@pytest.mark.parametrize("sizes, times, needle", [
    ([1, 2], [1e-6], "differ in length"),
    ([1024, 1024, 1024], [1e-6, 2e-6, 3e-6], "1 distinct size"),
    ([1024, -5], [1e-6, 2e-6], "not valid"),
    ([1024, 2048], [1e-6, math.nan], "not valid"),
    ([1024, 2048], [0.0, 1e-6], "not valid"),
])
def test_bad_input_raises_profile_error(sizes, times, needle):
    with pytest.raises(ProfileError, match=needle):
        fit_alpha_beta(sizes, times, what="test sweep")


def test_piecewise_time_with_custom_piece_function():
    fit = fit_alpha_beta(SIZES, [5e-6 + s / 5e9 if s <= 65536 else 40e-6 + s / 150e9 for s in SIZES])
    doubled = piecewise_time(fit.segments, 2**20, lambda seg, s: 2 * seg.time_s(s))
    assert doubled == pytest.approx(2 * fit.time_s(2**20))


def test_known_uncertainties_keep_noisy_sizes_from_pulling_the_line():
    """Small messages under outside load (+-30 %) and precise large ones (+-0.5 %): weighted by
    their uncertainties, the fit holds the large sizes (where DDP's buckets are) to their noise."""
    rng = np.random.default_rng(7)
    sizes = np.array([2.0**k for k in range(12, 26)])
    truth = 250e-6 + sizes / 36e6
    noisy = truth * np.where(sizes < 2**20, rng.lognormal(0.0, 0.3, sizes.size), rng.lognormal(0.0, 0.003, sizes.size))
    sigma = np.where(sizes < 2**20, 0.3, 0.005)
    weighted = fit_alpha_beta(sizes, noisy, rel_sigma=sigma)
    big = sizes >= 2**20
    err = np.abs([weighted.time_s(s) / t - 1 for s, t in zip(sizes[big], truth[big])])
    assert err.max() < 0.01
    with pytest.raises(ProfileError, match="relative uncertainties"):
        fit_alpha_beta(sizes, noisy, rel_sigma=sigma[:-1])


def test_uncertainties_come_from_the_repeats():
    from dpsim.profile.schema import Measurement, relative_uncertainties

    m = Measurement(size_bytes=1e6, time_s=1.0, q1_s=0.9, q3_s=1.1, repeats=16)
    assert relative_uncertainties([m]) == pytest.approx([1.2533 * 0.2 / 1.349 / 4])
    assert relative_uncertainties([Measurement(size_bytes=1e6, time_s=1.0)]) is None  # nccl-tests rows: unweighted
