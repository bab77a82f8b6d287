"""A calibration profile is read and parsed once per command (issue 25: "read a profile once per command").

Every command that takes ``--calibration`` and the API entries that fan out (a sweep's points, ``report``'s
tables, ``plan``'s search and the layouts it simulates, ``mix``'s jobs) reach the profile from several places;
each file read and each parse of one is counted here by patching the loader's own steps."""

from __future__ import annotations

import pytest

import dpsim
import dpsim.profile.io as profile_io
from dpsim.cli import main
from dpsim.predict import PredictConfig

PROFILE = "aws-p4de-2node"  # a shipped profile: two 8-GPU servers, collectives only
CAL = ["--calibration", PROFILE]
JOB = ["--model", "gpt2", "--link", "infiniband"]


@pytest.fixture
def counted(monkeypatch):
    """``{"read": files read as a profile, "parse": profile documents validated}``, counted from here on."""
    counts = {"read": 0, "parse": 0}
    read, parse = profile_io.read_text_capped, profile_io.profile_from_dict

    def counting_read(*args, **kwargs):
        if kwargs.get("what") == "profile JSON file":
            counts["read"] += 1
        return read(*args, **kwargs)

    def counting_parse(*args, **kwargs):
        counts["parse"] += 1
        return parse(*args, **kwargs)

    monkeypatch.setattr(profile_io, "read_text_capped", counting_read)
    monkeypatch.setattr(profile_io, "profile_from_dict", counting_parse)
    return counts


@pytest.mark.parametrize("argv", [
    ["predict", *JOB, "--gpus", "16", *CAL],
    ["predict", *JOB, "--gpus", "16", *CAL, "--json"],
    ["memory", *JOB, "--gpus", "16", *CAL],
    ["sweep", *JOB, "--axis", "gpus=8,16", *CAL],  # the grid's check, then each point
    ["goodput", *JOB, "--gpus", "16", *CAL],
    ["plan", *JOB, "--gpus", "16", "--global-batch", "64", *CAL],  # the search, its device and collectives, verify
], ids=lambda argv: argv[0] + ("-json" if "--json" in argv else ""))
def test_each_command_reads_its_profile_once(argv, counted, capsys):
    assert main(argv) == 0, capsys.readouterr().err
    assert counted == {"read": 1, "parse": 1}


def test_report_reads_its_profile_once(counted, tmp_path, capsys):
    # report runs a prediction, two small sweeps (their grids checked) and a memory table: 42 reads before.
    out = tmp_path / "r.html"
    assert main(["report", *JOB, "--gpus", "16", *CAL, "--output", str(out)]) == 0, capsys.readouterr().err
    assert counted == {"read": 1, "parse": 1}


def test_mix_reads_a_profile_its_jobs_share_once(counted, tmp_path, capsys):
    from dpsim.mix.simulate import _solo

    _solo.cache_clear()  # solo runs are kept between mixes: this one must predict its own
    (tmp_path / "m.yaml").write_text(
        "cluster: {link: infiniband, gpus: 32}\nhorizon: 1h\n"
        f"jobs:\n  - {{name: a, model: gpt2, gpus: 16, calibration: {PROFILE}}}\n"
        f"  - {{name: b, model: gpt2, gpus: 8, start: 10min, calibration: {PROFILE}}}\n")
    assert main(["mix", str(tmp_path / "m.yaml")]) == 0, capsys.readouterr().err
    assert counted == {"read": 1, "parse": 1}


def test_the_api_reads_a_profile_once_per_call(counted, tmp_path):
    from dpsim.report.html import write_report

    config = PredictConfig(gpus=16, link="infiniband", model="gpt2", calibration=PROFILE)
    calls = {
        "predict": lambda: dpsim.predict(config),
        "memory_report": lambda: dpsim.memory_report(config),
        "sweep": lambda: dpsim.sweep(gpus=[8, 16], link="infiniband", model="gpt2", calibration=PROFILE),
        "plan": lambda: dpsim.plan(config, gpus=[16], global_batch=64),
        "goodput": lambda: dpsim.goodput(config, duration_s=86400.0),
        "predict_with_variability": lambda: dpsim.predict_with_variability(config, dpsim.VariabilitySpec(noise_cv=0.05)),
        "write_report": lambda: write_report(tmp_path / "r.html", config),
    }
    for name, call in calls.items():
        counted.update(read=0, parse=0)
        call()
        assert counted == {"read": 1, "parse": 1}, name
    # Each call reads afresh: a profile rewritten between two calls is the new one.
    counted.update(read=0, parse=0)
    dpsim.predict(config)
    dpsim.predict(config)
    assert counted == {"read": 2, "parse": 2}


def test_validate_predicts_with_the_profile_it_wrote_read_once(counted):
    # validate writes its measured profile (validated once on the way out) and predicts with it: one read.
    pytest.importorskip("torch")
    from tests.test_ddp_program import VALIDATE_MLP, _run

    from dpsim.validate.runner import predict_run
    from dpsim.workload.from_torch import load_torch_workload

    model = load_torch_workload(VALIDATE_MLP)
    counted.update(read=0, parse=0)
    predict_run(_run(model, 2, 1e10), model, reference=VALIDATE_MLP, optimizer="sgd")
    assert counted == {"read": 1, "parse": 2}  # save_profile's check of what it writes, then the one read


def test_a_profile_rewritten_within_a_scope_is_read_again(tmp_path):
    import dataclasses

    from dpsim.profile.once import profiles_read_once

    path = tmp_path / "p.json"
    profile_io.save_profile(profile_io.load_profile(PROFILE), path)
    with profiles_read_once():
        first = profile_io.load_profile(str(path))
        assert profile_io.load_profile(str(path)) is first
        profile_io.save_profile(dataclasses.replace(first, description="rewritten, longer than before"), path)
        assert profile_io.load_profile(str(path)).description == "rewritten, longer than before"
