"""``--clip-grad-norm`` and ``--zero-grad``: predict charges them through the roofline's own terms.

The reference rows of ``tests/data/single_gpu_throughput.csv`` (``grad_clip``, ``zero_grad``)
and ``dpsim predict`` go through the same :func:`dpsim.workload.compute.optimizer_terms`; here
the step moves by exactly what those terms say, for DDP, the sharded strategies and a
tensor/pipeline layout, and the defaults leave the JSON as it was.
"""

from __future__ import annotations

import json

import pytest

from dpsim.cli import main
from dpsim.hardware import get_gpu
from dpsim.predict import PredictConfig, predict
from dpsim.workload.catalog import get_model
from dpsim.workload.compute import CLIP_GRAD_NORM_PASSES, optimizer_terms, optimizer_time_s
from dpsim.workload.precision import get_precision
from dpsim.workload.roofline import HOST_OVERHEAD_PER_OP_S, Efficiencies

BASE = dict(gpus=8, link="dgx-a100", model="gpt2", micro_batch=8, steps=2, compute_efficiency=1.0)
"""One DGX A100 node (8x A100 SXM 80 GB), GPT-2 small, amp-bf16 (fp32 gradients), AdamW foreach; at
the one-GPU roofline's own rates (``compute_efficiency`` 1, not the multi-GPU default), which
:func:`extra_optimizer_s` costs."""


def extra_optimizer_s(**options) -> float:
    """What the roofline adds to the one-GPU optimizer step for ``options``."""
    model, gpu, precision = get_model("gpt2"), get_gpu("a100"), get_precision("amp-bf16")
    return (optimizer_time_s(optimizer_terms(model, gpu, precision, "adamw", **options))
            - optimizer_time_s(optimizer_terms(model, gpu, precision, "adamw")))


GOLDEN_CLIP_US = 1166.7
"""3 passes x 4 B x 124,439,808 / (1.732e12 B/s x 0.739): 1.17 ms per step."""
GOLDEN_LOOP_US = 1184.0
"""148 zero_() at 8 us of dispatch each (the 0.39 ms memset is shorter): 1.18 ms per step."""


def test_golden_extra_costs_of_clipping_and_a_zero_loop():
    """Frozen figures, with their derivation: GPT-2 small (124,439,808 parameters, 148 tensors)
    on an A100 SXM 80 GB whose streaming bandwidth is 1.732e12 B/s (hardware.py) at the
    fitted memory efficiency."""
    model, gpu = get_model("gpt2"), get_gpu("a100")
    rate = gpu.streaming_bandwidth_bytes_per_s * Efficiencies().memory
    clip = extra_optimizer_s(clip_grad_norm=True)
    assert clip == pytest.approx(CLIP_GRAD_NORM_PASSES * 4 * model.param_count / rate, rel=1e-12)
    loop = extra_optimizer_s(zero_grad_loop=True)
    # A memset of every fp32 gradient, or the dispatch of one zero_() per tensor if longer.
    assert loop == pytest.approx(max(4 * model.param_count / rate, len(model.params) * HOST_OVERHEAD_PER_OP_S),
                                 rel=1e-12)
    assert (model.param_count, len(model.params)) == (124_439_808, 148)
    assert (round(clip * 1e6, 1), round(loop * 1e6, 1)) == (GOLDEN_CLIP_US, GOLDEN_LOOP_US)


def test_ddp_step_moves_by_the_roofline_terms():
    plain = predict(PredictConfig(**BASE))
    for options, extra in ((dict(clip_grad_norm=True), extra_optimizer_s(clip_grad_norm=True)),
                           (dict(zero_grad="zero-loop"), extra_optimizer_s(zero_grad_loop=True)),
                           (dict(clip_grad_norm=True, zero_grad="zero-loop"),
                            extra_optimizer_s(clip_grad_norm=True, zero_grad_loop=True))):
        p = predict(PredictConfig(**BASE, **options))
        assert extra > 0
        # DDP's optimizer runs unsharded after the last bucket: the whole extra is on the step.
        assert p.optimizer_s - plain.optimizer_s == pytest.approx(extra, rel=1e-9)
        assert p.step_time_s - plain.step_time_s == pytest.approx(extra, rel=1e-6)
        assert p.compute_s - plain.compute_s == pytest.approx(extra, rel=1e-6)


@pytest.mark.parametrize("strategy", ["zero1", "zero2", "zero3", "fsdp"])
def test_sharded_strategies_charge_their_shard(strategy):
    plain = predict(PredictConfig(**BASE, strategy=strategy))
    p = predict(PredictConfig(**BASE, strategy=strategy, clip_grad_norm=True))
    extra = extra_optimizer_s(clip_grad_norm=True)
    # Each rank clips and steps its own shard of the gradients (1/8 here, padding aside); the
    # one-GPU step it is compared with clips them all.
    assert p.optimizer_s - plain.optimizer_s == pytest.approx(extra / 8, rel=0.01)
    assert p.compute_s - plain.compute_s == pytest.approx(extra, rel=1e-6)


def test_a_tensor_pipeline_layout_charges_them_too():
    base = dict(gpus=16, link="nvlink", model="llama-2-7b", micro_batch=1, global_batch=32, tp=2, pp=2, steps=1)
    plain = predict(PredictConfig(**base))
    p = predict(PredictConfig(**base, clip_grad_norm=True, zero_grad="zero-loop"))
    assert p.optimizer_s > plain.optimizer_s
    assert p.step_time_s > plain.step_time_s


def cli_json(*argv: str) -> dict:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["predict", "--gpus", "8", "--link", "dgx-a100", "--model", "gpt2", "--json", *argv]) == 0
    return json.loads(out.getvalue())


def test_json_names_the_options_only_when_set():
    plain = cli_json()
    assert "clip_grad_norm" not in plain["config"] and "zero_grad" not in plain["config"]
    both = cli_json("--clip-grad-norm", "--zero-grad", "zero-loop")
    assert both["config"]["clip_grad_norm"] is True and both["config"]["zero_grad"] == "zero-loop"
    assert both["step_time_s"] > plain["step_time_s"]


def test_bad_zero_grad_is_one_line(capsys):
    assert main(["predict", "--zero-grad", "zeros"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--zero-grad" in err and "'zeros'" in err and "set-to-none, zero-loop" in err


@pytest.mark.parametrize("row_id", ["T046", "T003"])
def test_predict_charges_a_reference_row_as_the_accuracy_script_does(row_id):
    """One code path: ``predict --gpus 1`` with the row's flags gives the accuracy script's
    throughput for it (shipped constants), clipping and apex O2's zero loop included."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
    import accuracy_compute as accuracy

    (row,) = [r for r in accuracy.load_rows() if r.id == row_id]
    assert row.grad_clip and row.zero_grad_loop and row.optimizer_kernels == ("fused", None)
    config = PredictConfig(gpus=1, gpus_per_node=1, link="dgx-a100", gpu=row.gpu, model=row.model,
                           seq_len=row.seq_len, flash_attention=False, precision=row.precision,
                           optimizer=row.optimizer, micro_batch=row.micro_batch, steps=1,
                           clip_grad_norm=True, zero_grad="zero-loop")
    expected = accuracy.predicted(accuracy.kernels(row), Efficiencies())
    assert predict(config).single_gpu_samples_per_s == pytest.approx(expected, rel=1e-9)
    without = predict(PredictConfig(**{**config.to_dict(), "clip_grad_norm": False, "zero_grad": "set-to-none"}))
    assert without.single_gpu_samples_per_s > expected


def test_a_measured_optimizer_step_gets_the_options_added(tmp_path):
    """A calibration profile's optimizer step was timed without clipping or a zero loop
    (``zero_grad(set_to_none=True)`` and ``step()``): predict adds what the options cost."""
    from test_calibrate_provenance import config, cpu_profile, measured_step

    path = cpu_profile(tmp_path, step=measured_step())
    plain = predict(config(path))
    both = predict(config(path, clip_grad_norm=True, zero_grad="zero-loop"))
    assert plain.optimizer_s == pytest.approx(0.004)
    from dpsim.profile.calibrated import calibrated_device
    from dpsim.profile.io import load_profile
    from dpsim.workload.compute import compute_profile

    device = calibrated_device(load_profile(path), get_gpu("h100"))
    expected = compute_profile(get_model("bert-base", flash_attention=True), device, micro_batch=2,
                               precision=get_precision("fp32"), optimizer="adamw", clip_grad_norm=True,
                               zero_grad_loop=True).step_options_s
    extra = both.optimizer_s - plain.optimizer_s
    assert extra > 0 and extra == pytest.approx(expected, rel=1e-9)
    assert both.compute_s - plain.compute_s == pytest.approx(extra, rel=1e-6)
    assert "modelled clipping/zero_grad loop" in both.provenance.to_dict()["compute"]["detail"]
