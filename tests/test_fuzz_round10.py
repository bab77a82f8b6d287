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
