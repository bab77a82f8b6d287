"""Profiles: schema validation, atomic writes, and how predict uses them (collectives
scaled to other communicator sizes, compute rates, measured model step, overlap)."""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import re
import sys
from dataclasses import replace

import pytest

from dpsim.cli import main
from dpsim.errors import ProfileError
from dpsim.hardware import get_gpu
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict
from dpsim.profile.calibrated import CalibratedCollectives, calibrated_gpu
from dpsim.profile.io import load_profile, save_profile
from dpsim.profile.schema import (
    ComputeCalibration,
    LayerTiming,
    Measurement,
    ModelStep,
    OpCalibration,
    Profile,
    make_op_calibration,
)

A_S = 30e-6  # fitted latency at N0
BUSBW = 100e9  # fitted bus bandwidth
N0 = 8
SIZES = [2.0**k for k in range(12, 31)]


def _sweep(op: str, n: int, a: float = A_S, busbw: float = BUSBW) -> list[Measurement]:
    factor = {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "all_gather": (n - 1) / n,
              "broadcast": 1.0, "sendrecv": 1.0}[op]
    return [Measurement(size_bytes=s, time_s=a + factor * s / busbw, repeats=1) for s in SIZES]


@functools.lru_cache(maxsize=None)
def _fitted(op: str, link_class: str, n: int, a: float = A_S, busbw: float = BUSBW) -> OpCalibration:
    """The fit of one synthetic sweep, once per session: the same inputs fit the same (frozen) calibration, and
    refitting it in every make_profile() was most of this file's CPU time (17 ms a profile, 35 with --inter)."""
    return make_op_calibration(op, link_class, n, _sweep(op, n, a=a, busbw=busbw))


def make_profile(*, inter: bool = False, compute: ComputeCalibration | None = None, ops=("all_reduce",)) -> Profile:
    calibrations = {("intra_node", op): _fitted(op, "intra_node", N0) for op in ops}
    classes = {"intra_node": {"n_ranks": N0, "n_nodes": 1}}
    if inter:
        calibrations["inter_node", "all_reduce"] = _fitted("all_reduce", "inter_node", 16, a=80e-6, busbw=40e9)
        classes["inter_node"] = {"n_ranks": 16, "n_nodes": 2}
    return Profile(name="synthetic", created_utc="2025-01-01T00:00:00Z", link_classes=classes, ops=calibrations,
                   compute=compute, environment={"backend": "test"})


def run_cli(capsys, *args):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


# --------------------------------------------------------------------------- collectives


def test_measured_size_reproduces_the_fit():
    model = CalibratedCollectives(make_profile(), N0, 1)
    r = model.time("all_reduce", 2**24)
    assert r.time_s == pytest.approx(A_S + 1.75 * 2**24 / BUSBW, rel=1e-9)
    assert r.busbw_bytes_per_s == pytest.approx(2**24 / r.time_s * 1.75)
    assert r.algorithm == "calibrated" and r.latency_s == pytest.approx(A_S, rel=1e-9)


@pytest.mark.parametrize("n", [2, 4, 8, 64])
def test_other_communicator_sizes_follow_the_ring_model(n):
    """Latency scales with the ring's steps, busbw stays: T = a*steps(N)/steps(N0) + f(N)*S/B."""
    model = CalibratedCollectives(make_profile(), n, 1)
    s = 2**26
    assert model.time("all_reduce", s).time_s == pytest.approx(
        A_S * (n - 1) / (N0 - 1) + 2 * (n - 1) / n * s / BUSBW, rel=1e-9)
    # ops not measured are derived from the all-reduce fit: same per-step latency and busbw
    per_step = A_S / (2 * (N0 - 1))
    assert model.time("reduce_scatter", s).time_s == pytest.approx(per_step * (n - 1) + (n - 1) / n * s / BUSBW)
    assert model.time("all_gather", s).time_s == pytest.approx(per_step * (n - 1) + (n - 1) / n * s / BUSBW)
    assert model.time("broadcast", s).time_s == pytest.approx(per_step * (n - 1) + s / BUSBW)
    assert any("derived from the all_reduce fit" in note for note in model.notes)


def test_measured_op_is_used_over_derivation():
    profile = make_profile(ops=("all_reduce", "all_gather"))
    ag = replace(profile.ops["intra_node", "all_gather"])
    model = CalibratedCollectives(profile, N0, 1)
    assert model.time("all_gather", 2**20).time_s == pytest.approx(ag.fit.time_s(2**20))
    assert not model.notes


def test_multi_node_uses_inter_node_fit():
    model = CalibratedCollectives(make_profile(inter=True), 64, 8)
    s = 2**27
    assert model.link_class == "inter_node"
    assert model.time("all_reduce", s).time_s == pytest.approx(80e-6 * 63 / 15 + 2 * 63 / 64 * s / 40e9)


def test_missing_link_class_or_op_is_refused_clearly():
    with pytest.raises(ProfileError, match="no inter_node measurements.*across nodes"):
        CalibratedCollectives(make_profile(), 16, 2)
    only_p2p = make_profile(ops=("sendrecv",))
    with pytest.raises(ProfileError, match="no intra_node all_reduce fit.*sendrecv"):
        CalibratedCollectives(only_p2p, 8, 1).time("all_reduce", 1024)


def test_one_rank_and_empty_messages_cost_nothing():
    assert CalibratedCollectives(make_profile(), 1, 1).time("all_reduce", 2**20).time_s == 0.0
    assert CalibratedCollectives(make_profile(), 8, 1).time("all_reduce", 0).time_s == 0.0


# --------------------------------------------------------------------------- save / load


def test_round_trip_is_lossless(tmp_path):
    profile = make_profile(inter=True, compute=ComputeCalibration(
        device="cpu", matmul_flops_per_s={"float32": 1e11}, memory_bandwidth_bytes_per_s=2e10,
        overlap_slowdown=0.07, raw={"matmul": [{"m": 1}]}))
    path = save_profile(profile, tmp_path / "p.json")
    back = load_profile(path)
    assert back.to_dict() == json.loads(path.read_text())
    assert back.to_dict()["collectives"] == profile.to_dict()["collectives"]
    for key, cal in profile.ops.items():
        for s in (5e3, 3e6, 7e8):
            assert back.ops[key].fit.time_s(s) == pytest.approx(cal.fit.time_s(s), rel=1e-12)
    assert back.compute.overlap_slowdown == 0.07 and back.path == str(path)


def test_failed_write_leaves_existing_profile_untouched(tmp_path, monkeypatch):
    out = tmp_path / "node.json"
    out.write_text('{"keep": "me"}')

    def boom(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", boom)
    # One line naming the flag and the cause (it was an OSError traceback after the whole measurement).
    with pytest.raises(ProfileError, match=r"^--out: cannot write .*node\.json.*: No space left on device; it is left as it was$"):
        save_profile(make_profile(), out)
    assert out.read_text() == '{"keep": "me"}'
    assert [p.name for p in tmp_path.iterdir()] == ["node.json"], "no temporary file left behind"


def _doc():
    return make_profile().to_dict()


def _edit(path, doc):
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.update(schema="dpsim.calibration/0"), "schema: \"dpsim.calibration/0\" is not valid"),
    (lambda d: d.pop("collectives"), "collectives: missing"),
    (lambda d: d["collectives"].update(rack={}), "collectives.rack: unknown key"),
    (lambda d: d["collectives"]["intra_node"].update(n_ranks=1), "collectives.intra_node.n_ranks: 1 is not valid"),
    (lambda d: d["collectives"]["intra_node"].update(n_nodes=2), "intra_node.n_nodes: 2 is not valid; expected 1"),
    # Printed whole in predict's header (a 31-digit rank count); more ranks than dpsim simulates.
    (lambda d: d["collectives"]["intra_node"].update(n_ranks=10**30), "intra_node.n_ranks: 10000000000000"),
    (lambda d: d["collectives"]["intra_node"]["ops"].update(alltoall={}), "ops.alltoall: unknown key"),
    (lambda d: d["collectives"]["intra_node"]["ops"]["all_reduce"]["fit"]["segments"][0].update(latency_s=-1),
     "segments[0].latency_s: -1 is not valid; expected a number >= 0"),
    (lambda d: d["collectives"]["intra_node"]["ops"]["all_reduce"]["fit"]["segments"][0].update(
        bus_bandwidth_bytes_per_s="fast"), "bus_bandwidth_bytes_per_s: \"fast\" is not valid"),
    (lambda d: d["collectives"]["intra_node"]["ops"]["all_reduce"]["fit"].update(segments=[]),
     "fit.segments: list is not valid; expected a non-empty list"),
    (lambda d: d["collectives"]["intra_node"]["ops"]["all_reduce"]["fit"]["segments"].append(
        dict(d["collectives"]["intra_node"]["ops"]["all_reduce"]["fit"]["segments"][0])),
     "segments[1].first_size_bytes"),
    (lambda d: d.update(compute={"device": "x", "matmul_flops_per_s": {"tf99": 1.0}}),
     "compute.matmul_flops_per_s.tf99: unknown dtype"),
    (lambda d: d["collectives"]["intra_node"]["ops"]["all_reduce"]["measurements"][0].update(time_s=0),
     "measurements[0].time_s: 0 is not valid"),
    # The name titles collective's header: a newline split it, an escape sequence coloured the terminal.
    (lambda d: d.update(name="a\nb\x1b[31m"), "name: \"a\\nb\\u001b[31m\" is not valid; expected one line"),
])
def test_malformed_profile_one_line_naming_the_field(capsys, tmp_path, mutate, needle):
    doc = _doc()
    mutate(doc)
    path = _edit(tmp_path / "bad.json", doc)
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert needle in str(exc.value) and str(path) in str(exc.value)
    rc, out, err = run_cli(capsys, "predict", "--calibration", str(path), "--gpus", "8", "--link", "nvlink")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("dpsim: error: ") and needle in err


@pytest.mark.parametrize("content, needle", [
    ("{not json", "not valid JSON at line 1"),
    ("[]", "(top level): list is not valid; expected a JSON object"),
    (b"\xff\xfe", "not a UTF-8 text file"),
    # json keeps the last of two equal keys in silence; every YAML input refuses them
    ('{"schema": "dpsim.calibration/1", "schema": "dpsim.calibration/1"}', "key 'schema' appears twice"),
])
def test_unreadable_profiles(capsys, tmp_path, content, needle):
    path = tmp_path / "p.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    rc, _, err = run_cli(capsys, "collective", "--calibration", str(path), "--gpus", "8")
    assert rc == 2 and needle in err and err.count("\n") == 1


def test_unknown_name_lists_shipped_profiles(capsys, tmp_path):
    rc, _, err = run_cli(capsys, "predict", "--calibration", "no-such-node", "--gpus", "8")
    assert rc == 2 and "neither a file nor a shipped profile" in err and "a100-nvswitch-8gpu" in err
    rc, _, err = run_cli(capsys, "predict", "--calibration", str(tmp_path / "gone.json"), "--gpus", "8")
    assert rc == 2 and "does not exist" in err
    rc, _, err = run_cli(capsys, "predict", "--calibration", str(tmp_path), "--gpus", "8")
    assert rc == 2 and "is a directory" in err


# --------------------------------------------------------------------------- compute in predict


def test_compute_rates_replace_achieved_but_not_peak():
    gpu = get_gpu("h100")
    profile = make_profile(compute=ComputeCalibration(device="NVIDIA H100", matmul_flops_per_s={"bfloat16": 600e12},
                                                      memory_bandwidth_bytes_per_s=2.5e12))
    cal = calibrated_gpu(profile, gpu)
    assert cal.achieved_rate("bfloat16") == 600e12 and cal.achieved_rate("float16") == gpu.achieved_rate("float16")
    assert cal.peak_flops_per_s == gpu.peak_flops_per_s
    assert cal.memory_bandwidth_bytes_per_s == 2.5e12
    assert cal.streaming_bandwidth_bytes_per_s == 2.5e12  # a measured copy is what the roofline streams at
    assert calibrated_gpu(make_profile(), gpu) is gpu


def test_predict_uses_measured_compute_and_model_step(tmp_path):
    base = PredictConfig(gpus=8, link="nvlink", model="gpt2", micro_batch=4, steps=1)
    # The preset roofline at its own rates: a profile's prediction takes no multi-GPU default.
    preset = predict(replace(base, compute_efficiency=1.0))
    rate = get_gpu("h100").achieved_rate("bfloat16") / 2
    slow = save_profile(make_profile(compute=ComputeCalibration(
        device="slow h100", matmul_flops_per_s={"bfloat16": rate})), tmp_path / "slow.json")
    p = predict(replace(base, calibration=str(slow)))
    # Only the matmuls slow down: the roofline's memory-bound ops keep the preset's bandwidth.
    assert 1.1 * preset.forward_s < p.forward_s < 2 * preset.forward_s
    assert p.optimizer_s == pytest.approx(preset.optimizer_s, rel=1e-9)
    step = ModelStep(model="gpt2", micro_batch=4, dtype="bfloat16", forward_s=0.010, backward_s=0.020)
    measured = save_profile(make_profile(compute=ComputeCalibration(device="h100", model_step=step)),
                            tmp_path / "m.json")
    q = predict(replace(base, calibration=str(measured)))
    assert q.compute_s - q.optimizer_s == pytest.approx(0.030, rel=1e-9)  # measured forward + backward
    assert q.optimizer_s == pytest.approx(preset.optimizer_s, rel=1e-9)  # modelled optimizer
    other = predict(replace(base, calibration=str(measured), micro_batch=8))  # not what was measured
    assert other.compute_s - other.optimizer_s != pytest.approx(0.030, rel=1e-3)


def test_cli_overlap_slowdown_defaults_to_the_measured_one(capsys, tmp_path):
    path = save_profile(make_profile(compute=ComputeCalibration(device="x", overlap_slowdown=0.25)),
                        tmp_path / "o.json")
    d = json.loads(run_cli(capsys, "predict", "--calibration", str(path), "--gpus", "8", "--link", "nvlink",
                           "--model", "gpt2", "--json")[1])
    assert d["config"]["overlap_slowdown"] == 0.25
    d = json.loads(run_cli(capsys, "predict", "--calibration", str(path), "--gpus", "8", "--link", "nvlink",
                           "--model", "gpt2", "--overlap-slowdown", "0", "--json")[1])
    assert d["config"]["overlap_slowdown"] == 0.0


def test_predict_with_calibration_does_not_import_torch():
    code = ("import sys; from dpsim.cli import main; "
            "rc = main(['predict', '--gpus', '16', '--link', 'infiniband', '--calibration', 'aws-p4de-2node', "
            "'--json']); assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["config"]["calibration"] == "aws-p4de-2node"


# --------------------------------------------------------------------------- step-time noise (issue #7)


def test_step_time_cv_from_the_harness_repeats():
    from dpsim.calibrate.build import (
        coefficient_of_variation,
        profile_from_results,
        step_time_cv,
    )

    times = [0.9, 1.0, 1.1]  # mean 1, sample std 0.1
    assert coefficient_of_variation(times) == pytest.approx(0.1, rel=1e-12)
    assert coefficient_of_variation([0.5, 0.5, 0.5]) == 0.0
    assert coefficient_of_variation([1.0]) is None and coefficient_of_variation([]) is None
    # per rank, then the median over ranks
    assert step_time_cv([[0.9, 1.0, 1.1], [2.0, 2.0, 2.0], [1.8, 2.0, 2.2]]) == pytest.approx(0.1, rel=1e-12)
    assert step_time_cv([]) is None
    step = {"model": "gpt2", "micro_batch": 4, "dtype": "float32", "forward_s": 0.01, "backward_s": 0.02,
            "step_times_s": [[0.027, 0.030, 0.033], [0.029, 0.030, 0.031]], "layers": []}
    profile = profile_from_results({"compute": {"device": "cpu", "model_step": step}}, name="noise",
                                   created_utc="2025-01-01T00:00:00Z")
    assert profile.compute.model_step.step_time_cv == pytest.approx((0.1 + 1 / 30) / 2, rel=1e-12)
    old = dict(step)
    del old["step_times_s"]  # results of an older harness: no spread recorded
    assert profile_from_results({"compute": {"device": "cpu", "model_step": old}},
                                name="old").compute.model_step.step_time_cv is None


def test_fresh_processes_set_the_level_and_the_wait_is_kept():
    """The in-process times hold the split; fresh processes' ratio scales every one of them."""
    from dpsim.calibrate.build import profile_from_results

    step = {"model": "gpt2", "micro_batch": 4, "dtype": "float32", "forward_s": 0.01, "backward_s": 0.02,
            "optimizer_s": 0.004, "interval": {"mean_s": 0.035, "ci_low_s": 0.034, "ci_high_s": 0.036, "n": 10},
            "layer_times": [{"name": "a", "forward_s": 0.004, "backward_s": 0.015},
                            {"name": "b", "forward_s": 0.006, "backward_s": 0.005}],
            "fresh_process_ratio": 1.2, "after_comm": {"extra_s": 0.003, "wait_s": 0.25, "iterations": 12},
            "fresh_process_medians_s": [[0.041, 0.046, 0.040], [0.043, 0.044, 0.042]]}
    s = profile_from_results({"compute": {"device": "cpu", "model_step": step}}, name="fresh").compute.model_step
    assert s.fresh_process_steps_s == (0.043, 0.046, 0.042)  # each process's slowest rank, in the order they ran
    assert (s.forward_s, s.backward_s, s.optimizer_s) == pytest.approx((0.012, 0.024, 0.0048), rel=1e-12)
    assert [t for l in s.layers for t in (l.forward_s, l.backward_s)] == pytest.approx([0.0048, 0.018, 0.0072, 0.006])
    assert (s.step_time_mean_s, s.step_time_ci_low_s, s.step_time_ci_high_s) == pytest.approx((0.042, 0.0408, 0.0432))
    assert s.fresh_process_ratio == 1.2 and (s.after_comm_extra_s, s.after_comm_wait_s) == (0.003, 0.25)
    plain = {k: v for k, v in step.items() if k not in ("fresh_process_ratio", "after_comm", "fresh_process_medians_s")}
    s = profile_from_results({"compute": {"device": "cpu", "model_step": plain}}, name="old").compute.model_step
    assert s.forward_s == 0.01 and s.fresh_process_ratio is None and s.after_comm_extra_s is None
    assert s.fresh_process_steps_s is None
    # Ranks that outnumber the cores: the wait is not charged, and the profile says why.
    shared = dict(step, after_comm={**step["after_comm"], "cores": {"ranks_per_machine": 4, "threads_per_rank": 1,
                                                                    "cpu_cores": 2}})
    p = profile_from_results({"compute": {"device": "cpu", "model_step": shared}}, name="shared")
    assert p.compute.model_step.after_comm_extra_s is None and p.compute.model_step.after_comm_wait_s is None
    assert any("+3 ms but is not charged: 4 ranks x 1 threads share 2 cores" in w for w in p.warnings)
    assert not profile_from_results({"compute": {"device": "cpu", "model_step": step}}, name="own").warnings


def test_step_time_cv_round_trip_and_older_profiles(tmp_path):
    step = ModelStep(model="gpt2", micro_batch=4, dtype="bfloat16", forward_s=0.01, backward_s=0.02,
                     step_time_cv=0.05)
    path = save_profile(make_profile(compute=ComputeCalibration(device="h100", model_step=step)), tmp_path / "n.json")
    doc = json.loads(path.read_text())
    assert doc["schema"] == "dpsim.calibration/1" and doc["compute"]["model_step"]["step_time_cv"] == 0.05
    assert load_profile(path).compute.model_step == step
    del doc["compute"]["model_step"]["step_time_cv"]  # a profile written before the field existed
    back = load_profile(_edit(tmp_path / "old.json", doc))
    assert back.compute.model_step.step_time_cv is None and "step_time_cv" not in back.to_dict()["compute"]["model_step"]


@pytest.mark.parametrize("value, shown", [(-0.1, "-0.1"), (float("nan"), "NaN"), ("5%", '"5%"'), (True, "true"),
                                          (11, "11")])
def test_bad_step_time_cv_one_line(capsys, tmp_path, value, shown):
    step = ModelStep(model="gpt2", micro_batch=4, dtype="bfloat16", forward_s=0.01, backward_s=0.02)
    doc = make_profile(compute=ComputeCalibration(device="h100", model_step=step)).to_dict()
    doc["compute"]["model_step"]["step_time_cv"] = value
    path = _edit(tmp_path / "bad.json", doc)
    needle = f"compute.model_step.step_time_cv: {shown} is not valid; expected a number >= 0 and <= 10 or null"
    with pytest.raises(ProfileError, match="step_time_cv"):
        load_profile(path)
    rc, out, err = run_cli(capsys, "predict", "--calibration", str(path), "--gpus", "8", "--link", "nvlink")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("dpsim: error: ") and needle in err, err


def test_predict_noise_defaults_to_the_profiles_step_time_cv(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    step = ModelStep(model="resnet50", micro_batch=32, dtype="bfloat16", forward_s=0.01, backward_s=0.02,
                     step_time_cv=0.05)
    path = save_profile(make_profile(compute=ComputeCalibration(device="h100", model_step=step)), tmp_path / "n.json")
    base = ("predict", "--calibration", str(path), "--gpus", "8", "--link", "nvlink", "--model", "gpt2",
            "--mc-samples", "2", "--mc-steps", "5")
    rc, out, err = run_cli(capsys, *base, "--json")
    assert rc == 0, err
    v = json.loads(out)["variability"]
    assert v["noise_cv"] == 0.05 and "synthetic" in v["noise_source"] and v["statistics"]["samples"] == 2
    rc, out, err = run_cli(capsys, *base)
    assert rc == 0, err
    assert "noise 5 % CV (normal, from calibration profile 'synthetic' step_time_cv)" in out
    rc, out, err = run_cli(capsys, *base[:-4], "--noise-cv", "0", "--json")  # an explicit 0 wins
    assert rc == 0, err
    assert "variability" not in json.loads(out)
    rc, out, err = run_cli(capsys, *base, "--noise-cv", "0", "--json")  # then nothing varies: no samples to take
    assert rc == 2 and "--mc-samples" in err and "only applies with variability" in err
    rc, out, err = run_cli(capsys, *base, "--noise-cv", "0.02", "--json")
    v = json.loads(out)["variability"]
    assert v["noise_cv"] == 0.02 and v["noise_source"] is None
    no_cv = save_profile(make_profile(compute=ComputeCalibration(device="h100", model_step=replace(
        step, step_time_cv=None))), tmp_path / "old.json")
    rc, out, err = run_cli(capsys, "predict", "--calibration", str(no_cv), "--gpus", "8", "--link", "nvlink",
                           "--model", "gpt2", "--json")
    assert rc == 0, err
    assert "variability" not in json.loads(out)


def test_bandwidths_read_in_their_own_unit():
    from dpsim.calibrate.summary import calibration_table, format_rate

    assert format_rate(12.1e6) == "12.1 MB/s" and format_rate(48.5e9) == "48.5 GB/s" and format_rate(950) == "950 B/s"
    assert format_rate(math.inf) == "unbounded"
    # a 100 Mbit/s sweep: its table is in MB/s, with no "0.00" rates and no "-0.0" errors
    sizes = [2.0**k for k in range(12, 24)]
    meas = [Measurement(size_bytes=s, time_s=1e-3 + s / 12.5e6) for s in sizes]
    table = calibration_table(make_op_calibration("all_reduce", "inter_node", 2, meas))
    assert "(MB/s)" in table and "(GB/s)" not in table and "  0.00  " not in table and "-0.0 " not in table


@pytest.mark.parametrize("where, key, value", [
    ("compute.matmul_flops_per_s", "float32", 1e300), ("compute.matmul_flops_per_s", "float32", 1e-300),
    ("compute", "memory_bandwidth_bytes_per_s", 1e300), ("compute", "memory_bandwidth_bytes_per_s", 1e-300),
    ("compute", "overlap_slowdown", 1e300), ("compute", "comm_slowdown", 1e300),
    ("compute.model_step", "forward_s", 1e300), ("compute.model_step", "backward_s", 1e300),
    ("compute.model_step", "optimizer_s", 1e300), ("compute.model_step", "step_time_mean_s", 1e300),
    ("compute.model_step", "forward_flops_per_sample", 1e300), ("compute.model_step", "micro_batch", 10**30),
    ("compute.model_step", "repeats", 10**30), ("compute.model_step", "threads", 10**30),
    ("compute.model_step", "after_comm_extra_s", 1e300), ("compute.model_step", "after_comm_extra_s", -1e300),
    ("compute.model_step", "after_comm_wait_s", -1.0), ("compute.model_step", "fresh_process_ratio", 0.0),
    ("compute.model_step", "fresh_process_ratio", 1e3), ("compute.model_step", "fresh_process_steps_s", [0.1, 1e300]),
    ("compute.model_step", "fresh_process_steps_s", [0.0]), ("compute.model_step", "fresh_process_steps_s", 0.1),
    ("compute.model_step.layers[0]", "forward_s", 1e300),
    ("collectives.intra_node.ops.all_reduce.measurements[0]", "time_s", 1e300),
    ("collectives.intra_node.ops.all_reduce.measurements[0]", "size_bytes", 1e300),
    ("collectives.intra_node.ops.all_reduce.measurements[0]", "repeats", 10**30),
])
def test_compute_and_measured_numbers_are_bounded(tmp_path, where, key, value):
    """Like the fitted collective numbers (commit 10e49c0): a profile number far beyond any
    hardware is a corrupt file, refused in one line naming it, not 300-digit output."""
    step = ModelStep(model="gpt2", micro_batch=4, dtype="float32", forward_s=0.01, backward_s=0.02,
                     layers=(LayerTiming(name="h.0", forward_s=0.01, backward_s=0.02),), optimizer_s=0.001,
                     step_time_mean_s=0.031, forward_flops_per_sample=1e9, repeats=10, threads=2,
                     after_comm_extra_s=0.002, after_comm_wait_s=0.2, fresh_process_ratio=1.1,
                     fresh_process_steps_s=(0.03, 0.034, 0.031))
    doc = make_profile(compute=ComputeCalibration(
        device="cpu", matmul_flops_per_s={"float32": 5e10}, memory_bandwidth_bytes_per_s=1e10,
        overlap_slowdown=0.2, comm_slowdown=0.5, model_step=step)).to_dict()
    node = doc
    for part in re.split(r"\.(?![^\[]*\])", where):
        name, _, index = part.partition("[")
        node = node[name] if not index else node[name][int(index[:-1])]
    if key == "repeats" and "measurements" in where:
        node.setdefault("repeats", 5)
    node[key] = value
    with pytest.raises(ProfileError) as info:
        load_profile(_edit(tmp_path / "bad.json", doc))
    message = str(info.value)
    assert f"{where}.{key}:" in message and "\n" not in message and len(message) < 400, message


def test_calibrate_caps_a_slowdown_the_loader_would_refuse(tmp_path):
    """A machine busy enough to slow work 50-fold writes a profile predict can still load, and says so."""
    from dpsim.calibrate.build import profile_from_results

    profile = profile_from_results({"compute": {"device": "cpu", "matmul_flops_per_s": {"float32": 1e10},
                                                "overlap_slowdown": 50.0, "comm_slowdown": 300.0}}, name="busy")
    assert profile.compute.overlap_slowdown == 10.0 and profile.compute.comm_slowdown == 100.0
    assert sum("too busy to measure the interference" in w for w in profile.warnings) == 2
    back = load_profile(save_profile(profile, tmp_path / "busy.json"))
    assert back.compute.overlap_slowdown == 10.0
