"""Bad inputs found by the ninth fuzz round (fuzz9): one line and exit 2, or a sane result.

In-process and quick (the fast lane runs it), judged by ``fuzz_harness.check_outcome`` as the other fuzz
suites are. Each case says what it did before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuzz_harness import check_outcome, run_cli

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
SHAPE = ("transformer:hidden=1024,layers=4,heads=16,ffn=2816,vocab=32000,seq=2048,act=swiglu,norm=rmsnorm,"
         "pos=rope")
PREDICT = ["predict", "--gpus", "8", "--link", "nvlink", "--steps", "1"]


def _fixture(name: str, **changes) -> dict:
    return {**json.loads((CONFIGS / name / "config.json").read_text()), **changes}


def _predict_config_json(tmp_path, capsys, data: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    args = [*PREDICT, "--model", str(path), "--seq-len", "2048"]
    return args, run_cli(args, capsys)


# --- --model transformer:...: numbers that are not ASCII, refusals that named another value ------------------------
@pytest.mark.parametrize("extra, needle", [
    # Before: ValueError tracebacks (str.isdigit is true for a superscript two, int() refuses it).
    ("window=²", "window=² is not valid; expected an integer from 0"),
    ("parallel=²", "parallel=² is not valid"),
    # Before: taken (int and float read Arabic-Indic digits).
    ("window=١٢", "window=١٢ is not valid"),
    ("rotary_pct=٠.٥", "rotary_pct=٠.٥ is not valid"),
    # Before: refused naming a value the user never wrote (0.0, -0.0, inf, 10.0).
    ("rotary_pct=1e-400", "rotary_pct=1e-400 is not valid; expected a share above 0 and at most 1"),
    ("rotary_pct=-0", "rotary_pct=-0 is not valid"),
    ("final_softcap=1e400", "final_softcap=1e400 is not valid; expected a cap above 0, or 0 for none"),
    ("attn_softcap=Infinity", "attn_softcap=Infinity is not valid"),
])
def test_shape_numbers_are_ascii_and_named_as_given(extra, needle, capsys):
    args = [*PREDICT, "--model", f"{SHAPE},{extra}"]
    check_outcome(run_cli(args, capsys), args, "error", (f"--model transformer: {needle}",))


@pytest.mark.parametrize("extra, needle", [
    # Before: "sandwich_norms=True is not valid" (Python's spelling; the shape and JSON write true).
    ("sandwich_norms=true,experts=8,top_k=2,moe_ffn=512", "sandwich_norms=true is not valid"),
    ("qk_norm=true,kv_lora_rank=512,qk_nope_head_dim=128,qk_rope_head_dim=64,v_head_dim=128", "qk_norm=true is not"),
])
def test_shape_booleans_are_named_as_written(extra, needle, capsys):
    args = [*PREDICT, "--model", f"{SHAPE},{extra}"]
    check_outcome(run_cli(args, capsys), args, "error", (needle,))


@pytest.mark.parametrize("extra", ["window=1_024", "rotary_pct=.5", "rotary_pct=+1", "rotary_pct=2.5e-1",
                                   "window=16,window_layers=ALTERNATE"])
def test_shape_numbers_as_written_are_taken(extra, capsys):
    args = [*PREDICT, "--model", f"{SHAPE},{extra}"]
    check_outcome(run_cli(args, capsys), args, "ok")


# --- config.json: odd values of the newer keys ------------------------------------------------------------------
@pytest.mark.parametrize("name, changes, needle", [
    # Before: "partial_rotary_factor=0.5 is not valid; expected a share above 0 and at most 1" for the string "0.5".
    ("Mistral-7B-v0.1", {"partial_rotary_factor": "0.5"}, "partial_rotary_factor='0.5' is not valid"),
    ("Mistral-7B-v0.1", {"rope_parameters": {"partial_rotary_factor": "x"}}, "partial_rotary_factor='x' is not valid"),
    ("gemma-2-9b", {"attn_logit_softcapping": "50"}, "attn_logit_softcapping='50' is not valid"),
    ("gpt-neox-20b", {"rotary_pct": "0.25"}, "rotary_pct='0.25' is not valid"),
    # Before: GPT-J's rotary_dim was refused as the share it becomes ("rotary_dim=1.171875 is not valid; expected a
    # share above 0 and at most 1"), "64" as "a field the builders do not cover", and 64.5 and true were taken.
    ("gpt-j-6b", {"rotary_dim": 300}, "rotary_dim=300 is not valid; expected an integer from 1 to a head's width, "
                                      "n_embd / n_head = 256"),
    ("gpt-j-6b", {"rotary_dim": 0}, "rotary_dim=0 is not valid"),
    ("gpt-j-6b", {"rotary_dim": 64.5}, "rotary_dim=64.5 is not valid"),
    ("gpt-j-6b", {"rotary_dim": True}, "rotary_dim=true is not valid"),
    ("gpt-j-6b", {"rotary_dim": "64"}, "rotary_dim='64' is not valid"),
    # Before: num_ln_in_parallel_attn 0 under new_decoder_architecture built blocks in sequence (status 0);
    # transformers' FalconDecoderLayer gives the MLP a norm for 1 or 2 only.
    ("falcon-7b", {"new_decoder_architecture": True, "num_kv_heads": 71, "num_ln_in_parallel_attn": 0},
     "num_ln_in_parallel_attn=0 is not valid; allowed: 1 (one input_layernorm both read) or 2"),
    ("falcon-7b", {"new_decoder_architecture": True, "num_kv_heads": 71, "num_ln_in_parallel_attn": 3},
     "num_ln_in_parallel_attn=3 is not valid"),
    # Still refused as before.
    ("Mistral-7B-v0.1", {"sliding_window": -1}, "sliding_window=-1 is not valid"),
    ("Mistral-7B-v0.1", {"partial_rotary_factor": 1.5}, "partial_rotary_factor=1.5 is not valid"),
])
def test_config_json_odd_values_are_refused_by_their_own_name(name, changes, needle, tmp_path, capsys):
    args, outcome = _predict_config_json(tmp_path, capsys, _fixture(name, **changes))
    check_outcome(outcome, args, "error", ("--model", needle))


@pytest.mark.parametrize("key", ["bias", "multi_query", "parallel_attn", "new_decoder_architecture", "alibi"])
def test_config_json_falcon_switch_as_a_string_is_refused(key, tmp_path, capsys):
    """Before: "false" (a JSON string) was truthy: "bias": "false" built biases on every projection,
    "multi_query": "false" one key-value head, in silence (status 0); "alibi": "false" was refused as ALiBi."""
    args, outcome = _predict_config_json(tmp_path, capsys, _fixture("falcon-7b", **{key: "false"}))
    check_outcome(outcome, args, "error", (f"{key}='false' is not valid; expected true or false",))


@pytest.mark.parametrize("changes", [{"sliding_window": None}, {"sliding_window": 0}, {"partial_rotary_factor": None},
                                     {"partial_rotary_factor": 0.25}])
def test_config_json_window_and_rotary_left_out_or_set_are_taken(changes, tmp_path, capsys):
    args, outcome = _predict_config_json(tmp_path, capsys, _fixture("Mistral-7B-v0.1", **changes))
    check_outcome(outcome, args, "ok")


def test_config_json_falcon_new_architecture_norms_are_taken(tmp_path, capsys):
    base = _fixture("falcon-7b", new_decoder_architecture=True, num_kv_heads=71)
    params = []
    for num_ln in (1, 2):
        path = tmp_path / f"ln{num_ln}.json"
        path.write_text(json.dumps({**base, "num_ln_in_parallel_attn": num_ln}))
        args = [*PREDICT, "--model", str(path), "--seq-len", "2048", "--json"]
        outcome = run_cli(args, capsys)
        check_outcome(outcome, args, "ok")
        params.append(json.loads(outcome.out)["param_count"])
    assert params[1] - params[0] == 32 * 2 * 4544  # Falcon-40B's ln_attn and ln_mlp: one LayerNorm more a block


# --- dpsim mix: the shard group of a job ------------------------------------------------------------------------
def _mix(tmp_path, capsys, job: str):
    path = tmp_path / "mix.yaml"
    path.write_text("cluster: {link: infiniband, gpus: 16}\njobs:\n  - " + job + "\n")
    args = ["mix", str(path), "--json"]
    return args, run_cli(args, capsys)


def test_mix_fsdp_hybrid_with_tp_takes_its_shard_group(tmp_path, capsys):
    """Before: "jobs[0] (a): --zero-group: ... e.g. --zero-group 4", a flag the mix file had no key for."""
    job = "{name: a, model: gpt2, gpus: 16, steps: 1, strategy: fsdp-hybrid, tp: 2%s}"
    args, outcome = _mix(tmp_path, capsys, job % "")
    check_outcome(outcome, args, "error", ("jobs[0].zero_group (a): jobs[0].strategy fsdp-hybrid with jobs[0].tp 2 "
                                           "needs its shard group", "e.g. jobs[0].zero_group 4"))
    args, outcome = _mix(tmp_path, capsys, job % ", zero_group: 4")
    check_outcome(outcome, args, "ok")
    args, outcome = _mix(tmp_path, capsys, job % ", zero_group: 3")
    check_outcome(outcome, args, "error", ("jobs[0].zero_group (a): 3 does not divide the 8 data-parallel ranks",))


@pytest.mark.parametrize("extra, expect, needles", [
    (", strategy: zero3, zero_group: 8", "ok", ()),
    (", strategy: zero3, zero_impl: gemini, precision: bf16-params", "ok", ()),
    (", strategy: zero3, zero_impl: gemini", "error", ("jobs[0].precision (a): amp-bf16 is not what "
                                                       "jobs[0].zero_impl gemini runs",)),
    (", strategy: ddp, zero_group: 8", "error", ("jobs[0].zero_group (a): 8 applies to jobs[0].strategy fsdp-hybrid",)),
    (", strategy: zero3, zero_group: '8'", "error", ("jobs[0].zero_group (a): '8' is not valid",)),
])
def test_mix_zero_keys(extra, expect, needles, tmp_path, capsys):
    args, outcome = _mix(tmp_path, capsys, "{name: a, model: gpt2, gpus: 16, steps: 1%s}" % extra)
    check_outcome(outcome, args, expect, needles)


# --- a YAML input that holds no document ------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["mix", "{f}"], ["sweep", "-c", "{f}"],
                                     ["predict", "--model", "gpt2", "--gpus", "8", "--topology", "{f}"]])
@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_empty_yaml_is_named_so(command, text, tmp_path, capsys):
    """Before: "mix: None is not valid", "the document is NoneType", "(top level): None is not valid"."""
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    args = [a.replace("{f}", str(path)) for a in command]
    check_outcome(run_cli(args, capsys), args, "error",
                  (f"{path}: holds no YAML document (the file is empty or only comments)",))


# --- the environment ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["COLUMNS", "LINES"])
def test_terminal_size_of_superscript_digits_is_dropped(name, monkeypatch, capsys):
    """Before: COLUMNS=² raised ValueError in main() before any command ran (a traceback, status 1)."""
    monkeypatch.setenv(name, "²")
    args = [*PREDICT, "--model", "gpt2"]
    check_outcome(run_cli(args, capsys), args, "ok")


# --- --degrade of a link the job never uses ---------------------------------------------------------------------
@pytest.mark.parametrize("gpus, link, needle", [
    # Before: status 0 and the healthy step to the last digit (a 1-GPU job runs no collective).
    ("1", "nvlink:10%", "--degrade: 'nvlink:10%' would change nothing: a 1-GPU job runs no collective over any link"),
    ("1", "node0.gpu0:10%", "--degrade: 'node0.gpu0:10%' would change nothing"),
    # Before: status 0, no effect: GPU 5 of a 4-GPU job on an 8-GPU server carries none of its traffic.
    ("4", "node0.gpu5:10%", "--degrade: 'node0.gpu5:10%' names GPU 5, which the job does not use: its 4 GPUs of the "
                            "server are gpu0..gpu3"),
])
def test_degrade_of_a_link_the_job_never_uses_is_refused(gpus, link, needle, capsys):
    args = ["predict", "--model", "gpt2", "--link", "infiniband", "--steps", "1", "--gpus", gpus, "--degrade", link]
    check_outcome(run_cli(args, capsys), args, "error", (needle,))


def test_degrade_of_a_gpu_the_job_uses_slows_it(capsys):
    steps = []
    for extra in ([], ["--degrade", "node0.gpu3:10%"]):
        args = ["predict", "--model", "gpt2", "--link", "infiniband", "--steps", "1", "--gpus", "4", "--json", *extra]
        outcome = run_cli(args, capsys)
        check_outcome(outcome, args, "ok")
        steps.append(json.loads(outcome.out)["step_time_s"])
    assert steps[1] > steps[0]


# --- goodput --restart at its limit ---------------------------------------------------------------------------
def test_goodput_restart_is_checked_as_given(capsys):
    """Before: --restart 365d (the limit) was refused as "31536000.14932777 s is not valid", the checkpoint's read
    back added to it, and 1e9h was named "3600000000000.1494 s"."""
    args = ["goodput", "--model", "gpt2", "--link", "infiniband", "--gpus", "16", "--runs", "2", "--restart", "365d"]
    check_outcome(run_cli(args, capsys), args, "ok")
    args[-1] = "1e9h"
    check_outcome(run_cli(args, capsys), args, "error", ("--restart: 3.6e+12 s is not valid; expected a duration >= 0 "
                                                         "and <= 3.1536e+07 s (a year)",))


@pytest.mark.parametrize("link, needle", [
    # Before: status 0, the healthy step: 16 GPUs of nvl72-ib are one NVLink domain and talk over NVLink alone.
    ("node0.nic0:10%", "--degrade: 'node0.nic0:10%' names NIC 0, which carries none of the job's traffic: its 4 "
                       "servers are one NVLink domain of nvl72-ib"),
    ("infiniband:10%", "--degrade: 'infiniband' carries none of the job's traffic"),
    ("leaf-spine:10%", "degrade a link class they use: nvlink, nvlink-domain"),
])
def test_degrade_of_nics_inside_one_nvlink_domain_is_refused(link, needle, capsys):
    topology = str(Path(__file__).parents[1] / "topologies" / "examples" / "nvl72-ib.yaml")
    args = ["predict", "--model", "gpt2", "--topology", topology, "--steps", "1", "--gpus", "16", "--degrade", link]
    check_outcome(run_cli(args, capsys), args, "error", (needle,))
    args[args.index("16")] = "288"  # past one domain the NICs carry the job's traffic
    check_outcome(run_cli(args, capsys), args, "ok")


# --- --zero-impl gemini: flags it has no use for ----------------------------------------------------------------
GEMINI = ["predict", "--model", "gpt2", "--link", "infiniband", "--steps", "1", "--gpus", "16", "--strategy", "zero3",
          "--zero-impl", "gemini", "--precision", "bf16-params"]


@pytest.mark.parametrize("extra, needle", [
    # Before: each predicted Gemini's step to the last digit (status 0): it gathers chunks, not wrapped units, on the
    # compute stream (no overlap to slow).
    (["--fsdp-unit", "layer"], "--fsdp-unit: 'layer' does not apply to --zero-impl gemini, which gathers and "
                               "reduce-scatters chunks, not wrapped units"),
    (["--fsdp-unit", "model"], "--fsdp-unit: 'model' does not apply to --zero-impl gemini"),
    (["--overlap-slowdown", "0.5"], "--overlap-slowdown: 0.5 slows compute while communication overlaps it, but "
                                    "--zero-impl gemini runs its chunk collectives on the compute stream"),
])
def test_gemini_refuses_flags_it_has_no_use_for(extra, needle, capsys):
    args = GEMINI + extra
    check_outcome(run_cli(args, capsys), args, "error", (needle,))


def test_gemini_checkpointing_unit_is_taken(capsys):
    args = GEMINI + ["--activation-checkpointing", "--fsdp-unit", "layer"]
    check_outcome(run_cli(args, capsys), args, "ok")
