"""Defects the eighteenth fuzz round saw and left (polish5): letter case of choices, a symlink loop as calibrate's
output, bare numbers as mix times, a timeout under the watchdog's tick, a model repository's folder as --model,
and a subnormal MTBF in plan --rank goodput.

Each case says what it did before.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fuzz_harness import check_outcome, run_cli
from tests.fuzz_harness import refused as _refused
from tests.fuzz_harness import run_json as _json

REPO = Path(__file__).resolve().parent.parent
_LOG = str(REPO / "calibration" / "reference" / "nccl-tests" / "8x-a100-sxm-node-nvlink3-via-nvswitch.all_reduce_perf.log")




# --- 1. a choice in other letter case -------------------------------------------------------------------------------
def test_choices_take_any_letter_case_and_echo_the_canonical_name(capsys):
    """Before: ``--link InfiniBand`` was refused "'InfiniBand' is not a preset" and ``--strategy DDP`` "'DDP' is not
    known", while ``--gpu H100`` and ``--model GPT2`` were taken (and echoed as typed in ``--json``'s config). Every
    choice is now read case-insensitively in one place (dpsim.wording.canonical_choice, applied to every setting
    of a PredictConfig) and echoed by its canonical, lower-case name."""
    base = ["--gpus", "8", "--steps", "1", "--json"]
    upper = _json(["predict", "--link", "InfiniBand", "--strategy", "DDP", "--gpu", "H100", "--model", "GPT2",
                   "--precision", "AMP-BF16"] + base, capsys)
    lower = _json(["predict", "--link", "infiniband", "--strategy", "ddp", "--gpu", "h100", "--model", "gpt2",
                   "--precision", "amp-bf16"] + base, capsys)
    config = upper["config"]
    assert (config["link"], config["gpu"], config["model"], config["precision"]) == ("infiniband", "h100", "gpt2",
                                                                                     "amp-bf16")
    assert upper == lower
    # The same in a sweep's axes and plan's --rank; a name that is no choice in any case is still refused.
    out = _json(["sweep", "--model", "GPT2", "--gpus", "8", "--link", "InfiniBand,PCIe", "--steps", "1", "--json"],
                capsys)
    assert sorted(r["link"] for r in out["rows"]) == ["infiniband", "pcie"]
    _refused(["predict", "--link", "InfiniBandX", "--gpus", "8"], capsys, "--link", "InfiniBandX", "choose one of")


def test_choices_outside_a_predict_config_take_any_case_too(tmp_path, capsys):
    """collective's --op/-d, goodput's --elastic and a mix file's placement: the same helper."""
    args = ["collective", "--link", "infiniband", "--gpus", "8", "-e", "1K", "--json"]
    assert _json(args[:1] + ["--op", "All_Reduce", "-d", "Float"] + args[1:], capsys) == \
        _json(args[:1] + ["--op", "all_reduce", "-d", "float"] + args[1:], capsys)
    path = tmp_path / "m.yaml"
    path.write_text("cluster: {link: InfiniBand, gpus: 64}\nplacement: Packed\nhorizon: 1h\njobs:\n"
                    "  - {name: a, model: GPT2, gpus: 16, placement: Spread}\n")
    check_outcome(run_cli(["mix", str(path)], capsys), ["mix"], "ok")


def test_the_python_api_canonicalises_choices():
    import dpsim
    from dpsim.wording import canonical_choice

    config = dpsim.PredictConfig(model="GPT2", gpus=8, link="NVLink", strategy="ZeRO2", steps=1)
    assert (config.workload.model, config.cluster.link, config.parallelism.strategy) == ("gpt2", "nvlink", "zero2")
    assert canonical_choice("Ab", ["ab", "AB"]) == "Ab"  # two choices in one folding: ambiguous, left to refuse
    assert canonical_choice(3, ["3"]) == 3


# --- 2. calibrate --out through a symlink loop ---------------------------------------------------------------------
@pytest.mark.parametrize("force", [False, True])
def test_calibrate_refuses_an_output_link_loop_as_sweep_does(force, tmp_path, capsys):
    """calibrate's --out through a symlink loop (explicit, or the default name in the working directory) is refused
    as sweep's -o is, by the same helper (dpsim.files.path_kind), and the link is left as it was."""
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    args = ["calibrate", "--from-nccl-tests", _LOG, "--out", str(loop), "--quiet"] + (["--force"] if force else [])
    _refused(args, capsys, "--out", "Too many levels of symbolic links")
    assert loop.is_symlink() and os.readlink(loop) == str(loop)
    csv = tmp_path / "loop.csv"
    csv.symlink_to(csv)
    _refused(["sweep", "--model", "gpt2", "--gpus", "8", "--steps", "1", "-o", str(csv)], capsys,
             "-o/--output", "Too many levels of symbolic links")


def test_calibrates_default_output_through_a_loop_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loop = tmp_path / "dpsim-calibration-lp.json"
    loop.symlink_to(loop.name)
    _refused(["calibrate", "--from-nccl-tests", _LOG, "--name", "lp", "--quiet"], capsys, "--out",
             "Too many levels of symbolic links")
    assert loop.is_symlink()


# --- 3. bare numbers as a mix file's times --------------------------------------------------------------------------
def test_a_mix_files_times_take_bare_seconds_alike(tmp_path, capsys):
    """``horizon``, a job's ``start`` and an event's ``at`` follow one rule: a plain YAML number is seconds (the
    Python API's dicts give them so, tests/test_mix.py), quoted text carries its unit. The refusal of quoted text
    said "expected a time with its unit", as if the bare number taken a line above were wrong; it names both forms."""
    def mix(horizon, start, at):
        path = tmp_path / "m.yaml"
        path.write_text(f"cluster: {{link: infiniband, gpus: 64}}\nhorizon: {horizon}\njobs:\n"
                        f"  - {{name: a, model: gpt2, gpus: 16, start: {start}}}\n"
                        f"failures: {{repair: 10min, events: [{{at: {at}, node: 0}}]}}\n")
        return path

    bare = run_cli(["mix", str(mix("3600", "60", "600"))], capsys)
    check_outcome(bare, ["mix"], "ok")
    units = run_cli(["mix", str(mix("1h", "60s", "10min"))], capsys)
    assert bare.out == units.out
    for horizon, start, at, field in (("'3600'", "60", "600", "horizon"), ("3600", "'60'", "600", "jobs[0].start"),
                                      ("3600", "60", "'600'", "failures.events[0].at")):
        _refused(["mix", str(mix(horizon, start, at))], capsys, field, "90s, 10min, 4h, 1d",
                 "plain YAML number of seconds")


# --- 4. a calibration timeout below the watchdog's tick -----------------------------------------------------------
@pytest.mark.parametrize("value", ["1e-308", "0.5"])
def test_a_timeout_below_a_second_is_refused(value, tmp_path, capsys):
    """Before: ``calibrate --timeout 1e-308`` was taken, and the run later ended "no progress for 0 s". The least is
    dpsim.limits.MIN_TIMEOUT_S (the ranks' watchdog looks every 0.5 s), named in the line."""
    from dpsim.limits import MIN_TIMEOUT_S

    assert MIN_TIMEOUT_S == 1.0
    _refused(["calibrate", "--timeout", value, "--out", str(tmp_path / "p.json")], capsys, "--timeout", value, ">= 1 s")


def test_the_api_refuses_the_same_timeout():
    import dataclasses

    from dpsim.calibrate.command import CalibrateOptions, _validate
    from dpsim.errors import DpsimError

    with pytest.raises(DpsimError, match=r"--timeout: 1e-308 s .*>= 1 s"):
        _validate(dataclasses.replace(CalibrateOptions(), timeout_s=1e-308))


# --- 5. a model repository's folder as --model ----------------------------------------------------------------------
def test_a_folder_holding_config_json_names_the_file_to_give(tmp_path, capsys):
    """Before: ``--model <folder holding config.json>`` was refused "is not a catalog model; choose one of ..."
    with no word of the file beside it. Now the line names the config.json to pass (the folder itself is not taken:
    one called like a catalog key, gpt2/, would mean two models)."""
    folder = tmp_path / "Mistral-7B"
    folder.mkdir()
    (folder / "config.json").write_text((REPO / "tests" / "data" / "hf_configs" / "Mistral-7B-v0.1" /
                                         "config.json").read_text())
    for command in (["predict", "--steps", "1"], ["memory"]):
        _refused(command + ["--model", str(folder), "--gpus", "8"], capsys, "--model", "is a directory",
                 f"--model {folder / 'config.json'}")
    out = _json(["predict", "--model", str(folder / "config.json"), "--gpus", "8", "--steps", "1", "--json"], capsys)
    assert out["step_time_s"] > 0
    empty = tmp_path / "empty"
    empty.mkdir()
    _refused(["predict", "--model", str(empty), "--gpus", "8"], capsys, "is not a catalog model")


# --- 6. plan --rank goodput at a subnormal MTBF --------------------------------------------------------------------
@pytest.mark.parametrize("mtbf", ["1e-308s", "5e-324s"])
def test_plan_goodput_at_a_subnormal_mtbf_is_one_line_in_seconds(mtbf, capsys):
    """Before: ``plan --rank goodput --mtbf-gpu 1e-300s`` said "fails every 0.0 us", and ``1e-308s`` was an
    OverflowError traceback (the checkpoint interval so short that work / interval overflowed). Now one line, the
    MTBF in seconds to three digits as dpsim goodput prints it."""
    line = _refused(["plan", "--model", "gpt2", "--gpus", "8", "--global-batch", "64", "--verify", "0", "--rank",
                     "goodput", "--tokens", "1B", "--mtbf-gpu", mtbf], capsys, "--mtbf-gpu", "fails every")
    assert "0.0 us" not in line and "e-3" in line, line


def test_format_seconds_never_prints_zero_for_a_positive_time():
    from dpsim.units import format_seconds

    assert format_seconds(1.25e-309) == "1.25e-309 s"
    assert format_seconds(4e-8) == "4e-08 s"
    assert format_seconds(6e-8) == "0.1 us"
    assert format_seconds(0.0) == "0.0 us"
