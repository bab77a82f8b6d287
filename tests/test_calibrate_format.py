"""How calibrate prints numbers: no negative zero, no bandwidth that rounds to nothing.

Deterministic: the formatters get the extreme values a slow or loaded machine produces
(a 100 kbit/s link, a fit that lands a speck below zero), instead of hoping a real run
produces them.
"""

from __future__ import annotations

import re

import pytest

from dpsim.calibrate.summary import calibration_table, format_rate, profile_report, rate_cell
from dpsim.profile.schema import ComputeCalibration, Measurement, Profile, make_op_calibration
from dpsim.stats import fixed

NEGATIVE_ZERO = re.compile(r"-0\.0+(?![0-9])")
ROUNDED_TO_NOTHING = re.compile(r"(?<![0-9.])0\.00(?![0-9])")


@pytest.mark.parametrize("value, spec, text", [
    (-0.0, ".1f", "0.0"), (-1e-9, "+.1f", "+0.0"), (-0.00004, ".4f", "0.0000"), (-0.0815, ".4f", "-0.0815"),
    (-0.05, ".1f", "-0.1"), (0.04, "+.1f", "+0.0"), (-1e-12, ">7.1f", "    0.0"), (float("nan"), ".1f", "nan"),
])
def test_fixed_never_prints_negative_zero_but_keeps_real_negatives(value, spec, text):
    assert fixed(value, spec) == text


@pytest.mark.parametrize("value, text", [
    (48.5, "48.50"), (1.0, "1.00"), (0.999, "0.999"), (0.0312, "0.0312"), (0.00312, "0.00312"), (0.0, "0"),
    (float("inf"), "inf"),
])
def test_a_rate_cell_keeps_three_significant_digits_below_one(value, text):
    assert rate_cell(value) == text


def test_format_rate_picks_the_unit_of_the_value():
    assert format_rate(12.1e6) == "12.1 MB/s" and format_rate(48.5e9) == "48.5 GB/s" and format_rate(3.0) == "3 B/s"


def _slow_sweep(op: str = "all_reduce"):
    # a 10 Mbit/s link with 2 ms latency: 8 B reads 4 kB/s, 8 MiB 1.2 MB/s (the table's unit)
    sizes = [8 * 4 ** i for i in range(12)]
    meas = [Measurement(size_bytes=float(s), time_s=2e-3 + s / 1.25e6, min_s=2e-3 + s / 1.25e6,
                        max_s=2.1e-3 + s / 1.25e6, repeats=5) for s in sizes]
    return make_op_calibration(op, "inter_node", 2, meas)


def test_a_table_spanning_orders_of_magnitude_prints_no_zero_rate():
    text = calibration_table(_slow_sweep())
    assert "(MB/s)" in text  # the unit of the fastest row
    assert not ROUNDED_TO_NOTHING.search(text) and not NEGATIVE_ZERO.search(text), text


def test_report_prints_no_negative_zero_for_slowdowns_a_speck_below_zero():
    sweep = _slow_sweep()
    profile = Profile(name="t", link_classes={"inter_node": {"n_ranks": 2, "n_nodes": 2}},
                      ops={("inter_node", "all_reduce"): sweep},
                      compute=ComputeCalibration(device="cpu", matmul_flops_per_s={"float32": 5e10},
                                                 memory_bandwidth_bytes_per_s=1e10, overlap_slowdown=-1e-6,
                                                 comm_slowdown=-0.0))
    text = profile_report(profile)
    assert "compute slowdown while a collective runs: 0.0 %" in text
    assert "all-reduce slowdown while every rank computes: 0.0 %" in text
    assert not NEGATIVE_ZERO.search(text) and not ROUNDED_TO_NOTHING.search(text), text


def test_a_noisy_step_never_prints_zero_point_zero_zero():
    """A few noisy repeats put the mean's interval at zero and the after-a-wait extra near it
    (seen on CI: "95 % interval 0.00..3.50 ms")."""
    import re

    from dpsim.calibrate.summary import profile_report
    from dpsim.profile.schema import ComputeCalibration, ModelStep, Profile

    for extra in (0.0, -2e-7, 3e-6, -0.004):
        step = ModelStep(model="m", micro_batch=4, dtype="float32", forward_s=0.0005, backward_s=0.001,
                         step_time_mean_s=0.00157, step_time_ci_low_s=0.0, step_time_ci_high_s=0.0035, repeats=8,
                         after_comm_extra_s=extra, after_comm_wait_s=0.00136, fresh_process_ratio=0.643)
        text = profile_report(Profile(name="p", compute=ComputeCalibration(device="cpu", model_step=step)))
        assert "interval 0..3.50 ms" in text and "right after waiting" in text, text
        assert not re.search(r"(?<![0-9.])0\.00(?![0-9])", text) and not re.search(r"-0\.0+(?![0-9])", text), text
