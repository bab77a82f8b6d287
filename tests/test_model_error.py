"""The model-error interval on every prediction (issue 25 part 1): built from leave-one-system-out
validation residuals, measured for coverage, widened when a query extrapolates."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest

from dpsim.cli.app import main
from dpsim.predict.config import PredictConfig
from dpsim.predict.model_error import (
    COLLECTIVE_POOL,
    COVERAGE,
    KNOBS,
    LAYOUT_KINDS,
    MIN_ROWS,
    POOLS,
    WIDEN_PER_EXTRAPOLATION,
    Regime,
    ResidualRow,
    layout_kind,
    load_rows,
    log_interval,
    loso_coverage,
    regime_coverage,
)
from dpsim.predict.run import predict
from dpsim.workload.catalog import get_model

def test_every_shipped_row_is_cited_and_in_a_known_pool():
    rows, classes = load_rows()
    assert {r.pool for r in rows} == {*POOLS, COLLECTIVE_POOL}
    for r in rows:
        assert r.source.strip() and r.system and math.isfinite(r.log_ratio), r
    assert {"nvswitch", "ib", "tcp"} <= classes
    assert len({(r.pool, r.id) for r in rows}) == len(rows), "a row twice"


@pytest.fixture(scope="module")
def shipped_coverage():
    """:func:`loso_coverage` of the shipped rows and rules, scored once for the two bars below."""
    return loso_coverage()


def test_no_pool_falls_below_75_percent_inside(shipped_coverage):
    """The one margin for all pools (since interval4) is calibrated over the pools together, not in
    each, so a floor per pool keeps one pool from paying for another's width (2026-12-07, 479 rows:
    compute 90.0 %, ddp 96.9 %, layout 75.8 %, collective 80.9 %; 484 rows with R215-R219: 92.0, 100,
    73.5 and 82.8 %, a strict xfail then, as R215-R219 tipped 26 of 46 large-model folds' efficiency from
    0.95 to 0.90; 2026-12-08, 497 rows with R220-R232 and the folds choosing by 0.005
    (validation/accuracy_large_models.py's CHOICE_GRID): 90.0, 96.9, 75.2 and 81.5 %)."""
    cov = shipped_coverage
    assert cov["all"].rows == len(load_rows()[0])
    assert all(c.fraction >= 0.75 for c in cov.values()), {k: round(v.fraction, 3) for k, v in cov.items()}


def test_leaving_each_system_out_at_least_80_percent_of_rows_fall_inside(shipped_coverage):
    """The bar of issue 25, over every pool together (per pool in VALIDATION.md).

    Met since 2026-12-07 (385 of 479, 80.38 %; 388 of 484, 80.17 %, with R215-R219; 398 of 497, 80.08 %,
    with R220-R232 and the large-model folds choosing their efficiency by 0.005): it was a strict xfail at 375 of 471 (79.62 %) until NCCL's
    per-channel LL128 limits across NICs took the collective pool from 122 to 127 of 157 inside and eight
    unseen rows (R207-R214) came in; before, 365 of 457, 373 of 466, 372, 375 of 471 as rows were added."""
    cov = shipped_coverage
    assert cov["all"].fraction >= COVERAGE, {k: round(v.fraction, 3) for k, v in cov.items()}


@pytest.mark.xfail(strict=True, reason="issue 25's width bar is not met since 2026-12-07: the multi-GPU compute "
                   "efficiency 0.95 (dpsim/workload/compute.py) took the large-model and layout rows' median |error| "
                   "down while the one conformal margin, set by the heavy-tailed pools, did not shrink: 357 of 444 "
                   "inside (80.4 %), half-width / error 2.113 (1.895 over 433 rows at efficiency 1); with the "
                   "large-model rows at their leave-one-system-out residuals (validation/model_error.py since "
                   "2026-12-07) 355 (79.95 %), 2.148, and none of the interval rules registered then (Y0-Y6, "
                   "validation/model_error_variants.py) meets both bars (closest: Y5, 80.2 %, 2.029); over the 457 rows "
                   "with the unseen MLPerf rows R180-R192: 365 inside (79.9 %), 2.241 (Y5 2.036, W0 2.082); the query-time "
                   "regime features R1-R6 registered before scoring none meets both (R4 79.9 %, 2.092); over 466 rows "
                   "with the sustained H100 rate and R193-R201: 373 inside (80.04 %), 2.203; with the MLPerf GPT-3 rows' "
                   "attention kernels stated: 372 (79.83 %), 2.250; over 471 rows with R202-R206: 375 (79.62 %), 2.458; "
                   "over 479 rows with NCCL's per-channel LL128 limits and R207-R214: 385 (80.38 %), 2.183; over 484 rows "
                   "with R215-R219 (26 large-model folds' efficiency 0.95 -> 0.90): 388 (80.17 %), 2.457; over 497 rows with "
                   "R220-R232 and the large-model folds choosing by 0.005: 398 (80.08 %), 2.351")
def test_the_intervals_are_at_most_twice_the_median_error_wide(shipped_coverage):
    """Issue 25's bar: a median half-width at most twice the median |error|, leaving each system out.
    The shortest 80 % window per regime with one conformal margin for all pools (interval4) reads
    1.919 over the 423 rows (13.42 % / 6.99 %); the rule was chosen after ~25 registered variants
    had been scored, and chosen per left-out system on the other systems' rows alone among the
    rule before it, X1 and itself it reads 1.944 (``python validation/model_error_variants.py
    --nested W0 X1 X1J``). Before: 2.087 (the regime's p10-p90 with a margin per pool)."""
    cov = shipped_coverage["all"]
    assert cov.median_half_width <= 2.0 * cov.median_abs_error, (cov.median_half_width, cov.median_abs_error)


def test_the_large_model_runs_are_judged_by_the_layout_pool():
    """The published FSDP / ZeRO / 3D / MoE runs are residual rows of the pool their predictions
    take (a transformer of a billion parameters or more from the presets), not only a table."""
    rows = load_rows()[0]
    suites = {r.suite for r in rows if r.pool == "layout"}
    assert suites == {"layouts", "large-models"}
    assert all(r.suite == "" for r in rows if r.pool != "layout")
    large = [r for r in rows if r.suite == "large-models"]
    assert len(large) >= 100 and len({r.system for r in large}) >= 8


def test_every_layout_row_has_a_layout_kind_seen_on_more_than_one_system():
    """The layout pool's first key: each kind's rows come from at least two systems, so that leaving
    one out still leaves the kind rows of another (and no kind is an extrapolation there)."""
    rows = load_rows()[0]
    assert all((r.layout_kind in LAYOUT_KINDS) == (r.pool == "layout") for r in rows)
    for kind in LAYOUT_KINDS:
        assert len({r.system for r in rows if r.layout_kind == kind}) >= 2, kind


def test_layout_kind_of_a_model_and_layout():
    dense = get_model("llama-2-7b")
    assert layout_kind(dense, tp=1, pp=1, cp=1) == "dp"
    assert layout_kind(dense, tp=1, pp=2, cp=1) == "3d" == layout_kind(dense, tp=1, pp=1, cp=2)
    assert layout_kind(dataclasses.replace(dense, moe=object()), tp=1, pp=1, cp=1) == "moe"


def test_the_layout_pool_keys_by_layout_kind_and_an_unseen_kind_widens():
    rng = random.Random(13)
    rows = [dataclasses.replace(r, pool="layout", layout_kind="dp") for r in _synthetic(2 * MIN_ROWS, rng, systems=3)]
    base = Regime(pools=("layout",), gpu_arch="hopper", model_family="decoder", params=1e9, gpus=1, layout_kind="dp")
    lo0, hi0, matched, _, widened = log_interval(base, rows)
    assert matched["layout"]["layout_kind"] == "dp" and not widened
    lo, hi, matched, _, widened = log_interval(dataclasses.replace(base, layout_kind="moe"), rows)
    assert "layout_kind" not in matched["layout"]
    assert len(widened) == 1 and "moe layout" in widened[0]
    assert hi - lo == pytest.approx((hi0 - lo0) * WIDEN_PER_EXTRAPOLATION, rel=1e-9)


def test_a_ddp_query_on_an_architecture_with_enough_rows_keeps_them():
    """The ddp pool's wide leave-one-system-out intervals (module docstring: 20.41x its median
    error) come from a left-out hopper server leaving too few hopper rows, not from the intervals a
    prediction gets: with every row, a hopper query keeps its architecture's rows (all predicted
    within 0.5 %), and its interval is narrower than one on an architecture that falls back to the
    whole pool (blackwell: one server's rows). Since interval4 both carry the one margin of all
    pools (0.038 in ln over the 423 rows, which the layout and collective pools' scores set), so the
    hopper query's interval is -3.8 % / +4.0 % (-1.6 % / +1.7 % with the ddp pool's own margin
    before) and no longer under half the blackwell one's: the cost of the joint margin, disclosed
    in the module docstring. Held within +/-6.5 %: the margin moves as rows are added or re-scored
    (0.0364 -> 0.0379 when the expert and pipeline-pair placement re-scored R059 and R071-R073; to
    about 0.058, -5.7 % / +6.1 %, when the large-model rows entered with their leave-one-system-out
    residuals and R180-R192 were added, 2026-12-07)."""
    rows = load_rows()[0]
    hopper = Regime(pools=("ddp",), gpu_arch="hopper", model_family="cnn", params=2.56e7, gpus=8)
    lo, hi, matched, ids, widened = log_interval(hopper, rows)
    assert matched["ddp"].get("gpu_arch") == "hopper" and not widened
    assert len(ids) >= MIN_ROWS and all(abs(r.log_ratio) < 0.01 for r in rows if r.id in ids and r.pool == "ddp")
    lo_b, hi_b, matched_b, _, _ = log_interval(dataclasses.replace(hopper, gpu_arch="blackwell"), rows)
    assert "gpu_arch" not in matched_b["ddp"]
    assert hi - lo < hi_b - lo_b
    assert math.expm1(hi) < 0.065 and math.expm1(lo) > -0.065, (lo, hi)


def test_every_pool_has_its_knobs_and_each_regime_is_scored():
    assert set(KNOBS) == {*POOLS, COLLECTIVE_POOL}
    per_regime = regime_coverage()
    assert sum(c.rows for c in per_regime.values()) == len(load_rows()[0])
    assert {label.split()[0] for label in per_regime} == {*POOLS, COLLECTIVE_POOL}


def _synthetic(n: int, rng: random.Random, system: str = "s", systems: int = 1, sigma: float = 0.1,
               gpu_arch: str = "hopper") -> list[ResidualRow]:
    return [ResidualRow(id=f"{system}{gpu_arch}{i}", pool="compute", system=f"{system}{i % systems}",
                        log_ratio=rng.gauss(0.0, sigma), gpu_arch=gpu_arch, model_family="decoder", params=1e9,
                        gpus=1, source="synthetic")
            for i in range(n)]


def test_conformal_interval_covers_a_new_exchangeable_row_80_percent_of_the_time():
    rng = random.Random(7)
    regime = Regime(pools=("compute",), gpu_arch="hopper", model_family="decoder", params=1e9, gpus=1)
    trials, inside = 2000, 0
    for _ in range(trials):
        rows = _synthetic(MIN_ROWS, rng, systems=4)
        low, high, _, _, widened = log_interval(regime, rows)
        assert not widened
        inside += low <= rng.gauss(0.0, 0.1) <= high
    # the conformal margin guarantees >= 80 % for exchangeable rows (here a little more: a margin
    # scored on 9 rows takes the ceil(0.8 * 10) = 8th smallest score)
    assert 0.80 <= inside / trials <= 0.93


def test_an_accurate_regime_gets_a_narrower_interval():
    """The interval starts from the p10-p90 of the query's regime's own rows: once a regime keeps
    its key (here also with any one system left out, as the conformal margin is scored), its width
    follows its own spread, not the pool's."""
    rng = random.Random(5)
    rows = (_synthetic(2 * MIN_ROWS, rng, "a", systems=4, sigma=0.01, gpu_arch="hopper")
            + _synthetic(2 * MIN_ROWS, rng, "b", systems=4, sigma=0.2, gpu_arch="ampere"))
    hopper = Regime(pools=("compute",), gpu_arch="hopper", model_family="decoder", params=1e9, gpus=1)
    lo_h, hi_h, matched, _, _ = log_interval(hopper, rows)
    lo_a, hi_a, _, _, _ = log_interval(dataclasses.replace(hopper, gpu_arch="ampere"), rows)
    assert matched["compute"]["gpu_arch"] == "hopper"
    assert 3 * (hi_h - lo_h) < hi_a - lo_a


def test_the_interval_follows_the_regime_bias():
    """A regime whose measurements all run 20 % slower than predicted gets an interval around +20 %,
    not around the pool's zero."""
    rng = random.Random(11)
    rows = (_synthetic(MIN_ROWS, rng, "a", systems=3, sigma=0.02, gpu_arch="hopper")
            + [dataclasses.replace(r, log_ratio=r.log_ratio + math.log(1.2))
               for r in _synthetic(MIN_ROWS, rng, "b", systems=3, sigma=0.02, gpu_arch="ampere")])
    ampere = Regime(pools=("compute",), gpu_arch="ampere", model_family="decoder", params=1e9, gpus=1)
    lo, hi, _, _, _ = log_interval(ampere, rows)
    assert lo < math.log(1.2) < hi and lo > 0.0


def test_each_extrapolation_widens_the_interval_and_is_named():
    rng = random.Random(1)
    rows = _synthetic(40, rng)
    base = Regime(pools=("compute",), gpu_arch="hopper", model_family="decoder", params=1e9, gpus=1)
    lo0, hi0, _, _, w0 = log_interval(base, rows)
    assert w0 == ()
    for change, needle in [({"gpu_arch": "ada"}, "ada GPU"), ({"model_family": "cnn"}, "cnn model"),
                           ({"params": 1e12}, "model size"),
                           ({"unvalidated_fabric": ("network transport 'ib (host-staged)'",)}, "host-staged")]:
        lo, hi, _, _, widened = log_interval(dataclasses.replace(base, **change), rows)
        assert len(widened) == 1 and needle in widened[0], widened
        assert (hi - lo) == pytest.approx((hi0 - lo0) * WIDEN_PER_EXTRAPOLATION, rel=1e-9)


def test_a_regime_keeps_its_keys_only_while_enough_rows_remain():
    rng = random.Random(3)
    rows = _synthetic(MIN_ROWS, rng, "a") + [dataclasses.replace(r, gpu_arch="ampere", id="b" + r.id, system="b")
                                             for r in _synthetic(MIN_ROWS - 1, rng, "b")]
    hopper = Regime(pools=("compute",), gpu_arch="hopper", model_family="decoder", params=1e9, gpus=1)
    _, _, matched, ids, _ = log_interval(hopper, rows)
    assert matched["compute"]["gpu_arch"] == "hopper" and len(ids) == MIN_ROWS
    ampere = dataclasses.replace(hopper, gpu_arch="ampere")
    _, _, matched, ids, _ = log_interval(ampere, rows)
    # the keys before the architecture (the compute pool's family) stay; it and those after go
    assert matched["compute"] == {"model_family": "decoder"} and len(ids) == len(rows), "too few ampere rows"


def test_communication_error_weighs_by_the_exposed_share():
    rows = ([ResidualRow(id=f"c{i}", pool="compute", system="x", log_ratio=0.0, gpu_arch="hopper",
                         model_family="decoder", params=1e9, gpus=1, source="s") for i in range(MIN_ROWS)]
            + [ResidualRow(id=f"n{i}", pool=COLLECTIVE_POOL, system="y", log_ratio=math.log(1 + 0.05 * i),
                           gpu_arch="hopper", model_family="none", params=0.0, gpus=16, source="s", fabric="ib")
               for i in range(MIN_ROWS)])
    base = Regime(pools=("compute",), gpu_arch="hopper", model_family="decoder", params=1e9, gpus=16, fabric="ib")
    widths = []
    for share in (0.0, 0.25, 1.0):
        lo, hi, matched, _, _ = log_interval(dataclasses.replace(base, exposed_share=share), rows)
        widths.append(hi - lo)
        assert (COLLECTIVE_POOL in matched["pools"]) == (share > 0)
    assert widths[0] == 0.0 < widths[1] < widths[2]


def test_a_layout_query_over_a_fabric_the_layout_rows_crossed_takes_no_collective_term():
    """The layout rows are whole steps measured over their networks: their residuals already hold
    the error of a step's exposed communication over that fabric class, so the collective pool's is
    added only where no layout row crossed the query's fabric (and a layout row is scored so)."""
    rng = random.Random(17)
    layout = [dataclasses.replace(r, pool="layout", layout_kind="dp", fabric="ib", exposed_share=0.2)
              for r in _synthetic(2 * MIN_ROWS, rng, systems=3, sigma=0.02)]
    coll = [ResidualRow(id=f"n{i}", pool=COLLECTIVE_POOL, system=f"y{i % 3}", log_ratio=math.log(1 + 0.1 * i),
                        gpu_arch="hopper", model_family="none", params=0.0, gpus=16, source="s", fabric=fabric)
            for i in range(MIN_ROWS) for fabric in ("ib", "roce")]
    rows = layout + coll
    base = Regime(pools=("layout",), gpu_arch="hopper", model_family="decoder", params=1e9, gpus=16,
                  layout_kind="dp", exposed_share=0.3)
    lo0, hi0, matched0, _, _ = log_interval(base, rows)
    lo, hi, matched, _, _ = log_interval(dataclasses.replace(base, fabric="ib"), rows)
    assert (lo, hi) == (lo0, hi0) and COLLECTIVE_POOL not in matched["pools"]
    lo, hi, matched, _, _ = log_interval(dataclasses.replace(base, fabric="roce"), rows)
    assert COLLECTIVE_POOL in matched["pools"] and hi - lo > hi0 - lo0


def test_the_shipped_layout_rows_carry_their_step_as_queried():
    """Each layout row holds the fabric class, exposed share and typical all-reduce its prediction's
    regime has (``validation/model_error.py``), so that it is scored as the query it would be; the
    other step pools' rows hold none."""
    rows = load_rows()[0]
    layout = [r for r in rows if r.pool == "layout"]
    assert all(0.0 <= r.exposed_share <= 1.0 for r in layout)
    assert all(r.fabric for r in layout if r.gpus > 1) and any(r.exposed_share > 0 for r in layout)
    assert all(not r.fabric and r.exposed_share == 0.0 for r in rows if r.pool in ("compute", "ddp"))


def test_predict_json_and_table_carry_the_interval(capsys):
    rc = main(["predict", "--gpus", "16", "--link", "infiniband", "--model", "resnet50", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    e = out["model_error"]
    assert e["kind"] == "model-error" and e["coverage"] == COVERAGE
    assert 0 < e["low_s"] < e["high_s"] and e["rows"] and e["regime"]["pools"][:2] == ["compute", "ddp"]
    rc = main(["predict", "--gpus", "16", "--link", "infiniband", "--model", "resnet50"])
    text = capsys.readouterr().out
    assert rc == 0 and "80%)" in text and "model error" in text


def test_measured_compute_takes_the_ddp_pool_and_layouts_the_layout_pool():
    measured = predict(PredictConfig(gpus=8, link="nvlink", model="resnet50", single_gpu_step_s=0.1))
    assert measured.model_error.regime["pools"][0] == "ddp"
    layout = predict(PredictConfig(gpus=64, link="infiniband", model="llama-2-7b", tp=8, pp=2, dp=4, micro_batch=1,
                                   global_batch=64, precision="bf16-params"))
    assert layout.model_error.regime["pools"][0] == "layout"
    assert layout.model_error.regime["layout"]["layout_kind"] == "3d"
    assert layout.model_error.low_s < layout.model_error.high_s


def test_a_sharded_query_of_a_small_model_takes_the_layout_pool():
    """FSDP / ZeRO steps are validated by the layout pool's dp rows (MosaicML's 125M-760M FSDP runs
    among them), not by the ddp pool's DDP steps: a preset sharded query takes the layout pool
    whatever its size, as its validation rows are scored; DDP and a measured step keep theirs."""
    fsdp = predict(PredictConfig(gpus=16, link="infiniband", model="gpt2", strategy="fsdp")).model_error
    assert fsdp.regime["pools"] == ["layout"] and fsdp.regime["layout"]["layout_kind"] == "dp"
    ddp = predict(PredictConfig(gpus=16, link="infiniband", model="gpt2")).model_error
    assert ddp.regime["pools"][:2] == ["compute", "ddp"]
    measured = predict(PredictConfig(gpus=8, link="nvlink", model="gpt2", strategy="zero2",
                                     single_gpu_step_s=0.1)).model_error
    assert measured.regime["pools"][0] == "ddp"
    assert (fsdp.high_s - fsdp.low_s) / fsdp.predicted_s < (ddp.high_s - ddp.low_s) / ddp.predicted_s


def test_an_unvalidated_fabric_widens_the_prediction():
    nvswitch = predict(PredictConfig(gpus=8, link="nvlink", model="resnet50")).model_error
    pcie = predict(PredictConfig(gpus=8, link="pcie", model="resnet50")).model_error
    assert not any("fabric" in w for w in nvswitch.widened_for)
    assert any("intra-node fabric" in w for w in pcie.widened_for)


@pytest.mark.slow
def test_the_shipped_rows_are_what_the_validation_scripts_produce():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
    import model_error as script

    data = script.gather()
    shipped = json.loads(script.ROWS_FILE.read_text())
    assert data == shipped, "dpsim/predict/model_error_rows.json is stale: python validation/model_error.py --write"


@pytest.mark.slow
def test_the_variants_script_reimplements_the_shipped_intervals_and_restores_them():
    """``validation/model_error_variants.py`` scores the interval variants the module docstring
    lists (interval2 and interval3, 2026-12-06) by putting them in place of the module's functions;
    its X1J, the shipped rule through the W variants' code, must read exactly as :func:`loso_coverage`
    does, and V0 and W0, the rule shipped before it written in each family's code, as each other, or
    their other figures are not comparable; the module must be itself again afterwards."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
    from model_error_variants import VARIANTS, W_VARIANTS, installed, installed_w

    from dpsim.predict import model_error as me

    shipped = loso_coverage()
    functions = (me._order_statistics, me._select, me._margin, me._pool_samples, me.log_interval, me.KNOBS)
    with installed_w(W_VARIANTS["X1J"]):
        assert me._pool_samples is not functions[3]
        again = loso_coverage()
    assert me._pool_samples is functions[3]
    for pool, c in shipped.items():
        assert (again[pool].inside, again[pool].rows) == (c.inside, c.rows), pool
        assert again[pool].median_half_width == pytest.approx(c.median_half_width, rel=1e-12), pool
    with installed(VARIANTS["V0"]):
        assert me._margin is not functions[2]
        v0 = loso_coverage()
    assert (me._order_statistics, me._select, me._margin, me._pool_samples, me.log_interval, me.KNOBS) == functions
    with installed_w(W_VARIANTS["W0"]):
        w0 = loso_coverage()
    assert (v0["all"].inside, v0["all"].rows) == (403, 497)  # 2026-12-08: R220-R232, folds by 0.005 (392 of 484 before)
    for pool, c in v0.items():
        assert (w0[pool].inside, w0[pool].rows) == (c.inside, c.rows), pool
        assert w0[pool].median_half_width == pytest.approx(c.median_half_width, rel=1e-12), pool


def test_query_features_come_from_the_prediction_s_own_configuration():
    """regime (2026-12-07): the features the R variants key or calibrate on are read from the query,
    known before anything is measured, so ``predict`` could use any of them."""
    from dpsim.predict.model_error import LONG_CONTEXT_TOKENS, query_features

    model = get_model("llama-2-7b")
    plain = query_features(PredictConfig(gpus=8, model="llama-2-7b"), model)
    assert plain == {"sharded_state": False, "long_context": False, "fp8": False, "recompute": False}
    assert query_features(PredictConfig(gpus=8, model="llama-2-7b", strategy="fsdp"), model)["sharded_state"]
    assert query_features(PredictConfig(gpus=8, model="llama-2-7b", strategy="zero3"), model)["sharded_state"]
    assert not query_features(PredictConfig(gpus=8, model="llama-2-7b", strategy="zero1"), model)["sharded_state"]
    assert query_features(PredictConfig(gpus=8, model="llama-2-7b", tp=2, cp=2), model)["long_context"]
    long = dataclasses.replace(model, tokens_per_sample=LONG_CONTEXT_TOKENS)
    assert query_features(PredictConfig(gpus=8, model="llama-2-7b"), long)["long_context"]
    assert query_features(PredictConfig(gpus=8, model="llama-2-7b", recompute="full"), model)["recompute"]


def test_every_layout_row_carries_its_query_features_and_the_other_pools_none():
    """The features default to False (rows stored before they were gathered read so too); only a
    layout row's query sets them, and ``coarse`` is their composite with the MoE kind."""
    row = ResidualRow(id="x", pool="layout", system="s", log_ratio=0.0, gpu_arch="hopper", model_family="decoder",
                      params=7e9, gpus=64, source="test", layout_kind="moe")
    assert row.coarse and not row.sharded_state
    assert not dataclasses.replace(row, layout_kind="3d").coarse
    assert dataclasses.replace(row, layout_kind="dp", long_context=True).coarse
    for r in load_rows()[0]:
        if r.pool != "layout":
            assert not (r.sharded_state or r.long_context or r.fp8 or r.recompute), r.id
