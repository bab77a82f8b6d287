"""Per-step variability of tensor/pipeline/expert layouts (dpsim.variability.layout): per-rank
noise, stragglers and hiccups through the layout closed form, and MoE routing's per-dispatch load."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpsim.cli import main
from dpsim.errors import ConfigError
from dpsim.predict import PredictConfig, predict
from dpsim.strategies.stage_parts import StageParts
from dpsim.variability.layout import (
    block_maxima,
    layout_step_intervals,
    routing_ratios,
    sync_of,
)
from dpsim.variability.run import predict_with_variability
from dpsim.variability.spec import Straggler, VariabilitySpec
from dpsim.workload.routing import parse_routing, rank_load

MOE = dict(gpus=64, model="mixtral-8x7b", pp=4, ep=8, link="infiniband")
DENSE = dict(gpus=16, tp=2, pp=2, link="infiniband", model="llama-2-7b", micro_batch=1, global_batch=64,
             precision="bf16-mixed")


def _routing_only(routing: str, **overrides):
    """A MoE layout's step times under its routing's per-dispatch load alone (no per-rank factor)."""
    p = predict(PredictConfig(**{**MOE, **overrides}, moe_routing=routing))
    lay, parts = p.layout.layout, p.layout.stage_parts
    sync = sync_of(tp=lay.tp, cp=lay.cp, dp=lay.dp, pp=lay.pp, ep=lay.ep, etp=lay.etp,
                   micro_batches=lay.micro_batches, parts=parts, routing=routing)
    x = layout_step_intervals(VariabilitySpec(seed=3), parts, sync, persistent=np.ones(p.n_gpus),
                              nominal_step_s=p.step_time_s, steps=50, step_factors=p.layout.expert_load.step_factors)
    return p, x


# ----------------------------------------------------------------------------- no variability: as today

@pytest.mark.parametrize("cfg", [DENSE, MOE], ids=["dense", "moe-balanced"])
def test_no_variability_is_the_plain_prediction(cfg):
    config = PredictConfig(**cfg)
    plain = predict(config)
    p, report = predict_with_variability(config, VariabilitySpec())
    assert report is None
    assert p.step_time_s == plain.step_time_s and p.samples_per_s == plain.samples_per_s


def test_routing_variability_leaves_the_deterministic_step_alone():
    config = PredictConfig(**MOE, moe_routing="zipf:1.2")
    p, report = predict_with_variability(config, VariabilitySpec(samples=2), steps=5)
    assert p.step_time_s == predict(config).step_time_s  # the mean factor, as costed before
    assert report.routing_only and report.statistics.nominal_step_s == p.step_time_s


def test_all_factors_one_gives_the_nominal_step():
    p = predict(PredictConfig(**DENSE))
    lay, parts = p.layout.layout, p.layout.stage_parts
    sync = sync_of(tp=lay.tp, cp=lay.cp, dp=lay.dp, pp=lay.pp, ep=1, etp=1, micro_batches=lay.micro_batches,
                   parts=parts, routing=None)
    spec = VariabilitySpec(stragglers=(Straggler(target="gpu", index=0, factor=1.0),), samples=2)
    x = layout_step_intervals(spec, parts, sync, persistent=np.ones(p.n_gpus), nominal_step_s=p.step_time_s,
                              steps=4)
    assert np.allclose(x, p.step_time_s, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- the distribution

def test_percentiles_are_ordered_and_above_the_noise_free_step():
    _, report = predict_with_variability(PredictConfig(**DENSE), VariabilitySpec(noise_cv=0.05, samples=4), steps=30)
    s = report.statistics
    assert s.p99_s >= s.p90_s >= s.p50_s >= s.nominal_step_s
    assert s.mean_s > s.nominal_step_s and s.slowdown > 1
    lo, hi = s.samples_per_s_ci
    assert lo <= s.samples_per_s <= hi


def test_noise_costs_more_with_more_synchronising_ranks():
    slow = []
    for gpus in (8, 32, 128):
        cfg = {**DENSE, "gpus": gpus, "global_batch": 2 * gpus}
        _, report = predict_with_variability(PredictConfig(**cfg), VariabilitySpec(noise_cv=0.05, samples=4),
                                             steps=30)
        slow.append(report.statistics.slowdown)
    assert slow[0] < slow[1] < slow[2]


def test_a_wider_sync_block_waits_for_a_slower_rank():
    spec = VariabilitySpec(noise_cv=0.05, samples=2)
    persistent = np.ones(64)
    small = block_maxima(spec, persistent, block=2, steps=20, sample_ids=[0, 1], compute_s=1.0, exposure_s=1.0)
    large = block_maxima(spec, persistent, block=32, steps=20, sample_ids=[0, 1], compute_s=1.0, exposure_s=1.0)
    assert small.shape == (2, 20, 32) and large.shape == (2, 20, 2)
    assert large.mean() > small.mean() > 1.0


def test_one_stage_of_one_block_is_the_goodput_straggler_tail():
    """The goodput closed form is the special case of one block of every rank."""
    from dpsim.plan.layout_goodput import TAIL_STEPS, straggler_tail

    spec = VariabilitySpec(noise_cv=0.05)
    tail = straggler_tail(spec, n_gpus=256, gpus_per_node=8)
    assert tail == 1.140957925352596  # the value before the two shared block_maxima
    parts = (StageParts(work_s=1.0, compute_s=1.0, expert_compute_s=0.0, expert_comm_s=0.0, moe_layers=0,
                        optimizer_s=0.0),)
    sync = sync_of(tp=256, cp=1, dp=1, pp=1, ep=1, etp=1, micro_batches=1, parts=parts, routing=None)
    x = layout_step_intervals(VariabilitySpec(noise_cv=0.05, samples=1), parts, sync, persistent=np.ones(256),
                              nominal_step_s=1.0, steps=TAIL_STEPS)
    assert x.mean() == pytest.approx(tail, rel=1e-12)


def test_a_straggler_stretches_every_step_alike():
    config = PredictConfig(**DENSE)
    _, report = predict_with_variability(config, VariabilitySpec(stragglers=(Straggler(target="node", index=1,
                                                                                       factor=1.3),)), steps=5)
    s = report.statistics
    assert s.p50_s == pytest.approx(s.p99_s) and s.mean_s > 1.1 * s.nominal_step_s


def test_hiccups_lengthen_the_tail():
    config = PredictConfig(**DENSE)
    _, report = predict_with_variability(config, VariabilitySpec(hiccup_rate_per_s=0.05, hiccup_s=0.5, samples=4),
                                         steps=40)
    s = report.statistics
    assert s.p99_s > s.p50_s and s.mean_s > s.nominal_step_s


L13 = dict(gpus=64, tp=2, pp=4, link="infiniband", model="llama-2-13b", micro_batch=1, global_batch=64,
           precision="bf16-mixed")


@pytest.mark.parametrize("cfg, tol", [
    (L13, 0.003), ({**L13, "schedule": "gpipe"}, 0.003),
    ({**L13, "schedule": "1f1b-interleaved", "virtual_stages": 2}, 0.01), ({**L13, "schedule": "zb-h1"}, 0.01),
    ({**L13, "schedule": "dualpipe"}, 0.01), ({**L13, "gpus": 128, "cp": 2}, 0.01),
    ({**MOE, "global_batch": 256}, 0.003)], ids=["1f1b", "gpipe", "interleaved", "zb-h1", "dualpipe", "cp", "moe"])
def test_every_rank_slower_matches_the_engine_with_slower_compute(cfg, tol):
    """Every rank 1.3x slower (a straggler on every node) through the closed form, against the
    pipeline engine's own step with every compute time 1.3x longer (a measured one-GPU step 1.3x
    the modelled one): the schedule's fill weight and DualPipe's half passes are what make them agree."""
    from dpsim.hardware import get_gpu
    from dpsim.predict.config import resolved_compute_efficiency
    from dpsim.predict.run import load_model
    from dpsim.workload.compute import compute_profile
    from dpsim.workload.precision import get_precision

    config = PredictConfig(**cfg)
    p = predict(config)
    spec = VariabilitySpec(stragglers=tuple(Straggler(target="node", index=i, factor=1.3) for i in range(p.n_nodes)))
    _, report = predict_with_variability(config, spec, steps=2)
    precision = get_precision(config.execution.precision, config.execution.fp8, strategy=config.parallelism.strategy,
                              layout=True)
    # The one-GPU step at the compute efficiency predict(config) ran at (its multi-GPU default).
    one = compute_profile(load_model(config), get_gpu(p.gpu), micro_batch=config.workload.micro_batch,
                          precision=precision, optimizer=config.workload.optimizer,
                          compute_efficiency=resolved_compute_efficiency(config)[0])
    engine = predict(PredictConfig(**cfg, single_gpu_step_s=1.3 * one.step_s)).step_time_s
    assert report.statistics.mean_s == pytest.approx(engine, rel=tol)
    assert report.statistics.mean_s > 1.2 * p.step_time_s


# ----------------------------------------------------------------------------- MoE routing

def test_zipf_routing_spreads_the_steps_wider_than_balanced():
    pb, xb = _routing_only("balanced")
    pz, xz = _routing_only("zipf:1.2")
    assert xz.std() > xb.std()
    assert xz.std() / pz.step_time_s > xb.std() / pb.step_time_s


def test_balanced_routing_with_many_tokens_is_narrow():
    values = rank_load(parse_routing("balanced"), experts=64, ep=8, tokens_per_rank=65536, top_k=2).step_factors
    r = routing_ratios(values, groups=1, dispatches=32, shape=(2000,), rng=np.random.default_rng(0))
    assert abs(r.mean() - 1) < 1e-3 and r.std() < 1e-3
    few = rank_load(parse_routing("balanced"), experts=64, ep=8, tokens_per_rank=256, top_k=2).step_factors
    assert routing_ratios(few, groups=1, dispatches=32, shape=(2000,), rng=np.random.default_rng(0)).std() > r.std()


def test_several_expert_groups_per_block_raise_the_mean():
    values = rank_load(parse_routing("balanced"), experts=8, ep=2, tokens_per_rank=512, top_k=2).step_factors
    one = routing_ratios(values, groups=1, dispatches=4, shape=(4000,), rng=np.random.default_rng(1))
    four = routing_ratios(values, groups=4, dispatches=4, shape=(4000,), rng=np.random.default_rng(1))
    assert four.mean() > one.mean()


def test_routing_draws_leave_the_noise_draws_alone():
    p = predict(PredictConfig(**MOE))
    lay, parts = p.layout.layout, p.layout.stage_parts
    spec = VariabilitySpec(noise_cv=0.05, samples=2)
    args = dict(persistent=np.ones(64), nominal_step_s=p.step_time_s, steps=10)
    sync = sync_of(tp=1, cp=1, dp=lay.dp, pp=lay.pp, ep=lay.ep, etp=1, micro_batches=1, parts=parts, routing="x")
    a = layout_step_intervals(spec, parts, sync, **args)
    b = layout_step_intervals(spec, parts, sync, **args, step_factors=(1.0,) * 64)  # constant routing
    assert np.array_equal(a, b)


# ----------------------------------------------------------------------------- a golden case

def test_golden_seeded_moe_layout():
    config = PredictConfig(**MOE, moe_routing="zipf:1.2")
    _, report = predict_with_variability(config, VariabilitySpec(noise_cv=0.05, seed=7, samples=3), steps=20)
    s = report.statistics
    assert report.layout.block == 8 and report.layout.dispatches_per_step == (8, 8, 8, 8)
    # (6.301266094, 6.289059865, 6.463002961) before the weight-gradient GEMMs read and wrote the
    # gradient buffer (dpsim.workload.roofline.wgrad_output_bytes); (6.301269337, 6.289063101, 6.463006293) before
    # the multi-GPU compute efficiency 0.95 (dpsim.workload.compute.MULTI_GPU_TRAINING_EFFICIENCY);
    # (6.615813206, 6.602970146, 6.786064514) before the H100's sustained matmul rate (GH100_SUSTAINED_TFLOPS).
    assert (s.mean_s, s.p50_s, s.p99_s) == pytest.approx((6.859001124, 6.845604803, 7.035903875), rel=1e-8)


# ----------------------------------------------------------------------------- inputs

def test_degrade_on_a_layout_goes_with_the_noise():
    """--degrade with --noise-cv on a layout: the nominal step is the degraded one, the spread drawn on it."""
    from dpsim.network.degrade import parse_degradation

    deg = (parse_degradation("infiniband:50%"),)
    healthy, _ = predict_with_variability(PredictConfig(**DENSE), VariabilitySpec(noise_cv=0.05, samples=2), steps=10)
    slow, report = predict_with_variability(PredictConfig(**DENSE), VariabilitySpec(noise_cv=0.05, samples=2,
                                                                                     degradations=deg), steps=10)
    assert slow.step_time_s > healthy.step_time_s
    assert report.degradation.healthy_step_s == healthy.step_time_s
    assert report.statistics.nominal_step_s == slow.step_time_s


def test_a_named_link_outside_the_layout_is_refused_in_one_line():
    from dpsim.network.degrade import parse_degradation

    with pytest.raises(ConfigError, match=r"^--degrade: 'node2.nic0:50%' names node 2, but there are 2 nodes") as e:
        predict_with_variability(PredictConfig(**DENSE),
                                 VariabilitySpec(degradations=(parse_degradation("node2.nic0:50%"),)))
    assert "\n" not in str(e.value)


def test_a_block_that_does_not_tile_the_ranks_is_refused():
    with pytest.raises(ConfigError, match="block: 3 is not valid"):
        block_maxima(VariabilitySpec(noise_cv=0.1), np.ones(8), block=3, steps=1, sample_ids=[0], compute_s=1.0,
                     exposure_s=1.0)


def test_a_straggler_outside_the_layout_is_refused():
    with pytest.raises(ConfigError, match="--straggler: 'node9:1.3x' names node 9"):
        predict_with_variability(PredictConfig(**DENSE),
                                 VariabilitySpec(stragglers=(Straggler(target="node", index=9, factor=1.3),)))


# ----------------------------------------------------------------------------- the command line

def test_cli_json_of_a_noisy_moe_layout(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    rc = main(["predict", "--gpus", "64", "--model", "mixtral-8x7b", "--pp", "4", "--ep", "8", "--link",
               "infiniband", "--noise-cv", "0.05", "--mc-samples", "2", "--mc-steps", "10", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    d = json.loads(out)
    v = d["variability"]
    assert v["method"] == "layout-closed-form" and v["routing_only"] is False
    assert v["layout"]["routing"] == "balanced" and v["layout"]["block_ranks"] == 8
    st = v["statistics"]
    assert st["p99_step_s"] >= st["p90_step_s"] >= st["p50_step_s"] and st["nominal_step_s"] == d["step_time_s"]
    assert d["model_error"] is None or "variability" not in d["model_error"]


def test_cli_table_shows_routing_variability_without_noise(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    rc = main(["predict", "--gpus", "64", "--model", "mixtral-8x7b", "--pp", "4", "--ep", "8", "--link",
               "infiniband", "--moe-routing", "zipf:1.2", "--mc-samples", "2", "--mc-steps", "10"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "routing variability: MoE routing zipf:1.2 per dispatch" in out
    assert "p50 / p90 / p99 step" in out and "layout closed form" in out


def test_cli_degrade_on_a_layout(capsys):
    rc = main(["predict", "--gpus", "16", "--model", "llama-2-7b", "--tp", "2", "--pp", "2", "--link", "infiniband",
               "--degrade", "infiniband:50%", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    effect = json.loads(out)["variability"]["degradation"]
    assert effect["step_s"] > effect["healthy_step_s"]


def test_sampling_flags_stay_accepted_with_routing_variability_alone():
    # Non-balanced routing spreads the steps with no per-rank factor: --seed/--mc-steps apply there.
    cfg = PredictConfig(**MOE, moe_routing="zipf:1.2")
    _, report = predict_with_variability(cfg, VariabilitySpec(seed=3, samples=2), steps=3)
    assert report is not None and report.routing_only and report.spec.seed == 3
    with pytest.raises(ConfigError, match="--seed"):  # balanced routing, nothing else: nothing varies
        predict_with_variability(PredictConfig(**MOE), VariabilitySpec(seed=3), steps=None)
