"""Every command and flag fed hostile values: one line and exit 2, or a sane result; never a traceback or a hang.

Table-driven, in-process (``dpsim.cli.main`` under a time limit, see ``fuzz_harness.py``).
The config flags of ``predict``, ``memory``, ``report`` and ``goodput`` are generated from
``PredictConfig``'s fields (a new field is fuzzed without anyone listing it): for each
count and number, values below, above and outside its range and values that are not
numbers; for each choice, one that is not. Then every other command's own flags, file
inputs that are not files (``/dev/zero``, a FIFO, a directory, 2 MiB, a YAML alias bomb),
and valid extremes whose output must stay finite and humanly formatted.
``calibrate``, ``validate`` and ``testbed`` are only fed what is refused before any work
(no measurement, no DDP run, no network namespace).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpsim.cli.goodput import GOODPUT_FIELDS
from dpsim.cli.memory import MEMORY_FIELDS
from dpsim.limits import (
    MAX_EMULATED_HOSTS,
    MAX_GOODPUT_RUNS,
    MAX_NPROC,
    MAX_SWEEP_POINTS,
    MAX_WORKERS,
)
from dpsim.predict.config import SETTINGS, field_kind, flag_name, flag_scale, setting_field
from fuzz_harness import check_outcome, check_sane_output, run_cli

# Fuzzers (hundreds of hostile inputs): the fast lane (-m "not slow") leaves them to the full suite.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--gpus", "8", "--link", "nvlink", "--model", "gpt2"]
"""A cheap job, so that the cases that get past validation finish quickly."""

BOMB = "\n".join(["a: &a [" + ",".join(['"lol"'] * 9) + "]"]
                 + [f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]" for p, c in zip("abcdefgh", "bcdefghi")]) + "\n"
"""The 'billion laughs' YAML: 9 aliases of 9 aliases ... 10^9 strings once expanded, ~700 bytes."""


def _int_values(rule) -> list[str]:
    low = [] if rule.minimum <= 0 else [str(int(rule.minimum) - 1)]
    return low + ["-3", str(int(rule.maximum) + 1), "1.5", "abc", "", "1e400", "9" * 30, "nan"]


def _float_values(rule, scale: float) -> list[str]:
    values = ["nan", "inf", "-inf", "1e308", "-1", "abc", "", f"{rule.maximum * scale * 2:g}"]
    if rule.minimum > 0:
        values.append(f"{rule.minimum * scale / 2:g}")
    if rule.open_below:
        values.append(f"{rule.minimum * scale:g}")
    return values


def _field_cases(command: str, fields, base: list[str]) -> list:
    cases = []
    for name in fields:
        kind, _, choices = field_kind(name)
        flag = flag_name(name)
        rule = setting_field(name).metadata.get("rule")
        if choices:
            values = ["bogus", "", "x" * 5000]
        elif kind is int and rule is not None:
            values = _int_values(rule)
        elif kind is float and rule is not None:
            values = _float_values(rule, flag_scale(name) or 1.0)
        elif kind is str:
            values = ["x" * 5000]
        else:
            continue
        for value in values:
            cases.append(pytest.param(command, [*base, flag, value], "error", (flag,), id=f"{command}{flag}={value[:12]}"))
    return cases


def _paths(tmp: Path) -> dict[str, str]:
    """Inputs that are not what a flag expects (made once per test, under tmp)."""
    big = tmp / "big.yaml"
    big.write_text("# padding\n" * 220_000)  # 2.2 MB
    (tmp / "bomb.yaml").write_text(BOMB)
    (tmp / "self.yaml").write_text("a: &a [*a]\n")
    (tmp / "deep.yaml").write_text("[" * 50_000)
    (tmp / "digits.yaml").write_text("gpus: " + "9" * 5000 + "\n")
    (tmp / "binary.yaml").write_bytes(b"\xff\xfe\x00garbage\x80")
    (tmp / "empty.yaml").write_text("")
    (tmp / "list.yaml").write_text("- 1\n- 2\n")
    (tmp / "dup.yaml").write_text("name: a\nname: b\n")
    (tmp / "deep.json").write_text("[" * 50_000)
    (tmp / "digits.json").write_text('{"schema": ' + "9" * 5000 + "}")
    fifo = tmp / "fifo.yaml"
    if not fifo.exists():
        os.mkfifo(fifo)
    return {"zero": "/dev/zero", "dir": str(tmp), "missing": str(tmp / "missing.yaml"), "fifo": str(fifo),
            **{p.stem + p.suffix.replace(".", "_"): str(p) for p in tmp.iterdir() if p.is_file()}}


FILE_KINDS = ("zero", "dir", "missing", "fifo", "big_yaml", "bomb_yaml", "self_yaml", "deep_yaml", "digits_yaml",
              "binary_yaml", "empty_yaml", "list_yaml", "dup_yaml")
JSON_KINDS = ("zero", "dir", "fifo", "big_yaml", "deep_json", "digits_json", "binary_yaml", "empty_yaml")

FILE_FLAGS = [("predict", [*SMALL, "--topology"], "--topology", FILE_KINDS),
              ("collective", ["--topology"], "--topology", FILE_KINDS),
              ("memory", ["--topology"], "--topology", FILE_KINDS),
              ("sweep", ["--config"], "--config", FILE_KINDS),
              ("predict", [*SMALL, "--calibration"], "--calibration", JSON_KINDS),
              ("collective", ["--calibration"], "--calibration", JSON_KINDS)]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return _paths(tmp_path_factory.mktemp("fuzz-inputs"))


@pytest.mark.parametrize("command, args, kind", [
    pytest.param(c, a, k, id=f"{c}{f}={k}") for c, a, f, kinds in FILE_FLAGS for k in kinds])
def test_file_inputs_that_are_not_what_they_should_be(command, args, kind, paths, capsys):
    full = [command, *args, paths[kind]]
    outcome = run_cli(full, capsys, limit_s=20)
    check_outcome(outcome, full, "error")
    line = outcome.err
    assert paths[kind] in line or Path(paths[kind]).name in line or args[-1] in line, line


def _config_cases() -> list:
    fields = list(SETTINGS)
    return (_field_cases("predict", fields, SMALL)
            + _field_cases("memory", MEMORY_FIELDS, ["--gpus", "8", "--model", "gpt2"])
            + _field_cases("report", ["gpus", "micro_batch", "steps", "compute_efficiency", "single_gpu_step_s"],
                           ["--model", "gpt2"])
            + _field_cases("goodput", [f for f in GOODPUT_FIELDS if field_kind(f)[0] is int], ["--model", "gpt2"]))


def E(command: str, args: list[str], *needles: str):
    """A case that must be refused with one line naming every needle."""
    return pytest.param(command, args, "error", needles, id=f"{command} {' '.join(args)[:50]}")


def OK(command: str, args: list[str]):
    """A valid extreme: status 0 and sane output."""
    return pytest.param(command, args, "ok", (), id=f"ok {command} {' '.join(args)[:50]}")


HAND_CASES = [
    # predict: flags that are not PredictConfig fields, repeatable ones, combinations
    E("predict", [*SMALL, "--mc-samples", "0"], "--mc-samples"),
    E("predict", [*SMALL, "--mc-samples", "1000000", "--noise-cv", "0.1"], "--mc-samples"),
    E("predict", [*SMALL, "--mc-steps", "0"], "--mc-steps"),
    E("predict", [*SMALL, "--mc-steps", "100000000"], "--mc-steps"),
    E("predict", [*SMALL, "--mc-steps", "10000", "--mc-samples", "1000", "--noise-cv", "0.1"], "--mc-samples"),
    E("predict", ["--gpus", "1048576", "--link", "infiniband", "--noise-cv", "0.05"], "--mc-samples", "GPUs"),
    E("predict", [*SMALL, "--seed", "-1"], "--seed"),
    E("predict", [*SMALL, "--seed", "9" * 30], "--seed"),
    E("predict", [*SMALL, "--noise-cv", "nan"], "--noise-cv"),
    E("predict", [*SMALL, "--noise-cv", "-0.5"], "--noise-cv"),
    E("predict", [*SMALL, "--noise-cv", "1e308"], "--noise-cv"),
    E("predict", [*SMALL, "--noise-dist", "cauchy", "--noise-cv", "0.1"], "--noise-dist"),
    E("predict", [*SMALL, "--hiccup-rate-per-s", "1", "--hiccup-s", "0"], "--hiccup"),
    E("predict", [*SMALL, "--hiccup-rate-per-s", "1e9", "--hiccup-s", "1"], "--hiccup-rate-per-s"),
    E("predict", [*SMALL, "--hiccup-rate-per-s", "1000", "--hiccup-s", "3600"], "--hiccup-rate-per-s"),
    E("predict", [*SMALL, "--hiccup-rate-per-s", "inf", "--hiccup-s", "1"], "--hiccup-rate-per-s"),
    E("predict", [*SMALL, "--hiccup-rate-per-s", "1", "--hiccup-s", "nan"], "--hiccup-s"),
    E("predict", [*SMALL, "--straggler", "node0:1e308x"], "--straggler"),
    E("predict", [*SMALL, "--straggler", "node0:0x"], "--straggler"),
    E("predict", [*SMALL, "--straggler", "node0:nanx"], "--straggler"),
    E("predict", [*SMALL, "--straggler", "node" + "9" * 30 + ":2x"], "--straggler"),
    E("predict", [*SMALL, "--straggler", "node5:2x"], "--straggler", "node5"),
    E("predict", [*SMALL, "--straggler", "gpu8:2x"], "--straggler"),
    E("predict", [*SMALL, "--straggler", "rack0:2x"], "--straggler"),
    E("predict", [*SMALL, "--straggler", "gpu0:50x", "--straggler", "gpu0:50x"], "--straggler", "gpu0"),
    E("predict", [*SMALL, *["--straggler", "gpu0:1x"] * 1100], "--straggler"),
    E("predict", [*SMALL, "--degrade", "nvlink:0%"], "--degrade"),
    E("predict", [*SMALL, "--degrade", "nvlink:1e-300%"], "--degrade"),
    E("predict", [*SMALL, "--degrade", "nvlink:200%"], "--degrade"),
    E("predict", [*SMALL, "--degrade", "nvlink:nan%"], "--degrade"),
    E("predict", [*SMALL, "--degrade", "nvlink:1%", "--degrade", "nvlink:1%"], "--degrade"),
    E("predict", [*SMALL, "--degrade", "node99.nic0:50%"], "--degrade"),
    E("predict", [*SMALL, "--degrade", "warp-drive:50%"], "--degrade"),
    E("predict", [*SMALL, "--single-gpu-samples-per-s", "0"], "--single-gpu-samples-per-s"),
    E("predict", [*SMALL, "--single-gpu-samples-per-s", "1e-300"], "--single-gpu-samples-per-s"),
    E("predict", [*SMALL, "--single-gpu-samples-per-s", "nan"], "--single-gpu-samples-per-s"),
    E("predict", [*SMALL, "--single-gpu-samples-per-s", "1e308"], "--single-gpu-samples-per-s"),
    E("predict", [*SMALL, "--single-gpu-samples-per-s", "10", "--single-gpu-step-ms", "100"], "--single-gpu"),
    E("predict", [*SMALL, "--timeline", "step.txt"], "--timeline"),
    E("predict", [*SMALL, "--timeline", "/nonexistent-dir-for-fuzz/step.html"], "--timeline"),
    E("predict", [*SMALL, "--algo", "^ring,tree,nvls,nvls_tree,hierarchical,halving_doubling"], "--algo", "nothing"),
    E("predict", [*SMALL, "--algo", "^ring,tree,nvls,nvls_tree"], "--algo"),
    E("predict", [*SMALL, "--proto", "^LL,LL128,Simple"], "--proto", "nothing"),
    E("predict", [*SMALL, "--algo", "ring,warp"], "--algo"),
    E("predict", [*SMALL, "--algo", ",,,"], "--algo"),
    E("predict", [*SMALL, "--proto", "LL256"], "--proto"),
    E("predict", ["--gpus", "16", "--link", "ethernet", "--algo", "nvls"], "--algo"),
    E("predict", [*SMALL, "--link", "warp-drive"], "--link"),
    E("predict", [*SMALL, "--gpu", "tpu-v5"], "--gpu"),
    E("predict", ["--gpus", "8", "--model", "gpt-7"], "--model"),
    E("predict", ["--gpus", "8", "--model", "a:b:c:d:e"], "--model"),
    E("predict", ["--gpus", "8", "--model", "missing_file.py:build"], "--model"),
    E("predict", ["--gpus", "8", "--model", "no_such_package.mod:build"], "--model"),
    E("predict", ["--gpus", "8", "--model", "os.path:class"], "--model"),
    E("predict", [*SMALL, "--input-shape", "8,1024"], "--input-shape"),
    E("predict", [*SMALL, "--seq-len", "2048"], "--seq-len"),
    E("predict", ["--gpus", "12", "--link", "nvlink"], "--gpus"),
    E("predict", ["--gpus", "64", "--jobs", "100000"], "--jobs"),
    E("predict", ["--gpus", "1048576", "--jobs", "2", "--link", "infiniband"], "--jobs"),
    E("predict", [*SMALL, "--steps", "5000", "--grad-accum", "4"], "--steps", "--grad-accum"),
    E("predict", [*SMALL, "--strategy", "zero3", "--bucket-cap-mb", "25"], "--bucket-cap-mb"),
    E("predict", [*SMALL, "--calibration", "no-such-profile"], "--calibration"),
    # Dropped in silence: a profile's fits are what NCCL chose on the measured cluster, alone on it
    E("predict", ["--gpus", "16", "--link", "infiniband", "--model", "gpt2", "--calibration", "aws-p4de-2node",
                  "--algo", "tree"], "--algo: 'tree'", "--calibration"),
    E("predict", ["--gpus", "16", "--link", "infiniband", "--model", "gpt2", "--calibration", "aws-p4de-2node",
                  "--proto", "LL"], "--proto: 'LL'", "--calibration"),
    E("predict", ["--gpus", "16", "--link", "infiniband", "--model", "gpt2", "--calibration", "aws-p4de-2node",
                  "--jobs", "2"], "--jobs: 2", "--calibration"),
    E("collective", ["--gpus", "16", "--link", "infiniband", "--calibration", "aws-p4de-2node", "--algo", "ring"],
      "--algo: 'ring'"),
    OK("predict", ["--gpus", "16", "--link", "infiniband", "--model", "gpt2", "--calibration", "aws-p4de-2node",
                   "--algo", "", "--jobs", "1"]),
    E("predict", [*SMALL, "--bogus-flag", "1"], "--bogus-flag"),
    # a switch is named as typed ("--sequence-parallel: True applies only with tensor parallelism")
    E("predict", [*SMALL, "--sequence-parallel"], "--sequence-parallel: applies only with tensor"),
    E("predict", [*SMALL, "--no-cp-balance"], "--no-cp-balance: applies only with context"),
    E("predict", [*SMALL, "--strategy", "zero2", "--static-graph"], "--static-graph: it is an argument of PyTorch DDP"),
    E("predict", [*SMALL, "--tp", "2", "--no-broadcast-buffers"], "--no-broadcast-buffers: it is an argument"),
    E("predict", [*SMALL, "--gpus"], "--gpus"),
    # valid extremes: finite, humanly formatted
    OK("predict", [*SMALL, "--json"]),
    OK("predict", [*SMALL, "--single-gpu-step-ms", "0.001"]),
    OK("predict", [*SMALL, "--single-gpu-step-ms", "86400000", "--json"]),
    OK("predict", [*SMALL, "--single-gpu-samples-per-s", "1e6"]),
    E("predict", [*SMALL, "--single-gpu-samples-per-s", "1e9"], "--single-gpu-samples-per-s", "--micro-batch"),
    E("predict", [*SMALL, "--input-samples-per-s", "1e-300"], "--input-samples-per-s", "86400 s"),
    OK("predict", [*SMALL, "--input-samples-per-s", "1e-3", "--json"]),
    OK("predict", [*SMALL, "--compute-efficiency", "0.01"]),
    OK("predict", [*SMALL, "--overlap-slowdown", "10", "--json"]),
    OK("predict", [*SMALL, "--overlap-slowdown", "-0.0"]),
    OK("predict", [*SMALL, "--noise-cv", "-0.0"]),
    OK("predict", [*SMALL, "--strategy", "zero2", "--bucket-cap-mb", "1e-300"]),
    OK("predict", [*SMALL, "--bucket-cap-mb", "1048576", "--json"]),
    OK("predict", [*SMALL, "--micro-batch", "1048576"]),
    OK("predict", [*SMALL, "--seq-len", "1"]),
    OK("predict", ["--gpus", "1", "--gpus-per-node", "1", "--model", "gpt2", "--json"]),
    OK("predict", [*SMALL, "--hiccup-rate-per-s", "1000", "--hiccup-s", "0.001", "--mc-samples", "2",
                   "--mc-steps", "5"]),
    OK("predict", [*SMALL, "--noise-cv", "1", "--noise-dist", "lognormal", "--mc-samples", "3", "--json"]),
    OK("predict", [*SMALL, "--straggler", "gpu0:100x", "--straggler", "gpu1:0.01x"]),
    OK("predict", [*SMALL, "--degrade", "nvlink:0.1%", "--json"]),
    OK("predict", [*SMALL, "--seed", str(2**63 - 1), "--noise-cv", "0.1", "--mc-samples", "2", "--mc-steps", "3"]),
    OK("predict", [*SMALL, "--algo", ""]),
    OK("predict", ["--gpus", "65536", "--link", "infiniband", "--model", "gpt2", "--steps", "1", "--json"]),
    # plan: its own --global-batch and budget (the base config never sees them)
    E("plan", ["--gpus", "16", "--model", "gpt2", "--global-batch", "0"], "--global-batch"),
    E("plan", ["--gpus", "16", "--model", "gpt2", "--global-batch", "64", "--tokens", "1e300"], "--tokens"),
    # A search the flags leave empty is an error naming them, not "no layout fits; add GPUs" with exit 0
    E("plan", ["--gpus", "16", "--model", "gpt2", "--global-batch", "64", "--tp", "3"], "--tp: 3"),
    E("plan", ["--gpus", "16", "--model", "gpt2", "--global-batch", "64", "--micro-batches", "3"], "--micro-batches: 3"),
    E("plan", ["--gpus", "16", "--model", "gpt2", "--global-batch", "64", "--tp", "3", "--cp", "3"], "--tp: 3", "--cp 3"),
    E("plan", ["--gpus", "16", "--model", "resnet50", "--global-batch", "64", "--cp", "2"], "--cp: 2"),
    E("plan", ["--gpus", "16", "--model", "mixtral-8x7b", "--global-batch", "64", "--ep", "3"], "--ep: 3"),
    E("plan", ["--gpus", "1", "--model", "gpt2", "--global-batch", "64", "--strategies", "zero1"], "--strategies"),
    # memory
    E("memory", ["--gpus", "0"], "--gpus"),
    E("memory", ["--micro-batch", "1e9"], "--micro-batch"),
    # memory takes every predict field from the same option definitions (memparity), so --steps is
    # validated as predict validates it and, like predict's memory section, does not move memory.
    E("memory", ["--steps", "0"], "--steps"),
    OK("memory", ["--steps", "3"]),
    OK("memory", ["--micro-batch", "16384"]),
    OK("memory", ["--micro-batch", "1048576", "--model", "llama-2-70b", "--json"]),
    OK("memory", ["--gpus", "1048576", "--link", "infiniband", "--model", "llama-3-405b", "--json"]),
    OK("memory", ["--gpus", "8", "--model", "llama-3-405b"]),
    OK("memory", ["--gpus", "8", "--gpu", "v100-16gb", "--precision", "fp16-mixed", "--model", "llama-2-70b"]),
    # collective
    E("collective", ["--op", "all_to_all"], "--op"),
    E("collective", ["-d", "float128"], "--datatype"),
    E("collective", ["-b", "0"], "-b"),
    E("collective", ["-b", "-5"], "-b"),
    E("collective", ["-b", "1e-300"], "-b"),
    E("collective", ["-b", "nan"], "-b"),
    E("collective", ["-e", "1e30"], "-e"),
    E("collective", ["-e", "2T"], "-e"),
    E("collective", ["-e", "inf"], "-e"),
    E("collective", ["-e", "8Gb"], "-e", "bits"),
    E("collective", ["-b", "1G", "-e", "1K"], "-b"),
    E("collective", ["-f", "1"], "-f"),
    E("collective", ["-f", "1.0000001"], "-f", "rows"),
    E("collective", ["-f", "nan"], "-f"),
    E("collective", ["-f", "-2"], "-f"),
    E("collective", ["-f", "inf"], "-f"),
    E("collective", ["--gpus", "0"], "--gpus"),
    E("collective", ["--gpus", "1048577"], "--gpus"),
    E("collective", ["--gpus", "9" * 30], "--gpus"),
    E("collective", ["--gpus-per-node", "0"], "--gpus-per-node"),
    E("collective", ["--algo", "^ring,tree,nvls,nvls_tree"], "--algo"),
    E("collective", ["--proto", "^LL,LL128,Simple"], "--proto"),
    E("collective", ["--link", "x" * 5000], "--link"),
    E("collective", ["--calibration", "nope"], "--calibration"),
    OK("collective", ["-b", "1", "-e", "1", "-f", "1e308"]),
    OK("collective", ["-b", "1T", "-e", "1T", "--gpus", "1024", "--link", "infiniband"]),
    OK("collective", ["-b", "8", "-e", "1G", "-f", "1.1", "--json"]),
    OK("collective", ["--gpus", "1", "--json"]),
    OK("collective", ["--op", "broadcast", "--gpus", "65536", "--link", "infiniband", "-b", "1M", "-e", "1M"]),
    # models
    OK("models", []),
    OK("models", ["--json"]),
    E("models", ["--bogus"], "--bogus"),
    # report
    E("report", ["-o", "report.txt"], "-o"),
    E("report", ["-o", "/nonexistent-dir-for-fuzz/r.html"], "-o"),
    E("report", ["--tokens", "1e30"], "--tokens"),
    E("report", ["--tokens", "-5"], "--tokens"),
    E("report", ["--tokens", "nan"], "--tokens"),
    E("report", ["--tokens", "abc"], "--tokens"),
    E("report", ["--tokens", "1T", "--samples", "1M"], "--tokens", "--samples"),
    E("report", ["--samples", "1e300"], "--samples"),
    E("report", ["--gpu-hour-usd", "nan"], "--gpu-hour-usd"),
    E("report", ["--gpu-hour-usd", "-1"], "--gpu-hour-usd"),
    E("report", ["--gpu-hour-usd", "1e300"], "--gpu-hour-usd"),
    E("report", ["--gpu-hour-usd", "tpu=2"], "--gpu-hour-usd"),
    E("report", ["--gpu-hour-usd", "h100=abc"], "--gpu-hour-usd"),
    E("report", ["--scaling-gpus", "0"], "--scaling-gpus"),
    E("report", ["--scaling-gpus", "abc"], "--scaling-gpus"),
    E("report", ["--scaling-gpus", ","], "--scaling-gpus"),
    E("report", ["--scaling-gpus", "9" * 30], "--scaling-gpus"),
    E("report", ["--scaling-gpus", ",".join(["8"] * 100)], "--scaling-gpus"),
    E("report", ["--gpus", "0"], "--gpus"),
    # sweep
    E("sweep", ["--gpus", "0,8"], "--gpus"),
    E("sweep", ["--gpus", "8,,16"], "--gpus"),
    E("sweep", ["--gpus", "abc"], "--gpus"),
    E("sweep", ["--gpus", "1e9"], "--gpus"),
    E("sweep", ["--link", "warp"], "warp"),
    E("sweep", ["--micro-batch", "nan"], "--micro-batch"),
    E("sweep", ["--compute-efficiency", "0,1"], "--compute-efficiency"),
    E("sweep", ["--axis", "bogus=1"], "bogus"),
    E("sweep", ["--axis", "noequals"], "--axis"),
    E("sweep", ["--axis", "gpus=99999999999"], "gpus"),
    E("sweep", ["--axis", "flash_attention=maybe"], "flash_attention"),
    E("sweep", ["--tokens", "1e30"], "--tokens"),
    E("sweep", ["--tokens", "nan"], "--tokens"),
    E("sweep", ["--gpu-hour-usd", "1e300"], "--gpu-hour-usd"),
    E("sweep", ["--workers", "0"], "--workers"),
    E("sweep", ["--workers", str(MAX_WORKERS + 1)], "--workers"),
    E("sweep", ["--workers", "-1"], "--workers"),
    E("sweep", ["-o", "results.txt"], "-o"),
    E("sweep", ["-o", "/nonexistent-dir-for-fuzz/r.csv"], "-o"),
    E("sweep", ["-o", "/tmp"], "-o"),
    E("sweep", ["--gpus", ",".join(str(8 * i) for i in range(1, 1001)),
                "--micro-batch", ",".join(str(i) for i in range(1, 1 + MAX_SWEEP_POINTS // 1000 + 1))], "points"),
    E("sweep", ["--config", "nope.yaml"], "--config"),
    OK("sweep", ["--gpus", "8,16", "--link", "nvlink", "--model", "gpt2", "--tokens", "1e18"]),
    OK("sweep", ["--gpus", "8", "--link", "nvlink", "--model", "gpt2", "--json"]),
    OK("sweep", ["--gpus", "8", "--link", "nvlink", "--model", "gpt2", "--micro-batch", "1048576", "--json"]),
    OK("sweep", ["--gpus", "8", "--link", "nvlink", "--model", "gpt2", "--gpu-hour-usd", "10000", "--tokens", "1e18"]),
    OK("sweep", ["--gpus", "8", "--link", "nvlink", "--model", "gpt2", "--micro-batch", "1,2", "--skip-invalid",
                 "--axis", "algo=nvls", "--gpu", "a100"]),
    # goodput (flags of its own; its durations and failure model are dpsim/plan's)
    E("goodput", ["--runs", "0"], "--runs"),
    E("goodput", ["--runs", str(MAX_GOODPUT_RUNS + 1)], "--runs"),
    E("goodput", ["--runs", "abc"], "--runs"),
    E("goodput", ["--seed", "-1"], "--seed"),
    E("goodput", ["--seed", "9" * 30], "--seed"),
    E("goodput", ["--min-nodes", "0"], "--min-nodes"),
    E("goodput", ["--min-nodes", "9" * 30], "--min-nodes"),
    E("goodput", ["--tokens", "1e30"], "--tokens"),
    E("goodput", ["--tokens", "1T", "--duration", "1d"], "--tokens", "--duration"),
    E("goodput", ["--elastic", "pray"], "--elastic"),
    E("goodput", ["--mtbf-gpu", "abc"], "--mtbf-gpu"),
    E("goodput", ["--mtbf-node", "-5h"], "--mtbf-node"),
    E("goodput", ["--duration", "0d"], "--duration"),
    E("goodput", ["--checkpoint-bandwidth", "abc"], "--checkpoint-bandwidth"),
    E("goodput", ["--restart", "soon"], "--restart"),
    OK("goodput", ["--gpus", "16", "--model", "gpt2", "--runs", "3", "--duration", "1d"]),
    # calibrate: refused before anything is measured
    E("calibrate", ["--description", "two\nlines"], "--description: 'two\\nlines' is not valid; expected one line"),
    E("calibrate", ["--name", "x" * 5000], "--name"),
    E("calibrate", ["--nproc", "0"], "--nproc"),
    E("calibrate", ["--nproc", str(MAX_NPROC + 1)], "--nproc"),
    E("calibrate", ["--nproc", "9" * 30], "--nproc"),
    E("calibrate", ["--ranks-per-node", "0"], "--ranks-per-node"),
    E("calibrate", ["-e", "1T"], "-e"),
    E("calibrate", ["-b", "0"], "-b"),
    E("calibrate", ["-b", "1G", "-e", "1K"], "-b"),
    E("calibrate", ["-f", "1"], "-f"),
    E("calibrate", ["-f", "1.0001"], "-f"),
    E("calibrate", ["--iters", "0"], "--iters"),
    E("calibrate", ["--iters", "1000000"], "--iters"),
    E("calibrate", ["--warmup", "-1"], "--warmup"),
    E("calibrate", ["--timeout", "0"], "--timeout"),
    E("calibrate", ["--timeout", "nan"], "--timeout"),
    E("calibrate", ["--timeout", "inf"], "--timeout"),
    E("calibrate", ["--micro-batch", "0"], "--micro-batch"),
    E("calibrate", ["--seq-len", "0"], "--seq-len"),
    E("calibrate", ["some.log"], "--from-nccl-tests"),
    E("calibrate", ["--from-nccl-tests"], "--from-nccl-tests"),
    # validate: refused before any DDP run
    E("validate", ["--emulate-hosts", "0"], "--emulate-hosts"),
    E("validate", ["--emulate-hosts", str(MAX_EMULATED_HOSTS + 1)], "--emulate-hosts"),
    E("validate", ["--emulate-hosts", "9" * 30], "--emulate-hosts"),
    E("validate", ["--steps", "0"], "--steps"),
    E("validate", ["--steps", "1000000"], "--steps"),
    E("validate", ["--micro-batch", "0"], "--micro-batch"),
    E("validate", ["--racks", "0"], "--racks"),
    E("validate", ["--oversubscription", "nan"], "--oversubscription"),
    E("validate", ["--oversubscription", "0.5"], "--oversubscription"),
    E("validate", ["--oversubscription", "1e308"], "--oversubscription"),
    E("validate", ["--nic", "fast"], "--nic: 'fast' is not a rate"),  # named before the missing --emulate-hosts
    E("validate", ["--bucket-cap-mb", "0"], "--bucket-cap-mb"),
    E("validate", ["--bucket-cap-mb", "inf"], "--bucket-cap-mb"),
    E("validate", []),  # neither --emulate-hosts nor torchrun
    # testbed: refused before any namespace is made
    E("testbed", ["up", "--hosts", "0"], "--hosts"),
    E("testbed", ["up", "--hosts", str(MAX_EMULATED_HOSTS + 1)], "--hosts"),
    E("testbed", ["up", "--hosts", "-1"], "--hosts"),
    E("testbed", ["up", "--hosts", "2", "--racks", "3"], "--racks"),
    E("testbed", ["up", "--racks", "0"], "--racks"),
    E("testbed", ["up", "--oversubscription", "nan"], "--oversubscription"),
    E("testbed", ["up", "--oversubscription", "0"], "--oversubscription"),
    E("testbed", ["up", "--nic", "warp"], "--nic"),
    E("testbed", ["up", "--nic", "0gbit"], "--nic"),
    E("testbed", ["down"], "--all"),
    E("testbed", ["down", "tag", "--all"], "--all"),
    E("testbed", ["teleport"], "teleport"),
    # no command, unknown command
    E("bogus", [], "bogus"),
]


@pytest.mark.parametrize("command, args, expect, needles", _config_cases() + HAND_CASES)
def test_hostile_flags(command, args, expect, needles, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # any file a valid case writes lands here
    full = [command, *args] if command != "bogus" else ["bogus"]
    check_outcome(run_cli(full, capsys), full, expect, needles)


def test_bare_dpsim_names_the_commands(capsys):
    outcome = run_cli([], capsys)
    assert outcome.status == 2 and "missing command" in outcome.err


# ------------------------------------------------------------- random text where a number or a name belongs

NUMBERISH = st.text(alphabet="0123456789.eE+-xX%:,^ inafINFKMGTBbibs", max_size=14)
RANDOM_FLAGS = [
    ("memory", ["--gpus"], ["--model", "gpt2"]),
    ("memory", ["--micro-batch"], ["--model", "gpt2"]),
    ("collective", ["-b"], ["-e", "1T", "-f", "1e6"]),
    ("collective", ["-e"], ["-b", "1", "-f", "1e6"]),
    ("collective", ["-f"], ["-b", "1K", "-e", "1K"]),
    ("collective", ["--algo"], ["-b", "1M", "-e", "1M"]),
    ("collective", ["--proto"], ["-b", "1M", "-e", "1M"]),
    ("predict", ["--straggler"], SMALL),
    ("predict", ["--degrade"], SMALL),
    ("predict", ["--noise-cv"], [*SMALL, "--mc-samples", "2", "--mc-steps", "3"]),
    ("report", ["--tokens"], ["-o", "r.html", "--gpus", "0"]),  # a valid budget then meets --gpus 0: nothing runs
    ("sweep", ["--gpus"], ["--link", "nvlink", "--model", "gpt2", "--axis", "jobs=1025"]),
]


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=NUMBERISH)
@pytest.mark.parametrize("command, flag, rest", RANDOM_FLAGS, ids=lambda x: x if isinstance(x, str) else None)
def test_random_text_in_a_flag(command, flag, rest, value, capsys):
    args = [command, *flag, value, *rest]
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "either")


def test_a_report_at_the_extremes_prints_human_numbers(capsys, tmp_path):
    # Valid but extreme inputs: a day per step, the largest budget and price. The HTML's text
    # (plotly.js removed) must not hold a 20-digit cost or a trillion days written out.
    import re

    out = tmp_path / "r.html"
    args = ["report", "--gpus", "8", "--link", "ethernet", "--model", "gpt2", "--tokens", "1e18",
            "--gpu-hour-usd", "10000", "--single-gpu-step-ms", "86400000", "--scaling-gpus", "8,16", "-o", str(out)]
    check_outcome(run_cli(args, capsys), args, "ok")
    text = re.sub(r"<[^>]+>", " ", re.sub(r"<script.*?</script>", "", out.read_text(), flags=re.S))
    check_sane_output(text, "report.html")


TINY = "transformer:hidden=64,layers=2,heads=4,vocab=1000,seq=128,ffn=128"


@pytest.mark.parametrize("args, expect, needles", [
    # An empty inner stage of --stage-layers was told "use at most 2 chunks (fewer stages...)", yet
    # 0,1,1,0 on the same 4 stages runs: the ends may be empty, an inner stage may not.
    (["--pp", "4", "--stage-layers", "1,0,0,1"], "error", ("--stage-layers: 1,0,0,1", "first and the last")),
    (["--pp", "4", "--stage-layers", "0,1,1,0"], "ok", ()),
    (["--pp", "2", "--schedule", "1f1b-interleaved", "--virtual-stages", "2", "--stage-layers", "1,1,0,0",
      "--grad-accum", "2"], "error", ("--stage-layers: 1,1,0,0",)),
])
def test_stage_layers_with_an_empty_stage(args, expect, needles, capsys):
    full = ["predict", "--gpus", "8", "--link", "nvlink", "--model", TINY, *args]
    check_outcome(run_cli(full, capsys), full, expect, needles)
