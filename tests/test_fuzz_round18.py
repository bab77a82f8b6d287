"""Defects found by the eighteenth fuzz round (fuzz18): odd but plausible numbers, names and files through every
command and the Python API (budgets below one token, ...).

Each case says what it did before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fuzz_harness import refused as _refused
from tests.fuzz_harness import run_json as _json

REPO = Path(__file__).resolve().parent.parent




# --- 1. a budget below one token or sample --------------------------------------------------------------------------
@pytest.mark.parametrize("flag, value", [("--tokens", "1e-308"), ("--tokens", "0.5"), ("--samples", "1e-300")])
def test_a_budget_below_one_is_refused(flag, value, capsys):
    """Before: ``sweep --tokens 1e-308`` (and a sweep file's ``samples: 1e-308``) was taken as a budget: time to
    train 1.2e-311 s, cost 1.7e-313 USD in the JSON, though ``--tokens 0`` is refused "expected a count > 0". A
    budget is a count of whole tokens or samples: one line naming the flag, the value and ">= 1"."""
    model = "resnet50" if flag == "--samples" else "gpt2"
    base = ["--model", model, "--gpus", "8", "--link", "infiniband"]
    _refused(["sweep"] + base + ["--steps", "1", flag, value, "--json"], capsys, flag, value, ">= 1")
    _refused(["plan", "--model", model, "--gpus", "8", "--global-batch", "64", "--verify", "0", flag, value], capsys, flag, ">= 1")
    if flag == "--tokens":
        _refused(["goodput"] + base + [flag, value], capsys, flag, ">= 1")
    out = _json(["sweep"] + base + ["--steps", "1", flag, "1", "--json"], capsys)
    assert out["rows"][0]["time_to_train_s"] > 0


def test_a_sweep_files_budget_below_one_is_refused(tmp_path, capsys):
    """The same budget in a sweep file, and through ``dpsim.sweep``."""
    spec = tmp_path / "s.yaml"
    spec.write_text("grid:\n  gpus: [8]\n  model: [resnet50]\nsamples: 1e-308\n")
    _refused(["sweep", "-c", str(spec), "--link", "infiniband", "--steps", "1"], capsys, "samples", "1e-308", ">= 1")
    import dpsim
    from dpsim.errors import DpsimError

    with pytest.raises(DpsimError, match=">= 1"):
        dpsim.sweep({"gpus": [8], "model": ["gpt2"]}, tokens=0.25)


# --- 2. an MTBF so short that the failure rates overflow -------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--mtbf-gpu", "--mtbf-node", "--mtbf-link"])
@pytest.mark.parametrize("value", ["1e-308s", "5e-324s"])
def test_goodput_through_an_overflowing_failure_rate_is_one_line(flag, value, capsys):
    """Before: ``goodput --mtbf-gpu 1e-308s`` on 16 GPUs was a ZeroDivisionError traceback: 16 / 1e-308 failures
    per second overflowed to inf, the job's MTBF came out 0 s and the checkpoint-interval search divided by it
    (``--mtbf-gpu 1e-300s`` was refused: "the job fails every 6.25e-302 s on average ..."). The same line now."""
    _refused(["goodput", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--tokens", "1B", flag, value,
              "--json"], capsys, "--mtbf-gpu/--mtbf-node/--mtbf-link", "fails every")


def test_the_job_mtbf_of_overflowing_rates_is_positive():
    """The job's MTBF is 1 / (the sum of its components' rates), computed without overflowing that sum."""
    import math

    from dpsim.plan.reliability import ClusterShape, FailureRates

    shape = ClusterShape(n_nodes=2, gpus_per_node=8, links_per_node=8)
    tiny = shape.mtbf_s(FailureRates(gpu_mtbf_s=1e-308, node_mtbf_s=math.inf, link_mtbf_s=math.inf))
    assert tiny == pytest.approx(1e-308 / 16, rel=1e-9)
    assert shape.mtbf_s(FailureRates(gpu_mtbf_s=5e-324)) > 0
    plain = FailureRates(gpu_mtbf_s=1e6, node_mtbf_s=2e6, link_mtbf_s=4e6)
    assert shape.mtbf_s(plain) == pytest.approx(1 / (16 / 1e6 + 2 / 2e6 + 16 / 4e6), rel=1e-12)


# --- 3. error lines that printed 'inf' for a number ----------------------------------------------------------------
def _no_inf(line: str) -> None:
    import re

    assert not re.search(r"(?<![\w.])-?(nan|inf|infinity)(?![\w])", line, re.I), line


def test_a_loader_of_1e_minus_308_samples_per_s_names_no_inf(capsys):
    """Before: ``--input-samples-per-s 1e-308`` was refused "loads the 4 samples of a GPU's step in inf s": the
    division overflowed and the line printed ``inf`` as a time. Now it says the time is over a day."""
    line = _refused(["predict", "--model", "gpt2", "--gpus", "8", "--link", "infiniband", "--input-samples-per-s",
                     "1e-308"], capsys, "--input-samples-per-s", "1e-308", "86400 s")
    _no_inf(line)


@pytest.mark.parametrize("mtbf", ["1e-308s", "5e-324s"])
def test_a_mix_whose_failure_rate_overflows_names_no_inf(mtbf, tmp_path, capsys):
    """Before: a mix file's ``mtbf_gpu: 1e-308s`` was refused "the cluster's servers fail every 0 s on average and
    the 3600 s horizon would draw about inf of them"."""
    path = tmp_path / "mix.yaml"
    path.write_text("cluster: {link: infiniband, gpus: 64}\nhorizon: 1h\njobs:\n  - {name: a, model: gpt2, gpus: 16}\n"
                    f"failures: {{repair: 1h, mtbf_gpu: {mtbf}}}\n")
    line = _refused(["mix", str(path)], capsys, "failures.mtbf_gpu", "100,000")
    _no_inf(line)
    assert "every 0 s" not in line, line


# --- 4. a value shown in its flag's units names what was typed ---------------------------------------------------
@pytest.mark.parametrize("args, typed", [
    (["predict", "--single-gpu-step-ms", "1e-308"], "1e-308 ms"),
    (["sweep", "--axis", "single_gpu_step_s=1e-308"], "1e-305 ms"),
])
def test_a_scaled_flag_is_refused_with_the_number_typed(args, typed, capsys):
    """Before: ``--single-gpu-step-ms 1e-308`` was refused "--single-gpu-step-ms: 9.999999999999475e-309 ms is not
    valid": the value went to seconds (a subnormal float, 1e-311) and back, and the line named a number nobody
    typed (``--axis single_gpu_step_s=1e-308``: "9.999999999999999e-306 ms")."""
    line = _refused(args[:1] + ["--model", "gpt2", "--gpus", "8", "--link", "infiniband"] + args[1:], capsys,
                    f": {typed} is not valid", ">= 0.001 ms")
    assert "99999" not in line, line


# --- 5. numpy's scalars through every Python entry point, as PredictConfig takes them -----------------------------
def test_numpy_scalars_are_numbers_to_every_entry_point():
    """Before: ``PredictConfig(gpus=np.int64(16))`` was taken (fuzz round 12), but ``goodput(runs=np.int64(3))``
    was refused "--runs: np.int64(3) is not valid; expected an integer", and so were goodput's seed and
    min_nodes, a float32 token budget, ``predict_collective(minbytes=np.int64(8))``, ``plan(top=np.int64(3))`` and
    ``VariabilitySpec(samples=np.int64(3))``: numbers from ``np.arange`` or a DataFrame column. Each is taken as
    the Python number, and the results are the same as with it."""
    np = pytest.importorskip("numpy")
    import dpsim
    from dpsim.variability.spec import VariabilitySpec

    config = dpsim.PredictConfig(model="gpt2", gpus=16, link="infiniband", steps=1)
    plain = dpsim.goodput(config, tokens=1e9, runs=3, seed=2, min_nodes=1)
    again = dpsim.goodput(config, tokens=np.float32(1e9), runs=np.int64(3), seed=np.int64(2), min_nodes=np.int32(1))
    assert again.result == plain.result
    rows = dpsim.predict_collective(config, minbytes=np.int64(8), maxbytes=np.int64(1024), stepfactor=np.float32(4))
    assert rows.to_dict() == dpsim.predict_collective(config, minbytes=8, maxbytes=1024, stepfactor=4.0).to_dict()
    json.dumps(rows.to_dict())
    result = dpsim.plan(config, gpus=[8], global_batch=64, verify=np.int64(0), top=np.int64(3))
    assert len(result.ranked) <= 3
    spec = VariabilitySpec(noise_cv=np.float32(0.05), samples=np.int64(3), seed=np.int64(2))
    assert type(spec.samples) is int and type(spec.seed) is int and type(spec.noise_cv) is float
    assert spec == VariabilitySpec(noise_cv=float(np.float32(0.05)), samples=3, seed=2)
    with pytest.raises(dpsim.DpsimError, match="--runs"):
        dpsim.goodput(config, tokens=1e9, runs=np.float64(3.0))  # a float is not a count, numpy's or Python's
    with pytest.raises(dpsim.DpsimError, match="--runs"):
        dpsim.goodput(config, tokens=1e9, runs=np.bool_(True))


def test_the_python_api_takes_the_budget_the_command_line_takes():
    """Before: ``dpsim.plan(tokens=0.5)`` and ``dpsim.goodput(tokens=0.5)`` were taken ("a number > 0") where the
    command line (and ``dpsim.sweep``) refuse a budget below one token."""
    import dpsim

    config = dpsim.PredictConfig(model="gpt2", gpus=16, link="infiniband", steps=1)
    with pytest.raises(dpsim.DpsimError, match=r"--tokens: .*>= 1"):
        dpsim.plan(config, gpus=[8], global_batch=64, verify=0, tokens=0.5)
    with pytest.raises(dpsim.DpsimError, match=r"--samples: .*>= 1"):
        dpsim.plan(config, gpus=[8], global_batch=64, verify=0, samples=1e-308)
    with pytest.raises(dpsim.DpsimError, match=r"--tokens: .*>= 1"):
        dpsim.goodput(config, tokens=0.5)


def test_a_checkpoint_bandwidth_of_1e_minus_308_names_no_inf(capsys):
    """Before: ``goodput --checkpoint-bandwidth 1e-308B/s`` was refused "... would take inf s, over 3.1536e+07 s"."""
    line = _refused(["goodput", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--tokens", "1B",
                     "--checkpoint-bandwidth", "1e-308B/s"], capsys, "--checkpoint-bandwidth", "a year")
    _no_inf(line)


# --- 6. an empty path where a file is read --------------------------------------------------------------------------
_LOG = str(REPO / "calibration" / "reference" / "nccl-tests" / "8x-a100-sxm-node-nvlink3-via-nvswitch.all_reduce_perf.log")


@pytest.mark.parametrize("args, flag", [
    (["sweep", "-c", "", "--steps", "1", "--json"], "--config"),
    (["mix", ""], "mix file"),
    (["calibrate", "--from-nccl-tests", "", "--out", "OUT"], "--from-nccl-tests"),
])
def test_an_empty_path_is_refused_as_no_file_name(args, flag, tmp_path, capsys):
    """Before: ``sweep -c ''`` swept the defaults as if no file were given (exit 0, one point of gpt2 on 64
    GPUs), ``mix ''`` was refused "mix file: cannot read '.': it is a directory" (a folder the user never named),
    and ``calibrate --from-nccl-tests ''`` "--from-nccl-tests: : does not exist". As ``--calibration ''`` and
    ``--topology ''`` are: one line naming the flag and the empty name."""
    args = [str(tmp_path / "p.json") if a == "OUT" else a for a in args]
    line = _refused(args, capsys, flag, "''")
    assert "'.'" not in line and ": : " not in line, line


# --- 7. an output path that is a link to a missing directory: refused before the work ---------------------------------
def test_an_output_link_to_a_missing_directory_is_refused_before_the_work(tmp_path, capsys):
    """Before: ``report -o latest.html`` where latest.html links into a directory that is gone computed the whole
    report (3 s here) and only then failed "cannot write '/gone/x.html'" (``sweep -o`` likewise): the checks made
    before the work tried the link's own directory, while the write goes through the link, as open() does. The
    checks (``check_output_path``, ``check_writable_dir``) now follow the link too."""
    from dpsim.errors import ConfigError
    from dpsim.files import check_output_path, check_writable_dir

    link = tmp_path / "latest.html"
    link.symlink_to(tmp_path / "gone" / "report.html")
    with pytest.raises(ConfigError, match="gone"):
        check_output_path(link, "-o/--output")
    csv = tmp_path / "latest.csv"
    csv.symlink_to(tmp_path / "gone" / "rows.csv")
    with pytest.raises(ConfigError, match="gone"):
        check_writable_dir(csv, "-o/--output")
    _refused(["report", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--steps", "1", "-o", str(link)],
             capsys, "-o/--output", "gone")
    # A link to a file in a directory that exists is written through, as before.
    (tmp_path / "runs").mkdir()
    good = tmp_path / "good.html"
    good.symlink_to(tmp_path / "runs" / "report.html")
    assert check_output_path(good, "-o/--output") == good
