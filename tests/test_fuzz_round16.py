"""Defects found by the sixteenth fuzz round (fuzz16): ``--fp8-params`` (FP8 primary weights) through the
parameter all-gathers, ``dpsim plan`` and every command that takes precision flags, and ``--decompose --only``.

Each case says what it did before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz_harness import refused as _refused
from tests.fuzz_harness import run_json as _json

REPO = Path(__file__).resolve().parent.parent





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
                                    gpu="h100", link="aws-p5"))
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
    4th and 5th), data-parallel HSDP under FSDP1 and 547 ddp ones, each of which ``predict`` refuses
    ("--fp8-params: runs with a distributed optimizer ... --strategy zero3 is not one"), costed as though they
    held FP8 primary weights. They are left out and counted; every ranked layout is one predict takes."""
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


def test_the_api_plan_leaves_out_the_same_layouts():
    """``dpsim.plan(PredictConfig(..., fp8_params=True))`` as the command line: every layout one predict takes,
    a ``strategies`` of ddp refused."""
    import dpsim

    config = dpsim.PredictConfig(model="llama-2-7b", gpu="h100", precision="bf16-params", fp8="te-delayed",
                                 fp8_params=True)
    result = dpsim.plan(config, gpus=[16], global_batch=256, verify=0, top=1000)
    assert result.ranked and all(_predict_accepts(
        {"tp": e.candidate.tp, "pp": e.candidate.pp, "cp": e.candidate.cp, "ep": e.candidate.ep,
         "etp": e.candidate.etp, "strategy": e.candidate.strategy}) for e in result.ranked)
    with pytest.raises(dpsim.ConfigError, match="--fp8-params"):
        dpsim.plan(config, gpus=[16], global_batch=256, verify=0, strategies=["ddp"])


# --- 3. --fp8-params on every command that takes precision flags ------------------------------------------------------
_JOB = ["--model", "llama-2-7b", "--gpu", "h100", "--gpus", "8", "--link", "aws-p5", "--precision", "bf16-params",
        "--strategy", "zero1", "--steps", "1"]


@pytest.mark.parametrize("command", ["predict", "memory", "goodput", "report"])
@pytest.mark.parametrize("flags, named", [
    (["--fp8-params"], "needs an FP8 recipe"),
    (["--fp8", "torchao-tensorwise", "--fp8-params"], "torchao"),
    (["--fp8", "te-delayed", "--fp8-params", "--strategy", "ddp"], "--strategy ddp"),
    (["--fp8", "te-delayed", "--fp8-params", "--precision", "amp-bf16"], "amp-bf16"),
])
def test_every_command_refuses_fp8_params_without_what_it_needs(command, flags, named, capsys, tmp_path):
    """Checked: one line naming ``--fp8-params`` on every command (report writes nothing)."""
    extra = ["-o", str(tmp_path / "r.html")] if command == "report" else []
    _refused([command] + _JOB + flags + extra, capsys, "--fp8-params", named)
    assert not (tmp_path / "r.html").exists()


def test_sweep_axes_refuse_fp8_params_by_point(capsys):
    """A sweep names the point and the flag; ``--skip-invalid`` records it on that row alone."""
    _refused(["sweep"] + _JOB + ["--axis", "fp8_params=true,false"], capsys, "fp8_params=True", "--fp8-params")
    _refused(["sweep"] + _JOB + ["--axis", "fp8_params=maybe", "--axis", "fp8=te-delayed"], capsys,
             "fp8_params", "maybe")
    rows = _json(["sweep"] + _JOB + ["--axis", "fp8=te-delayed", "--axis", "fp8_params=true",
                                     "--strategy", "ddp,zero1", "--skip-invalid", "--json"], capsys)
    rows = rows if isinstance(rows, list) else rows["rows"]
    by = {r["strategy"]: r for r in rows}
    assert "--fp8-params" in by["ddp"]["error"] and by["zero1"]["error"] is None


def test_predict_api_and_cli_agree_with_fp8_params(capsys):
    """``dpsim.predict(PredictConfig(...))`` == ``dpsim predict``; ``memory --json`` == ``dpsim.memory_report`` and
    names its FP8 parts (the FP8 weights inside the weights, the FP8-saved inputs inside the activations)."""
    import dpsim

    fp8 = ["--fp8", "te-delayed", "--fp8-params"]
    cli = _json(["predict"] + _JOB + fp8 + ["--json"], capsys)
    config = dpsim.PredictConfig(model="llama-2-7b", gpu="h100", gpus=8, link="aws-p5", precision="bf16-params",
                                 strategy="zero1", steps=1, fp8="te-delayed", fp8_params=True)
    assert dpsim.predict(config).step_time_s == cli["step_time_s"]
    memory = _json(["memory"] + _JOB + fp8 + ["--json"], capsys)
    report = dpsim.memory_report(config)
    assert memory["total_bytes"] == report.memory.total_bytes
    assert 0 < memory["fp8_weights_bytes"] <= memory["weights_bytes"]
    assert memory["fp8_inputs_bytes"] < 0
    with pytest.raises(dpsim.ConfigError, match="--fp8-params"):
        dpsim.predict(dpsim.PredictConfig(model="llama-2-7b", gpus=8, fp8="torchao-tensorwise", fp8_params=True,
                                          precision="bf16-params", strategy="zero1"))


# --- 2b. plan's tensor/pipeline candidates run the job's FP8 primary weights ------------------------------------------
@pytest.mark.parametrize("strategy", ["zero1", "fsdp"])
def test_plan_costs_a_layouts_memory_with_fp8_params_as_predict(strategy):
    """Before: the planner resolved a tensor/pipeline candidate's precision (``strategy_precision``) without
    ``--fp8-params``: gpt2 at tp 2 on 8 GPUs was charged TransformerEngine's per-step FP8 weight cache on top of
    bf16 weights (3,381,093,120 B a GPU) where predict charges the FP8 primary weights (3,296,158,464 B);
    tests/test_fp8_params.py::test_plan_charges_what_predict_charges failed on main since the fp8dp merge."""
    from dpsim.plan.planner import plan_layouts
    from dpsim.predict import PredictConfig
    from dpsim.predict.run import memory_for_config

    base = PredictConfig(gpus=8, link="infiniband", model="gpt2", micro_batch=2, steps=1, precision="bf16-params",
                         fp8="te-delayed", fp8_params=True)
    result = plan_layouts(base, gpus=[8], global_batch=16, tps=[2], pps=[1], strategies=[strategy],
                          micro_batches=[2], recomputes=["off"], sequence_parallel=True, verify=0)
    (estimate,) = [e for e in result.ranked if e.candidate.tp == 2]
    mem = memory_for_config(estimate.candidate.config(base))[0]
    assert mem.fp8_weights_bytes > 0
    assert estimate.memory_bytes == pytest.approx(mem.total_bytes, rel=1e-12)


# --- 4. accuracy_large_models.py --only: a bad id, an empty list, a row not predicted --------------------------------
def _alm():
    import sys

    sys.path.insert(0, str(REPO / "validation"))
    import accuracy_large_models

    return accuracy_large_models


@pytest.mark.parametrize("only, named", [
    ("R999", "R999"),
    ("R001,R999,R998", "R999, R998"),
    ("r001", "R001"),  # the id as the rows spell it, suggested
    (",", "names no row"),
    (" , ", "names no row"),
])
@pytest.mark.parametrize("decompose", [True, False])
def test_only_refuses_an_id_it_does_not_have(only, named, decompose, capsys):
    """Before: ``--decompose --only R999`` printed "R999: no such row" and exited 0 (a script checking the exit
    status saw success); ``--only ,`` looked for a row called "" the same way; without ``--decompose``,
    ``--only R999`` ran the table over no row ("0 rows, median |error| nan %") and exited 0. Now one line on
    stderr naming the ids, exit status 2, nothing decomposed or evaluated."""
    alm = _alm()
    argv = (["--decompose"] if decompose else ["--no-loso"]) + ["--only", only]
    assert alm.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and "--only" in err and named in err, err


def test_only_takes_ids_with_spaces_around_them(capsys):
    """``--only "R141, R999"``-style lists are split and stripped; a row the table does not predict (R141: out of
    dpsim's scope) is one line saying why, as the table lists it, not a decomposition of a step it does not
    claim."""
    alm = _alm()
    assert alm.main(["--decompose", "--only", " R141 "]) == 0
    out = capsys.readouterr().out.strip()
    assert len(out.splitlines()) == 1 and out.startswith("R141: not predicted: "), out


def test_accuracy_layouts_only_refuses_an_id_it_does_not_have(capsys):
    """Before: ``validation/accuracy_layouts.py --only R999`` ended in a ``StatisticsError: no median for empty
    data`` traceback. The same one line as accuracy_large_models.py's, exit status 2."""
    import sys

    sys.path.insert(0, str(REPO / "validation"))
    import accuracy_layouts

    assert accuracy_layouts.main(["--only", "R999"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "--only: R999 is not a row" in err, err
