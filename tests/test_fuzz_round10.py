"""Bad inputs found by the tenth fuzz round (fuzz10): one line and exit 2, or a sane result.

In-process and quick (the fast lane runs it), judged by ``fuzz_harness.check_outcome`` as the other fuzz
suites are. Each case says what it did before.
"""

from __future__ import annotations

import json

import pytest

from fuzz_harness import check_outcome, run_cli

PLAN_P5 = ["plan", "--model", "gpt2", "--link", "aws-p5", "--calibration", "aws-p5-2node", "--gpus", "16",
           "--global-batch", "64", "--tp", "1", "--pp", "1", "--verify", "0"]


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
