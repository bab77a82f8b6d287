"""Defects the twenty-fifth fuzz round took up (fuzz25, the leftovers round 24 saw): ``dpsim.plan``/``dpsim.goodput``
refusing the budget text ``tokens="1B"`` that ``dpsim.sweep`` and every ``--tokens`` take (and ``duration_s="30d"``
that ``--duration`` takes); a hand-edited calibration profile's ``r2: 2``, ``"poor": "no"``, ``world_size: 0`` and
``hosts: "1"`` taken; an A100 node's profile with ``--gpu h100`` taken in silence; a mix job's server that does not
exist refused without its field path; a sweep file's bare ``1e3`` taken as 1000 GPUs while its quoted ``"1e3"`` was
refused; ``--seq-len`` past a rotary model's trained context taken in silence. Bare ``dpsim`` keeps exit status 2
(click 8.2's rule for help shown in place of a command: dpsim/cli/app.py), pinned in tests/test_cli.py.

Each case says what it did before.
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import pytest

import dpsim
from dpsim.errors import ProfileError
from tests.fuzz_harness import refused, run_cli

ROOT = Path(__file__).parents[1]
CONFIG = dict(gpus=8, link="nvlink", model="gpt2")


# --- 1. the API takes the command line's budget and duration text ------------------------------------------------------
def test_goodput_and_plan_take_the_budget_text_sweep_takes():
    """Before: ``dpsim.goodput(config, tokens="1B")`` and ``dpsim.plan(..., tokens="1B")`` were refused "'1B' is not
    valid" while ``dpsim.sweep(tokens="1B")`` and ``--tokens 1B`` took it. Now text is read by the CLI's parser and
    gives the number's result."""
    config = dpsim.PredictConfig(**CONFIG)
    as_text = dpsim.goodput(config, tokens="1B", runs=3)
    as_number = dpsim.goodput(config, tokens=1e9, runs=3)
    assert as_text.work_s == as_number.work_s
    base = dpsim.PredictConfig(link="nvlink", model="gpt2")
    text_plan = dpsim.plan(base, gpus=[8], global_batch=64, tokens="1B", verify=0)
    number_plan = dpsim.plan(base, gpus=[8], global_batch=64, tokens=1e9, verify=0)
    assert text_plan.ranked[0].time_to_train_s == number_plan.ranked[0].time_to_train_s


def test_goodput_takes_the_duration_text_its_flags_take():
    """Before: ``duration_s="30d"`` and ``checkpoint_interval_s="1h"`` were refused while ``--duration 30d`` and
    ``--checkpoint-interval 1h`` were taken. Now the same text gives the same seconds; text without a unit is still
    refused as the flag refuses it."""
    config = dpsim.PredictConfig(**CONFIG)
    text = dpsim.goodput(config, duration_s="30d", checkpoint_interval_s="1h", restart_s="5min", runs=3)
    number = dpsim.goodput(config, duration_s=30 * 86400.0, checkpoint_interval_s=3600.0, restart_s=300.0, runs=3)
    assert text.work_s == number.work_s == 30 * 86400.0
    with pytest.raises(dpsim.ConfigError, match=r"^--duration: '30' has no unit"):
        dpsim.goodput(config, duration_s="30", runs=3)


# --- 2. a hand-edited profile's values outside their meaning -----------------------------------------------------------
def _profile() -> dict:
    return json.loads((ROOT / "calibration" / "profiles" / "aws-p4de-2node.json").read_text())


def _fit(data: dict) -> dict:
    return data["collectives"]["intra_node"]["ops"]["all_reduce"]["fit"]


@pytest.mark.parametrize("edit, needle", [
    (lambda d: _fit(d).__setitem__("r2", 2), "collectives.intra_node.ops.all_reduce.fit.r2: 2 is not valid; "
                                            "expected a finite number <= 1"),
    (lambda d: _fit(d)["segments"][0].__setitem__("r2", 1.5), "fit.segments[0].r2: 1.5 is not valid"),
    (lambda d: _fit(d).__setitem__("poor", "no"), 'fit.poor: "no" is not valid; expected true, false or null'),
    (lambda d: d["environment"].__setitem__("world_size", 0), "environment.world_size: 0 is not valid; expected an "
                                                              "integer >= 1"),
    (lambda d: d["environment"].__setitem__("hosts", "1"), 'environment.hosts: "1" is not valid'),
    (lambda d: d["environment"].__setitem__("hosts", 32), "environment.hosts: 32 is not valid; expected at most "
                                                         "world_size (16)"),
])
def test_a_profile_value_outside_its_meaning_is_refused(edit, needle):
    """Before: each was loaded and used (an R² above 1 cannot come from 1 - SSres/SStot, dpsim/profile/fit.py
    log_r2; "poor" is a bool; a run has at least one host and rank). Now one ProfileError names the field path,
    the value and what is allowed; a negative r2 (a fit worse than the mean) is still taken."""
    from dpsim.profile.io import profile_from_dict

    data = _profile()
    edited = copy.deepcopy(data)
    edit(edited)
    with pytest.raises(ProfileError) as exc:
        profile_from_dict(edited)
    assert needle in str(exc.value), str(exc.value)
    worse_than_mean = copy.deepcopy(data)
    _fit(worse_than_mean)["r2"] = -3.0
    assert profile_from_dict(worse_than_mean).ops["intra_node", "all_reduce"].fit.r2 == -3.0


# --- 3. a profile measured on another GPU ------------------------------------------------------------------------------
def test_a_profile_of_another_gpu_warns_once(capsys):
    """Before: ``--calibration a100-nvswitch-8gpu --gpu h100`` printed an H100 prediction from A100 NVLink3 fits with
    no word. Now one warning line names the GPUs, the rates and the fix; with the profile's own GPU, none."""
    args = ["predict", "--gpus", "8", "--model", "gpt2", "--calibration", "a100-nvswitch-8gpu"]
    other = run_cli([*args, "--gpu", "h100"], capsys)
    assert other.status == 0, other.err
    lines = [line for line in other.err.splitlines() if line.startswith("dpsim: warning: ")]
    assert len(lines) == 1 and "measured on A100, not H100" in lines[0] and "--gpu a100" in lines[0], other.err
    same = run_cli([*args, "--gpu", "a100-40gb"], capsys)
    assert same.status == 0 and "warning" not in same.err, same.err


# --- 4. a mix job's servers named by field path -------------------------------------------------------------------------
def test_a_mix_job_server_that_does_not_exist_names_its_field():
    """Before: "jobs 'a' at 0 s: nodes 9 does not exist", no field path, and only when the job arrived. Now
    "jobs[0].nodes (a): server 9 does not exist", as the rest of the mix's checks name their fields, before the run."""
    from dpsim.mix import mix_from_dict, simulate_mix

    topology = ROOT / "tests" / "data" / "mix" / "fat-tree-2to1.yaml"
    spec = mix_from_dict({"cluster": {"topology": str(topology), "gpus": 16},
                          "jobs": [{"name": "a", "model": "gpt2", "gpus": 4, "steps": 5, "nodes": [0, 9]}]})
    with pytest.raises(dpsim.ConfigError, match=r"^jobs\[0\]\.nodes \(a\): server 9 does not exist; the cluster has "
                                                r"servers 0\.\.7$"):
        simulate_mix(spec, sample_steps=None)


# --- 5. a sweep file's integer written as a float ---------------------------------------------------------------------
@pytest.mark.parametrize("written", ["1e3", '"1e3"', "1000.0"])
def test_a_sweep_file_integer_axis_takes_integers_only(written, tmp_path, capsys):
    """Before: ``gpus: [1e3]`` (YAML reads a float) ran 1000 GPUs while ``gpus: ["1e3"]`` was refused, and the
    command line refuses ``--gpus 1e3``. Now one rule: an integer axis takes integers."""
    path = tmp_path / "s.yaml"
    path.write_text(f"grid:\n  gpus: [{written}]\n  model: gpt2\n  link: infiniband\n")
    refused(["sweep", "--config", str(path)], capsys, "grid gpus:", "is not valid; expected an integer")


# --- 6. a sequence past the trained context -----------------------------------------------------------------------------
def test_seq_len_past_a_rotary_models_context_warns(capsys, tmp_path):
    """Before: ``--seq-len 8192`` on llama-2-7b (max_position_embeddings 4096), or past a config.json's, was taken
    with no word. Now a DpsimWarning (one CLI warning line), the prediction as given; learned positions are still
    refused (gpt2)."""
    from dpsim.errors import DpsimWarning

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        dpsim.predict(dpsim.PredictConfig(gpus=8, link="nvlink", model="llama-2-7b", seq_len=8192))
    assert [w for w in seen if issubclass(w.category, DpsimWarning) and "trained context" in str(w.message)]
    config = tmp_path / "tiny" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 704,
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 4, "vocab_size": 1000,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}))
    outcome = run_cli(["predict", "--gpus", "8", "--model", str(config), "--seq-len", "4096"], capsys)
    assert outcome.status == 0, outcome.err
    lines = [line for line in outcome.err.splitlines() if line.startswith("dpsim: warning: ")]
    assert len(lines) == 1 and "max_position_embeddings = 2,048" in lines[0], outcome.err
    refused(["predict", "--gpus", "8", "--model", "gpt2", "--seq-len", "2048"], capsys, "learned position embeddings")
