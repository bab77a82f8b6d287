"""Defects found by the sixteenth fuzz round (fuzz16): ``--fp8-params`` (FP8 primary weights) through the
parameter all-gathers, ``dpsim plan`` and every command that takes precision flags, and ``--decompose --only``.

Each case says what it did before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fuzz_harness import check_outcome, run_cli

REPO = Path(__file__).resolve().parent.parent


def _json(args, capsys) -> dict:
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    return json.loads(outcome.out)


def _refused(args, capsys, *words) -> str:
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "error")
    line = outcome.err.strip()
    assert "Traceback" not in line and len(line.splitlines()) == 1, line
    for word in words:
        assert word in line, line
    return line


# --- 1. one function for a parameter all-gather's bytes ---------------------------------------------------------------
@pytest.mark.parametrize("precision, fp8, fp8_params, strategy", [
    ("bf16-params", None, False, "zero1"),
    ("bf16-params", "te-delayed", True, "zero1"),
    ("bf16-params", "te-delayed", False, "fsdp"),
    ("amp-bf16", "torchao-tensorwise", False, "fsdp"),
    ("amp-bf16", "torchao-tensorwise", False, "zero3"),
])
def test_the_pipeline_and_the_planner_gather_the_same_bytes(precision, fp8, fp8_params, strategy):
    """Before: the tensor/pipeline program's ``DataParallelPlan.gather_bytes`` was a second copy of
    ``gathered_weight_bytes`` (which predict's data-parallel programs, the memory model and plan use), fed a
    flag predict/layout.py worked out by a rule of its own. It now reads the precision's recipe and calls the
    one function: an FP8 job (FSDP2's float8 all-gather, FP8 primary weights) and a bf16 one agree."""
    from dpsim.plan.planner import Planner
    from dpsim.predict.config import PredictConfig
    from dpsim.strategies.pipeline import DataParallelPlan
    from dpsim.workload.fp8 import gathered_weight_bytes
    from dpsim.workload.precision import get_precision

    p = get_precision(precision, fp8, strategy=strategy, layout=True, fp8_params=fp8_params)
    dp = DataParallelPlan(strategy=strategy, dp=8, overlap=True, bucket_elements=100, grad_bytes=p.grad_bytes,
                          weight_bytes=p.weight_bytes, fp8=p.fp8)
    planner = Planner(PredictConfig(model="gpt2", gpus=8, precision=precision, fp8=fp8, fp8_params=fp8_params,
                                    gpu="h100", link="dgx-h100"))
    recipe = planner.gather_fp8(strategy, True)
    for numel, fp8_numel in ((1000, 600), (1000, 0), (1000, 1500), (7.5e8, 3.1e8)):
        one = gathered_weight_bytes(numel, fp8_numel, p.weight_bytes, p.fp8)
        assert dp.gather_bytes(numel, fp8_numel) == one
        assert planner._gather_bytes(numel, fp8_numel, recipe) == one
    moved_in_fp8 = bool(fp8) and (fp8_params or (strategy == "fsdp" and fp8.startswith("torchao")))
    assert (dp.gather_bytes(1000, 600) < 1000 * p.weight_bytes) == moved_in_fp8


# --- 2. plan --fp8-params ranks only layouts that hold FP8 primary weights, as predict takes them --------------------
_PLAN = ["plan", "--model", "llama-2-7b", "--gpu", "h100", "--precision", "bf16-params", "--fp8", "te-delayed",
         "--fp8-params", "--global-batch", "256", "--verify", "0", "--top", "1000", "--json"]


def _predict_accepts(row: dict) -> bool:
    from dpsim.errors import DpsimError
    from dpsim.workload.precision import check_fp8_params_strategy

    layout = row["tp"] * row["pp"] * row.get("cp", 1) * row.get("ep", 1) * row.get("etp", 1) > 1
    try:
        check_fp8_params_strategy(row["strategy"], fsdp_version="1", layout=layout)
    except DpsimError:
        return False
    return True


def test_plan_with_fp8_params_ranks_only_layouts_predict_takes(capsys):
    """Before: ``plan --fp8 te-delayed --fp8-params --gpus 16`` ranked ZeRO-3/MiCS layouts ("tp1 pp1 dp16 mics8",
    4th and 5th), dp-only HSDP under FSDP1 and 547 ddp ones, each of which ``predict`` refuses ("--fp8-params: runs with a distributed optimizer
    ... --strategy zero3 is not one"), costed as though they held FP8 primary weights. They are left out and
    counted; every ranked layout is one predict takes."""
    out = _json(_PLAN + ["--gpus", "16"], capsys)
    rows = out["layouts"]
    assert rows and all(_predict_accepts(r) for r in rows), [r["strategy"] for r in rows if not _predict_accepts(r)]
    assert out["counts"]["no_fp8_params"] > 0


def test_plan_with_fp8_params_and_only_strategies_that_cannot_hold_them_is_refused(capsys):
    """``--strategies ddp`` (or zero3) with ``--fp8-params``: one line naming the flag, no search."""
    _refused(_PLAN + ["--gpus", "16", "--strategies", "ddp,zero1"], capsys, "--fp8-params", "ddp")
    _refused(_PLAN + ["--gpus", "16", "--strategies", "zero3"], capsys, "--fp8-params", "zero3")


def test_plan_with_fp8_params_on_one_gpu_says_why(capsys):
    """One GPU has only ddp, which cannot hold FP8 primary weights: one line saying so, not a misleading
    'no layout exists'."""
    _refused(_PLAN + ["--gpus", "1", "--global-batch", "8"], capsys, "--fp8-params")
