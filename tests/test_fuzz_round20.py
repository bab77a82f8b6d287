"""Defects the twentieth fuzz round found (fuzz20): the Python API's predict keywords of the wrong type, choices
that still refused another letter case (plan's search lists, calibrate, --noise-dist), a CPU profile calibrate
wrote that no predict could use, and a negative overlap fraction in --json.

Each case says what it did before.
"""

from __future__ import annotations

import math

import pytest

import dpsim
from dpsim.errors import DpsimError
from dpsim.profile.io import save_profile
from dpsim.profile.schema import ComputeCalibration, Measurement, Profile, make_op_calibration
from tests.fuzz_harness import refused
from tests.fuzz_harness import run_json as _json


def _config(**changes) -> dpsim.PredictConfig:
    return dpsim.PredictConfig(**{"model": "gpt2", "gpus": 8, "link": "infiniband", "steps": 1, **changes})


# --- 1. dpsim.predict's keyword arguments ---------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    ({"degradations": "infiniband:50%"}, ("--degrade", "LinkDegradation")),
    ({"degradations": ["infiniband:50%"]}, ("--degrade", "LinkDegradation")),
    ({"degradations": 5}, ("--degrade", "LinkDegradation")),
    ({"model": "gpt2"}, ("model", "ModelSpec")),
    ({"topology": "infiniband"}, ("topology", "Topology")),
])
def test_predict_refuses_keyword_arguments_of_the_wrong_type(kwargs, words):
    """Before: ``dpsim.predict(config, degradations="infiniband:50%")`` (or a list of such strings) ended in
    AttributeError "'str' object has no attribute 'capacity_fraction'", ``degradations=5`` in a TypeError,
    ``model="gpt2"`` in "'str' object has no attribute 'moe'" and ``topology="infiniband"`` in "... no attribute
    'spec'": the config was checked, its companions not. Now --degrade's own validator and a type check."""
    with pytest.raises(DpsimError) as err:
        dpsim.predict(_config(), **kwargs)
    for word in words:
        assert word in str(err.value)


# --- 2. plan's search lists and job choices in any letter case ------------------------------------------------------
def test_plan_search_lists_take_any_letter_case(capsys):
    """Before: ``plan --strategies ZeRO1,FSDP`` was refused "'ZeRO1,FSDP' is not valid; choose from ddp, zero1, ...",
    likewise ``--schedules GPipe`` and ``--recompute Full`` (and ``strategies=["ZeRO1"]`` from Python), while
    predict takes ``--strategy ZeRO1`` and ``--schedule GPipe``."""
    base = ["plan", "--gpus", "16", "--model", "gpt2", "--link", "infiniband", "--global-batch", "64", "--pp", "1,2",
            "--verify", "0", "--top", "3", "--json"]
    upper = _json(base + ["--strategies", "ZeRO1,FSDP", "--schedules", "GPipe", "--recompute", "Full"], capsys)
    lower = _json(base + ["--strategies", "zero1,fsdp", "--schedules", "gpipe", "--recompute", "full"], capsys)
    assert upper == lower
    result = dpsim.plan(dpsim.PredictConfig(model="gpt2", link="infiniband"), gpus=[8], global_batch=64, verify=0, top=1, strategies=["DDP"],
                        recomputes=("Off",))
    assert {e.candidate.strategy for e in result.ranked} == {"ddp"}


def test_plan_job_choices_take_any_letter_case():
    """Before: ``dpsim.plan(..., cp_comm="A2A")`` and ``tp_comm_overlap="Async"`` were refused "'A2A' is not known"
    though PredictConfig(cp_comm="A2A") is taken: the plan's own copies of those fields skipped the case folding."""
    base = dpsim.PredictConfig(model="llama-2-7b", link="infiniband", seq_len=32768)
    kwargs = dict(gpus=[16], global_batch=16, cps=[2], verify=0, top=2)
    upper = dpsim.plan(base, cp_comm="A2A", tp_comm_overlap="Async", **kwargs)
    lower = dpsim.plan(base, cp_comm="a2a", tp_comm_overlap="async", **kwargs)
    assert upper.ranked == lower.ranked


# --- 3. calibrate's choices, and a CPU profile without float32 --------------------------------------------------------
def test_calibrate_choices_take_any_letter_case(tmp_path, capsys):
    """Before: ``calibrate --backend Gloo`` was refused "'Gloo' is not valid; choose nccl or gloo", and ``--ops
    All_Reduce``, ``--dtypes Float16``, ``--optimizer AdamW`` and ``--model GPT2`` each likewise. Now each is read in
    its canonical case: these flags pass and the run stops at the next rule (a CPU profile needs float32, below),
    and ``--ops All_Reduce,all_reduce`` is one name given twice."""
    out = str(tmp_path / "p.json")
    refused(["calibrate", "--backend", "Gloo", "--nproc", "2", "--ops", "All_Reduce", "--dtypes", "Float16",
             "--model", "GPT2", "--optimizer", "AdamW", "--out", out, "--quiet"], capsys, "--dtypes", "float32")
    refused(["calibrate", "--backend", "gloo", "--nproc", "2", "--ops", "All_Reduce,all_reduce", "--out", out,
             "--quiet"], capsys, "--ops", "repeats all_reduce")


def test_calibrate_on_cpus_refuses_dtypes_without_float32(tmp_path, capsys):
    """Before: ``calibrate --backend gloo --dtypes float16`` measured for minutes and wrote a profile that every
    predict refused "gpu 'cpu': no achieved rate for dtype 'float32-highest'; known: float16" (a line naming no flag;
    with ``--precision amp-fp16`` it said "measured on CPUs in float32"): predict costs a CPU profile in float32
    only. Now refused before any rank starts."""
    refused(["calibrate", "--backend", "gloo", "--nproc", "2", "--dtypes", "float16,bfloat16", "--out",
             str(tmp_path / "p.json"), "--quiet"], capsys, "--dtypes", "float16,bfloat16", "float32")
    assert not (tmp_path / "p.json").exists()


def test_a_cpu_profile_without_float32_matmuls_is_named(tmp_path, capsys):
    """The other end (a profile written before, or by hand): predict said "gpu 'cpu': no achieved rate for dtype
    'float32-highest'"; now one line naming --calibration and what to measure."""
    sizes = [2.0**k for k in range(12, 20)]
    sweep = [Measurement(size_bytes=s, time_s=5e-4 + s / 1e8, repeats=10, mean_s=5e-4 + s / 1e8) for s in sizes]
    profile = Profile(name="half", environment={"backend": "gloo", "device_type": "cpu", "device_memory_bytes": 16e9,
                                                "ranks_per_node": [2], "hosts": 1},
                      link_classes={"intra_node": {"n_ranks": 2, "n_nodes": 1}},
                      ops={("intra_node", "all_reduce"): make_op_calibration("all_reduce", "intra_node", 2, sweep)},
                      compute=ComputeCalibration(device="Test CPU", matmul_flops_per_s={"float16": 50e9},
                                                 memory_bandwidth_bytes_per_s=20e9))
    path = str(save_profile(profile, tmp_path / "half.json"))
    refused(["predict", "--calibration", path, "--model", "gpt2", "--gpus", "2", "--steps", "1"], capsys,
            "--calibration", "float16", "--dtypes float32")


# --- 4. --noise-dist in any letter case -----------------------------------------------------------------------------
def test_noise_dist_takes_any_letter_case(capsys):
    """Before: ``--noise-dist LogNormal`` was refused "'LogNormal' is not valid; choose one of normal, lognormal"
    (and VariabilitySpec(noise_distribution="LogNormal") from Python)."""
    base = ["predict", "--model", "gpt2", "--gpus", "8", "--link", "infiniband", "--steps", "2", "--noise-cv", "0.1",
            "--mc-samples", "2", "--json"]
    assert _json(base + ["--noise-dist", "LogNormal"], capsys) == _json(base + ["--noise-dist", "lognormal"], capsys)
    assert dpsim.VariabilitySpec(noise_cv=0.1, noise_distribution="LogNormal").noise_distribution == "lognormal"


# --- 5. a fraction below zero ---------------------------------------------------------------------------------------
def test_overlap_fraction_is_never_negative(capsys):
    """Before: gpt2 on 8 GPUs under zero2 hides none of its communication, and its exposed time, summed apart, came
    out 3e-18 s over the whole: ``--json`` printed ``"overlap_fraction": -1.3322676295501878e-15`` (sweep's rows
    too)."""
    doc = _json(["predict", "--model", "gpt2", "--gpus", "8", "--link", "infiniband", "--strategy", "zero2", "--steps",
                 "1", "--json"], capsys)
    assert 0.0 <= doc["overlap_fraction"] <= 1.0
    rows = _json(["sweep", "--model", "gpt2", "--gpus", "8", "--link", "infiniband", "--strategy", "zero2", "--json"],
                 capsys)["rows"]
    assert all(0.0 <= r["overlap_fraction"] <= 1.0 and math.isfinite(r["overlap_fraction"]) for r in rows)


# --- 6. a flag the policy never reads -------------------------------------------------------------------------------
def test_goodput_min_nodes_without_shrink_is_refused(capsys):
    """Before: ``goodput --min-nodes 4`` under the default ``--elastic wait`` printed the same numbers as without it
    (status 0): the floor is read by the shrink policy alone. The API's ``min_nodes=4`` likewise."""
    refused(["goodput", "--model", "gpt2", "--gpus", "64", "--link", "infiniband", "--duration", "1d", "--runs", "2",
             "--min-nodes", "4"], capsys, "--min-nodes", "4", "--elastic shrink")
    with pytest.raises(DpsimError, match="--min-nodes: 4"):
        dpsim.goodput(_config(gpus=64), duration_s=86400, runs=2, min_nodes=4)
    # Under shrink it is read, as before.
    assert dpsim.goodput(_config(gpus=64), duration_s=86400, runs=2, min_nodes=4, policy="shrink").n_nodes == 8


# --- 7. a sweep point's stage layers as a list ----------------------------------------------------------------------
def test_sweep_takes_a_points_stage_layers_as_a_list(tmp_path, capsys):
    """Before: a sweep file's ``stage_layers: [[5, 9, 9, 9], [8, 8, 8, 8]]`` (and ``dpsim.sweep(stage_layers=[[5, 9,
    9, 9]])``) was refused "[5, 9, 9, 9] is not valid; expected a string or null", though
    ``PredictConfig(stage_layers=[5, 9, 9, 9])`` takes the list: each point's list now reads as its text."""
    grid = tmp_path / "g.yaml"
    grid.write_text("grid:\n  gpus: [16]\n  link: [infiniband]\n  model: [llama-2-7b]\n  pp: [4]\n  grad_accum: [8]\n"
                    "  micro_batch: [1]\n  stage_layers: [[5, 9, 9, 9], '8,8,8,8']\n")
    rows = _json(["sweep", "-c", str(grid), "--json"], capsys)["rows"]
    assert [r["stage_layers"] for r in rows] == ["5,9,9,9", "8,8,8,8"]
    frame = dpsim.sweep(gpus=16, link="infiniband", model="llama-2-7b", pp=4, grad_accum=8, micro_batch=1,
                        stage_layers=[(5, 9, 9, 9)])
    assert list(frame["stage_layers"]) == ["5,9,9,9"]
    assert frame["step_time_s"][0] == rows[0]["step_time_s"]
    # A list holding what is no block count is still refused, naming the axis.
    with pytest.raises(DpsimError, match="sweep stage_layers: .* is not valid; expected block counts"):
        dpsim.sweep(gpus=16, link="infiniband", model="llama-2-7b", pp=4, grad_accum=8, stage_layers=[[5, 9, 9, True]])


def test_validate_choices_take_any_letter_case():
    """Before: ``validate --optimizer AdamW`` was refused "'AdamW' is not valid; choose one of adamw, ..." and
    ``--model GPT2`` "'GPT2' is not a catalog model", as calibrate's were (the case is checked before any rank)."""
    from dpsim.validate.api import ValidationConfig

    config = ValidationConfig(model="GPT2", micro_batch=1, bucket_cap_mb=None, world_size=2, nic_bits_per_s=None,
                              optimizer="AdamW")
    assert (config.model, config.optimizer) == ("gpt2", "adamw")
    assert ValidationConfig(model="MLP", micro_batch=1, bucket_cap_mb=None, world_size=2,
                            nic_bits_per_s=None).model == "mlp"
