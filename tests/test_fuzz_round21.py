"""Defects the twenty-first fuzz round found (fuzz21): nccl-tests logs whose device list was cut, given twice or
from two systems; a transformers config.json edited between two predictions, with a model_type that is no string,
or a GPT-J narrower than its heads; --mtp-depth with a traced torch module; --mtbf-link on a job of one node.

Each case says what it did before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz_harness import check_outcome, refused, run_cli

REPO = Path(__file__).resolve().parent.parent
_LOG = REPO / "calibration" / "reference" / "nccl-tests" / "8x-a100-sxm-node-nvlink3-via-nvswitch.all_reduce_perf.log"


# --- 1. an nccl-tests log whose device list was cut --------------------------------------------------------------
@pytest.mark.parametrize("dropped, words", [
    ("Rank  7", ("line 26", "gives 8 ranks", "device list has 7 ranks")),
    ("Rank  3", ("lacks rank(s) 3",)),
])
def test_a_cut_device_list_is_refused(dropped, words, tmp_path, capsys):
    """Before: an 8-GPU all_reduce_perf log with its last ``#  Rank  7`` line lost was fitted as a 7-rank
    communicator (``world_size: 7``, every busbw recomputed 2 % low against the log's own busbw column), and one
    with rank 3's line lost likewise: the device list was counted, never checked. Now the list must number ranks
    0..N-1 and agree with the busbw/algbw ratio nccl-tests printed (within its two-decimal rounding)."""
    log = tmp_path / "cut.all_reduce_perf.log"
    log.write_text("".join(line for line in _LOG.read_text().splitlines(keepends=True) if dropped not in line))
    out = tmp_path / "p.json"
    refused(["calibrate", "--from-nccl-tests", str(log), "--out", str(out), "--quiet"], capsys,
            "--from-nccl-tests", *words)
    assert not out.exists()
    # The whole log is still taken.
    args = ["calibrate", "--from-nccl-tests", str(_LOG), "--out", str(out), "--quiet"]
    check_outcome(run_cli(args, capsys), args, "ok")


# --- 2. a transformers config.json edited between two predictions -----------------------------------------------
def test_an_edited_config_json_is_read_again(tmp_path):
    """Before: ``dpsim.predict`` of a config.json, then the file edited (32 layers to 8) and predicted again in
    the same process (a notebook; a sweep run twice), gave the first model's step time (0.864 s both times):
    the model was memoized by the file's path. A topology file (keyed by its contents) and a torch module file
    (by its mtime) were read again. Now the file's shape is read on every call and keys the memo."""
    import json

    import dpsim

    data = json.loads((REPO / "tests" / "data" / "hf_configs" / "Mistral-7B-v0.1" / "config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))

    def predict() -> dpsim.Prediction:
        return dpsim.predict(dpsim.PredictConfig(model=str(path), gpus=8, link="dgx-a100", steps=1, seq_len=512,
                                                 micro_batch=1))

    deep = predict()
    data["num_hidden_layers"] = 8
    path.write_text(json.dumps(data))
    shallow = predict()
    assert shallow.step_time_s < 0.5 * deep.step_time_s
    # The same file unchanged is still one model (the memo still serves it).
    assert predict().step_time_s == shallow.step_time_s


# --- 3. a config.json whose model_type is no string ---------------------------------------------------------------
@pytest.mark.parametrize("kind", [[1], {"a": 1}])
def test_a_config_json_model_type_that_is_no_string_is_named(kind, tmp_path, capsys):
    """Before: ``"model_type": [1]`` (or an object) in a config.json ended in a traceback, "TypeError: unhashable
    type: 'list'", where the family was looked up."""
    import json

    data = json.loads((REPO / "tests" / "data" / "hf_configs" / "Mistral-7B-v0.1" / "config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**data, "model_type": kind}))
    refused(["predict", "--model", str(path), "--gpus", "8", "--steps", "1"], capsys, "--model", "model_type=",
            "llama, mistral")
    refused(["memory", "--model", str(path), "--gpus", "8"], capsys, "model_type=")


# --- 4. --mtp-depth with a traced torch module ----------------------------------------------------------------------
@pytest.mark.parametrize("depth", ["1", "16"])
def test_mtp_depth_with_a_traced_module_is_refused(depth, capsys):
    """Before: ``--model examples/my_model.py:build --mtp-depth 16`` predicted the module as it is (the same step
    time and memory as without the flag, status 0): the refusal was tested on --input-shape alone, so a builder
    whose example input comes from the file took the flag and dropped it. (A catalog model that is no Llama-style
    decoder was refused, and still is.)"""
    refused(["predict", "--model", str(REPO / "examples" / "my_model.py") + ":build", "--gpus", "8", "--steps", "1",
             "--mtp-depth", depth], capsys, "--mtp-depth", depth, "traced torch module")


# --- 5. a GPT-J config.json narrower than its heads -----------------------------------------------------------------
@pytest.mark.parametrize("width", [3, 15])
def test_a_gptj_config_narrower_than_its_heads_is_named(width, tmp_path, capsys):
    """Before: a GPT-J config.json with ``n_embd`` 3 (or 15) and ``n_head`` 16 ended in a traceback,
    "ZeroDivisionError: division by zero": rotary_dim was divided by n_embd // n_head = 0 before the width was
    checked."""
    import json

    data = json.loads((REPO / "tests" / "data" / "hf_configs" / "gpt-j-6b" / "config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**data, "n_embd": width}))
    refused(["predict", "--model", str(path), "--gpus", "8", "--steps", "1"], capsys, "n_head=16", f"n_embd={width}")


# --- 6. --mtbf-link on a job of one node -----------------------------------------------------------------------------
def test_mtbf_link_on_one_node_is_refused(capsys):
    """Before: ``goodput --gpus 8 --link infiniband --mtbf-link 1min`` (8 GPUs, one server: no inter-node link)
    printed the same goodput as without the flag, its link failure rate 0 (status 0): the flag was dropped in
    silence, as --min-nodes without shrink was (round 20). The API's ``rates=FailureRates(link_mtbf_s=60)``
    likewise. On two nodes it is read, as before."""
    import dpsim
    from dpsim.errors import DpsimError
    from dpsim.plan.reliability import FailureRates

    refused(["goodput", "--model", "gpt2", "--gpus", "8", "--link", "infiniband", "--duration", "1d", "--runs", "2",
             "--mtbf-link", "1min"], capsys, "--mtbf-link", "60 s", "one node")
    config = dpsim.PredictConfig(model="gpt2", gpus=8, link="infiniband", steps=1)
    with pytest.raises(DpsimError, match="--mtbf-link: 60 s"):
        dpsim.goodput(config, duration_s=86400, runs=2, rates=FailureRates(link_mtbf_s=60.0))
    two = dpsim.goodput(dpsim.PredictConfig(model="gpt2", gpus=16, link="infiniband", steps=1), duration_s=86400,
                        runs=2, rates=FailureRates(link_mtbf_s=3.6e6))
    assert two.failure_rates_per_s["link"] > 0


# --- 7. nccl-tests logs fitted together that are not one system's ---------------------------------------------------
def test_one_log_given_twice_is_refused(tmp_path, capsys):
    """Before: ``calibrate --from-nccl-tests A.log A.log`` fitted every size of A twice (status 0)."""
    out = tmp_path / "p.json"
    refused(["calibrate", "--from-nccl-tests", str(_LOG), str(_LOG), "--out", str(out), "--quiet"], capsys,
            "--from-nccl-tests", "given twice", "give each log once")
    assert not out.exists()


def test_two_systems_logs_of_one_op_are_refused(tmp_path, capsys):
    """Before: the 2 x p4de (A100) and 2 x p5 (H100) all_reduce_perf logs, given together, were merged into one
    inter_node all_reduce fit (R² 0.80, worst residual 83 %: a warning, status 0) describing neither machine."""
    logs = REPO / "calibration" / "reference" / "nccl-tests"
    a100 = logs / "aws-p4de-24xlarge-x2-16x-a100-80gb.all_reduce_perf.log"
    h100 = logs / "aws-p5-48xlarge-x2-16x-h100-80gb.all_reduce_perf.log"
    out = tmp_path / "p.json"
    refused(["calibrate", "--from-nccl-tests", str(a100), str(h100), "--out", str(out), "--quiet"], capsys,
            "--from-nccl-tests", "H100", "A100", "one system")
    assert not out.exists()
