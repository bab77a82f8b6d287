"""Cost: prices per GPU preset with sources, overrides, time-to-train and cost arithmetic."""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError, DpsimError
from dpsim.hardware import GPU_PRESETS
from dpsim.plan.cost import (
    GPU_HOUR_PRICES,
    check_price_override,
    format_count,
    gpu_hour_price,
    parse_count,
    parse_price_overrides,
    prediction_cost,
    training_cost,
)
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message and message
    return message


def test_every_gpu_preset_has_a_cited_price():
    assert set(GPU_HOUR_PRICES) == set(GPU_PRESETS)
    for name, price in GPU_HOUR_PRICES.items():
        assert price.gpu == name
        assert 0 < price.usd_per_gpu_hour < 100
        assert len(price.source) > 20 and "$" in price.source


def test_newer_gpus_cost_more_per_hour():
    p = {k: v.usd_per_gpu_hour for k, v in GPU_HOUR_PRICES.items()}
    assert p["v100"] < p["a100"] < p["h100"] <= p["h200"] < p["b200"]


@pytest.mark.parametrize("raw, value", [("1T", 1e12), ("300B", 3e11), ("2.5e12", 2.5e12), ("15M", 1.5e7),
                                        ("90k", 9e4), (1e9, 1e9), (" 1 t ", 1e12), ("2G", 2e9)])
def test_parse_count(raw, value):
    assert parse_count(raw) == pytest.approx(value)


@pytest.mark.parametrize("raw", ["abc", "-1", "0", "1X", "", True, float("inf"), 0])
def test_parse_count_rejects(raw):
    with pytest.raises(ConfigError) as exc:
        parse_count(raw, "--tokens")
    assert one_line(exc).startswith("--tokens: ")


def test_format_count():
    assert [format_count(x) for x in (1e12, 3e11, 2.5e6, 90e3, 12)] == ["1T", "300B", "2.5M", "90K", "12"]


def test_training_cost_arithmetic():
    c = training_cost(tokens_per_s=1e6, n_gpus=64, gpu="h100", tokens="1T", gpu_hour_usd=2.0)
    assert c.time_s == pytest.approx(1e6)
    assert c.time_days == pytest.approx(1e6 / 86400)
    assert c.gpu_hours == pytest.approx(64 * 1e6 / 3600)
    assert c.cost_usd == pytest.approx(c.gpu_hours * 2.0)
    assert (c.budget, c.budget_unit, c.usd_per_gpu_hour) == (1e12, "tokens", 2.0)


def test_default_price_and_overrides():
    default = GPU_HOUR_PRICES["h100"].usd_per_gpu_hour
    assert gpu_hour_price("h100") == default
    assert gpu_hour_price("H100", 1.5) == 1.5
    assert gpu_hour_price("h100", {"h100": 2.5}) == 2.5
    assert gpu_hour_price("a100", {"h100": 2.5}) == GPU_HOUR_PRICES["a100"].usd_per_gpu_hour
    assert gpu_hour_price("h100", 0) == 0.0


def test_price_override_errors_are_one_line():
    with pytest.raises(ConfigError) as exc:
        gpu_hour_price("h100", {"h999": 1.0})
    assert "'h999' is not a GPU preset" in one_line(exc) and "h100" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        gpu_hour_price("h100", -1)
    assert "-1" in one_line(exc)
    with pytest.raises(ConfigError):
        gpu_hour_price("h100", {"h100": "cheap"})


def test_parse_price_overrides():
    assert parse_price_overrides([]) is None
    assert parse_price_overrides(["2.5"]) == 2.5
    assert parse_price_overrides(["$3"]) == 3.0
    assert parse_price_overrides(["h100=2.5", "a100=1"]) == {"h100": 2.5, "a100": 1.0}
    assert parse_price_overrides(["h100=2.5,a100=1"]) == {"h100": 2.5, "a100": 1.0}
    for bad in (["h100=abc"], ["foo=1"], ["=1"], ["2.5", "3"], ["abc"]):
        with pytest.raises(ConfigError) as exc:
            parse_price_overrides(bad)
        assert one_line(exc).startswith("--gpu-hour-usd")
    # Two prices for one GPU: the later one silently won (h100=1 then H100=9 costed at 9).
    for bad in (["h100=1", "H100=9"], ["h100=1,h100=2"]):
        with pytest.raises(ConfigError, match="--gpu-hour-usd: '(h|H)100' is given two prices"):
            parse_price_overrides(bad)
    # ... and a YAML mapping (a sweep file's gpu_hour_usd) naming one GPU in two cases.
    with pytest.raises(ConfigError, match="gpu_hour_usd: 'H100' is given two prices"):
        check_price_override({"h100": 1, "H100": 2})


def test_budget_validation():
    with pytest.raises(ConfigError):
        training_cost(tokens_per_s=1.0, n_gpus=1, gpu="h100")
    with pytest.raises(ConfigError):
        training_cost(tokens_per_s=1.0, n_gpus=1, gpu="h100", tokens=1, samples=1)
    with pytest.raises(ConfigError) as exc:
        training_cost(tokens_per_s=None, samples_per_s=10.0, n_gpus=8, gpu="h100", tokens="1T")
    assert "--samples" in one_line(exc)
    with pytest.raises(ConfigError):
        training_cost(tokens_per_s=1.0, n_gpus=0, gpu="h100", tokens=1)
    c = training_cost(tokens_per_s=None, samples_per_s=100.0, n_gpus=8, gpu="a100", samples="1M")
    assert c.budget_unit == "samples" and c.time_s == pytest.approx(1e4)


def test_prediction_cost_uses_the_predicted_throughput():
    p = predict(PredictConfig(gpus=16, link="infiniband", model="gpt2"))
    c = prediction_cost(p, tokens="10B")
    assert c.time_s == pytest.approx(1e10 / p.tokens_per_s)
    assert c.cost_usd == pytest.approx(16 * c.time_s / 3600 * GPU_HOUR_PRICES["h100"].usd_per_gpu_hour)
    image = predict(PredictConfig(gpus=8, link="nvlink", model="resnet50", micro_batch=32))
    with pytest.raises(DpsimError):
        prediction_cost(image, tokens="1T")
    assert prediction_cost(image, samples="1.28M").budget_unit == "samples"


def test_64_ethernet_or_32_infiniband_for_1t_tokens():
    """The question the issue asks: half the GPUs on a fast fabric finish sooner and cost less."""
    kw = dict(model="llama-2-7b", micro_batch=1)
    eth = prediction_cost(predict(PredictConfig(gpus=64, link="ethernet", **kw)), tokens="1T")
    ib = prediction_cost(predict(PredictConfig(gpus=32, link="infiniband", **kw)), tokens="1T")
    assert ib.time_s < eth.time_s
    assert ib.cost_usd < eth.cost_usd
