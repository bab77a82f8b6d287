"""Defects the twenty-fourth fuzz round took up (fuzz24, a demanding new user): ``dpsim --version`` and ``-h`` refused
as unknown options; ``--single-gpu-samples-per-s`` of a subnormal rate refused as "a inf s step"; the Python API's
misspelt or missing arguments (``dpsim.goodput(config, duratoin_s=...)``, ``dpsim.VariabilitySpec(nose_cv=...)``)
raising Python's bare ``TypeError`` that a caller catching ``DpsimError`` saw as a traceback; an ``alltoall_perf``
log told to keep the line it kept (or read as an all_reduce); a config.json naming a key twice read at the last;
a 20-parameter module titled "2e-08 B params"; a misspelt sweep axis answered with a list cut before the name meant.

Each case says what it did before.
"""

from __future__ import annotations

import pickle
from importlib import metadata

import pytest

import dpsim
from dpsim.errors import ConfigTypeError, DpsimError
from tests.fuzz_harness import refused, run_cli


# --- 1. dpsim --version -----------------------------------------------------------------------------------------------
def test_dpsim_version_prints_the_installed_version(capsys):
    """Before: ``dpsim --version`` (and ``python -m dpsim --version``) was "No such option: --version", exit status
    2: the first thing a user types to report a problem. Now it prints the installed distribution's version, 0."""
    outcome = run_cli(["--version"], capsys)
    assert outcome.status == 0, outcome.err
    assert outcome.out.strip() == f"dpsim {metadata.version('dpsim')}"
    assert outcome.err == ""


# --- 2. a subnormal single-GPU rate -----------------------------------------------------------------------------------
def test_a_subnormal_single_gpu_rate_names_no_inf(capsys):
    """Before: ``--single-gpu-samples-per-s 1e-320`` overflowed micro-batch / rate and the refusal read "is a inf s
    step". Now it says the step is over the limit; an ordinary too-slow rate still prints its step."""
    line = refused(["predict", "--gpus", "8", "--link", "nvlink", "--single-gpu-samples-per-s", "1e-320"], capsys,
                   "--single-gpu-samples-per-s", "a step over 86400 s", "expected a step from")
    assert "inf" not in line, line
    refused(["predict", "--gpus", "8", "--link", "nvlink", "--single-gpu-samples-per-s", "1e-9"], capsys,
            "is a 4e+09 s step")


# --- 3. the Python API's arguments --------------------------------------------------------------------------------------
def _config():
    return dpsim.PredictConfig(gpus=8, link="nvlink", model="gpt2")


@pytest.mark.parametrize("call, words", [
    (lambda: dpsim.goodput(_config(), duratoin_s=86400),
     ("dpsim.goodput()", "'duratoin_s'", "did you mean duration_s?", "tokens=")),
    (lambda: dpsim.plan(_config(), gpuz=[8], global_batch=64), ("dpsim.plan()", "'gpuz'", "did you mean gpus?")),
    (lambda: dpsim.plan(_config(), gpus=[8]), ("dpsim.plan()", "'global_batch'", "global_batch=")),
    (lambda: dpsim.predict(gpus=8), ("dpsim.predict()", "'gpus'", "dpsim.PredictConfig(gpus=...)")),
    (lambda: dpsim.predict(), ("dpsim.predict()", "'config'", "it takes config, then keywords")),
    (lambda: dpsim.memory_report(_config(), strategy="fsdp"), ("dpsim.memory_report()", "'strategy'")),
    (lambda: dpsim.predict_collective(_config(), opp="all_gather"), ("did you mean op?",)),
    (lambda: dpsim.predict_with_variability(_config()), ("dpsim.predict_with_variability()", "'spec'")),
    (lambda: dpsim.sweep({"gpus": [8]}, {"link": ["nvlink"]}), ("dpsim.sweep()", "too many positional")),
])
def test_the_apis_misspelt_or_missing_arguments_are_one_dpsim_error(call, words):
    """Before: each raised Python's bare TypeError ("goodput() got an unexpected keyword argument 'duratoin_s'"),
    no DpsimError, naming nothing to give instead. Now one ConfigTypeError (a DpsimError, and still a TypeError)
    naming the function, the argument, the nearest names and what it takes."""
    with pytest.raises(DpsimError) as exc:
        call()
    assert isinstance(exc.value, TypeError)
    line = str(exc.value)
    assert "\n" not in line
    for word in words:
        assert word in line, line


@pytest.mark.parametrize("call, words", [
    (lambda: dpsim.VariabilitySpec(nose_cv=0.1), ("dpsim.VariabilitySpec()", "'nose_cv'", "did you mean noise_cv")),
    (lambda: dpsim.VariabilitySpec(0.1), ("dpsim.VariabilitySpec()", "too many positional", "noise_cv=")),
    (lambda: dpsim.SweepSpec(axez={}), ("dpsim.SweepSpec()", "'axez'", "did you mean axes?")),
    (lambda: dpsim.PredictConfig(8), ("dpsim.PredictConfig()", "too many positional", "(**settings)")),
])
def test_the_public_specs_misspelt_arguments_are_one_dpsim_error(call, words):
    """Before: ``VariabilitySpec(nose_cv=0.1)``, ``SweepSpec(axez={})`` and ``PredictConfig(8)`` were bare
    TypeErrors from the dataclass ``__init__``. Now one ConfigTypeError as for the functions."""
    with pytest.raises(ConfigTypeError) as exc:
        call()
    for word in words:
        assert word in str(exc.value), str(exc.value)


def test_checked_calls_still_run_pickle_and_show_their_signature():
    """The check changes nothing for a call that binds: the same results, the same signature for help(), and the
    functions and specs still pickle by name (a process pool's map)."""
    import inspect

    spec = dpsim.VariabilitySpec(noise_cv=0.05)
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert pickle.loads(pickle.dumps(dpsim.goodput)) is dpsim.goodput
    assert "duration_s" in inspect.signature(dpsim.goodput).parameters
    assert "noise_cv" in inspect.signature(dpsim.VariabilitySpec).parameters
    assert dpsim.predict(_config()).step_time_s == dpsim.predict(config=_config()).step_time_s


# --- 4. nccl-tests logs of a collective dpsim does not hold -----------------------------------------------------------
_LOG = "calibration/reference/nccl-tests/8x-a100-sxm-node-nvlink3-via-nvswitch.all_reduce_perf.log"


@pytest.mark.parametrize("name", ["alltoall_perf.log", "allreduce-vs-alltoall.log"])
def test_a_log_of_a_collective_dpsim_does_not_hold_is_named(name, tmp_path, capsys):
    """Before: an ``alltoall_perf`` log (a real nccl-tests binary) was refused "cannot tell which collective this
    log measured; keep nccl-tests' '# Collective test starting: all_reduce_perf' line" though it kept that line,
    and the same log in a file whose name mentions allreduce was read as an all_reduce, status 0, a profile of the
    wrong collective. Now nccl-tests' own line decides: one line naming the binary, its line and the logs dpsim
    reads."""
    from pathlib import Path

    text = Path(_LOG).read_text().replace("all_reduce_perf", "alltoall_perf").replace("# all_reduce (", "# alltoall (")
    log = tmp_path / name
    log.write_text(text)
    out = tmp_path / "profile.json"
    refused(["calibrate", "--from-nccl-tests", str(log), "--out", str(out)], capsys,
            f"{name} line 5", "the log is of alltoall_perf", "all_reduce_perf, all_gather_perf")
    assert not out.exists()


# --- 5. a transformers config.json with a key twice -----------------------------------------------------------------
def test_a_config_json_with_a_key_twice_is_refused(tmp_path, capsys):
    """Before: ``"hidden_size": 4096, ..., "hidden_size": 2048`` in a hand-edited config.json was read in silence at
    the last value (json's rule): a 3.7 B model planned, status 0, where the first line says the 8 B. The profile
    and the YAML files already refused a key written twice; now config.json does too, naming the key."""
    from pathlib import Path

    text = Path("examples/Llama-3.1-8B/config.json").read_text()
    config = tmp_path / "config.json"
    config.write_text(text.replace('"hidden_size": 4096,', '"hidden_size": 4096, "hidden_size": 2048,'))
    refused(["predict", "--gpus", "8", "--link", "nvlink", "--model", str(config), "--seq-len", "4096"], capsys,
            "--model", "config.json", "key 'hidden_size' appears twice", "give each key once")
    config.write_text(text)
    assert run_cli(["predict", "--gpus", "8", "--link", "nvlink", "--model", str(config), "--seq-len", "4096"],
                   capsys).status == 0


# --- 6. -h ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["-h"], ["predict", "-h"], ["testbed", "up", "-h"], ["collective", "-h"]])
def test_dash_h_is_help_everywhere(args, capsys):
    """Before: ``dpsim predict -h`` was "No such option: -h", status 2, where nearly every command-line tool shows its
    help. Now -h is --help on every command (no command has a -h of its own), status 0."""
    outcome = run_cli(args, capsys)
    assert outcome.status == 0, outcome.err
    assert "Usage: dpsim" in outcome.out and outcome.err == ""


# --- 7. a toy module's parameter count ------------------------------------------------------------------------------
def test_a_small_modules_parameter_count_reads_as_a_count(tmp_path, capsys):
    """Before: a traced ``nn.Linear(4, 4)`` (20 parameters, a new user's first try) was titled "(2e-08 B params)" by
    predict and memory. Now below a million the count itself ("20 params"); from a million up the titles are as
    they were ("0.124 B params": the goldens' form)."""
    pytest.importorskip("torch")
    module = tmp_path / "tiny.py"
    module.write_text("import torch\n\ndef build():\n    return torch.nn.Linear(4, 4)\n")
    for command in ("predict", "memory"):
        outcome = run_cli([command, "--gpus", "8", "--link", "nvlink", "--model", f"{module}:build",
                           "--input-shape", "4,4"], capsys)
        assert outcome.status == 0, outcome.err
        assert "(20 params)" in outcome.out and "e-08" not in outcome.out, outcome.out[:300]
    outcome = run_cli(["predict", "--gpus", "8", "--link", "nvlink", "--model", "gpt2"], capsys)
    assert "gpt2 (0.124 B params)" in outcome.out


# --- 8. a misspelt sweep axis ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis, meant", [("strategi=ddp", "strategy"), ("zero_impll=deepspeed", "zero_impl"),
                                         ("micro_bach=1,2", "micro_batch")])
def test_a_misspelt_sweep_axis_names_the_axis_it_meant(axis, meant, capsys):
    """Before: ``sweep --axis strategi=ddp`` listed every axis (~970 characters), and the error line, cut at 800,
    ended at "reco..." before strategy, tp or zero_impl: the name the user meant was not on the line. Now the
    nearest names come first ("did you mean strategy?"), then the list as before."""
    line = refused(["sweep", "--gpus", "8", "--link", "nvlink", "--model", "gpt2", "--axis", axis], capsys,
                   f"is not a sweep axis; did you mean {meant}")
    assert line.index(meant) < line.index("choose among")
