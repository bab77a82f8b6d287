"""Commands that describe the same job agree (issue 25 item 2, "one library behind every command").

``goodput`` costs the job ``predict`` predicts: the same flags give the same throughput, MoE flags
included (goodput had no --moe-a2a-overlap, --moe-routing, --moe-a2a, ..., so an MoE job run with the
all-to-all overlap could not be costed at all).
"""

from __future__ import annotations

import json

import pytest

from dpsim.cli import main

MOE_JOB = ["--model", "mixtral-8x7b", "--link", "nvlink", "--gpus", "16", "--ep", "8", "--grad-accum", "4"]


def _json(args: list[str], capsys) -> dict:
    capsys.readouterr()
    status = main(args)
    out, err = capsys.readouterr()
    assert status in (0, None), err
    return json.loads(out)


@pytest.mark.parametrize("moe_flags", [
    ["--moe-a2a-overlap"],
    ["--moe-a2a-overlap", "--moe-a2a", "hierarchical", "--moe-routing", "zipf:0.5", "--moe-capacity-factor", "1.25"],
])
def test_goodput_costs_the_moe_job_predict_predicts(moe_flags, capsys):
    predicted = _json(["predict", *MOE_JOB, *moe_flags, "--json"], capsys)
    costed = _json(["goodput", *MOE_JOB, *moe_flags, "--runs", "2", "--json"], capsys)
    # Same step time: the same tokens per step over the same step (exact, one library computes both).
    assert costed["tokens_per_s"] == predicted["tokens_per_s"]
    # And the flags reach both: without them the job is another one.
    plain = _json(["predict", *MOE_JOB, "--json"], capsys)
    assert plain["tokens_per_s"] != predicted["tokens_per_s"]


def test_goodput_and_predict_share_every_moe_flag():
    from dpsim.cli.goodput import GOODPUT_FIELDS
    from dpsim.cli.predict import PREDICT_FIELDS
    from dpsim.predict.config import MOE_FIELDS

    assert set(MOE_FIELDS) <= set(GOODPUT_FIELDS) & set(PREDICT_FIELDS)
