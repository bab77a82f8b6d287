"""One-GPU throughput from specs against published measurements (issue: accuracy), leave one GPU out.

``tests/data/single_gpu_throughput.csv`` holds published training throughput, each row
citing its source (repository@commit, file, table and row) and its configuration (GPU,
model, precision as the framework set it, micro-batch, attention kernel, memory layout,
optimizer implementation). ``python validation/accuracy_compute.py`` predicts every row
from the GPU preset and the roofline, with the roofline's two fitted constants fitted on
the *other* GPU chips' rows. Deterministic (no timing). The issue's target is median
|error| <= 10 %, worst <= 25 %; what the model reaches today is pinned here so that it can
only improve, and the misses are explained in VALIDATION.md ("Single-GPU throughput").
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from dpsim.hardware import GPU_PRESETS
from dpsim.workload.compute import MULTI_GPU_TRAINING_EFFICIENCY, OPTIMIZER_IMPLEMENTATIONS
from dpsim.workload.precision import OPTIMIZER_STATES, PRECISIONS
from dpsim.workload.roofline import Efficiencies

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "validation"))
import accuracy_compute as accuracy  # noqa: E402

PINNED_MEDIAN = 0.084
PINNED_WORST = 0.345
"""Today's leave-one-chip-out accuracy (8.3 % / 34.2 %), with a hair of slack. The worst row
(T046) moved from 38.0 % when the optimizer's fp32-master copies (apex O2), apex O2's
per-parameter ``zero_grad`` and ``run_squad.py``'s per-step gradient clipping were charged."""


@pytest.fixture(scope="module")
def evaluated():
    return accuracy.evaluate()


def test_rows_are_cited_and_well_formed():
    rows = accuracy.load_rows()
    assert len(rows) >= 50 and len({r.id for r in rows}) == len(rows)
    chips = {r.chip for r in rows if r.is_scored}
    assert {"GV100", "GA100", "GH100"} <= chips and len(chips) >= 5
    models = {r.model for r in rows}
    assert {"resnet50", "bert-large", "vit-b-16"} <= models and any(m.startswith("mpt-") for m in models)
    for r in rows:
        assert r.gpu in GPU_PRESETS and r.precision in PRECISIONS and r.optimizer in OPTIMIZER_STATES, r.id
        assert re.search(r"@[0-9a-f]{40} ", r.source), f"{r.id}: source must pin a commit"
        assert r.micro_batch >= 1 and r.grad_accum >= 1 and r.measured > 0 and r.published > 0, r.id
        assert r.scored == "yes" or (r.scored.startswith("no: ") and len(r.scored) > 40), r.id
        impl, ops = r.optimizer_kernels
        assert impl in OPTIMIZER_IMPLEMENTATIONS and (ops is None or (impl == "loop" and ops > 0)), r.id
        assert r.attention in ("", "eager", "fused", "triton"), r.id
        # NVIDIA's run_squad.py (Lambda's BERT runs use it too) clips every step.
        assert r.grad_clip == (r.model == "bert-large"), r.id
        # Apex O2 (NVIDIA's BERT fp16 runs) zeroes the fp16 gradients parameter by parameter.
        assert r.zero_grad_loop == (r.model == "bert-large" and r.precision == "fp16-params"), r.id
        assert r.gpus == 1 or not r.is_scored, f"{r.id}: a multi-GPU row is not a single-GPU measurement"


def test_lambda_rows_score_the_steady_state_of_their_logs():
    # Lambda's table divides whole runs, start-up included: the steady state is faster, by
    # 0.3-17 %, and every such row names the logs it was read from.
    for r in accuracy.load_rows():
        if r.source.startswith("lambdal/"):
            assert r.published <= r.measured <= 1.2 * r.published, r.id
            assert "steady state from the run logs pytorch/results" in r.source, r.id
        else:
            assert r.measured == r.published, r.id


def test_reference_models_have_the_published_parameter_counts():
    for name, (cfg, published) in accuracy.REFERENCE_MODELS.items():
        row = next(r for r in accuracy.load_rows() if r.model == name and (r.seq_len or 0) <= cfg.n_positions)
        assert accuracy.build(row).param_count == published, name


def test_the_fast_kernels_reproduce_compute_profile():
    for row in accuracy.load_rows()[::7]:
        assert abs(accuracy.check_profile_agrees(row)) < 1e-9, row.id


@pytest.mark.slow
def test_shipped_constants_are_the_fit_on_all_rows(evaluated):
    _, all_rows = evaluated
    shipped = Efficiencies()
    for field in ("memory", "matmul"):
        assert getattr(shipped, field) == pytest.approx(getattr(all_rows, field), abs=0.002), field


@pytest.mark.slow
def test_leave_one_chip_out_is_honest():
    # Changing every measurement of one chip must not move that chip's predictions.
    rows = accuracy.load_rows()
    before, _ = accuracy.evaluate(rows)
    import dataclasses
    doubled = [dataclasses.replace(r, measured=r.measured * 2) if r.chip == "GH100" else r for r in rows]
    after, _ = accuracy.evaluate(doubled)
    for b, a in zip(before, after):
        if b.row.chip == "GH100":
            assert a.predicted == pytest.approx(b.predicted, rel=1e-12), b.row.id


@pytest.mark.slow
def test_accuracy_is_pinned_and_documented(evaluated):
    results, _ = evaluated
    s = accuracy.summary(results)
    assert s["median"] <= PINNED_MEDIAN and s["worst"] <= PINNED_WORST
    validation = (REPO / "VALIDATION.md").read_text()
    line = (f"{s['rows']} scored rows, leave one chip out: median |error| {s['median'] * 100:.1f} %, "
            f"worst {s['worst'] * 100:.1f} %")
    assert line in validation, "VALIDATION.md's single-GPU section is stale: rerun validation/accuracy_compute.py"
    for res in results:
        assert f"| {res.row.id} |" in validation


def test_multi_gpu_rows_go_through_the_fsdp_path():
    rows = [r for r in accuracy.load_rows() if r.gpus > 1]
    assert rows and all(not r.is_scored for r in rows)
    m = accuracy.multi_gpu(rows[0])
    # FSDP's collectives are mostly hidden behind compute on one NVSwitch node: the FSDP path
    # is within a few per cent of the compute-only estimate (the one-GPU roofline, at the rate
    # multi-GPU training sustains, predict's default on 8 GPUs), and both are positive.
    assert m.fsdp > 0 and m.compute_only > 0 and m.exposed_comm_s < 0.05 * m.step_s
    assert m.fsdp == pytest.approx(m.compute_only * MULTI_GPU_TRAINING_EFFICIENCY, rel=0.05)


def test_the_section_writer_keeps_every_other_section(tmp_path):
    doc = tmp_path / "VALIDATION.md"
    doc.write_text("# Validation\n\n## Part 1\n\ntext one\n\n<!-- single-gpu-throughput: begin -->\n"
                   f"{accuracy.HEADING}\n\nold\n<!-- single-gpu-throughput: end -->\n\n<!-- layouts: begin -->\n"
                   "## Layouts\n\nx\n<!-- layouts: end -->\n\n## Part 3\n\ny\n")
    accuracy.write_section(f"{accuracy.HEADING}\n\nnew\n", doc)
    text = doc.read_text()
    assert "old" not in text and "single-gpu-throughput" not in text
    assert text.index("text one") < text.index("new") < text.index("<!-- layouts: begin -->\n## Layouts")
    assert text.endswith("<!-- layouts: end -->\n\n## Part 3\n\ny\n")
    accuracy.write_section(f"{accuracy.HEADING}\n\nnew\n", doc)
    assert doc.read_text() == text  # idempotent


@pytest.mark.slow
def test_forward_checks_pair_an_inference_row_with_its_training_row(evaluated):
    results, _ = evaluated
    by_id = {r.row.id: r for r in results}
    for check in accuracy.FORWARD_CHECKS:
        assert re.search(r"@[0-9a-f]{40} ", check.source), check
        train = by_id[check.training_row]
        assert (train.row.gpu, train.row.precision) == (check.gpu, check.precision), check
        # The forward alone (no dropout, backward or optimizer) runs several times faster
        # than a training step of the same batch.
        assert accuracy.forward_only(check, train.efficiencies) > 2.5 * train.predicted, check
