"""One library behind every command: the Python API gives exactly what the CLI prints.

Every golden CLI case (tests/golden/cases.py) is also run through the public API
(``import dpsim``), its flags turned into API arguments by the library's own converters, and
the two JSON documents must be equal, number for number. A calibration profile that measured
its overlap slowdown gives the same step from ``dpsim predict``, ``predict()`` and ``dpsim
sweep``, and is read once per command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
from pathlib import Path

import pytest

import dpsim
from dpsim.cli import main
from dpsim.predict.config import SETTINGS, derived_flags, field_kind, flag_name, flag_scale
from dpsim.profile.io import load_profile, save_profile
from dpsim.profile.schema import ComputeCalibration

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))

from cases import FAMILIES  # noqa: E402
from run import ROOT, load_golden, report_contents, without_volatile  # noqa: E402

# ------------------------------------------------------------------ flags -> API arguments

_FIELD_OF_FLAG = {}
for _name in SETTINGS:
    _FIELD_OF_FLAG[flag_name(_name)] = _name
    if field_kind(_name)[0] is bool:
        _FIELD_OF_FLAG["--no-" + flag_name(_name).removeprefix("--")] = _name


def _split_args(argv: list[str]) -> tuple[dict, dict]:
    """(PredictConfig fields, the command's other flags as raw text) of a CLI invocation."""
    from dpsim.plan.grid import convert_value

    fields, other = {}, {}
    args = [a for a in argv[1:] if a != "--json"]
    i = 0
    while i < len(args):
        flag = args[i]
        name = _FIELD_OF_FLAG.get(flag)
        if name is not None and field_kind(name)[0] is bool:
            fields[name] = not flag.startswith("--no-")
            i += 1
            continue
        value = args[i + 1]
        i += 2
        if name is None:
            other.setdefault(flag, []).append(value)
            continue
        typed = convert_value(name, value, flag)
        fields[name] = typed / flag_scale(name) if flag_scale(name) else typed
    return derived_flags(fields), other


def _one(other: dict, flag: str, default=None):
    return other.pop(flag, [default])[-1]


def api_predict(argv: list[str]) -> dict:
    from dpsim.network.degrade import parse_degradation
    from dpsim.variability.spec import parse_straggler

    fields, other = _split_args(argv)
    rate = _one(other, "--single-gpu-samples-per-s")
    if rate is not None:  # the API takes the step it implies
        fields["single_gpu_step_s"] = fields.get("micro_batch", 4) / float(rate)
    noise = _one(other, "--noise-cv")
    spec = dpsim.VariabilitySpec(
        noise_cv=None if noise is None else float(noise), noise_distribution=_one(other, "--noise-dist", "normal"),
        stragglers=tuple(parse_straggler(s) for s in other.pop("--straggler", [])),
        degradations=tuple(parse_degradation(d) for d in other.pop("--degrade", [])),
        hiccup_rate_per_s=float(_one(other, "--hiccup-rate-per-s", 0)), hiccup_s=float(_one(other, "--hiccup-s", 0)),
        seed=int(_one(other, "--seed", 0)), samples=int(_one(other, "--mc-samples", 10)))
    steps = _one(other, "--mc-steps")  # as the CLI: left out is None (refused where nothing varies)
    steps = None if steps is None else int(steps)
    assert not other, f"flags the test does not map: {other}"
    prediction, report = dpsim.predict_with_variability(dpsim.PredictConfig(**fields), spec, steps=steps)
    out = prediction.to_dict()
    if report is not None:
        out["variability"] = report.to_dict()
    return out


def api_goodput(argv: list[str]) -> dict:
    from dpsim.plan.cost import parse_count
    from dpsim.plan.reliability import parse_long_duration_s

    fields, other = _split_args(argv)
    duration = _one(other, "--duration")
    tokens = _one(other, "--tokens")
    interval = _one(other, "--checkpoint-interval")
    kwargs = dict(duration_s=None if duration is None else parse_long_duration_s(duration, "--duration"),
                  tokens=None if tokens is None else parse_count(tokens, "--tokens"),
                  checkpoint_interval_s=None if interval is None else parse_long_duration_s(interval, "x"),
                  policy=_one(other, "--elastic", "wait"), runs=int(_one(other, "--runs", 100)),
                  seed=int(_one(other, "--seed", 0)))
    assert not other, f"flags the test does not map: {other}"
    return dpsim.goodput(dpsim.PredictConfig(**fields), **kwargs).to_dict()


def api_sweep(argv: list[str]) -> dict:
    from dpsim.plan.sweep import records_json, run_sweep

    args = [a for a in argv[1:] if a != "--json"]
    pairs = list(zip(args[::2], args[1::2]))
    grid = {flag.removeprefix("--"): values.split(",") for flag, values in pairs if flag != "--degrade"}
    spec = dpsim.SweepSpec.from_grid(grid, degrade=[v for flag, v in pairs if flag == "--degrade"] or None)
    # the rows as the DataFrame has them: every column in every row (null where a row has none)
    return records_json(run_sweep(spec).to_dict(orient="records"), spec)


def api_memory(argv: list[str]) -> dict:
    fields, other = _split_args(argv)
    assert not other, f"flags the test does not map: {other}"
    return dpsim.memory_report(dpsim.PredictConfig(**fields)).to_dict()


def api_collective(argv: list[str]) -> dict:
    from dpsim.predict.collective import predict_collective
    from dpsim.units import parse_size_bytes

    fields, other = _split_args(argv)
    kwargs = dict(op=_one(other, "--op", "all_reduce"), minbytes=parse_size_bytes(_one(other, "-b", "8"), "-b"),
                  maxbytes=parse_size_bytes(_one(other, "-e", "1G"), "-e"), stepfactor=float(_one(other, "-f", 2.0)),
                  dtype=_one(other, "-d", "float"))
    assert not other, f"flags the test does not map: {other}"
    return predict_collective(dpsim.PredictConfig(**fields), **kwargs).to_dict()


def _own_flags(argv: list[str], flags: tuple[str, ...]) -> tuple[list[str], dict]:
    """``argv`` without ``flags`` and their values (a command's own flags spelled like a field's), and those."""
    rest, own, i = [], {}, 0
    while i < len(argv):
        if argv[i] in flags:
            own[argv[i]] = argv[i + 1]
            i += 2
        else:
            rest.append(argv[i])
            i += 1
    return rest, own


def api_plan(argv: list[str]) -> dict:
    from dpsim.plan.cost import parse_count
    from dpsim.network.degrade import parse_degradation
    from dpsim.plan.planner import PLAN_RECOMPUTES, PLAN_SCHEDULES, parse_choice_list, parse_int_list
    from dpsim.predict.config import PLAN_DP_STRATEGIES

    argv, own = _own_flags(argv, ("--gpus", "--tp", "--pp", "--micro-batches", "--recompute", "--degrade"))
    fields, other = _split_args(argv)
    global_batch = fields.pop("global_batch")
    grad_accum_fusion = fields.pop("grad_accum_fusion", True)
    tokens = _one(other, "--tokens")
    kwargs = dict(gpus=parse_int_list(own["--gpus"], "--gpus"), global_batch=global_batch,
                  tps=parse_int_list(own.get("--tp"), "--tp"), pps=parse_int_list(own.get("--pp"), "--pp"),
                  strategies=parse_choice_list(_one(other, "--strategies"), "--strategies", PLAN_DP_STRATEGIES),
                  degradations=(parse_degradation(own["--degrade"]),) if "--degrade" in own else (),
                  micro_batches=parse_int_list(own.get("--micro-batches"), "--micro-batches"),
                  recomputes=parse_choice_list(own.get("--recompute"), "--recompute", PLAN_RECOMPUTES),
                  # None when the flag is left out, as the command line passes it (the library's defaults).
                  schedules=parse_choice_list(_one(other, "--schedules"), "--schedules", PLAN_SCHEDULES),
                  tokens=None if tokens is None else parse_count(tokens, "--tokens"),
                  top=int(_one(other, "--top", 10)), verify=int(_one(other, "--verify", 64)),
                  grad_accum_fusion=grad_accum_fusion, rank_by=_one(other, "--rank", "time"))
    if kwargs["rank_by"] == "goodput":
        from dpsim.plan.layout_goodput import FailureInputs
        from dpsim.plan.reliability import FailureRates, parse_long_duration_s

        mtbf = _one(other, "--mtbf-gpu")
        kwargs["failures"] = FailureInputs(
            rates=FailureRates() if mtbf is None else FailureRates(gpu_mtbf_s=parse_long_duration_s(mtbf, "x")),
            replace_s=parse_long_duration_s(_one(other, "--replace", "0s"), "x"))
    assert not other, f"flags the test does not map: {other}"
    out = dpsim.plan(dpsim.PredictConfig(**fields, micro_batch=1), **kwargs).to_dict()
    return without_volatile("plan", json.loads(json.dumps(_as_printed(out))))


def api_report(argv: list[str]) -> dict:
    from dpsim.plan.cost import parse_count
    from dpsim.report.html import collect, render

    fields, other = _split_args(argv)
    tokens = _one(other, "--tokens")
    scaling = _one(other, "--scaling-gpus")
    kwargs = dict(tokens=None if tokens is None else parse_count(tokens, "--tokens"),
                  scaling_gpus=None if scaling is None else [int(n) for n in scaling.split(",")])
    assert not other, f"flags the test does not map: {other}"
    return report_contents(render(collect(dpsim.PredictConfig(**fields), **kwargs)))


def api_mix(argv: list[str]) -> dict:
    from dpsim.mix import load_mix, simulate_mix

    argv, own = _own_flags(argv[1:], ("--sample-steps",))
    assert argv[1:] == ["--json"], f"flags the test does not map: {argv}"
    steps = int(own.get("--sample-steps", 20))
    return {"schema": "dpsim.mix/1", **simulate_mix(load_mix(argv[0]), sample_steps=steps or None).to_dict()}


API = {"predict": api_predict, "goodput": api_goodput, "sweep": api_sweep, "memory": api_memory,
       "collective": api_collective, "layout": api_predict, "pipeline": api_predict, "moe": api_predict,
       "plan": api_plan, "report": api_report, "mix": api_mix}
"""Golden family -> the same request through the library (``layout``, ``pipeline`` and ``moe`` are
``predict``'s cases)."""


def _as_printed(obj):
    """What ``--json`` writes for ``obj`` (JSON has no inf or nan: the CLI writes null)."""
    from dpsim.cli.app import _json_safe

    return _json_safe(obj)


def test_every_command_with_golden_cases_has_an_api_here():
    assert sorted(API) == sorted(FAMILIES)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_golden_case_gives_the_same_json_through_the_api(family, monkeypatch):
    monkeypatch.chdir(ROOT)  # the cases name topology files relative to the repository
    frozen = load_golden(family)
    differ = {}
    for name, argv in FAMILIES[family]().items():
        api = json.loads(json.dumps(_as_printed(API[family](argv))))
        if api != frozen[name]["output"]:
            differ[name] = sorted(k for k in set(api) | set(frozen[name]["output"])
                                  if api.get(k) != frozen[name]["output"].get(k))
    assert not differ, f"the API and the CLI differ: {differ}"


# ------------------------------------------------------------------ one profile, one number

def _measured_profile(tmp_path) -> str:
    """The shipped aws-p4de-2node profile as if calibrate had also measured the slowdowns of
    overlapping compute and communication (no shipped profile did: their compute is null)."""
    shipped = load_profile("aws-p4de-2node")
    compute = ComputeCalibration(device="NVIDIA A100-SXM4-80GB", overlap_slowdown=0.05, comm_slowdown=0.1)
    return str(save_profile(dataclasses.replace(shipped, name="p4de-measured", compute=compute),
                            tmp_path / "p4de-measured.json"))


def _cli_json(*argv: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return json.loads(out.getvalue())


def test_a_profile_that_measured_its_overlap_slowdown_gives_one_step_everywhere(tmp_path):
    path = _measured_profile(tmp_path)
    args = ["--gpus", "64", "--link", "aws-p4de", "--calibration", path]
    cli = _cli_json("predict", *args, "--json")
    api = dpsim.predict(dpsim.PredictConfig(gpus=64, link="aws-p4de", calibration=path))
    swept = _cli_json("sweep", *args, "--json")["rows"][0]
    api_swept = dpsim.sweep(gpus=64, link="aws-p4de", calibration=path)
    assert cli["config"]["overlap_slowdown"] == api.config.calibration.overlap_slowdown == 0.05  # the measured one
    assert cli["step_time_s"] == api.step_time_s == swept["step_time_s"] == api_swept["step_time_s"].iloc[0]
    default = dpsim.predict(dpsim.PredictConfig(gpus=64, link="aws-p4de", calibration=path, overlap_slowdown=0.1))
    assert default.step_time_s != api.step_time_s  # the slowdown moves the step: the test can fail


def test_a_cpu_profile_sets_precision_ranks_per_node_and_noise_for_the_api_too(tmp_path):
    from test_calibrate_provenance import MB, MODEL, cpu_profile, measured_step

    path = cpu_profile(tmp_path, step=measured_step(step_time_cv=0.02))
    cli = _cli_json("predict", "--gpus", "4", "--link", "ethernet", "--model", MODEL, "--micro-batch", str(MB),
                    "--calibration", path, "--mc-samples", "2", "--mc-steps", "3", "--json")
    p, report = dpsim.predict_with_variability(
        dpsim.PredictConfig(gpus=4, link="ethernet", model=MODEL, micro_batch=MB, calibration=path),
        dpsim.VariabilitySpec(samples=2), steps=3)
    assert (p.config.execution.precision, p.config.cluster.gpus_per_node, report.spec.noise_cv) == ("fp32", 1, 0.02)
    assert json.loads(json.dumps(_as_printed({**p.to_dict(), "variability": report.to_dict()}))) == cli


def test_predict_reads_its_profile_once(tmp_path, monkeypatch):
    import dpsim.profile.io as io_module

    path = _measured_profile(tmp_path)
    parses = []
    parse = io_module.profile_from_dict
    monkeypatch.setattr(io_module, "profile_from_dict", lambda *a, **k: parses.append(1) or parse(*a, **k))
    _cli_json("predict", "--gpus", "16", "--link", "aws-p4de", "--calibration", path, "--json")
    assert len(parses) == 1  # was 4: the CLI's three defaults and predict each read it
    parses.clear()
    _cli_json("predict", "--gpus", "16", "--link", "aws-p4de", "--calibration", path, "--straggler", "gpu3:1.2x",
              "--mc-samples", "2", "--mc-steps", "3", "--json")
    assert len(parses) == 1
    parses.clear()
    dpsim.predict(dpsim.PredictConfig(gpus=16, link="aws-p4de", calibration=path))
    assert len(parses) == 1


def test_import_dpsim_is_cheap_and_exports_the_api():
    import subprocess

    # The command line's own module (what every command, ``--help`` included, starts with) sorts flags by
    # panel without the configuration: PredictConfig, every strategy and workload module and numpy (~0.3 s
    # of a process) load only for a command that takes config flags (dpsim/cli/panels.py, issue #24).
    code = ("import sys, dpsim\nprint(sorted(m for m in sys.modules if m.startswith('dpsim')))\n"
            "import dpsim.cli.app\n"
            "print(sorted(m for m in ('dpsim.predict.config', 'dpsim.strategies', 'numpy') if m in sys.modules))\n"
            "print(all(callable(getattr(dpsim, n)) for n in dpsim.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "['dpsim', 'dpsim.lazy']" and out[1] == "[]" and out[2] == "True"
    for name in ("predict", "PredictConfig", "sweep", "plan", "goodput", "Prediction", "PlanResult",
                 "GoodputReport", "DpsimError"):
        assert name in dpsim.__all__
    assert dpsim.predict.run.predict is not None  # the callable package is still the package
