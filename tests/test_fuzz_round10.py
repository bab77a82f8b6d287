"""Bad inputs found by the tenth fuzz round (fuzz10): one line and exit 2, or a sane result.

In-process and quick (the fast lane runs it), judged by ``fuzz_harness.check_outcome`` as the other fuzz
suites are. Each case says what it did before.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fuzz_harness import check_outcome, run_cli

PLAN_P5 = ["plan", "--model", "gpt2", "--link", "aws-p5", "--calibration", "aws-p5-2node", "--gpus", "16",
           "--global-batch", "64", "--tp", "1", "--pp", "1", "--verify", "0", "--micro-batches", "4", "--recompute", "off"]


# --- plan with a profile measured across servers only --------------------------------------------------------
def test_plan_ranks_the_layouts_a_cross_server_profile_can_cost(capsys):
    """Before: "--calibration: ... has no intra_node measurements" for the whole search (exit 2): the zero3
    search adds a MiCS row (shard group of one server), whose communicator the profile cannot cost, and no flag
    leaves that row out; predict of every other layout ran."""
    args = [*PLAN_P5, "--strategies", "zero3", "--json"]
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    doc = json.loads(outcome.out)
    assert {r["zero_group"] for r in doc["layouts"]} == {None} and doc["counts"]["refused_by_placement"] > 0
    args = args[:-1]
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    assert "of them need intra_node measurements, which --calibration has none of" in " ".join(outcome.out.split())


def test_plan_where_no_layout_can_be_costed_says_so(capsys):
    args = [*PLAN_P5, "--strategies", "fsdp-hybrid"]
    check_outcome(run_cli(args, capsys), args, "error", (
        "has no intra_node measurements (it has: inter_node); a communicator of 8 ranks on 1 node needs",
        "every layout searched has one"))


# --- config.json of the newer families: odd or missing fields ------------------------------------------------
CONFIGS = Path(__file__).parent / "data" / "hf_configs"


def _fixture(name: str, **changes) -> dict:
    data = {**json.loads((CONFIGS / name / "config.json").read_text()), **changes}
    return {k: v for k, v in data.items() if v is not _DROP}


_DROP = object()


@pytest.mark.parametrize("name, changes, needle", [
    # Before: each was built as a Qwen2-MoE without a shared expert (and without its gate), in silence (status 0);
    # transformers' Qwen2MoeSparseMoeBlock builds both whatever the width.
    ("Qwen1.5-MoE-A2.7B", {"shared_expert_intermediate_size": 0}, "shared_expert_intermediate_size=0 is not valid; "
                                                                  "expected an integer from 1"),
    ("Qwen1.5-MoE-A2.7B", {"shared_expert_intermediate_size": None}, "has no shared_expert_intermediate_size (null)"),
    ("Qwen1.5-MoE-A2.7B", {"shared_expert_intermediate_size": _DROP},
     "has no shared_expert_intermediate_size (missing)"),
    # Before: "shared_expert_intermediate_size=True is not valid" (Python's spelling of the file's true).
    ("Qwen1.5-MoE-A2.7B", {"shared_expert_intermediate_size": True}, "shared_expert_intermediate_size=true is not"),
    # Before: taken in silence (they shape no cost): a string, 0, a negative base, a boolean.
    ("gemma-3-1b-pt", {"rope_local_base_freq": "1e4"}, "rope_local_base_freq='1e4' is not valid; expected a number "
                                                       "above 0"),
    ("gemma-3-1b-pt", {"rope_local_base_freq": -5}, "rope_local_base_freq=-5 is not valid"),
    ("gemma-3-1b-pt", {"rope_theta": 0}, "rope_theta=0 is not valid"),
    ("c4ai-command-r-v01", {"logit_scale": 0}, "logit_scale=0 is not valid; expected a number above 0"),
    ("c4ai-command-r-v01", {"logit_scale": "0.0625"}, "logit_scale='0.0625' is not valid"),
    ("c4ai-command-r-v01", {"logit_scale": True}, "logit_scale=true is not valid"),
    # Before: [] was read as left out (sliding_window_pattern's blocks); a list of another length and a string as
    # "a field the builders do not cover", which named no field.
    ("gemma-3-1b-pt", {"layer_types": []}, "layer_types=[0 entries] is not valid; expected a list of one entry per "
                                           "block, num_hidden_layers=26"),
    ("gemma-3-1b-pt", {"layer_types": ["sliding_attention"] * 25}, "layer_types=[25 entries] is not valid"),
    ("gemma-2-9b", {"layer_types": "sliding_attention"}, "layer_types='sliding_attention' is not valid"),
    # Still refused as before.
    ("gemma-3-1b-pt", {"sliding_window_pattern": 0}, "sliding_window_pattern=0 is not valid"),
    ("gemma-3-1b-pt", {"sliding_window_pattern": -1}, "sliding_window_pattern=-1 is not valid"),
])
def test_config_json_newer_families_odd_fields(name, changes, needle, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_fixture(name, **changes)))
    args = ["predict", "--gpus", "8", "--link", "nvlink", "--steps", "1", "--seq-len", "1024", "--model", str(path)]
    check_outcome(run_cli(args, capsys), args, "error", ("--model", needle))


@pytest.mark.parametrize("name, changes", [
    ("gemma-3-1b-pt", {"rope_local_base_freq": None}), ("gemma-3-1b-pt", {"rope_local_base_freq": _DROP}),
    ("gemma-3-1b-pt", {"sliding_window_pattern": 1}), ("gemma-3-1b-pt", {"layer_types": None}),
    ("c4ai-command-r-v01", {"logit_scale": _DROP}), ("c4ai-command-r-v01", {"logit_scale": 1}),
    ("Qwen1.5-MoE-A2.7B", {"shared_expert_intermediate_size": 1}), ("falcon-rw-1b", {"rope_theta": 10000.0}),
])
def test_config_json_newer_families_as_written_are_taken(name, changes, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_fixture(name, num_hidden_layers=2, **changes)))
    args = ["predict", "--gpus", "8", "--link", "nvlink", "--steps", "1", "--seq-len", "1024", "--model", str(path)]
    check_outcome(run_cli(args, capsys), args, "ok")


# --- goodput: a restart longer than the job's MTBF ------------------------------------------------------------
def test_goodput_shrink_policy_that_never_finishes_is_refused(monkeypatch, capsys):
    """Before: --mtbf-node 1h --restart 2h on 2 nodes passed the wait policy's bounds and ran past 5 minutes (the
    shrink policy, always compared, played ~400,000 failures a run one numpy step each). The bound is lowered here
    so that the case runs in a moment."""
    monkeypatch.setattr("dpsim.plan.goodput.MAX_ELASTIC_EVENTS", 200)
    args = ["goodput", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--runs", "1", "--mtbf-node", "1h",
            "--restart", "2h", "--duration", "2h"]
    check_outcome(run_cli(args, capsys), args, "error", (
        "--elastic shrink: a run on fewer nodes passes 200 failures and restarts unfinished", "a shorter --restart"))
    args[args.index("2h")] = "1min"  # a restart the failures leave time for stays under the bound
    check_outcome(run_cli(args, capsys), args, "ok")


# --- sweep axes: repeats under another name, integers beside a null ------------------------------------------
SWEEP = ["sweep", "--model", "gpt2", "--link", "infiniband", "--steps", "1", "--gpus", "8"]


@pytest.mark.parametrize("values", ["amp,amp-bf16", "bf16-params,bf16-mixed", "bf16,bf16-true"])
def test_sweep_precision_old_name_repeats_its_new_one(values, capsys):
    """Before: two identical points (status 0), as 8,08 or 25,25.0 were already refused."""
    args = [*SWEEP, "--precision", values]
    check_outcome(run_cli(args, capsys), args, "error", (f"--precision: {values.split(',')!r} repeats a value",))


def test_sweep_integer_axis_beside_a_null_stays_an_integer(capsys):
    """Before: "seq_len": 512.0 in the JSON (and 512.0 in a CSV): pandas made the column float for its null,
    and predict --seq-len refuses 512.0."""
    args = [*SWEEP, "--seq-len", "none,512", "--json"]
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    assert [r["seq_len"] for r in json.loads(outcome.out)["rows"]] == [None, 512]
    assert "512.0" not in outcome.out


# --- plan --rank goodput where no layout can finish -------------------------------------------------------------
def test_layout_goodput_of_a_hopeless_run_skips_the_interval_search(monkeypatch):
    """Before: plan --rank goodput --tokens 1T --mtbf-node 1s searched every layout's checkpoint interval (~25 ms
    each, 30 s over gpt2's 1,212 layouts on 16 GPUs) to refuse them all; the work alone has 1e6 failures."""
    from dpsim.plan import layout_goodput as lg
    from dpsim.plan.reliability import ClusterShape, FailureRates

    def searched(*args, **kwargs):
        raise AssertionError("the interval search ran")

    monkeypatch.setattr(lg, "model_optimum_s", searched)
    cost = lg.checkpoint_cost(state_bytes=1.5e9, gpus_per_node=8)
    failures = lg.FailureInputs(rates=FailureRates(node_mtbf_s=1.0))
    run = lg.layout_goodput(work_s=5e5, cluster=ClusterShape(n_nodes=2, gpus_per_node=8, links_per_node=8),
                            checkpoint=cost, failures=failures)
    assert run.expected_wall_s == math.inf and run.interval_s > 0


# --- a calibration profile's hand-edited environment -------------------------------------------------------------
@pytest.mark.parametrize("key, value, needle", [
    # Before: read as a GPU profile (is_cpu_profile compares the string), status 0.
    ("device_type", 3, "environment.device_type: 3 is not valid; expected a torch device type"),
    ("device_type", "", "environment.device_type: \"\" is not valid"),
    # Before: dropped in silence (profile_ranks_per_node takes whole numbers only).
    ("ranks_per_node", [0], "environment.ranks_per_node: list is not valid; expected a list of each host's ranks"),
    ("ranks_per_node", ["8"], "environment.ranks_per_node: list is not valid"),
    ("ranks_per_node", 8, "environment.ranks_per_node: 8 is not valid"),
])
def test_profile_environment_fields_predict_reads_are_checked(key, value, needle, tmp_path, capsys):
    data = json.loads((Path(__file__).parents[1] / "calibration" / "profiles" / "aws-p5-2node.json").read_text())
    data["environment"][key] = value
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    args = ["predict", "--model", "gpt2", "--gpus", "16", "--link", "aws-p5", "--steps", "1", "--calibration",
            str(path)]
    check_outcome(run_cli(args, capsys), args, "error", (needle,))


def test_mix_job_whose_calibration_lacks_a_class_is_named(tmp_path, capsys):
    """The refusal plan now counts per layout keeps its one line when mix rewords it for a job."""
    path = tmp_path / "mix.yaml"
    path.write_text("cluster: {link: aws-p5, gpus: 32}\njobs:\n  - {name: a, model: gpt2, gpus: 16, steps: 1, "
                    "calibration: aws-p5-2node, strategy: zero3, zero_group: 8}\n")
    args = ["mix", str(path), "--json"]
    check_outcome(run_cli(args, capsys), args, "error", ("jobs[0].calibration (a): ", "has no intra_node measurements"))


# --- left by fuzz10, fixed after (polish) ------------------------------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    # Before: "names node 1, but there are 1 nodes (node0..node0)".
    (["predict", "--model", "gpt2", "--gpus", "8", "--link", "nvlink", "--steps", "1", "--straggler", "node1:1.3x"],
     "--straggler: 'node1:1.3x' names node 1, but there is 1 node (node0)"),
    (["predict", "--model", "gpt2", "--gpus", "8", "--link", "nvlink", "--steps", "1", "--degrade", "node1.gpu0:50%"],
     "--degrade: 'node1.gpu0:50%' names node 1, but there is 1 node (node0)"),
    (["predict", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--steps", "1", "--degrade",
      "node2.nic0:50%"], "names node 2, but there are 2 nodes (node0..node1)"),
])
def test_counts_in_messages_agree_with_their_number(args, needle, capsys):
    check_outcome(run_cli(args, capsys), args, "error", (needle,))


def test_wording_helpers():
    from dpsim.wording import a_an, count, count_are, index_range, span, there_are

    assert [count(1, "node"), count(2, "node"), count(0, "GPU")] == ["1 node", "2 nodes", "0 GPUs"]
    assert [there_are(1, "rank"), there_are(3, "rank"), count_are(1, "server")] == [
        "there is 1 rank", "there are 3 ranks", "1 server is"]
    assert [a_an("encoder"), a_an("ampere"), a_an("unknown"), a_an("decoder"), a_an("hopper")] == [
        "an encoder", "an ampere", "an unknown", "a decoder", "a hopper"]
    assert [span(2.56e7, 2.56e7), span(2.561e7, 2.564e7), span(1.25e8, 1.01e12)] == [
        "2.56e+07", "2.56e+07", "1.25e+08-1.01e+12"]
    assert [index_range("gpu", 1), index_range("node", 4)] == ["gpu0", "node0..node3"]


def test_model_error_extrapolation_text_reads_right():
    """Before: "no validation row of a encoder model" and "outside the validated 2.56e+07-2.56e+07" (a pool whose
    rows are all one size)."""
    from dataclasses import replace

    from dpsim.predict.model_error import _extrapolations, load_rows

    rows = [r for r in load_rows()[0] if r.pool == "compute" and r.model_family != "encoder"]
    one = [replace(rows[0], params=2.56e7)]
    regime = replace(rows[0], model_family="encoder", gpu_arch="ampere" if rows[0].gpu_arch != "ampere" else "ada",
                     params=1.24e8)
    text = _extrapolations(rows, regime, "compute") + _extrapolations(one, regime, "compute")
    assert "compute: no validation row of an encoder model" in text
    assert any(t.startswith("compute: no validation row on an a") for t in text)
    assert "compute: model size 1.24e+08 outside the validated 2.56e+07" in text


@pytest.mark.parametrize("where, value, needle", [
    # Before: both taken (status 0): 15 ranks on 2 nodes (no whole ranks per node), and a profile named "".
    (("collectives", "inter_node", "n_ranks"), 15,
     "collectives.inter_node.n_ranks: 15 is not valid; expected a multiple of n_nodes (2)"),
    (("name",), "", "name: \"\" is not valid; expected one line of printable text, not empty"),
    (("name",), "  ", "name: \"  \" is not valid"),
])
def test_profile_ranks_per_node_and_name_are_checked(where, value, needle, tmp_path, capsys):
    data = json.loads((Path(__file__).parents[1] / "calibration" / "profiles" / "aws-p5-2node.json").read_text())
    node = data
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    args = ["predict", "--model", "gpt2", "--gpus", "16", "--link", "aws-p5", "--steps", "1", "--calibration",
            str(path)]
    check_outcome(run_cli(args, capsys), args, "error", (needle,))


def _gemma3_multimodal(**text_changes) -> dict:
    text = {k: v for k, v in _fixture("gemma-3-1b-pt", num_hidden_layers=2, **text_changes).items()
            if k != "model_type" and v is not _DROP}
    return {"model_type": "gemma3", "text_config": {**text, **({"model_type": text_changes["model_type"]}
                                                               if "model_type" in text_changes else {})}}


@pytest.mark.parametrize("data, needle", [
    # Before: head_dim 0 was read as hidden / heads (status 0); the shape's `head_dim or hidden // heads`.
    (_fixture("gemma-3-1b-pt", head_dim=0), "head_dim=0 is not valid; expected an integer from 1"),
    (_fixture("gemma-2-9b", head_dim=-4), "head_dim=-4 is not valid"),
    (_fixture("gemma-3-1b-pt", head_dim="256"), "head_dim='256' is not valid"),
    # Before: read as Gemma 3 in silence. transformers' Gemma3Config builds a text_config dict as
    # Gemma3TextConfig(**text_config) whatever its model_type, so a "llama" there is refused, not honoured.
    (_gemma3_multimodal(model_type="llama"), "text_config.model_type='llama' is not valid; expected 'gemma3_text'"),
])
def test_gemma_head_dim_and_text_config_model_type(data, needle, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    args = ["predict", "--gpus", "8", "--link", "nvlink", "--steps", "1", "--seq-len", "1024", "--model", str(path)]
    check_outcome(run_cli(args, capsys), args, "error", ("--model", needle))


@pytest.mark.parametrize("data", [_gemma3_multimodal(), _gemma3_multimodal(model_type="gemma3_text"),
                                  _fixture("gemma-3-1b-pt", num_hidden_layers=2, head_dim=_DROP)])
def test_gemma3_text_config_as_transformers_writes_it_is_taken(data, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    args = ["predict", "--gpus", "8", "--link", "nvlink", "--steps", "1", "--seq-len", "1024", "--model", str(path)]
    check_outcome(run_cli(args, capsys), args, "ok")


def test_sweep_seq_len_equal_to_the_models_own_repeats_none(capsys):
    """Before: --seq-len none,1024 on gpt2 (n_positions 1024) ran the same point twice (status 0)."""
    args = [*SWEEP, "--seq-len", "none,1024"]
    check_outcome(run_cli(args, capsys), args, "error", (
        "sweep seq_len: [None, 1024] repeats a value: 1024 is gpt2's own sequence length",))
    args = [*SWEEP, "--seq-len", "512,none"]
    args[args.index("gpt2")] = "bert-base"
    check_outcome(run_cli(args, capsys), args, "error", ("[512, None] repeats a value: 512 is bert-base's own",))
    args = [*SWEEP, "--seq-len", "none,256", "--json"]
    args[args.index("gpt2")] = "bert-base"  # its own sequence is 512: the two points differ
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    assert [r["seq_len"] for r in json.loads(outcome.out)["rows"]] == [None, 256]


def test_nccl_tests_log_with_unequal_hosts_is_refused(tmp_path):
    """A device list of 3 + 1 ranks made a profile of 4 ranks on 2 nodes, which the loader now refuses."""
    from test_calibrate_nccl_tests import OLD_FORMAT

    from dpsim.calibrate.nccl_tests import parse_nccl_tests
    from dpsim.errors import ProfileError

    path = tmp_path / "all_reduce_perf.log"
    path.write_text(OLD_FORMAT.replace("on       dgx1 device  3", "on       dgx2 device  3"))
    with pytest.raises(ProfileError, match=r"the device list has 4 ranks on 2 hosts, 3, 1 per host; dpsim takes"):
        parse_nccl_tests(path)
