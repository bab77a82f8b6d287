"""``dpsim goodput`` takes predict's variability flags (the same option definitions): the token budget is
trained at the mean step the variability engine draws; without them, the plain step as before."""

from __future__ import annotations

import inspect
import json

import pytest

from dpsim.cli import main
from dpsim.cli import predict as predict_cli
from dpsim.cli.goodput import goodput_command
from dpsim.errors import ConfigError
from dpsim.plan.job import goodput
from dpsim.predict.config import PredictConfig
from dpsim.variability.spec import VariabilitySpec, parse_straggler

JOB = ["--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--tokens", "1B", "--runs", "10"]
CONFIG = PredictConfig(model="gpt2", gpus=16, link="infiniband")
SHARED = {"noise_cv": "NOISE_CV", "noise_dist": "NOISE_DIST", "straggler": "STRAGGLER", "degrade": "DEGRADE",
          "hiccup_rate_per_s": "HICCUP_RATE_PER_S", "hiccup_s": "HICCUP_S", "mc_samples": "MC_SAMPLES",
          "mc_steps": "MC_STEPS"}


def _cli(capsys, *extra) -> dict:
    assert main(["goodput", *JOB, *extra, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_goodput_and_predict_share_one_definition_of_each_flag():
    for command in (goodput_command, predict_cli.predict):
        params = inspect.signature(command).parameters
        for name, constant in SHARED.items():
            assert params[name].default is getattr(predict_cli, constant), (command.__name__, name)


def test_cli_equals_api_and_stretches_the_work_by_the_mean_step(capsys):
    got = _cli(capsys, "--noise-cv", "0.05", "--straggler", "node1:1.3x", "--seed", "3")
    spec = VariabilitySpec(noise_cv=0.05, stragglers=(parse_straggler("node1:1.3x"),), seed=3)
    api = goodput(CONFIG, tokens=1e9, runs=10, seed=3, variability=spec)
    assert got == json.loads(json.dumps(api.to_dict()))
    plain = goodput(CONFIG, tokens=1e9, runs=10, seed=3)
    stats = api.variability.statistics
    # The budget's steps at the engine's mean step instead of the plain one (a 1.3x straggler: slower).
    assert stats.nominal_step_s == pytest.approx(plain.prediction.step_time_s, rel=1e-12)
    assert api.work_s == pytest.approx(plain.work_s * stats.mean_s / stats.nominal_step_s, rel=1e-12)
    assert api.work_s > 1.3 * plain.work_s
    assert got["variability"]["seed"] == 3 and got["variability"]["stragglers"] == ["node1:1.3x"]


def test_without_the_flags_goodput_is_unchanged(capsys):
    got = _cli(capsys)
    assert "variability" not in got
    assert got == json.loads(json.dumps(goodput(CONFIG, tokens=1e9, runs=10).to_dict()))


def test_a_degraded_link_alone_trains_at_the_degraded_step(capsys):
    got = _cli(capsys, "--degrade", "infiniband:50%")
    plain = goodput(CONFIG, tokens=1e9, runs=10)
    assert got["variability"]["statistics"] is None
    degraded = got["variability"]["degradation"]
    assert got["work_s"] == pytest.approx(plain.work_s * degraded["step_s"] / degraded["healthy_step_s"], rel=1e-9)


@pytest.mark.parametrize("flag, value", [("--noise-cv", "0.05"), ("--straggler", "node1:1.3x"),
                                         ("--degrade", "infiniband:50%"), ("--mc-steps", "20")])
def test_without_a_token_budget_each_flag_is_refused_in_one_line(flag, value, capsys):
    assert main(["goodput", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", flag, value]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"dpsim: error: {flag}: stretches the time to train a token budget (each step waits for its "
                   f"slowest rank); give --tokens, or leave it out (--duration is a time already)"]
    # fuzz8: the API's spec names what it sets (it named all eight flags).
    with pytest.raises(ConfigError, match=r"^--noise-cv: stretches the time to train a token budget"):
        goodput(CONFIG, duration_s=86400.0, variability=VariabilitySpec(noise_cv=0.05))


def test_a_bad_variability_value_is_predicts_error(capsys):
    assert main(["goodput", *JOB, "--noise-cv", "-1"]) == 2
    goodput_err = capsys.readouterr().err
    assert main(["predict", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--noise-cv", "-1"]) == 2
    assert capsys.readouterr().err == goodput_err
    assert goodput_err.startswith("dpsim: error: --noise-cv: -1.0 is not valid")


def test_a_given_duration_carries_no_model_error_a_token_budget_does(capsys):
    """``--duration`` is a failure-free time the user gives: no prediction is in it, so no model-error
    interval qualifies it (``--duration 54d`` printed "54.00 d (model error p10-p90 58.22 d .. 67.77 d)");
    with ``--tokens`` the time comes from the predicted step, and the step's interval scales with it."""
    import json

    from dpsim.cli import main

    base = ["goodput", "--gpus", "64", "--link", "infiniband", "--model", "llama-2-7b", "--micro-batch", "1",
            "--runs", "5", "--json"]
    assert main(base + ["--duration", "7d"]) == 0
    given = json.loads(capsys.readouterr().out)
    assert given["tokens"] is None and given["work_model_error"] is None
    assert main(base + ["--tokens", "10B"]) == 0
    budget = json.loads(capsys.readouterr().out)
    error = budget["work_model_error"]
    assert error is not None and error["low_s"] < error["high_s"]
    assert main(base[:-1] + ["--duration", "7d"]) == 0
    assert "model error" not in capsys.readouterr().out
