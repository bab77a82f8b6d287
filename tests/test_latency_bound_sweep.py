"""A calibration sweep that never outgrew its latency: costed at the least bandwidth its times allow, with a
warning, instead of refused (CI failure 2026-12-07: gloo all_reduce 16-64 KiB on a busy 2-core box timed flat and
``dpsim calibrate`` exited 2); a broken log (flat to gigabytes, falling, every time equal) is still refused."""

import pytest

from dpsim.errors import ProfileError
from dpsim.profile.schema import (
    LATENCY_BOUND_MAX_SPAN,
    Measurement,
    fit_warnings,
    latency_bound_bus_bandwidth,
    make_op_calibration,
    op_bus_factor,
)

SIZES = (16384, 32768, 65536)


def _sweep(times_us, sizes=SIZES):
    return [Measurement(size_bytes=s, time_s=t * 1e-6) for s, t in zip(sizes, times_us)]


@pytest.mark.parametrize("times_us", [(80, 95, 78), (90, 85, 80), (100, 100.5, 99.9)])
def test_a_flat_small_sweep_is_costed_at_its_bandwidth_bound(times_us):
    ms = _sweep(times_us)
    c = make_op_calibration("all_reduce", "intra_node", 2, ms)
    spread_s = (max(times_us) - min(times_us)) * 1e-6
    bound = op_bus_factor("all_reduce", 2) * (SIZES[-1] - SIZES[0]) / spread_s
    assert latency_bound_bus_bandwidth("all_reduce", 2, ms) == pytest.approx(bound)
    assert c.bus_bandwidth_bytes_per_s(c.fit.segments[-1]) == pytest.approx(bound)
    # larger messages cost more, at exactly the bound's per-byte rate
    t1, t2 = c.fit.time_s(1e6), c.fit.time_s(2e6)
    assert t2 - t1 == pytest.approx(1e6 * op_bus_factor("all_reduce", 2) / bound)
    # inside the sweep the line stays near the measured times (it is their latency)
    for m in ms:
        assert abs(c.fit.time_s(m.size_bytes) - m.time_s) / m.time_s < 0.25
    warnings = fit_warnings({("intra_node", "all_reduce"): c})
    assert any("latency but not its bandwidth" in w and "measure larger sizes" in w for w in warnings), warnings


def test_a_sweep_that_grows_is_not_called_latency_bound():
    ms = _sweep((20, 40, 80))
    assert latency_bound_bus_bandwidth("all_reduce", 2, ms) is None
    c = make_op_calibration("all_reduce", "intra_node", 2, ms)
    assert not any("latency but not" in w for w in fit_warnings({("intra_node", "all_reduce"): c}))


def test_a_sweep_that_resolves_a_bandwidth_inside_the_span_keeps_its_own_fit():
    # 80 -> 90 us, growing: the fit's own slope (not the bound), and no warning
    ms = _sweep((80, 86, 90))
    c = make_op_calibration("all_reduce", "intra_node", 2, ms)
    assert not any("latency but not" in w for w in fit_warnings({("intra_node", "all_reduce"): c}))


@pytest.mark.parametrize("times_us, why", [
    ((80, 80, 80), "every size took the same time"),
    ((100, 100.001, 100), "more than any interconnect"),
])
def test_no_bound_or_an_impossible_one_is_refused(times_us, why):
    sizes = (1e6, 1e8, 1e10)
    with pytest.raises(ProfileError, match="does not grow with size") as info:
        make_op_calibration("all_reduce", "intra_node", 8, _sweep(times_us, sizes))
    assert why in str(info.value)


def test_a_sweep_spanning_more_than_the_latency_bound_that_ends_flat_is_refused():
    # grows 20x, then flat over its top: a broken log, not a latency-bound one
    sizes = (1e3, 1e4, 1e5, 1e6, 1e7, 1e8)
    ms = _sweep((10, 12, 40, 200, 200, 200), sizes)
    assert max(m.time_s for m in ms) / min(m.time_s for m in ms) > LATENCY_BOUND_MAX_SPAN
    with pytest.raises(ProfileError, match="does not grow with size"):
        make_op_calibration("all_reduce", "intra_node", 8, ms)
