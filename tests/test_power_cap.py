"""``--power-cap-w``: a GPU's compute under a power limit, from a published sweep (dpsim/hardware.py)."""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import (POWER_CAP_RANGE_W, POWER_CAP_SOURCES, POWER_CAP_THROUGHPUT, get_gpu,
                            power_cap_throughput)
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict

SMALL = dict(gpus=16, link="dgx-a100", model="gpt2-medium", micro_batch=2, steps=1)
LAYOUT = dict(gpus=16, link="dgx-a100", model="llama-2-7b", micro_batch=1, tp=2, dp=8, global_batch=16,
              sequence_parallel=True, strategy="zero1", steps=1)


def test_every_curve_is_cited_within_its_gpus_limits_and_rises_to_one():
    assert set(POWER_CAP_THROUGHPUT) == set(POWER_CAP_RANGE_W) == set(POWER_CAP_SOURCES)
    for name, points in POWER_CAP_THROUGHPUT.items():
        get_gpu(name)  # a preset
        low, high = POWER_CAP_RANGE_W[name]
        caps, fractions = zip(*points)
        assert caps[0] <= low and caps[-1] == high, name  # the curve covers every cap the board accepts
        assert list(caps) == sorted(set(caps)) and list(fractions) == sorted(fractions), name
        assert fractions[-1] == 1.0 and all(0 < f <= 1 for f in fractions), name
        assert "dvfs_sweep.csv" in POWER_CAP_SOURCES[name]


def test_measured_points_and_the_uncapped_default():
    # ai-emerald/emerald-ai-demo-may-2025@34403aef78c2 data/dvfs_sweep.csv, mean of the pt_mpt rows at 350 W:
    # (0.9213 + 0.9116 + 0.9350) / 3.
    assert power_cap_throughput("a100", 350) == pytest.approx(0.9226)
    assert power_cap_throughput("A100-40GB", 400) == 1.0
    assert power_cap_throughput("h100", None) == 1.0  # no cap: every GPU, curve or not
    assert power_cap_throughput("a100", 325) == pytest.approx((0.8667 + 0.9226) / 2)  # linear between points


def test_a_lower_cap_never_speeds_a_step():
    fractions = [power_cap_throughput("a100", w) for w in range(100, 401, 5)]
    assert fractions == sorted(fractions)
    for kw in (SMALL, LAYOUT):
        steps = [predict(PredictConfig(**kw, gpu="a100", power_cap_w=w)).step_time_s for w in (400, 350, 300, 200, 100)]
        assert steps == sorted(steps) and steps[-1] > steps[0], kw["model"]


def test_default_is_unchanged():
    for kw in (SMALL, LAYOUT):
        none = predict(PredictConfig(**kw, gpu="a100"))
        full = predict(PredictConfig(**kw, gpu="a100", power_cap_w=400))
        assert none.step_time_s == full.step_time_s
        assert "power_cap_w" not in none.to_dict()["config"]  # --json's config names it only when given
        assert full.to_dict()["config"]["power_cap_w"] == 400


@pytest.mark.parametrize("gpu, cap, needles", [
    ("a100", 450, ("--power-cap-w", "450 W", "'a100'", "100 to 400 W")),
    ("a100-40gb", 99, ("--power-cap-w", "99 W", "100 to 400 W")),
    ("h100", 600, ("--power-cap-w", "'h100'", "a100, a100-40gb")),
])
def test_caps_outside_a_measured_gpus_limits_are_one_clear_error(gpu, cap, needles):
    with pytest.raises(ConfigError) as err:
        predict(PredictConfig(**SMALL, gpu=gpu, power_cap_w=cap))
    assert all(n in str(err.value) for n in needles), str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("cap", [0, -5, 1e9, float("nan")])
def test_caps_that_are_no_power_are_refused_by_the_config(cap):
    with pytest.raises(ConfigError, match="--power-cap-w"):
        PredictConfig(**SMALL, gpu="a100", power_cap_w=cap)


def test_a_measured_step_and_a_cap_are_not_combined():
    with pytest.raises(ConfigError, match="--power-cap-w: 350 W is not available with --single-gpu-step-ms"):
        predict(PredictConfig(**SMALL, gpu="a100", power_cap_w=350, single_gpu_step_s=0.2))


def test_provenance_names_the_cap():
    p = predict(PredictConfig(**SMALL, gpu="a100", power_cap_w=350))
    assert "350 W power cap (--power-cap-w)" in p.provenance.compute.detail
