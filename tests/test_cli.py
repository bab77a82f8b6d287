"""The command line: output, JSON keys, and the one-line error rule.

House rules: every bad user input prints exactly one line on stderr starting with
``dpsim: error:`` that names the flag (or YAML field), the value and what is allowed,
and exits with status 2, never a traceback; ``python -m dpsim`` works like ``dpsim``;
``--json`` is valid JSON with stable keys.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dpsim.cli import main

REPO = Path(__file__).resolve().parents[1]

PREDICTION_KEYS = {
    "schema", "config", "topology", "gpu", "n_gpus", "n_nodes", "model", "param_count",
    "tokens_per_sample", "step_time_s", "forward_s", "backward_s", "optimizer_s", "compute_s",
    "comm_s", "exposed_comm_s", "overlap_fraction", "samples_per_s", "tokens_per_s",
    "single_gpu_samples_per_s", "scaling_efficiency", "mfu", "n_buckets", "gradient_bytes",
    "ring", "memory",
}
MEMORY_KEYS = {
    "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
    "comm_buffers_bytes", "overhead_bytes", "total_bytes", "capacity_bytes", "fits",
}
RING_KEYS = {"channels", "bandwidth_bytes_per_s", "intra_hop_latency_s", "inter_hop_latency_s",
             "bottleneck_link_classes"}


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    # rich sizes tables to COLUMNS when stdout is not a terminal; keep rows unwrapped.
    monkeypatch.setenv("COLUMNS", "160")


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in out and "Traceback" not in err
    return rc, out, err


def run_json(capsys, *args: str) -> dict:
    rc, out, err = run_cli(capsys, *args, "--json")
    assert rc == 0, err
    assert err == ""
    return json.loads(out)


def assert_one_line_error(rc: int, out: str, err: str, *needles: str) -> str:
    assert rc == 2, (rc, out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("dpsim: error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


# ----------------------------------------------------------------------------- predict

def test_predict_prints_table(capsys):
    rc, out, err = run_cli(capsys, "predict", "--gpus", "64", "--link", "ethernet")
    assert rc == 0, err
    assert err == ""
    for label in ("step time", "all-reduce exposed", "throughput", "samples/s", "tokens/s",
                  "scaling efficiency", "memory per GPU", "total"):
        assert label in out, label
    assert re.search(r"\bfits\b|DOES NOT FIT", out)
    assert "64 x h100" in out and "8 nodes" in out


def test_predict_memory_verdict_does_not_fit(capsys):
    rc, out, err = run_cli(capsys, "predict", "--gpus", "8", "--link", "nvlink", "--model", "llama-2-70b")
    assert rc == 0, err
    assert "DOES NOT FIT" in out


def test_predict_json_keys_and_values(capsys):
    d = run_json(capsys, "predict", "--gpus", "64", "--link", "ethernet")
    assert PREDICTION_KEYS <= set(d)
    assert MEMORY_KEYS <= set(d["memory"])
    assert RING_KEYS <= set(d["ring"])
    assert d["schema"] == "dpsim.prediction/1"
    assert d["n_gpus"] == 64 and d["n_nodes"] == 8 and d["topology"] == "ethernet"
    assert d["config"]["gpus"] == 64 and d["config"]["link"] == "ethernet"
    for key in ("step_time_s", "compute_s", "comm_s", "samples_per_s", "tokens_per_s"):
        assert isinstance(d[key], float) and d[key] > 0, key
    assert 0 <= d["exposed_comm_s"] <= d["comm_s"] + 1e-12
    assert 0 <= d["overlap_fraction"] <= 1
    assert 0 < d["scaling_efficiency"] <= 1
    assert d["step_time_s"] >= d["compute_s"] * (1 - 1e-9)
    assert d["samples_per_s"] == pytest.approx(64 * d["config"]["micro_batch"] / d["step_time_s"])
    assert d["tokens_per_s"] == pytest.approx(d["samples_per_s"] * d["tokens_per_sample"])
    mem = d["memory"]
    assert isinstance(mem["fits"], bool)
    assert mem["fits"] == (mem["total_bytes"] <= mem["capacity_bytes"])
    parts = sum(mem[k] for k in MEMORY_KEYS - {"total_bytes", "capacity_bytes", "fits"})
    assert mem["total_bytes"] == pytest.approx(parts)


@pytest.mark.parametrize("args", [
    ("--gpus", "1"),  # no ring at all: no inf/nan may leak into JSON
    ("--gpus", "4", "--model", "resnet50"),  # no tokens: tokens_per_s is null, key kept
    ("--gpus", "16", "--link", "infiniband", "--no-overlap"),
    ("--gpus", "16", "--link", "pcie", "--bucket-cap-mb", "100", "--precision", "fp32"),
])
def test_predict_json_keys_are_stable_across_configs(capsys, args):
    d = run_json(capsys, "predict", *args)
    assert PREDICTION_KEYS <= set(d)
    assert MEMORY_KEYS <= set(d["memory"])
    assert RING_KEYS <= set(d["ring"])

    def finite(obj):
        if isinstance(obj, float):
            assert math.isfinite(obj)
        elif isinstance(obj, dict):
            for v in obj.values():
                finite(v)
        elif isinstance(obj, list):
            for v in obj:
                finite(v)
    finite(d)


def test_predict_json_key_order_is_stable(capsys):
    a = list(run_json(capsys, "predict", "--gpus", "8"))
    b = list(run_json(capsys, "predict", "--gpus", "32", "--link", "infiniband", "--model", "gpt2"))
    assert a == b


def test_predict_faster_fabric_is_faster(capsys):
    eth = run_json(capsys, "predict", "--gpus", "64", "--link", "ethernet")
    ib = run_json(capsys, "predict", "--gpus", "64", "--link", "infiniband")
    assert ib["step_time_s"] < eth["step_time_s"]
    assert ib["scaling_efficiency"] > eth["scaling_efficiency"]


@pytest.mark.parametrize("args, needles", [
    (["--gpus", "0"], ["--gpus", "0", ">= 1"]),
    (["--gpus", "-8"], ["--gpus", "-8"]),
    (["--gpus", "12"], ["--gpus", "12", "multiple", "8"]),
    (["--gpus", "8", "--gpus-per-node", "3"], ["--gpus", "8", "--gpus-per-node=3"]),
    (["--gpus-per-node", "0"], ["--gpus-per-node", "0"]),
    (["--gpus", "abc"], ["--gpus", "integer"]),
    (["--link", "nope"], ["--link", "'nope'", "ethernet", "infiniband", "nvlink", "pcie"]),
    (["--model", "nope"], ["--model", "'nope'", "gpt2-xl"]),
    (["--precision", "nope"], ["--precision", "'nope'", "bf16-mixed"]),
    (["--optimizer", "nope"], ["--optimizer", "'nope'", "adamw"]),
    (["--gpu", "nope"], ["--gpu", "'nope'", "h100"]),
    (["--bucket-cap-mb", "-1"], ["--bucket-cap-mb", "-1", "> 0"]),
    (["--bucket-cap-mb", "0"], ["--bucket-cap-mb", "0", "> 0"]),
    (["--bucket-cap-mb", "nan"], ["--bucket-cap-mb", "nan"]),
    (["--micro-batch", "0"], ["--micro-batch", "0", ">= 1"]),
    (["--seq-len", "0"], ["--seq-len", "0"]),
    (["--steps", "0"], ["--steps", "0"]),
    (["--overlap-slowdown", "-1"], ["--overlap-slowdown", "-1"]),
    (["--single-gpu-step-ms", "0"], ["--single-gpu-step-ms", "0"]),
    (["--single-gpu-step-ms", "10", "--single-gpu-samples-per-s", "5"],
     ["--single-gpu-step-ms", "--single-gpu-samples-per-s"]),
    (["--topology", "missing.yaml"], ["--topology", "missing.yaml"]),
    (["--frobnicate"], ["--frobnicate"]),
    (["--gpus"], ["--gpus", "requires an argument"]),
    (["--gpus", "8", "extra"], ["extra"]),
])
def test_predict_bad_input_one_line_exit_2(capsys, args, needles):
    rc, out, err = run_cli(capsys, "predict", *args)
    assert_one_line_error(rc, out, err, *needles)
    assert out == ""


def test_unknown_command_one_line(capsys):
    rc, out, err = run_cli(capsys, "frobnicate")
    assert_one_line_error(rc, out, err, "frobnicate")


def test_no_command_shows_help_and_one_error_line(capsys):
    rc, out, err = run_cli(capsys)
    assert_one_line_error(rc, out, err, "predict", "collective", "models")
    assert "predict" in out  # the help


def test_help_states_the_overlap_slowdown_default_it_uses(capsys):
    """--overlap-slowdown left out is DEFAULT_OVERLAP_SLOWDOWN (18.9 %, arXiv:2507.03114), not
    the 0.1 the help and docs/predict.md once said."""
    from dpsim.predict.config import DEFAULT_OVERLAP_SLOWDOWN
    rc, out, err = run_cli(capsys, "predict", "--help")
    flat = " ".join(line.strip(" │") for line in out.splitlines())
    assert rc == 0 and f"else {DEFAULT_OVERLAP_SLOWDOWN:g} " in " ".join(flat.split())
    doc = open(__import__("pathlib").Path(__file__).parents[1] / "docs" / "predict.md").read()
    assert f"default {DEFAULT_OVERLAP_SLOWDOWN:g}" in doc


def test_help_exits_zero(capsys):
    rc, out, err = run_cli(capsys, "predict", "--help")
    assert rc == 0 and err == ""
    assert "--gpus" in out and "--link" in out and "--json" in out


def test_user_topology_file_errors_are_one_line(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "topologies" / "ethernet.yaml").read_text()
                   .replace("nic_gbit_per_s: 100", "nic_gbit_per_s: -100"))
    rc, out, err = run_cli(capsys, "predict", "--topology", str(bad))
    assert_one_line_error(rc, out, err, str(bad), "fabric.nic_gbit_per_s", "-100", "number>0")


# ----------------------------------------------------------------------------- collective

def parse_nccl_table(out: str) -> tuple[list[str], list[list[str]]]:
    lines = out.splitlines()
    header = [ln for ln in lines if ln.startswith("#") and "size" in ln and "busbw" in ln]
    rows = [ln.split() for ln in lines if ln.strip() and not ln.startswith("#")]
    assert len(header) == 1, out
    return header[0].lstrip("#").split(), rows


def test_collective_nccl_tests_table(capsys):
    rc, out, err = run_cli(capsys, "collective", "--op", "all_reduce", "--gpus", "16", "--link", "infiniband",
                           "-b", "8", "-e", "1G", "-f", "2")
    assert rc == 0, err
    header, rows = parse_nccl_table(out)
    assert header == ["size", "count", "type", "redop", "root", "time", "algbw", "busbw"]
    assert "(us)" in out and "(GB/s)" in out
    assert len(rows) == 28
    sizes = [int(r[0]) for r in rows]
    assert sizes == [2**k for k in range(3, 31)]  # 8 B .. 1 GiB
    n = 16
    times = []
    for size, count, dtype, redop, root, time_us, algbw, busbw in rows:
        assert int(count) == int(size) // 4 and dtype == "float" and redop == "sum" and root == "-1"
        algbw, busbw, time_us = float(algbw), float(busbw), float(time_us)
        # algbw = S/T in GB/s (1e9) with T in us
        assert algbw == pytest.approx(int(size) / (time_us * 1e-6) / 1e9, abs=0.01, rel=1e-3)
        # busbw = algbw * 2(N-1)/N, each printed to 2 decimals
        assert abs(busbw - algbw * 2 * (n - 1) / n) <= 0.005 + 0.005 * 2 * (n - 1) / n + 1e-9
        times.append(time_us)
    assert times == sorted(times)
    assert float(rows[-1][7]) > float(rows[0][7])
    assert "Avg bus bandwidth" in out


def test_collective_json(capsys):
    d = run_json(capsys, "collective", "--op", "all_reduce", "--gpus", "16", "--link", "infiniband",
                 "-b", "8", "-e", "1G", "-f", "2")
    assert d["schema"] == "dpsim.collective/1"
    assert d["op"] == "all_reduce" and d["n_ranks"] == 16 and d["topology"] == "infiniband"
    assert len(d["rows"]) == 28
    for row in d["rows"]:
        assert set(row) >= {"size_bytes", "count", "time_s", "algbw_bytes_per_s", "busbw_bytes_per_s"}
        assert row["algbw_bytes_per_s"] == pytest.approx(row["size_bytes"] / row["time_s"], rel=1e-9)
        assert row["busbw_bytes_per_s"] == pytest.approx(row["algbw_bytes_per_s"] * 2 * 15 / 16, rel=1e-9)
    assert d["rows"][0]["size_bytes"] == 8 and d["rows"][-1]["size_bytes"] == 2**30


@pytest.mark.parametrize("op, factor, redop, root", [
    ("reduce_scatter", 7 / 8, "sum", "-1"),
    ("all_gather", 7 / 8, "none", "-1"),
    ("broadcast", 1.0, "none", "0"),
])
def test_collective_other_ops_busbw_factor(capsys, op, factor, redop, root):
    d = run_json(capsys, "collective", "--op", op, "--gpus", "8", "-b", "1M", "-e", "64M")
    for row in d["rows"]:
        assert row["busbw_bytes_per_s"] == pytest.approx(row["algbw_bytes_per_s"] * factor, rel=1e-9)
    rc, out, err = run_cli(capsys, "collective", "--op", op, "--gpus", "8", "-b", "1M", "-e", "64M")
    assert rc == 0, err
    _, rows = parse_nccl_table(out)
    assert {r[3] for r in rows} == {redop} and {r[4] for r in rows} == {root}


@pytest.mark.parametrize("args, needles", [
    (["-e", "1X"], ["-e/--maxbytes", "'1X'", "1GiB"]),
    (["-b", "abc"], ["-b/--minbytes", "'abc'"]),
    (["-b", "0"], ["-b/-e", "'0'"]),
    (["-b", "2G", "-e", "1G"], ["-b/-e", "'2G'", "'1G'"]),
    (["--op", "foo"], ["--op", "'foo'", "all_reduce"]),
    (["-f", "1"], ["-f/--stepfactor", "1", "> 1"]),
    (["-f", "abc"], ["--stepfactor"]),
    (["-d", "foo"], ["--datatype", "'foo'", "float"]),
    (["--gpus", "12", "--link", "infiniband"], ["--gpus", "12", "multiple"]),
    (["--gpus", "0"], ["--gpus", "0"]),
    (["--link", "nope"], ["--link", "'nope'"]),
])
def test_collective_bad_input_one_line_exit_2(capsys, args, needles):
    rc, out, err = run_cli(capsys, "collective", *args)
    assert_one_line_error(rc, out, err, *needles)
    assert out == ""


# ----------------------------------------------------------------------------- models

def test_models_lists_catalog(capsys):
    from dpsim.workload.catalog import list_models

    rc, out, err = run_cli(capsys, "models")
    assert rc == 0, err
    names = list_models()
    assert "gpt2-xl" in names
    for name in names:
        assert name in out, name
    d = run_json(capsys, "models")
    assert [m["name"] for m in d["models"]] == names
    assert all(m["param_count"] > 0 for m in d["models"])


# ----------------------------------------------------------------------------- python -m dpsim

def _run_module(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="160")
    return subprocess.run([sys.executable, "-m", "dpsim", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=60)


def test_module_entry_point_predict_json_imports_neither_torch_nor_the_other_commands(tmp_path):
    # One fresh process for both checks (tests/test_predict.py ran the same prediction through main() in a
    # second one for its modules): runpy runs dpsim/__main__.py as python -m does, and at exit the process
    # writes the modules it imported to a file (stdout and stderr stay the command's own).
    modules = tmp_path / "modules.json"
    code = ("import atexit, json, os, runpy, sys\n"
            f"atexit.register(lambda: open({str(modules)!r}, 'w').write(json.dumps([sorted(sys.modules), "
            f"os.environ.get('OPENBLAS_NUM_THREADS')])))\n"
            "sys.argv = ['dpsim', 'predict', '--gpus', '64', '--link', 'ethernet', '--json']\n"
            "runpy.run_module('dpsim', run_name='__main__', alter_sys=True)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, COLUMNS="160"), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    d = json.loads(proc.stdout)
    assert PREDICTION_KEYS <= set(d) and d["n_gpus"] == 64
    # torch is never imported by predict, and the other commands' modules (calibrate, plan, goodput, ...)
    # only when they run (dpsim/cli/commands.py).
    loaded, blas_threads = json.loads(modules.read_text())
    loaded = set(loaded)
    assert "torch" not in loaded
    # numpy started OpenBLAS on one thread (dpsim.cli.app.loading), and the variable was put back after.
    assert blas_threads == os.environ.get("OPENBLAS_NUM_THREADS")
    # The package's frozen keyword-only classes are made by dpsim.frozen (tests/test_frozen.py checks the source).
    assert "dpsim.frozen" in loaded
    # Nor networkx (~0.15 s of start-up): the connectivity check walks a Reach (dpsim.topology.graph).
    assert "networkx" not in loaded
    assert {"dpsim.cli.predict", "dpsim.cli.app", "dpsim.cli.commands"} <= loaded
    assert not loaded & {"dpsim.cli.calibrate", "dpsim.cli.plan", "dpsim.cli.goodput", "dpsim.cli.layout_plan",
                         "dpsim.cli.validate", "dpsim.cli.testbed", "dpsim.cli.memory"}, loaded


# A fresh process each (about half a second on 2 cores): the fast lane keeps one error of the library's
# own checks and one of the parser's; the same messages in-process are the tests above, every one fast.
@pytest.mark.parametrize("args, needle", [
    pytest.param(["predict", "--gpus", "abc"], "--gpus", marks=pytest.mark.slow),
    (["predict", "--gpus", "12"], "--gpus"),
    (["predict", "--frobnicate"], "--frobnicate"),
    pytest.param(["collective", "-e", "1X"], "-e/--maxbytes", marks=pytest.mark.slow),
])
def test_module_entry_point_errors_exit_2(args, needle):
    proc = _run_module(*args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpsim: error: ") and needle in lines[0]


_MIX = "cluster: {link: infiniband, gpus: 16}\nhorizon: 1h\njobs:\n  - {name: a, model: gpt2, gpus: 8}\n"


@pytest.mark.parametrize("unwritable", ["long", "/proc/dpsim-fuzz"])
@pytest.mark.parametrize("command, flag, suffix", [
    (["predict", "--gpus", "8", "--link", "nvlink", "--model", "gpt2", "--timeline"], "--timeline", ".html"),
    (["report", "--gpus", "8", "--link", "nvlink", "--model", "gpt2", "-o"], "-o/--output", ".html"),
    (["sweep", "--gpus", "8", "--model", "gpt2", "-o"], "-o/--output", ".csv"),
    (["mix", "MIX", "--html"], "--html", ".html"),
])
def test_an_unwritable_output_is_one_line_before_the_work(capsys, tmp_path, command, flag, suffix, unwritable):
    # A directory nobody may write (/proc here; read-only or not permitted for a user) or a file name too long
    # for the file system passed the checks and failed at the very end: an OSError traceback after the work.
    (tmp_path / "mix.yaml").write_text(_MIX)
    path = str(tmp_path / ("x" * 300)) + suffix if unwritable == "long" else unwritable + suffix
    args = [str(tmp_path / "mix.yaml") if a == "MIX" else a for a in command]
    rc, out, err = run_cli(capsys, *args, path)
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"dpsim: error: {flag}: cannot ")


def test_a_failed_atomic_write_is_one_line_and_keeps_the_old_file(tmp_path, monkeypatch):
    # A full disk (or a lost permission) at the final rename was an OSError traceback.
    from dpsim.errors import ConfigError
    from dpsim.files import write_text_atomic

    path = tmp_path / "out.html"
    path.write_text("old\n")

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(ConfigError, match="--timeline: cannot write .*No space left on device; it is left as it was"):
        write_text_atomic(path, "new\n", flag="--timeline")
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out.html"]


@pytest.mark.parametrize("args, flag", [
    (["predict", "--gpus", "8", "--link", "nvlink", "--model", "gpt2", "--calibration", "LONG.json"], "--calibration"),
    (["predict", "--gpus", "8", "--link", "nvlink", "--model", "gpt2", "--calibration", "NAME"], "--calibration"),
    (["predict", "--gpus", "8", "--link", "nvlink", "--model", "LONG.py:build"], "--model"),
    (["calibrate", "--from-nccl-tests", "LONG.log"], "--from-nccl-tests"),
    (["calibrate", "--from-nccl-tests", "LOG", "--out", "LONG.json"], "--out"),
    (["predict", "--gpus", "8", "--link", "nvlink", "--model", "gpt2", "--timeline", "LONG/t.html"], "--timeline"),
])
def test_a_file_name_too_long_is_one_line(capsys, tmp_path, args, flag):
    # Path.exists()/is_file()/is_dir() raise ENAMETOOLONG: an OSError traceback from --calibration, --model,
    # --from-nccl-tests and --out (and from a directory component too long for an output).
    long = str(tmp_path / ("x" * 300))
    log = tmp_path / "all_reduce_perf.log"
    log.write_text("# nccl-tests\n")
    args = [a.replace("LONG", long).replace("NAME", "x" * 300) if a != "LOG" else str(log) for a in args]
    rc, out, err = run_cli(capsys, *args)
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"dpsim: error: {flag}: ") and "File name too long" in err


def test_calibrate_out_in_a_missing_directory_is_refused_like_every_output(capsys, tmp_path):
    # calibrate --out created the missing directories (a typo became a new tree) where --timeline,
    # --html and the others refuse them; it is now refused before the logs are read.
    log = tmp_path / "all_reduce_perf.log"
    log.write_text("# nccl-tests\n")
    out = tmp_path / "missing" / "p.json"
    rc, _, err = run_cli(capsys, "calibrate", "--from-nccl-tests", str(log), "--out", str(out))
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"dpsim: error: --out: directory {str(out.parent)!r} does not exist"), err
    assert not out.parent.exists()


def test_save_profile_does_not_create_directories(tmp_path):
    from dpsim.errors import DpsimError
    from dpsim.profile.io import save_profile
    from tests.test_calibrate_profile import make_profile

    with pytest.raises(DpsimError, match="--out: cannot write"):
        save_profile(make_profile(), tmp_path / "missing" / "p.json")
    assert not (tmp_path / "missing").exists()


def test_a_timeline_that_cannot_be_written_prints_no_json(capsys, tmp_path, monkeypatch):
    # The JSON document was printed first and the timeline written after it: a failed write left a complete
    # JSON on stdout under exit status 2. The timeline is now written before anything is printed.
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    rc = main(["predict", "--gpus", "8", "--link", "nvlink", "--model", "gpt2", "--json",
               "--timeline", str(tmp_path / "t.html")])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, (out[:200], err)
    assert err.startswith("dpsim: error: --timeline: cannot write ") and "No space left on device" in err


def test_a_bare_command_group_lists_its_own_commands(capsys):
    # A bare `dpsim testbed` listed dpsim's top-level commands (calibrate, collective, ...), not up/down/status.
    rc, _, err = run_cli(capsys, "testbed")
    assert rc == 2 and err.splitlines()[-1] == "dpsim: error: testbed: missing command; choose one of down, status, up"
    rc, _, err = run_cli(capsys)
    assert rc == 2 and err.splitlines()[-1].startswith("dpsim: error: missing command; choose one of calibrate, ")


@pytest.mark.parametrize("columns", ["0", "-3", "abc"])
def test_a_nonsense_terminal_width_still_prints(columns, capsys, monkeypatch):
    # rich took COLUMNS=0 as a zero-wide console: predict, memory, goodput and models printed nothing
    # at all, with status 0.
    from dpsim.cli import main

    monkeypatch.setenv("COLUMNS", columns)
    assert main(["models"]) == 0
    assert "gpt2" in capsys.readouterr().out



class _FullDisk(io.RawIOBase):
    """A file on a disk with ``room`` bytes left: a write stores what fits and returns that count, the
    next one raises ENOSPC (as a regular file on a full file system does)."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.written = b""

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if not self.room:
            raise OSError(28, "No space left on device")
        kept = bytes(data[:self.room])
        self.room -= len(kept)
        self.written += kept
        return len(kept)


@pytest.mark.parametrize("argv", [["predict", "--gpus", "16", "--model", "gpt2", "--json"], ["models"]])
@pytest.mark.parametrize("room", [0, 100])
def test_a_full_disk_under_the_standard_output_is_one_line(capsys, monkeypatch, argv, room):
    """fuzz5: `dpsim plan --json > out.json` on a nearly full disk wrote the first 8 KiB and exited with
    status 0 (the text layer dropped the short write's count); with no room at all, a traceback."""
    capsys.readouterr()
    disk = _FullDisk(room)
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(disk, buffer_size=64), encoding="utf-8"))
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2 and err == ("dpsim: error: cannot write the standard output: No space left on device; what "
                                   "was written is incomplete\n")
    assert len(disk.written) == room


def test_a_predict_flag_sweep_does_not_list_points_to_axis(capsys):
    """`dpsim sweep --recompute full` was click's "No such option" alone: sweep lists a few predict
    flags as its own and takes every other field as --axis NAME=V1,V2; the line says so (modernjobs).
    An option that is no field gets no hint."""
    from dpsim.cli import main

    assert main(["sweep", "--model", "gpt2", "--recompute", "full"]) == 2
    assert "sweep takes it as --axis recompute=V1,V2" in capsys.readouterr().err
    assert main(["sweep", "--model", "gpt2", "--no-such-field", "1"]) == 2
    assert "--axis" not in capsys.readouterr().err


def _run_main(args, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(args)
    out, err = capsys.readouterr()
    return status, out, err


def test_main_builds_the_command_once_and_calls_do_not_leak(monkeypatch, capsys):
    """main() reuses one click group per process (typer rebuilt it, and the command asked for, on every call: 3.7 ms
    of predict's 12 ms in a notebook); what one call gave (options, a failed parse) never reaches the next."""
    import copy

    import typer

    cli_app = sys.modules["dpsim.cli.app"]  # the module (dpsim.cli.app the attribute is the typer app)

    plain = ["predict", "--model", "gpt2", "--gpus", "8", "--steps", "1", "--json"]
    monkeypatch.setattr(cli_app, "_GROUP", None)
    fresh = _run_main(plain, capsys)
    assert fresh[0] == 0
    group = cli_app.command()
    predict = group.commands["predict"]
    defaults = copy.deepcopy([(p.name, p.default) for p in predict.params])
    group.commands["memory"]  # built on first use, once

    built = []
    monkeypatch.setattr(typer.main, "get_command", lambda *a, **k: built.append(a) or pytest.fail("rebuilt"))
    other = [*plain[:-1], "--micro-batch", "3", "--degrade", "nvlink:50%", "--degrade", "node0.gpu1:20%",
             "--algo", "ring", "--json"]
    assert _run_main(other, capsys)[0] == 0
    assert _run_main(["predict", "--model", "gpt2", "--gpus", "x"], capsys)[0] == 2  # a parse that fails midway
    assert _run_main(["memory", "--model", "gpt2", "--gpus", "8", "--json"], capsys)[0] == 0
    again = _run_main(plain, capsys)
    assert again == fresh  # the same bytes as the first call on a new group
    assert not built and cli_app.command() is group and group.commands["predict"] is predict
    assert [(p.name, p.default) for p in predict.params] == defaults
    monkeypatch.undo()


def test_main_rebuilds_when_a_command_is_added(monkeypatch, capsys):
    """The cached group is the app's as it is now: a command registered after a call is there on the next."""
    cli_app = sys.modules["dpsim.cli.app"]  # the module (dpsim.cli.app the attribute is the typer app)

    monkeypatch.setattr(cli_app.app, "registered_commands", list(cli_app.app.registered_commands))
    assert _run_main(["models", "--help"], capsys)[0] == 0
    first = cli_app.command()

    def hello() -> None:
        print("hello")

    cli_app.app.command("hello")(hello)
    assert _run_main(["hello"], capsys)[:2] == (0, "hello\n")
    assert cli_app.command() is not first
    monkeypatch.undo()
    assert _run_main(["hello"], capsys)[0] == 2  # gone again once the test's registration is undone
