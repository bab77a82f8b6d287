"""Bad inputs found by the eleventh fuzz round (fuzz11): one line and exit 2, or a sane result.

In-process and quick (the fast lane runs it), judged by ``fuzz_harness.check_outcome`` as the other fuzz
suites are. Each case says what it did before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuzz_harness import check_outcome, run_cli


# --- plan: the fsdp-hybrid rule of an empty search ----------------------------------------------------------------
def test_plan_fsdp_hybrid_rule_no_longer_says_no_ep(capsys):
    """Before: "... fsdp-hybrid needs more data-parallel ranks than one server holds (...), and no --ep": plan
    searches HSDP under --ep since e11acf4, so the rule sent the user to drop --ep, which changes nothing here
    (two stages of one 8-GPU server each leave no replica of a whole-server shard group)."""
    args = ["plan", "--model", "mixtral-8x7b", "--gpus", "16", "--link", "infiniband", "--global-batch", "64",
            "--verify", "0", "--micro-batches", "1", "--recompute", "full", "--strategies", "fsdp-hybrid", "--tp", "1",
            "--pp", "2", "--ep", "8"]
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "error", ("fsdp-hybrid needs more data-parallel ranks than one server holds",
                                           "with --ep, a group whose tp x group x cp ranks ep x etp divides"))
    assert "and no --ep" not in outcome.err


# --- sweep: a catalog model or GPU in another case ------------------------------------------------------------
@pytest.mark.parametrize("flag, values", [("--model", "gpt2,GPT2"), ("--gpu", "h100,H100"), ("--model", "gpt2,Gpt2 ")])
def test_sweep_catalog_model_or_gpu_in_another_case_repeats(flag, values, capsys):
    """Before: status 0 and two identical rows, both named gpt2 (h100): the catalog and the GPU presets are read
    case-insensitively, so the two values were one point run twice."""
    args = ["sweep", "--link", "infiniband", "--steps", "1", "--gpus", "16", *(["--model", "gpt2"] if flag != "--model"
                                                                             else []), flag, values]
    check_outcome(run_cli(args, capsys), args, "error", (f"{flag}: ", "repeats a value; give each value once"))


def test_sweep_one_shape_in_two_key_orders_repeats(capsys):
    """Before: status 0, the same point twice, both rows named "transformer"."""
    a = "transformer:hidden=768,layers=12,heads=12,ffn=3072,vocab=50257,seq=1024"
    b = "transformer:layers=12,hidden=768,heads=12,ffn=3072,vocab=50257,seq=1024"
    args = ["sweep", "--link", "infiniband", "--steps", "1", "--gpus", "8", "--axis", f"model={a};{b}"]
    check_outcome(run_cli(args, capsys), args, "error", ("--axis model: ", "repeats a value"))
    args[-1] = f"model={a};{a.replace('heads=12', 'heads=6')}"  # two shapes: two points
    check_outcome(run_cli(args, capsys), args, "ok")


def test_sweep_models_of_different_names_still_run(capsys):
    args = ["sweep", "--link", "infiniband", "--steps", "1", "--gpus", "8", "--model", "gpt2,bert-base", "--json"]
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    assert [r["model"] for r in json.loads(outcome.out)["rows"]] == ["gpt2", "bert-base"]


# --- counts in the schedule and context-parallel refusals -------------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    # Before: "1 micro-batches per replica" (fuzz8's cases kept the plural), and "1 token(s)".
    (["--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--pp", "2", "--schedule", "1f1b-interleaved",
      "--virtual-stages", "2"], "--grad-accum: 1 micro-batch per replica is not a multiple of --pp 2"),
    (["--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--pp", "2", "--schedule", "1f1b-interleaved",
      "--virtual-stages", "2", "--global-batch", "8", "--micro-batch", "1"],
     "--global-batch: 8 gives 1 micro-batch per replica, not a multiple"),
    (["--model", "mixtral-8x7b", "--gpus", "16", "--link", "infiniband", "--pp", "2", "--schedule", "dualpipe",
      "--ep", "8", "--global-batch", "8", "--micro-batch", "1"], "--global-batch: 8 gives 1 micro-batch per replica;"),
    (["--model", "mixtral-8x7b", "--gpus", "16", "--link", "infiniband", "--pp", "2", "--schedule", "dualpipe",
      "--ep", "8"], "--grad-accum: 1 micro-batch per replica; --schedule dualpipe"),
    (["--model", "bert-base", "--gpus", "16", "--link", "infiniband", "--cp", "2"],
     "layer 'pooler' computes on 1 token per sample"),
    (["--model", "mixtral-8x7b", "--gpus", "16", "--link", "infiniband", "--cp", "2", "--seq-len", "3"],
     "--cp: 2 does not divide the 1 token each expert of mixtral-8x7b gets per sample"),
])
def test_counts_in_schedule_and_cp_refusals_agree_with_their_number(args, needle, capsys):
    args = ["predict", "--steps", "1", *args]
    check_outcome(run_cli(args, capsys), args, "error", (needle,))


# --- sweep -o under a file -------------------------------------------------------------------------------------
def test_sweep_output_under_a_file_says_it_is_not_a_directory(tmp_path, capsys):
    """Before: "directory '.../keep.csv' does not exist" for a file that exists (report, --timeline and mix --html
    already said "is not a directory"); the file is left as it was."""
    keep = tmp_path / "keep.csv"
    keep.write_text("KEEP\n")
    args = ["sweep", "--model", "gpt2", "--link", "nvlink", "--steps", "1", "--gpus", "8,16", "-o",
            str(keep / "r.csv")]
    check_outcome(run_cli(args, capsys), args, "error", (f"-o/--output: directory {str(keep)!r} is not a directory",))
    assert keep.read_text() == "KEEP\n"
    args[-1] = str(tmp_path / "missing" / "r.csv")
    check_outcome(run_cli(args, capsys), args, "error", ("missing' does not exist",))


def test_sweep_write_results_under_a_file_says_it_is_not_a_directory(tmp_path):
    import pandas as pd

    from dpsim.errors import ConfigError
    from dpsim.plan.sweep import write_results

    keep = tmp_path / "keep.csv"
    keep.write_text("KEEP\n")
    with pytest.raises(ConfigError, match="is not a directory$"):
        write_results(pd.DataFrame({"a": [1]}), keep / "r.csv")
    assert keep.read_text() == "KEEP\n"


# --- goodput: a duration past a century -----------------------------------------------------------------------
@pytest.mark.parametrize("flag, needle", [
    # Before: "86400000000000.0 s is not valid" (a 14-digit number; --restart says 3.6e+12 s since fuzz9).
    ("--duration", "--duration: 8.64e+13 s is not valid; expected a duration > 0"),
    ("--checkpoint-interval", "--checkpoint-interval: 8.64e+13 s is not valid; expected at most"),
])
def test_goodput_long_durations_are_named_in_short_form(flag, needle, capsys):
    args = ["goodput", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--runs", "1", flag, "1e9d"]
    check_outcome(run_cli(args, capsys), args, "error", (needle,))


# --- mix: YAML values named as the file writes them ---------------------------------------------------------------
@pytest.mark.parametrize("jobs, needle", [
    # Before: "jobs[0].gpus: True is not valid", "jobs: None is not valid", "jobs: '0 jobs' is not valid".
    ("\n  - {name: a, model: gpt2, gpus: true, steps: 1}", "jobs[0].gpus: true is not valid; expected an integer"),
    ("\n  - {name: a, model: gpt2, gpus: null, steps: 1}", "jobs[0].gpus: null is not valid"),
    ("", "jobs: null is not valid; expected a list of 1 to"),
    (" []", "jobs: [] is not valid; expected a list of 1 to"),
    ("\n  - {name: a, model: gpt2, gpus: '16', steps: 1}", "jobs[0].gpus: '16' is not valid"),
])
def test_mix_values_are_named_as_yaml_writes_them(jobs, needle, tmp_path, capsys):
    path = tmp_path / "mix.yaml"
    path.write_text(f"cluster: {{link: infiniband, gpus: 32}}\njobs:{jobs}\n")
    args = ["mix", str(path)]
    check_outcome(run_cli(args, capsys), args, "error", (needle,))


# --- config.json: attention heads of 0 in the newer families ------------------------------------------------
CONFIGS = Path(__file__).parent / "data" / "hf_configs"


@pytest.mark.parametrize("name, key", [("gemma-3-1b-pt", "num_attention_heads"), ("gemma-2-9b", "num_attention_heads"),
                                       ("c4ai-command-r-v01", "num_attention_heads"), ("gpt-j-6b", "n_head"),
                                       ("Mistral-7B-v0.1", "num_attention_heads")])
@pytest.mark.parametrize("value", [0, -2])
def test_config_json_attention_heads_below_one_are_named(name, key, value, tmp_path, capsys):
    """Before (Gemma 2/3, Cohere, GPT-J): "its gemma2 configuration has a field the builders do not cover (an
    activation other than the family's, ...)", which named no field; the Llama-style families named it."""
    data = {**json.loads((CONFIGS / name / "config.json").read_text()), key: value}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    args = ["predict", "--gpus", "8", "--link", "nvlink", "--steps", "1", "--seq-len", "1024", "--model", str(path)]
    check_outcome(run_cli(args, capsys), args, "error", (f"{key}={value} is not valid; expected an integer from 1",))


# --- a calibration profile's unbounded numbers ------------------------------------------------------------------
@pytest.mark.parametrize("where", ["fit", "segment"])
def test_profile_r2_refusal_reads_without_minus_inf(where, tmp_path, capsys):
    """Before: "fit.r2: NaN is not valid; expected a number >= -inf or null" (an r2 has no lower bound)."""
    data = json.loads((Path(__file__).parents[1] / "calibration" / "profiles" / "a100-nvswitch-8gpu.json").read_text())
    fit = data["collectives"]["intra_node"]["ops"]["all_reduce"]["fit"]
    (fit if where == "fit" else fit["segments"][0])["r2"] = float("nan")
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    args = ["predict", "--model", "gpt2", "--gpus", "8", "--link", "dgx-a100", "--steps", "1", "--calibration", str(path)]
    outcome = run_cli(args, capsys)
    # Round 25: the bound <= 1 (R² = 1 - SSres/SStot) was added; still no "-inf" for the missing lower bound.
    check_outcome(outcome, args, "error", ("r2: NaN is not valid; expected a finite number <= 1 or null",))
    assert "-inf" not in outcome.err


# --- NVLS across an NVL72 rack with its NVLink domain degraded ---------------------------------------------------
NVL72 = ["predict", "--model", "gpt2", "--link", "gb200-nvl72", "--gpus", "72", "--steps", "1", "--micro-batch", "1",
         "--json"]


def _step(args, capsys) -> float:
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    return json.loads(outcome.out)["step_time_s"]


def test_nvls_over_a_degraded_nvlink_domain_slows(capsys):
    """Before: --degrade nvlink-domain:1% (and 10 %) predicted the healthy 72-GPU step to the last digit: NVLS,
    NCCL's choice there, was costed on the GPU links alone (the domain's links never bound when healthy)."""
    healthy = _step(NVL72, capsys)
    ten = _step([*NVL72, "--degrade", "nvlink-domain:10%"], capsys)
    one = _step([*NVL72, "--degrade", "nvlink-domain:1%"], capsys)
    assert healthy < ten < one
    # The tier's link at 10 % gives each GPU what its own link at 10 % gives it: the same NVLS step.
    nvls = [*NVL72, "--algo", "nvls"]
    assert _step([*nvls, "--degrade", "nvlink-domain:10%"], capsys) == _step([*nvls, "--degrade", "nvlink:10%"], capsys)
    # Named links too (the whole-cluster path): never faster than the class alone.
    assert _step([*nvls, "--degrade", "nvlink-domain:10%", "--degrade", "node0.gpu0:99%"], capsys) >= \
        _step([*nvls, "--degrade", "nvlink-domain:10%"], capsys)


def test_nvls_over_a_degraded_nvlink_switch_tier_slows(capsys):
    """Before: --link nvlink --gpus 16 --degrade nvlink-fabric:10% predicted the healthy step (0.019483 s) to the
    last digit, as the NVL72 domain did."""
    base = ["predict", "--model", "gpt2", "--link", "nvlink", "--gpus", "16", "--steps", "1", "--micro-batch", "1",
            "--json"]
    assert _step(base, capsys) < _step([*base, "--degrade", "nvlink-fabric:10%"], capsys)
    nvls = [*base, "--algo", "nvls"]
    assert _step([*nvls, "--degrade", "nvlink-fabric:10%"], capsys) == _step([*nvls, "--degrade", "nvlink:10%"], capsys)
