"""Defects found by the seventeenth fuzz round (fuzz17): odd but plausible inputs through every command and the
Python API (long-context transformers configurations, ``plan --budget-usd``, ...).

Each case says what it did before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fuzz_harness import check_outcome, run_cli
from tests.fuzz_harness import refused as _refused
from tests.fuzz_harness import run_json as _json

REPO = Path(__file__).resolve().parent.parent




# --- 1. a transformers config.json whose context is over the longest sequence: the advice that works ---------------
def _long_context_config(tmp_path: Path) -> str:
    config = json.loads((REPO / "examples" / "Llama-3.1-8B" / "config.json").read_text())
    config["max_position_embeddings"] = 10_485_760  # Llama 4 Scout's context length
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_a_long_context_config_json_is_told_to_give_seq_len(tmp_path, capsys):
    """Before: ``predict --model config.json`` of a model with a 10M-token context was refused "give a shorter one:
    --seq-len (a shape) or --input-shape (a transformers configuration)", and ``--input-shape`` is then refused
    ("applies only to a torch module ..., catalog models take --seq-len"). The line names --seq-len, which works,
    and not --input-shape."""
    model = _long_context_config(tmp_path)
    base = ["predict", "--model", model, "--gpus", "8", "--micro-batch", "1", "--steps", "1"]
    line = _refused(base + ["--json"], capsys, "--seq-len", "10,485,760")
    assert "--input-shape" not in line, line
    assert _json(base + ["--seq-len", "4096", "--json"], capsys)["tokens_per_sample"] == 4096


# --- 2. plan --budget-usd that every layout is over: the cheapest one, not one that does not fit memory --------------
_BUDGET = ["plan", "--model", "llama-2-7b", "--gpus", "16", "--global-batch", "32", "--tokens", "1e12", "--verify", "0",
           "--budget-usd", "0.0001"]


def test_plan_over_every_budget_names_the_cheapest_layout(capsys):
    """Before: with 1,284 layouts fitting in memory, all over ``--budget-usd 0.0001``, plan printed "(of the others,
    closest: --gpus 16 --tp 2 --pp 2 ... needs 76.8 GiB of 75.7 GiB usable)" (a layout that does not fit, no use
    against a budget), "0 layouts in this search (nothing fits)", and ``--json``'s ``closest_to_fitting`` was that
    layout. Now the closest to being ranked is the cheapest layout over the budget, with its cost."""
    out = _json(_BUDGET + ["--json"], capsys)
    assert out["counts"]["ranked"] == 0 and out["counts"]["over_budget"] > 0
    near = out["closest_to_fitting"]
    assert near["memory_bytes"] <= near["usable_bytes"] and near["cost_usd"] > 0.0001
    # ... the cheapest of them: a budget just above it ranks it first.
    ranked = _json(_BUDGET[:-1] + [f"{near['cost_usd'] * (1 + 1e-9)!r}", "--json"], capsys)
    assert ranked["counts"]["ranked"] >= 1 and ranked["best"]["flags"] == near["flags"]
    outcome = run_cli(_BUDGET, capsys)
    check_outcome(outcome, _BUDGET, "ok")
    text = " ".join(outcome.out.split())
    assert "nothing fits" not in text and "needs" not in text.split("no layout is within")[1], text
    assert "cheapest" in text and near["flags"].split()[0] in text, text


# --- 3. --algo/--proto with '^' inside the list ---------------------------------------------------------------------
@pytest.mark.parametrize("flag, text, fixed", [
    ("--algo", "^ring,^tree", "^ring,tree"),
    ("--algo", "ring,^tree", None),
    ("--proto", "^LL,^LL128", "^LL,LL128"),
])
@pytest.mark.parametrize("command", ["collective", "predict"])
def test_a_caret_inside_the_list_says_where_it_goes(flag, text, fixed, command, capsys):
    """Before: ``--algo ^ring,^tree`` (excluding two, written as one would guess) was refused "'^tree' is not known;
    choose from ring, tree, ... (comma-separated, or ^name to exclude)": tree is known, and the advice repeats what
    was given. As NCCL_ALGO reads it, '^' goes once before the list and excludes every name in it: the line says so
    and, where every name had one, gives the spelling that works."""
    args = [command, "--gpus", "16", "--link", "infiniband", flag, text]
    args += ["--model", "gpt2", "--steps", "1"] if command == "predict" else []
    line = _refused(args, capsys, flag, "once")
    assert "is not known" not in line, line
    if fixed:
        assert fixed in line, line
        fixed_args = [fixed if a == text else a for a in args]
        check_outcome(run_cli(fixed_args, capsys), fixed_args, "ok")


# --- 4. an nccl-tests log whose time does not grow with size: no bandwidth, refused ---------------------------------
def _log_with_times(tmp_path: Path, times_us) -> Path:
    logs = REPO / "calibration" / "reference" / "nccl-tests"
    src = logs / "8x-a100-sxm-node-nvlink3-via-nvswitch.all_reduce_perf.log"
    lines, rows = [], iter(times_us)
    for line in src.read_text().splitlines():
        parts = line.split()
        if parts and parts[0].isdigit() and len(parts) == 8:
            parts[5] = f"{next(rows):.2f}"
            line = "   ".join(parts)
        lines.append(line)
    path = tmp_path / "all_reduce_perf.log"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("times_us", [
    [100.0] * 7,                                   # every size the same time
    [1000.0 / 2 ** i for i in range(7)],           # faster as it grows
    [43.83, 101.9, 133.5, 684.6, 2420.6, 2420.6, 2420.6],  # flat from 256 MB to 16 GiB
])
def test_a_log_without_a_bandwidth_is_refused(times_us, tmp_path, capsys):
    """Before: ``calibrate --from-nccl-tests`` of a log whose time stays flat (or falls) over its largest sizes wrote
    a profile whose last piece had no per-byte cost (``bus_bandwidth_bytes_per_s: null``), with no warning for the
    flat log, and ``collective --calibration`` then predicted a 2 GiB all-reduce at 18.75 us (200,431 GB/s bus
    bandwidth on 8 A100s) or 100 us (37,581 GB/s). Now one line naming the log and the sizes, nothing written."""
    log = _log_with_times(tmp_path, times_us)
    out = tmp_path / "p.json"
    _refused(["calibrate", "--from-nccl-tests", str(log), "--out", str(out)], capsys, str(log), "bandwidth")
    assert not out.exists()


def test_a_profile_whose_last_piece_has_no_bandwidth_is_refused(tmp_path, capsys):
    """The same profile written by hand (its last segment's ``bus_bandwidth_bytes_per_s`` null): refused on load
    naming the field, as the loader refuses a bandwidth of 0."""
    doc = json.loads((REPO / "calibration" / "profiles" / "a100-nvswitch-8gpu.json").read_text())
    segments = doc["collectives"]["intra_node"]["ops"]["all_reduce"]["fit"]["segments"]
    segments[-1]["bus_bandwidth_bytes_per_s"] = None
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    _refused(["collective", "--calibration", str(path), "--gpus", "8", "--link", "dgx-a100"], capsys,
             f"segments[{len(segments) - 1}].bus_bandwidth_bytes_per_s", "null")
    # ... a piece below the last may have none (latency-bound small messages).
    if len(segments) > 1:
        doc["collectives"]["intra_node"]["ops"]["all_reduce"]["fit"]["segments"][-1] = \
            json.loads((REPO / "calibration" / "profiles" / "a100-nvswitch-8gpu.json").read_text())[
                "collectives"]["intra_node"]["ops"]["all_reduce"]["fit"]["segments"][-1]
        segments = doc["collectives"]["intra_node"]["ops"]["all_reduce"]["fit"]["segments"]
        segments[0]["bus_bandwidth_bytes_per_s"] = None
        path.write_text(json.dumps(doc))
        check_outcome(run_cli(["collective", "--calibration", str(path), "--gpus", "8", "--link", "dgx-a100"],
                              capsys), ["collective"], "ok")


# --- 5. an nccl-tests row past the largest size: the log's line, not the profile's field ----------------------------
def test_a_log_row_past_the_largest_size_names_the_line(tmp_path, capsys):
    """Before: a row of 17,179,869,184,000 B (a log edited, or nccl-tests -e 16T) was refused as "(profile for
    p.json): collectives.intra_node.ops.all_reduce.measurements[6].size_bytes: 1.7e13 is not valid", the field of a
    profile the user never wrote. Now the log's file and line, as a time out of range is."""
    log = _log_with_times(tmp_path, [43.83, 101.9, 133.5, 684.6, 2420.6, 8203.9, 127997.0])
    text = log.read_text().replace("17179869184   4294967296", "17179869184000   4294967296000")
    assert text != log.read_text()
    log.write_text(text)
    out = tmp_path / "p.json"
    line = _refused(["calibrate", "--from-nccl-tests", str(log), "--out", str(out)], capsys, f"{log} line ",
                    "17179869184000")
    assert "profile for" not in line and "measurements[" not in line, line
    assert not out.exists()


# --- 6. plan of a torch module: its example input, and data parallelism for a module without blocks ---------------
_MLP = '''
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(64, 256)
        self.down = nn.Linear(256, 64)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def build():
    return MLP()
'''


def _mlp(tmp_path: Path) -> str:
    path = tmp_path / "mlp.py"
    path.write_text(_MLP)
    return f"{path}:build"


def test_plan_takes_a_torch_modules_input_shape(tmp_path, capsys):
    """Before: ``plan --model mlp.py:build`` (no example_input()) was refused "needs an example input: pass
    --input-shape", and ``plan --input-shape`` was refused "No such option: --input-shape": no way to plan it from
    the command line. plan takes --input-shape as predict does."""
    pytest.importorskip("torch")
    model = _mlp(tmp_path)
    out = _json(["plan", "--model", model, "--input-shape", "8,64", "--gpus", "8", "--global-batch", "32",
                 "--link", "infiniband", "--verify", "1", "--top", "3", "--json"], capsys)
    assert out["layouts"] and "--input-shape 8,64" in out["command"], out["command"]


def test_plan_ranks_data_parallelism_for_a_module_without_blocks(tmp_path, capsys):
    """Before: a module without repeated blocks (an MLP: 0 blocks to split into stages) had no candidate at all, not
    even --tp 1 --pp 1: "no layout of mlp:build exists on --gpus 8 and --global-batch 32 (3 refused by the model's
    shape or the placement); change the GPU count or the global batch", though predict runs it on 8 GPUs. Its
    data-parallel layouts are searched; the best one is predict's step."""
    pytest.importorskip("torch")
    import dpsim

    config = dpsim.PredictConfig(model=_mlp(tmp_path), input_shape="8,64", gpu="h100", link="infiniband")
    result = dpsim.plan(config, gpus=[8], global_batch=32, verify=1, top=5)
    assert result.ranked and all(e.candidate.tp == e.candidate.pp == 1 for e in result.ranked)
    best = result.best
    again = dpsim.predict(best.candidate.config(result.base))
    assert again.step_time_s == pytest.approx(best.step_time_s, rel=1e-9)


# --- 7. --moe-a2a-overlap with nothing to pair -------------------------------------------------------------------
_MOE = ["--model", "mixtral-8x7b", "--gpus", "64", "--link", "aws-p5", "--strategy", "zero1", "--precision",
        "bf16-params", "--micro-batch", "1", "--steps", "1", "--ep", "8"]


@pytest.mark.parametrize("command", ["predict", "memory", "goodput"])
def test_a2a_overlap_with_one_micro_batch_and_no_pipeline_is_refused(command, capsys):
    """Before: ``predict --ep 8 --moe-a2a-overlap`` without --pp pairs each micro-batch's backward with the next one's
    forward, and with 1 micro-batch a step there is none: the step was 0.7470757564830582 s with the flag and
    without, the flag dropped in silence (with --grad-accum 4 it hides 71 ms). One line naming the flag and
    --grad-accum, as other flags that change nothing are refused."""
    _refused([command] + _MOE + ["--moe-a2a-overlap"], capsys, "--moe-a2a-overlap", "--grad-accum")
    with_it = _json(["predict"] + _MOE + ["--moe-a2a-overlap", "--grad-accum", "4", "--json"], capsys)
    without = _json(["predict"] + _MOE + ["--grad-accum", "4", "--json"], capsys)
    assert with_it["step_time_s"] < without["step_time_s"]


def test_plan_with_a2a_overlap_leaves_it_off_where_nothing_pairs():
    """plan's candidates with one micro-batch and no pipeline (global batch = dp x micro-batch) run without the
    overlap, as predict takes them; the search does not fail on them."""
    import dpsim

    config = dpsim.PredictConfig(model="mixtral-8x7b", gpu="h100", link="aws-p5", precision="bf16-params")
    result = dpsim.plan(config, gpus=[64], global_batch=64, pps=[1], eps=[8], micro_batches=[1], verify=1, top=5,
                        moe_a2a_overlap=True)
    assert result.ranked and any(not e.candidate.moe_a2a_overlap for e in result.ranked)
    for e in result.ranked:
        c = e.candidate
        assert c.moe_a2a_overlap == (64 // (c.micro_batch * c.dp) > 1), c.flags()
    paired = dpsim.plan(config, gpus=[64], global_batch=256, pps=[1], eps=[8], micro_batches=[1], verify=1, top=5,
                        moe_a2a_overlap=True)
    assert paired.ranked and all(e.candidate.moe_a2a_overlap for e in paired.ranked)
