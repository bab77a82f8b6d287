"""``plan`` and ``sweep`` with predictions that extrapolate their steady state (dpsim/predict/extrapolate.py).

Invariants: a layout whose prediction extrapolates is kept past the full path's limits (10,000 micro-batches x
steps, 500,000 pipeline slots) and simulated as ``predict`` simulates it (the same call, so the same numbers, bit
for bit); its work (:func:`~dpsim.plan.planner.predict_work`, what ``plan``'s ``VERIFY_WORK`` and ``sweep``'s
``MAX_SWEEP_WORK`` bound) is the sampled counts' and so does not grow with the micro-batch count; where every
micro-batch is simulated (few of them, a data loader's rate, :func:`full_simulation`) the work is the full
count's, as before."""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.limits import MAX_PIPELINE_SLOTS, MAX_SIMULATED_MICRO_BATCHES, MAX_SWEEP_WORK
from dpsim.plan.grid import SweepSpec
from dpsim.plan.planner import DP_WORK_PER_LAYER, DP_WORK_PER_LAYER_SHARDED, plan_layouts, predict_work
from dpsim.plan.sweep import prediction_record, sweep_records, sweep_work
from dpsim.predict import PredictConfig, predict
from dpsim.predict.extrapolate import extrapolated_counts, extrapolates, full_simulation, sample_counts

BIG = 1 << 20
"""A global batch of 1,048,576 samples: on 8 GPUs of data parallelism alone with micro-batch 1 or 2, 65,536 or
131,072 micro-batches per replica, past the full path's 10,000 x 3 steps (fuzz round 8's case, where plan left
every data-parallel layout out)."""


def _base(**kw) -> PredictConfig:
    return PredictConfig(model="gpt2", gpus=8, link="nvlink", **kw)


def test_a_plan_past_the_full_limit_lists_layouts_predicted_as_predict_predicts_them():
    base = _base(micro_batch=1)
    search = dict(gpus=[8], global_batch=BIG, tps=[1], pps=[1], strategies=["ddp", "zero1"], micro_batches=[1, 2],
                  recomputes=["off"], verify=2)
    with full_simulation():  # main's path: every layout passes the limit and is left out
        with pytest.raises(ConfigError, match="layouts with more micro-batches per replica than predict simulates"):
            plan_layouts(base, **search)
    result = plan_layouts(base, **search)
    assert result.ranked and all(e.fits for e in result.ranked)
    assert all(BIG // (e.candidate.micro_batch * e.candidate.dp) * base.workload.steps > MAX_SIMULATED_MICRO_BATCHES
               for e in result.ranked)
    verified = [e for e in result.ranked if e.verified is not None]
    assert len(verified) == result.verification["simulated"] == 2
    for e in verified:
        config = e.candidate.config(result.base)
        assert extrapolates(config)
        assert e.verified.to_dict() == predict(config).to_dict()  # the same path: equal, not approximately
        assert e.step_time_s == e.verified.step_time_s


def test_a_pipeline_past_the_slot_limit_is_kept_and_verified():
    """pp 4 x 131,072 micro-batches = 524,288 slots (over 500,000): simulated from its sampled counts."""
    base = _base(micro_batch=1)
    result = plan_layouts(base, gpus=[8], global_batch=BIG * 2 // 4, tps=[2], pps=[4], strategies=["ddp"],
                          micro_batches=[1], recomputes=["off"], schedules=["1f1b"], sequence_parallel=True, verify=1)
    (e,) = [e for e in result.ranked if e.verified is not None]
    c = e.candidate
    assert c.pp * BIG * 2 // 4 > MAX_PIPELINE_SLOTS
    assert e.verified.to_dict() == predict(c.config(result.base)).to_dict()


def test_a_sweep_over_a_large_global_batch_is_not_refused_and_its_points_are_predicts():
    grid = {"model": "gpt2-xl", "link": "infiniband", "gpus": [4, 8], "micro_batch": 1, "global_batch": [BIG, BIG // 2]}
    spec = SweepSpec.from_grid(grid)
    configs = [PredictConfig(**p) for p in spec.points()]
    with full_simulation():
        assert sweep_work(spec, configs) > MAX_SWEEP_WORK  # main's counting refused it
    assert sweep_work(spec, configs) < MAX_SWEEP_WORK / 100
    rows = sweep_records(spec)
    assert len(rows) == len(configs) == 4
    for row, config in zip(rows, configs):
        assert extrapolates(config)
        expected = prediction_record(predict(config))
        assert {k: row[k] for k in expected} == expected


WORK_CASES = {
    "ddp": dict(layout=False, pp=1, schedule="1f1b", virtual_stages=1, strategy="ddp"),
    "fsdp": dict(layout=False, pp=1, schedule="1f1b", virtual_stages=1, strategy="fsdp"),
    "1f1b": dict(layout=True, pp=4, schedule="1f1b", virtual_stages=1, strategy="ddp"),
    "interleaved": dict(layout=True, pp=4, schedule="1f1b-interleaved", virtual_stages=3, strategy="ddp"),
    "dualpipe": dict(layout=True, pp=4, schedule="dualpipe", virtual_stages=1, strategy="ddp"),
}


def _full_work(kw: dict, m: int, steps: int, layers: int) -> float:
    """The count before extrapolation: every micro-batch."""
    if kw["layout"]:
        return float(kw["pp"] * (2 if kw["schedule"] == "dualpipe" else kw["virtual_stages"]) * m)
    return m * steps * layers * DP_WORK_PER_LAYER.get(kw["strategy"], DP_WORK_PER_LAYER_SHARDED)


@pytest.mark.parametrize("name", sorted(WORK_CASES))
def test_an_extrapolated_predictions_work_does_not_grow_with_its_micro_batches(name):
    kw = WORK_CASES[name]
    works = {m: predict_work(**kw, micro_batches=m, steps=3, layers=20) for m in (4096, 4104, 1 << 16, 1 << 24)}
    assert len(set(works.values())) == 1
    (work,) = set(works.values())
    assert 0 < work < _full_work(kw, 4096, 3, 20) / 2  # at most half the full path's (SPARSE_FACTOR)


@pytest.mark.parametrize("name", sorted(WORK_CASES))
@pytest.mark.parametrize("m", [1, 64, 512, 4096])
def test_the_full_paths_work_is_unchanged(name, m):
    kw = WORK_CASES[name]
    full = _full_work(kw, m, 3, 20)
    with full_simulation():
        assert predict_work(**kw, micro_batches=m, steps=3, layers=20) == full
    assert predict_work(**kw, micro_batches=m, steps=3, layers=20, input_rate=True) == full
    if m <= 512:
        assert predict_work(**kw, micro_batches=m, steps=3, layers=20) == full


def test_the_work_counts_are_those_predict_samples():
    """predict_work's counts are sample_counts' for the same config (one rule, two entry points)."""
    for kw in (dict(gpus=16), dict(gpus=16, tp=2, pp=4), dict(gpus=8, pp=4, schedule="1f1b-interleaved",
                                                             virtual_stages=3),
               dict(gpus=8, pp=4, schedule="dualpipe")):
        config = PredictConfig(model="gpt2", link="infiniband", micro_batch=1, global_batch=1 << 20, **kw)
        p = config.parallelism
        counts = extrapolated_counts(config.micro_batches, layout=p.layout_active, pp=p.pp, schedule=p.schedule,
                                     virtual_stages=p.virtual_stages, steps=config.workload.steps)
        assert counts is not None and counts == sample_counts(config) and extrapolates(config)


def test_too_many_steps_for_the_sampled_counts_keeps_the_old_limit():
    """Steps x the sampled counts past 10,000: no extrapolation, so the layout is still left out as too long."""
    counts = extrapolated_counts(1 << 16, layout=False, pp=1, schedule="1f1b", virtual_stages=1, steps=3)
    steps = MAX_SIMULATED_MICRO_BATCHES // sum(counts) + 1
    assert extrapolated_counts(1 << 16, layout=False, pp=1, schedule="1f1b", virtual_stages=1, steps=steps) is None
    with pytest.raises(ConfigError, match="layouts with more micro-batches per replica than predict simulates"):
        plan_layouts(_base(micro_batch=1, steps=steps), gpus=[8], global_batch=BIG, tps=[1], pps=[1],
                     strategies=["ddp"], micro_batches=[1], recomputes=["off"], verify=0)


def test_a_global_batch_of_16m_samples_is_taken_and_the_limit_named_past_its_own():
    """The global batch was capped at every count's 1,048,576 while each micro-batch was simulated; a plan of
    16,777,216 samples now costs what 1,048,576 does (dpsim/limits.py MAX_GLOBAL_BATCH)."""
    from dpsim.limits import MAX_GLOBAL_BATCH

    config = PredictConfig(model="gpt2", gpus=16, link="infiniband", micro_batch=1, global_batch=1 << 24)
    assert config.micro_batches == 1 << 20 and extrapolates(config)
    small = predict(PredictConfig(model="gpt2", gpus=16, link="infiniband", micro_batch=1, global_batch=1 << 20))
    assert predict(config).step_time_s > 15 * small.step_time_s
    with pytest.raises(ConfigError, match=f"--global-batch: {MAX_GLOBAL_BATCH + 1} is not valid; expected an integer "
                                          f">= 1 and <= {MAX_GLOBAL_BATCH:,}"):
        PredictConfig(model="gpt2", gpus=16, link="infiniband", global_batch=MAX_GLOBAL_BATCH + 1)
