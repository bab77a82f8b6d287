"""A prediction of many micro-batches extrapolated from a few (dpsim/predict/extrapolate.py) against the full
simulation of every micro-batch, for every layout kind and schedule, below and above the threshold.

Invariant: below :data:`EXTRAPOLATE_ABOVE` the two paths are one (bit for bit); above, every number of
``predict --json`` agrees within 1e-9 of its size, plus 1e-12 of the step for a time that is the difference of
two absolute times (a stage's wait), and 1e-9 absolute for a share (``overlap_fraction``, 1 - exposed / comm,
near 0 where little is hidden): the full path adds thousands of op times in absolute time and rounds there, as
its own module docstring says (dpsim/engine/play.py)."""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.predict import PredictConfig, predict
from dpsim.predict.extrapolate import (EXTRAPOLATE_ABOVE, NotPeriodic, _affine, extrapolated, full_simulation,
                                       sample_counts)
from dpsim.predict.run import full_path_allowed

REL = 1e-9
"""Relative agreement of each number (see the module docstring)."""
STEP_REL = 1e-12
"""... or absolute, as a share of the step time."""

GPT2 = dict(link="infiniband", model="gpt2", micro_batch=1, steps=1)
CASES = {
    "ddp": dict(GPT2, gpus=16),
    "ddp-no-overlap": dict(GPT2, gpus=16, overlap=False),
    "zero1": dict(GPT2, gpus=16, strategy="zero1"),
    "zero2": dict(GPT2, gpus=16, strategy="zero2"),
    "fsdp": dict(GPT2, gpus=16, strategy="fsdp"),
    "zero3": dict(GPT2, gpus=16, strategy="zero3"),
    "hsdp": dict(GPT2, gpus=16, strategy="fsdp-hybrid", zero_group=8),
    "tp2-pp4-1f1b": dict(GPT2, gpus=16, tp=2, pp=4),
    "pp4-gpipe": dict(GPT2, gpus=8, pp=4, schedule="gpipe"),
    "pp4-interleaved": dict(GPT2, gpus=8, pp=4, schedule="1f1b-interleaved", virtual_stages=3),
    "pp4-zb-h1": dict(GPT2, gpus=8, pp=4, schedule="zb-h1"),
    "pp4-dualpipe": dict(GPT2, gpus=8, pp=4, schedule="dualpipe"),
    "pp4-deepspeed": dict(GPT2, gpus=8, pp=4, schedule="deepspeed"),
    "pp2-zero1": dict(GPT2, gpus=8, pp=2, strategy="zero1"),
    "pp2-fsdp": dict(GPT2, gpus=8, pp=2, strategy="fsdp"),
    "cp2": dict(GPT2, gpus=8, cp=2, tp=2),
    "moe-ep8-pp2": dict(link="infiniband", model="qwen3-30b-a3b", micro_batch=1, steps=1, gpus=16, ep=8, pp=2,
                        precision="bf16-mixed", recompute="full", moe_routing="zipf:1.0"),
    "moe-ep8-dualpipe": dict(link="infiniband", model="qwen3-30b-a3b", micro_batch=1, steps=1, gpus=32, ep=8, pp=4,
                             schedule="dualpipe", precision="bf16-mixed", recompute="full"),
    "ddp-3-steps": dict(GPT2, gpus=16, steps=3),
    "ddp-powersgd": dict(GPT2, gpus=16, comm_hook="powersgd"),
    "ddp-2-jobs": dict(GPT2, gpus=16, jobs=2),
    "ddp-calibrated": dict(link="aws-p4de", calibration="aws-p4de-2node", model="gpt2", micro_batch=1, gpus=16,
                           steps=1),
    "zero3-offload": dict(GPT2, gpus=16, strategy="zero3", offload="optimizer"),
    "pp4-interleaved-fsdp": dict(GPT2, gpus=16, pp=4, schedule="1f1b-interleaved", virtual_stages=2, strategy="fsdp"),
    "tp4-sequence-parallel": dict(GPT2, gpus=16, tp=4, sequence_parallel=True),
    "cp2-a2a": dict(GPT2, gpus=8, cp=2, cp_comm="a2a"),
}
BELOW = 64
ABOVE = 2400
"""Micro-batches per replica: below the threshold (full path only), and above it for every case (a multiple of
each period: 1, 2 for DualPipe, 4 for the interleaved schedule of 4 stages); also just past the threshold
(:data:`ABOVE_FEW`, the fast lane's)."""
ABOVE_FEW = 600


def _config(kw: dict, n: int) -> PredictConfig:
    dp = kw["gpus"] // (kw.get("tp", 1) * kw.get("pp", 1) * kw.get("cp", 1))
    return PredictConfig(**kw, global_batch=n * kw["micro_batch"] * dp)


def _differences(a, b, step_s: float, path: str = "") -> list[str]:
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), path
        return [d for k in a for d in _differences(a[k], b[k], step_s, f"{path}.{k}")]
    if isinstance(a, list):
        assert len(a) == len(b), path
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, step_s, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        slack = STEP_REL * step_s if path.endswith("_s") else REL if path.endswith("fraction") else 0.0
        ok = abs(a - b) <= REL * max(abs(a), abs(b)) + slack
        return [] if ok else [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_below_the_threshold_every_micro_batch_is_simulated(name):
    config = _config(CASES[name], BELOW)
    assert sample_counts(config) is None
    with full_simulation():
        full = predict(config).to_dict()
    assert predict(config).to_dict() == full


@pytest.mark.parametrize("name, n", [pytest.param(name, n, id=f"{name}-{n}", marks=[pytest.mark.slow] if n == ABOVE
                                                  else []) for name in sorted(CASES) for n in (ABOVE_FEW, ABOVE)])
def test_above_the_threshold_the_extrapolation_is_the_full_simulation(name, n):
    config = _config(CASES[name], n)
    assert config.micro_batches == n > EXTRAPOLATE_ABOVE and sample_counts(config) is not None
    fast = predict(config)
    assert fast.simulation.trace == () and fast.program is None  # it did extrapolate
    with full_simulation():
        full = predict(config)
    assert len(full.simulation.trace) > 0
    step = full.step_time_s
    assert _differences(fast.to_dict(), full.to_dict(), step) == []
    assert [s.step_time_s for s in fast.simulation.steps] == pytest.approx(
        [s.step_time_s for s in full.simulation.steps], rel=REL)


def test_past_the_full_limit_a_pipeline_is_predicted_and_its_memory_settled():
    """65,536 micro-batches of a 4-stage pipeline: refused before (500,000 slots at most), now predicted, the step
    growing by the same increment per micro-batch as between two counts the full path simulates."""
    kw = CASES["tp2-pp4-1f1b"]
    big = predict(_config(kw, 1 << 17))
    with full_simulation():
        small, smaller = predict(_config(kw, 4096)), predict(_config(kw, 2048))
    per = (small.step_time_s - smaller.step_time_s) / 2048
    assert big.step_time_s == pytest.approx(small.step_time_s + ((1 << 17) - 4096) * per, rel=1e-9)
    assert big.memory.total_bytes == small.memory.total_bytes  # 1F1B holds pp micro-batches at most
    assert big.layout.ideal_bubble_fraction == pytest.approx(3 / ((1 << 17) + 3), rel=1e-12)


def test_the_cli_example_once_refused_is_predicted():
    """The brief's example: --global-batch 65536 --micro-batch 1 --gpus 16 --model llama-2-7b --link infiniband
    (4,096 micro-batches x 3 steps = 12,288 simulated) was refused "expected at most 10,000"."""
    config = PredictConfig(global_batch=65536, micro_batch=1, gpus=16, model="llama-2-7b", link="infiniband")
    assert config.workload.steps * config.micro_batches > 10_000 and not full_path_allowed(config)
    assert predict(config).step_time_s > 0


def test_a_data_loader_keeps_the_full_path_and_its_limit():
    with pytest.raises(ConfigError, match="input-samples-per-s"):
        PredictConfig(gpus=16, link="infiniband", model="gpt2", micro_batch=1, global_batch=16 * 20_000,
                      input_samples_per_s=1e6)


def test_a_quantity_off_its_line_is_not_extrapolated():
    assert _affine([1.0, 2.0, 3.0, 5.0], (10, 11, 12, 14), 100, "x") == 91.0
    with pytest.raises(NotPeriodic):
        _affine([1.0, 2.0, 3.0, 6.0], (10, 11, 12, 14), 100, "x")  # the far count is off the line
    with pytest.raises(NotPeriodic):
        _affine([1.0, 2.0, 3.5, 5.5], (10, 11, 12, 14), 100, "x")  # unequal increments


def test_a_sample_whose_text_moves_is_not_periodic():
    """A string that changes with the count (a random draw named per micro-batch) ends the extrapolation."""
    from dpsim.engine.simulate import StepTiming
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Sample:
        timing: StepTiming
        note: str

    def at(config):
        n = config.micro_batches
        return Sample(timing=StepTiming(step_time_s=2.0 * n, forward_s=n, backward_s=n, optimizer_s=1.0,
                                        comm_s=0.0, exposed_comm_s=0.0), note=f"draw {n % 3}")
    config = _config(CASES["ddp"], ABOVE)
    with pytest.raises(NotPeriodic, match="note"):
        extrapolated(at, config, sample_counts(config))


def test_variability_keeps_the_full_path_and_its_limit():
    """Per-rank draws do not repeat micro-batch after micro-batch: the full path plays them (its program is
    there for the replay), and past its limit the refusal says why."""
    from dpsim import VariabilitySpec
    from dpsim.variability.run import predict_with_variability

    config = _config(CASES["ddp"], ABOVE)
    assert sample_counts(config) is not None
    prediction, report = predict_with_variability(config, VariabilitySpec(noise_cv=0.05, samples=2), steps=3)
    assert prediction.program is not None and report.statistics is not None
    big = PredictConfig(global_batch=65536, micro_batch=1, gpus=16, model="llama-2-7b", link="infiniband")
    with pytest.raises(ConfigError, match=r"draws per rank and step \(its steady state does not repeat\), so every "
                                          r"micro-batch is simulated; expected at most 10,000 there"):
        predict_with_variability(big, VariabilitySpec(noise_cv=0.05))


def test_a_steady_state_that_does_not_repeat_falls_back_to_the_full_path(monkeypatch):
    """Within the full path's limit every micro-batch is then simulated; past it, one line says why."""
    import dpsim.predict.run as run

    def off_the_line(*args, **kwargs):
        raise NotPeriodic("prediction.layout.stages[0].bubble_s")
    monkeypatch.setattr(run, "extrapolated", off_the_line)
    within = _config(CASES["tp2-pp4-1f1b"], ABOVE)
    assert predict(within).program is None and len(predict(within).simulation.trace) > 0  # the full path's
    past = _config(CASES["ddp"], 20_000)
    with pytest.raises(ConfigError, match=r"its steady state does not repeat \(prediction.layout.stages\[0\]"
                                          r".bubble_s is not the same increment per micro-batch\)"):
        predict(past)
