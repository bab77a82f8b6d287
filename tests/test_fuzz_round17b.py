"""Fuzzing round 17b: three small input defects.

1. The Python API's ``stage_layers`` took only text: ``PredictConfig(stage_layers=[15, 17])`` was refused
   "--stage-layers: [15, 17] is not valid; expected a string". A sequence of integers is taken as the flag's
   text and checked as the flag is.
2. ``sweep`` advised ``pass --input-shape`` for a torch module without an example input, a flag sweep has not
   got ("No such option"); it says ``--axis input_shape=SHAPE``, the spelling sweep takes.
3. ``goodput --noise-cv -0.1`` without ``--tokens`` was refused for the missing budget, not for the bad value
   (which came up only once the budget was given): each value is checked against its own rule first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dpsim
from fuzz_harness import run_cli


def _predict(stage_layers):
    return dpsim.predict(dpsim.PredictConfig(model="llama-2-7b", gpus=2, link="nvlink", pp=2,
                                             stage_layers=stage_layers, steps=1))


# --- 1. stage_layers as a sequence ----------------------------------------------------------------------------
@pytest.mark.parametrize("value", [[15, 17], (15, 17)])
def test_stage_layers_takes_a_sequence_of_ints(value):
    config = dpsim.PredictConfig(model="llama-2-7b", gpus=2, link="nvlink", pp=2, stage_layers=value)
    assert config.parallelism.stage_layers == "15,17"
    assert _predict(value).to_dict() == _predict("15,17").to_dict()


def test_stage_layers_takes_numpy_ints():
    np = pytest.importorskip("numpy")
    config = dpsim.PredictConfig(model="llama-2-7b", gpus=2, link="nvlink", pp=2,
                                 stage_layers=list(np.array([15, 17], dtype=np.int64)))
    assert config.parallelism.stage_layers == "15,17"


def test_stage_layers_sequence_is_checked_as_the_flag_is():
    # The wrong number of stages: the same words as the text.
    with pytest.raises(dpsim.ConfigError) as seq:
        _predict([32])
    with pytest.raises(dpsim.ConfigError) as text:
        _predict("32")
    assert str(seq.value) == str(text.value)
    assert str(seq.value).startswith("--stage-layers: '32' is not valid; expected 2 block counts")


@pytest.mark.parametrize("value", [[15.0, 17], [True, 31], ["15", "17"], [], [None]])
def test_stage_layers_sequence_of_non_integers_is_refused(value):
    with pytest.raises(dpsim.ConfigError, match=r"^--stage-layers: .* is not valid; expected block counts, one per "
                                                r"pipeline stage, as integers"):
        dpsim.PredictConfig(model="llama-2-7b", gpus=2, link="nvlink", pp=2, stage_layers=value)


# --- 2. sweep's advice in its own spelling --------------------------------------------------------------------
_MLP = '''
import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 64)
        self.b = torch.nn.Linear(64, 64)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def build():
    return MLP()
'''


def _mlp(tmp_path: Path) -> str:
    path = tmp_path / "mlp.py"
    path.write_text(_MLP)
    return f"{path}:build"


def test_sweep_advises_the_axis_it_takes(tmp_path, capsys):
    pytest.importorskip("torch")
    model = _mlp(tmp_path)
    outcome = run_cli(["sweep", "--model", model, "--link", "infiniband", "--gpus", "8"], capsys)
    assert outcome.status == 2
    err = outcome.err
    assert "pass --axis input_shape=SHAPE (e.g. 8,3,224,224" in err and "--input-shape" not in err, err
    # Following the advice runs.
    ok = run_cli(["sweep", "--model", model, "--link", "infiniband", "--gpus", "8", "--axis", "input_shape=8,64",
                  "--json"], capsys)
    assert ok.status == 0, ok.err
    rows = json.loads(ok.out)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert len(rows) == 1 and rows[0]["input_shape"] == "8,64"


def test_sweep_skip_invalid_rows_advise_the_axis(tmp_path, capsys):
    pytest.importorskip("torch")
    outcome = run_cli(["sweep", "--model", _mlp(tmp_path), "--link", "infiniband", "--gpus", "8", "--skip-invalid",
                       "--json"], capsys)
    assert outcome.status == 0, outcome.err
    assert "--axis input_shape=SHAPE" in outcome.out and "--input-shape" not in outcome.out


def test_predict_still_advises_its_flag(tmp_path, capsys):
    pytest.importorskip("torch")
    outcome = run_cli(["predict", "--model", _mlp(tmp_path), "--link", "infiniband", "--gpus", "8"], capsys)
    assert outcome.status == 2 and "pass --input-shape" in outcome.err


# --- 3. goodput checks each value before the rules between them ------------------------------------------------
_GOODPUT = ["goodput", "--model", "gpt2", "--gpus", "8", "--link", "nvlink"]


@pytest.mark.parametrize("extra, needle", [
    (["--noise-cv", "-0.1"], "--noise-cv: -0.1 is not valid; expected a number >= 0"),
    (["--hiccup-s", "-1"], "--hiccup-s: -1.0 is not valid"),
    (["--mc-steps", "0"], "--mc-steps: 0 is not valid; expected an integer >= 1"),
    (["--noise-cv", "0.1", "--mc-steps", "0"], "--mc-steps: 0 is not valid"),
])
def test_goodput_bad_value_without_tokens_names_the_value(extra, needle, capsys):
    outcome = run_cli(_GOODPUT + extra, capsys)
    assert outcome.status == 2
    assert needle in outcome.err and "give --tokens" not in outcome.err, outcome.err


def test_goodput_good_value_without_tokens_still_asks_for_the_budget(capsys):
    outcome = run_cli(_GOODPUT + ["--noise-cv", "0.1"], capsys)
    assert outcome.status == 2 and "--noise-cv: stretches the time to train a token budget" in outcome.err


def test_goodput_api_checks_mc_steps_first():
    with pytest.raises(dpsim.ConfigError, match=r"^--mc-steps: 0 is not valid"):
        dpsim.goodput(dpsim.PredictConfig(model="gpt2", gpus=8, link="nvlink"), duration_s=3600.0,
                      variability=dpsim.VariabilitySpec(noise_cv=0.1), mc_steps=0)
