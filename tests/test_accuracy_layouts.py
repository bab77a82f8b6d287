"""Tensor x pipeline x data layouts against published Megatron-LM measurements.

The rows are ``tests/data/layout_reference.csv`` (each citing its source: Narayanan et al.
2021 Table 1 with the configurations of Megatron-LM's ``examples/sc21`` scripts,
Korthikanti et al. 2022's MFU table, Megatron-Turing NLG 530B, Megatron-Core's 2024 H100
table); ``validation/accuracy_layouts.py`` predicts them from the presets alone and prints
the table VALIDATION.md shows. Nothing is fitted on them.

Absolute accuracy rests mostly on the compute model (issue 12's roofline, which puts every
row a little fast); its bars leave room for that model's revisions. What the layout model
itself is answerable for is *relative*: between the 14 runs Megatron's authors measured
on one system (Selene: Narayanan's and Korthikanti's rows), across 1.7B-1T parameters,
tensor 1-8, pipeline 1-64, interleaved or not, the errors must stay within a narrow band
whatever the compute model's overall level.
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "validation"))

import accuracy_layouts  # noqa: E402

MEDIAN_BAR = 0.10
"""Median |error| over every row, nothing fitted (5.8 % with blocking pipeline transfers, SM
contention of hidden tensor-parallel collectives, unfused gradient accumulation where the runs
had it, Megatron's cross-entropy and its bf16 gradients reduced in fp32; 11.7 % before them;
the issue's target is 5 %)."""
WORST_BAR = 0.40
"""Worst |error| over every row, nothing fitted (33.8 %, Megatron-Turing NLG; 44.1 % before; the
issue's target is 12 %)."""
SPREAD_BAR = 0.10
"""Largest minus smallest error over the 14 Selene rows Megatron's authors measured (7.6
points; 10.9 before the mechanisms above)."""


@pytest.fixture(scope="module")
def results():
    return [accuracy_layouts.evaluate(r) for r in accuracy_layouts.rows()]


def test_every_row_cites_its_source_and_is_a_valid_layout():
    with accuracy_layouts.DATA.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len({r["id"] for r in rows}) >= 20
    for r in rows:
        assert r["source"] and ("@" in r["source"] or "arXiv" in r["source"]), r["id"]
        assert int(r["tp"]) * int(r["pp"]) * int(r["dp"]) == int(r["gpus"]), r["id"]
        config = accuracy_layouts.config_of(r)  # PredictConfig checks the layout's own rules
        assert config.micro_batches * config.workload.micro_batch * int(r["dp"]) == int(r["global_batch"])


def test_published_flops_reproduce_the_published_times():
    """Korthikanti et al. 2022's MFU with the model-FLOPs formula gives the paper's iteration
    times (1.10, 13.75, 37.83, 71.49 s), and Narayanan's Eq. 3 gives MT-NLG's 126 TFLOP/s at 60.1 s:
    the FLOP conventions of the validation script are the publications'."""
    rows = {r["id"]: r for r in accuracy_layouts.rows()}
    for rid, seconds in (("K01", 1.10), ("K02", 13.75), ("K03", 37.83), ("K04", 71.49)):
        r = rows[rid]
        t = accuracy_layouts.flops(r) / (float(r["published"]) / 100 * int(r["gpus"]) * 312e12)
        assert t == pytest.approx(seconds, rel=0.005)
    m01 = dict(rows["M01"], flop_formula="narayanan-eq3")
    assert accuracy_layouts.flops(m01) / (60.1 * 2240) / 1e12 == pytest.approx(126, rel=0.01)


@pytest.mark.slow
def test_accuracy_on_published_layouts(results):
    errors = [abs(r["error"]) for r in results]
    median, worst = statistics.median(errors), max(errors)
    table = "\n".join(f"{r['id']} {r['model']} {r['layout']}: {100 * r['error']:+.1f} %" for r in results)
    assert median <= MEDIAN_BAR, f"median |error| {100 * median:.1f} %\n{table}"
    assert worst <= WORST_BAR, f"worst |error| {100 * worst:.1f} %\n{table}"


@pytest.mark.slow
def test_relative_accuracy_on_one_system(results):
    selene = [r["error"] for r in results if r["set"] in ("narayanan2021", "korthikanti2022")]
    assert len(selene) == 14
    spread = max(selene) - min(selene)
    assert spread <= SPREAD_BAR, f"errors from {100 * min(selene):+.1f} % to {100 * max(selene):+.1f} %"


def test_megatron_rows_after_2021_overlap_tensor_parallel_communication_in_backward():
    """From 2022 Megatron-LM's column-parallel linear launches its backward's tensor-parallel
    collective asynchronously behind the weight-gradient GEMM: at 2e90a342f5 (the README commit
    of Korthikanti's rows) the input gradient's all-reduce (``LinearWithGradAccumulationAndAsyncAllreduce``,
    ``megatron/mpu/layers.py``, on unless ``--no-async-tensor-model-parallel-allreduce``), at
    285068c8 (MegaScale's baseline) that or, with sequence parallelism and no flag, the
    all-gather and reduce-scatter (``LinearWithGradAccumulationAndAsyncCommunication``,
    ``megatron/core/tensor_parallel/layers.py``); only Narayanan's 2021 code blocks on every
    collective."""
    for r in accuracy_layouts.rows():
        if r["set"] in ("korthikanti2022", "megascale2024"):
            assert r["tp_comm_overlap"] == "backward", r["id"]
        if r["set"] == "narayanan2021":
            assert r["tp_comm_overlap"] == "off", r["id"]


def test_megatron_bf16_rows_reduce_gradients_in_fp32():
    """Megatron-LM's --bf16 forces fp32 gradient accumulation and reduction (no opt-out at the
    rows' commits): its rows run ``bf16-fp32-grads``, whose distributed optimizer reduce-scatters
    twice the bytes of ``bf16-params`` and all-gathers the same bf16 parameters."""
    from dpsim.predict.config import PredictConfig
    from dpsim.predict.run import predict
    for r in accuracy_layouts.rows():
        if r["set"] in ("korthikanti2022", "mcore2024"):
            assert r["precision"] == "bf16-fp32-grads", r["id"]
    kw = dict(gpus=16, tp=2, pp=2, dp=4, model="llama-2-7b", link="infiniband", micro_batch=1, global_batch=16,
              strategy="zero1", steps=1)
    b16, f32 = (predict(PredictConfig(precision=p, **kw)) for p in ("bf16-params", "bf16-fp32-grads"))
    assert f32.comm_bytes_by_op["reduce_scatter"] == pytest.approx(2 * b16.comm_bytes_by_op["reduce_scatter"])
    assert f32.comm_bytes_by_op["all_gather"] == pytest.approx(b16.comm_bytes_by_op["all_gather"])
    assert f32.step_time_s >= b16.step_time_s and f32.memory.total_bytes > b16.memory.total_bytes


@pytest.mark.slow
def test_mtnlg_times_split_into_work_per_sample_and_a_fixed_part(results):
    """Megatron-Turing NLG's three times (global batch fixed, dp 8/10/12) are ``work/dp + fixed``
    to 0.6 %: 197 ms of one pipeline's work per sample plus 12.7 s that do not scale with dp.
    dpsim's own split is printed by the validation script; the published one is the target."""
    mt = [r for r in results if r["set"] == "mtnlg2022"]
    work, fixed = accuracy_layouts.dp_decomposition(mt, "published")
    assert work == pytest.approx(0.197, rel=0.01) and fixed == pytest.approx(12.7, rel=0.02)
    for r in mt:
        dp = int(r["layout"].split("x")[2])
        assert work * r["global_batch"] / dp + fixed == pytest.approx(r["published"], rel=0.007)


@pytest.mark.slow
def test_every_published_layout_fits_in_memory(results):
    """They ran, so dpsim's memory model must find them within capacity (80 GB A100/H100; the
    MT-NLG rows' 40 GB GPUs are costed on the 80 GB preset). MegaScale's Megatron-LM baseline
    rows (B01-B11) publish neither recomputation nor sequence parallelism; Megatron-LM's defaults
    (neither) do not fit, so they carry the least memory saving that does (selective recomputation
    with sequence parallelism; validation/large_model_runs.md, MegaScale section)."""
    assert [r["id"] for r in results if not r["fits"]] == []


def test_micro_batch_sensitivity_covers_only_the_assumed_rows():
    """The sensitivity re-predicts the rows whose micro-batch the CSV assumes (N01's is in
    run_table_1.sh), at 1 (the table's own prediction), 2 and 4; at a fixed global batch a
    larger micro-batch leaves H04's last backward longer to hide its reduce-scatter behind."""
    rows = [r for r in accuracy_layouts.rows() if r["id"] in ("N01", "H04")]
    sens = accuracy_layouts.micro_batch_sensitivity(rows)
    assert [s["id"] for s in sens] == ["H04"]
    errors = sens[0]["errors"]
    assert sorted(errors) == [1, 2, 4]
    assert errors[1] == pytest.approx(accuracy_layouts.evaluate(rows[1])["error"])
    assert errors[1] < errors[2] < errors[4]
    assert "| H04 |" in accuracy_layouts.sensitivity_markdown(sens)


@pytest.mark.slow
def test_shard_diagnosis_sees_the_split_shapes_and_the_uncharged_clipping():
    # K01: tp 8 at micro-batch 1 quantizes worst; dp 1 keeps 2.7e9 parameters per GPU to clip.
    by_id = {r["id"]: r for r in accuracy_layouts.rows()}
    k01, n09 = (accuracy_layouts.shard_diagnosis(by_id[i]) for i in ("K01", "N09"))
    assert 0.85 < k01["gemm_efficiency"] < n09["gemm_efficiency"] <= 1.0
    assert 0.0 < n09["clip_share"] < 0.005 < k01["clip_share"] < 0.05
    assert 0.5 < k01["matmul_share"] < 1.0


def test_an_evaluation_is_made_once_per_row_and_handed_out_as_a_copy():
    # The table's fixture and model_error.py's gathering share the predictions of every row.
    row = next(r for r in accuracy_layouts.rows() if r["id"] == "N01")
    first = accuracy_layouts.evaluate(row)
    first["error"] = 99.0
    again = accuracy_layouts.evaluate(dict(row))
    assert again["error"] != 99.0 and again == accuracy_layouts._evaluate(row, compute_efficiency=None)
    assert accuracy_layouts.evaluate(row, compute_efficiency=0.9)["step_s"] > again["step_s"]
