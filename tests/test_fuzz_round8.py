"""Bad inputs found by the eighth fuzz round (fuzz8): one line and exit 2, or a sane result.

In-process and quick (the fast lane runs it), judged by ``fuzz_harness.check_outcome`` as the other fuzz
suites are. Each case says what it did before.
"""

from __future__ import annotations

import json

import pytest

from fuzz_harness import check_outcome, run_cli

LLAMA = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16,
         "num_key_value_heads": 8, "num_hidden_layers": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
         "hidden_act": "silu", "tie_word_embeddings": False}
"""A small Llama config.json (the keys a repository's file carries)."""


def _predict_json_model(tmp_path, capsys, text: str):
    (tmp_path / "config.json").write_text(text)
    args = ["predict", "--model", str(tmp_path / "config.json"), "--gpus", "8", "--link", "nvlink", "--steps", "1"]
    return args, run_cli(args, capsys)


# --- --model config.json: a file that is not a configuration dpsim can read ----------------------------------
@pytest.mark.parametrize("data, needles", [
    # Before: a RecursionError traceback from json.loads.
    ("[" * 100_000, ("is not a readable JSON configuration (RecursionError)",)),
    # Before: each read as "its llama configuration has a field the builders do not cover (an activation ...)".
    ({k: v for k, v in LLAMA.items() if k != "hidden_size"}, ("its llama configuration has no hidden_size (missing)",)),
    ({**LLAMA, "hidden_size": None}, ("has no hidden_size (null)",)),
    ({**LLAMA, "hidden_size": "1024"}, ("hidden_size='1024' is not valid; expected an integer",)),
    ({**LLAMA, "hidden_size": 1024.0}, ("hidden_size=1024.0 is not valid; expected an integer",)),
    ({**LLAMA, "model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2},
     ("its qwen3_moe configuration has no moe_intermediate_size (missing)",)),
    ({**LLAMA, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": "2"},
     ("num_experts_per_tok='2' is not valid; expected an integer",)),
    # Before: head_dim="64" was refused as "head_dim=64 is not valid; expected an integer" (the quotes dropped).
    ({**LLAMA, "head_dim": "64"}, ("head_dim='64' is not valid",)),
    # Before: "false" (a JSON string) was truthy: the head was predicted tied, in silence (status 0).
    ({**LLAMA, "tie_word_embeddings": "false"}, ("tie_word_embeddings='false' is not valid; expected true or false",)),
    ({**LLAMA, "attention_bias": "no"}, ("attention_bias='no' is not valid",)),
])
def test_config_json_that_dpsim_cannot_read(data, needles, tmp_path, capsys):
    text = data if isinstance(data, str) else json.dumps(data)
    args, outcome = _predict_json_model(tmp_path, capsys, text)
    check_outcome(outcome, args, "error", ("--model", *needles))


def test_config_json_without_activation_function_takes_transformers_default(tmp_path, capsys):
    """Before: a GPT-2 config.json without activation_function (GPT2Config's default is gelu_new) was refused
    as "a field the builders do not cover"; it is built as transformers builds it."""
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 2, "n_head": 12, "vocab_size": 50257,
            "n_positions": 1024}
    args, outcome = _predict_json_model(tmp_path, capsys, json.dumps(gpt2))
    check_outcome(outcome, args, "ok")
    args, outcome = _predict_json_model(tmp_path, capsys, json.dumps({**gpt2, "activation_function": "gelu_new"}))
    assert outcome.status == 0


def test_config_json_as_written_is_taken(tmp_path, capsys):
    args, outcome = _predict_json_model(tmp_path, capsys, json.dumps(LLAMA))
    check_outcome(outcome, args, "ok")


# --- --moe-routing and --moe-capacity-factor where nothing reads them -----------------------------------------
MIXTRAL = ["predict", "--model", "mixtral-8x7b", "--gpus", "8", "--link", "nvlink", "--steps", "1"]


@pytest.mark.parametrize("args, needles", [
    # Before: each predicted the balanced step to the last digit (status 0): with --ep 1 every GPU holds
    # every expert (its work is the mean), and the data-parallel-only path runs its experts dropless.
    (MIXTRAL + ["--moe-routing", "gini:0.9"], ("--moe-routing: 'gini:0.9' loads the experts unevenly, and --ep is 1",)),
    (MIXTRAL + ["--moe-routing", "zipf:1.2"], ("--moe-routing: 'zipf:1.2'", "give --ep 2 or more, or leave it out")),
    (MIXTRAL + ["--moe-capacity-factor", "1.0"], ("--moe-capacity-factor: 1 drops tokens over an expert's capacity",
                                                  "with data parallelism alone")),
    (MIXTRAL + ["--tp", "2", "--sequence-parallel", "--moe-routing", "maxvio:0.5"],
     ("--ep is 1", "or --moe-capacity-factor, whose drops it sets")),
    (["memory", *MIXTRAL[1:], "--moe-routing", "gini:0.5"], ("--moe-routing: 'gini:0.5'",)),
    (["goodput", *MIXTRAL[1:-2], "--moe-capacity-factor", "2", "--runs", "2"], ("--moe-capacity-factor: 2",)),
    (["plan", "--model", "mixtral-8x7b", "--gpus", "16", "--global-batch", "64", "--verify", "0", "--ep", "1",
      "--moe-routing", "gini:0.5"], ("--moe-routing: 'gini:0.5' loads the experts unevenly", "the search has none")),
])
def test_moe_routing_without_expert_parallelism_is_refused(args, needles, capsys):
    check_outcome(run_cli(args, capsys), args, "error", needles)


@pytest.mark.parametrize("extra", [
    ["--ep", "2", "--moe-routing", "gini:0.9"],
    ["--moe-routing", "zipf:0"],  # uniform: the balanced routing by another name
    ["--tp", "2", "--sequence-parallel", "--moe-routing", "gini:0.9", "--moe-capacity-factor", "1.0"],
    ["--tp", "2", "--sequence-parallel", "--moe-capacity-factor", "1.0"],
])
def test_moe_routing_where_it_moves_the_step_is_taken(extra, capsys):
    args = MIXTRAL + extra
    check_outcome(run_cli(args, capsys), args, "ok")


def test_moe_routing_api():
    import dpsim

    with pytest.raises(dpsim.ConfigError, match=r"^--moe-routing: 'gini:0.5' loads the experts unevenly"):
        dpsim.predict(dpsim.PredictConfig(model="mixtral-8x7b", gpus=8, link="nvlink", moe_routing="gini:0.5"))
    with pytest.raises(dpsim.ConfigError, match=r"^--moe-routing: 'gini:0.5' .* the search has none"):
        dpsim.plan(dpsim.PredictConfig(model="mixtral-8x7b", link="infiniband", moe_routing="gini:0.5"), gpus=[16],
                   global_batch=64, verify=0, eps=[1])


# --- --no-overlap on a sharded strategy alone ---------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["zero3", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid"])
def test_no_overlap_on_a_per_unit_strategy_alone_is_refused(strategy, capsys):
    """Before: the data-parallel-only zero3/fsdp programs have no overlap switch, and --no-overlap predicted the
    overlapped step to the last digit (status 0)."""
    args = ["predict", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--steps", "1", "--strategy",
            strategy, "--no-overlap"]
    check_outcome(run_cli(args, capsys), args, "error",
                  (f"--no-overlap: --strategy {strategy} with data parallelism alone", "leave it out"))


@pytest.mark.parametrize("extra", [["--strategy", "zero2"], ["--strategy", "zero3", "--tp", "2"],
                                   ["--strategy", "fsdp", "--pp", "2"]])
def test_no_overlap_where_it_applies_is_taken(extra, capsys):
    args = ["predict", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--steps", "1", "--no-overlap",
            *extra]
    check_outcome(run_cli(args, capsys), args, "ok")


def test_plan_no_overlap_with_fsdp_alone_runs_its_fsdp_layouts_overlapped(capsys):
    """plan --no-overlap keeps searching (and verifying) fsdp without a layout, as predict runs it: overlapped."""
    args = ["plan", "--model", "gpt2", "--gpus", "8", "--link", "nvlink", "--global-batch", "64", "--no-overlap",
            "--strategies", "fsdp", "--tp", "1", "--pp", "1", "--verify", "1"]
    check_outcome(run_cli(args, capsys), args, "ok")


# --- a pipeline schedule's micro-batch rule, blamed on a flag the job did not give ------------------------------
PP4 = ["predict", "--model", "llama-3-8b", "--gpus", "16", "--link", "infiniband", "--pp", "4", "--steps", "1"]


@pytest.mark.parametrize("extra, needles", [
    # Before: "--global-batch: 16 gives 1 micro-batches per replica ..." though no --global-batch was given.
    (["--schedule", "1f1b-interleaved", "--virtual-stages", "2", "--stage-layers", "3,4,4,5,4,4,4,4"],
     ("--grad-accum: 1 micro-batch per replica is not a multiple of --pp 4", "give --grad-accum 4")),
    (["--schedule", "1f1b-interleaved", "--virtual-stages", "2", "--grad-accum", "6"], ("give --grad-accum 8",)),
    (["--schedule", "dualpipe", "--grad-accum", "9"], ("--grad-accum: 9 micro-batches per replica; --schedule "
                                                       "dualpipe needs an even number", "give --grad-accum 10")),
    # A --global-batch given is still the one named.
    (["--schedule", "1f1b-interleaved", "--virtual-stages", "2", "--global-batch", "16"],
     ("--global-batch: 16 gives 1 micro-batch per replica",)),
])
def test_schedule_micro_batch_rule_names_the_flag_given(extra, needles, capsys):
    args = PP4 + extra
    check_outcome(run_cli(args, capsys), args, "error", needles)


def test_interleaved_uneven_chunks_with_enough_micro_batches_run(capsys):
    args = PP4 + ["--schedule", "1f1b-interleaved", "--virtual-stages", "2", "--stage-layers", "3,4,4,5,4,4,4,4",
                  "--grad-accum", "8", "--json"]
    check_outcome(run_cli(args, capsys), args, "ok")


# --- a search axis with a value twice --------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, needle", [
    # Before: dpsim.plan ranked every layout twice (10 rows, 5 layouts); the command line dropped the repeat.
    (dict(gpus=[8, 8]), "--gpus: 8,8 repeats 8; give each value once"),
    (dict(gpus=[8], tps=[1, 1]), "--tp: 1,1 repeats 1"),
    (dict(gpus=[8], micro_batches=[4, 4]), "--micro-batches: 4,4 repeats 4"),
    (dict(gpus=[8], strategies=["ddp", "ddp"]), "--strategies: ddp,ddp repeats ddp"),
    (dict(gpus=[8], recomputes=["off", "off"]), "--recompute: off,off repeats off"),
])
def test_plan_search_axis_repeats_are_refused(kwargs, needle):
    import dpsim

    with pytest.raises(dpsim.ConfigError) as exc:
        dpsim.plan(dpsim.PredictConfig(model="gpt2", link="nvlink"), global_batch=64, verify=0, **kwargs)
    assert str(exc.value).startswith(needle)


@pytest.mark.parametrize("flag, value", [("--gpus", "8,8"), ("--strategies", "ddp,ddp"), ("--tp", "1,2,1")])
def test_plan_cli_search_axis_repeats_are_refused(flag, value, capsys):
    args = ["plan", "--model", "gpt2", "--link", "nvlink", "--global-batch", "64", "--verify", "0", "--gpus", "8",
            flag, value]
    check_outcome(run_cli(args, capsys), args, "error", (f"{flag}: {value} repeats",))


# --- sweep --axis of a field whose one value is a comma list ----------------------------------------------------
SWEEP = ["sweep", "--model", "gpt2", "--gpus", "8", "--link", "nvlink", "--steps", "1", "--json"]


def _sweep_axes(capsys, *extra: str) -> dict:
    args = SWEEP + list(extra)
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    return json.loads(outcome.out)["axes"]


def test_sweep_axis_stage_layers_is_one_value(capsys):
    """Before: --axis stage_layers=5,7 swept the points 5 and 7, each refused ("sweep point stage_layers=5:
    '5' is not valid; expected 2 block counts"): no point of uneven stages could be given with --axis."""
    assert _sweep_axes(capsys, "--axis", "pp=2", "--axis", "stage_layers=5,7")["stage_layers"] == ["5,7"]
    assert _sweep_axes(capsys, "--axis", "pp=2", "--axis", "stage_layers=5,7;6,6")["stage_layers"] == ["5,7", "6,6"]


def test_sweep_axis_semicolons_keep_a_value_s_commas(capsys):
    assert _sweep_axes(capsys, "--axis", "algo=ring,tree")["algo"] == ["ring", "tree"]  # unchanged
    assert _sweep_axes(capsys, "--axis", "algo=ring,tree;nvls")["algo"] == ["ring,tree", "nvls"]


@pytest.mark.parametrize("extra, needles", [
    (["--axis", "pp=2", "--axis", "stage_layers=5,7;"], ("--axis stage_layers: '5,7;' is not valid; give "
                                                         "semicolon-separated values without empty items",)),
    (["--axis", "pp=2", "--axis", "stage_layers=5,7;5,7"], ("repeats a value",)),
    (["--gpus", "8;16"], ("--gpus: '8;16' is not valid",)),  # a field's own flag keeps commas only
])
def test_sweep_axis_separators_refused(extra, needles, capsys):
    args = SWEEP + extra
    check_outcome(run_cli(args, capsys), args, "error", needles)


# --- --jobs with a shard group inside one server -------------------------------------------------------------
@pytest.mark.parametrize("extra", [["--strategy", "fsdp-hybrid", "--zero-group", "2"],
                                   ["--strategy", "fsdp-hybrid", "--zero-group", "4", "--placement", "interleaved"],
                                   ["--strategy", "zero1", "--zero-impl", "internlm", "--zero-group", "4"]])
def test_jobs_with_a_group_inside_one_server_is_predicted(extra, capsys):
    """Before: "--jobs: jobs share servers' NICs and switches, so each job needs whole servers; --gpus 2 is less
    than one server" to a job of --gpus 16 (the 2-GPU shard group was costed as if it were another job's cluster)."""
    args = ["predict", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--steps", "1", "--jobs", "2",
            *extra]
    check_outcome(run_cli(args, capsys), args, "ok")


def test_goodput_api_mc_steps_without_variability_is_refused():
    """Before: dpsim.goodput(config, tokens=..., mc_steps=5) with no variability= spec sampled nothing and dropped
    mc_steps in silence (the command line refuses --mc-steps without a variability flag)."""
    import dpsim

    config = dpsim.PredictConfig(model="gpt2", gpus=16, link="infiniband", steps=1)
    with pytest.raises(dpsim.ConfigError, match=r"^--mc-steps: 5 only applies with variability"):
        dpsim.goodput(config, tokens=1e9, runs=2, mc_steps=5)
    report = dpsim.goodput(config, tokens=1e9, runs=2, mc_steps=5,
                           variability=dpsim.VariabilitySpec(noise_cv=0.05, samples=2))
    assert report.work_s > 0


def test_config_json_that_is_a_fifo_or_too_large_is_refused(tmp_path, capsys):
    """Before: a FIFO named x.json blocked the read for ever (a hang); a 60 MB file was read whole."""
    import os

    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "big.json").write_text('{"model_type": "llama", "pad": "' + "x" * (2 << 20) + '"}')
    for name, needle in (("fifo.json", "it is not a regular file (a device, FIFO or socket); expected a transformers "
                                       "config.json"),
                         ("big.json", "is larger than 1,048,576 bytes")):
        args = ["predict", "--model", str(tmp_path / name), "--gpus", "8", "--link", "nvlink"]
        check_outcome(run_cli(args, capsys, limit_s=5), args, "error", ("--model: ", needle))


def test_builder_file_that_is_not_a_regular_file_is_named_so(tmp_path, capsys):
    """Before: "--model: file 'x.py' does not exist" for a directory or a FIFO named x.py that is right there."""
    import os

    os.mkfifo(tmp_path / "fifo.py")
    (tmp_path / "d.py").mkdir()
    for name, needle in (("fifo.py", "is not a regular file (a device, FIFO or socket)"), ("d.py", "is a directory")):
        args = ["predict", "--model", f"{tmp_path / name}:build", "--gpus", "8", "--link", "nvlink"]
        check_outcome(run_cli(args, capsys, limit_s=5), args, "error", (f"--model: '{tmp_path / name}' {needle}",))


# --- plan with more micro-batches per replica than predict simulates ----------------------------------------------
def test_plan_leaves_out_layouts_predict_cannot_simulate(capsys):
    """Before: plan --global-batch 1048576 on 16 GPUs ended in predict's "--global-batch: 1,048,576 gives 65,536
    micro-batches per replica x --steps 3 ... (raise --micro-batch or lower --steps)", flags plan does not have,
    and no layout at all; then the data-parallel-only layouts past the limit were left out, the pipelines ranked.
    Since predict extrapolates a steady state past 512 micro-batches (dpsim/predict/extrapolate.py) they are
    ranked too, and the search with --pp 1 --tp 1 once refused "leaves no layout" lists them (the refusal is
    left to a job whose sampled counts pass the limit: tests/test_plan_extrapolated_predictions.py)."""
    args = ["plan", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--global-batch", "1048576",
            "--verify", "0", "--json"]
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    rows = json.loads(outcome.out)["layouts"]
    assert rows and any(row["tp"] * row["pp"] * row["cp"] * row["ep"] == 1
                        and row["micro_batch"] * row["dp"] * 10_000 < 1048576 * 3 for row in rows)
    args = ["plan", "--model", "gpt2", "--gpus", "8", "--link", "nvlink", "--global-batch", "1048576", "--verify", "0",
            "--pp", "1", "--tp", "1", "--json"]
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    assert json.loads(outcome.out)["layouts"]


def test_goodput_api_variability_without_tokens_names_what_the_spec_sets():
    """Before: VariabilitySpec(noise_cv=0.05) without tokens was refused naming all eight variability flags."""
    import dpsim

    config = dpsim.PredictConfig(model="gpt2", gpus=16, link="infiniband", steps=1)
    with pytest.raises(dpsim.ConfigError, match=r"^--noise-cv: stretches the time to train a token budget"):
        dpsim.goodput(config, duration_s=86400.0, variability=dpsim.VariabilitySpec(noise_cv=0.05))
    with pytest.raises(dpsim.ConfigError, match=r"^--noise-cv, --noise-dist, --straggler"):  # a spec of defaults
        dpsim.goodput(config, duration_s=86400.0, variability=dpsim.VariabilitySpec())
