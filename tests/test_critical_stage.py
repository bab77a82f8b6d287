"""The layout prediction's headline is the critical pipeline stage's, not stage 0's.

Every stage of a played pipeline runs from the step's start to its end computing, waiting for its
own collectives or waiting for another stage (the bubble), then idles (its tail) until the last
stage ends the step. The critical stage is the one with the most compute and own waits, the one
idle least for the others: the bottleneck. Its forward, backward and optimizer times, its
communication and what of it is exposed are the prediction's; with one stage it is stage 0 and
nothing changes. What must hold: the decomposition, the step no shorter than the critical stage's
own time, exposed communication no more than communication, a heavy last stage taking the
headline, a heavy first stage keeping it on stage 0, ties going to the lowest stage, and the
after-wait charge moving the step once, by the most any stage's charge exceeds its tail.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from test_calibrate_provenance import config as profile_config  # helpers only
from test_calibrate_provenance import cpu_profile, measured_step
from test_layout_invariants import BASE, GRID, _predict

from dpsim.engine.pipeline import PipelineResult, StageTiming
from dpsim.predict.config import PredictConfig
from dpsim.predict.layout import critical_stage
from dpsim.predict.provenance import AfterComm, Origin, Provenance, charge_after_comm
from dpsim.predict.run import predict

TOL = 1e-9
PIPELINED = sorted(n for n in GRID if GRID[n].get("pp", 1) > 1)


def _own(st: StageTiming) -> float:
    return st.busy_s + st.wait_comm_s


@pytest.mark.parametrize("name", PIPELINED)
def test_every_stage_is_busy_waiting_or_done_until_the_step_ends(name):
    rep = _predict(name).layout
    step = rep.pipeline.step_time_s
    for st, sr in zip(rep.pipeline.stages, rep.stages):
        assert st.busy_s + st.wait_comm_s + st.wait_transfer_s == pytest.approx(st.end_s, rel=TOL, abs=1e-12)
        assert sr.bubble_s + sr.comm_wait_s + sr.busy_s + sr.tail_s == pytest.approx(step, rel=TOL)


@pytest.mark.parametrize("name", sorted(GRID))
def test_the_headline_is_the_critical_stage_whose_own_time_bounds_the_step(name):
    p = _predict(name)
    rep = p.layout
    k = rep.critical_stage
    stages = rep.pipeline.stages
    crit = stages[k]
    # The most own time, the least idle for others (bubble and tail), and the step no shorter.
    assert _own(crit) >= max(_own(st) for st in stages) * (1 - TOL)
    idle = [sr.bubble_s + sr.tail_s for sr in rep.stages]
    assert idle[k] <= min(idle) + TOL * p.step_time_s
    assert p.step_time_s >= _own(crit) * (1 - TOL) and p.step_time_s >= crit.busy_s
    assert k == 0 if rep.layout.pp == 1 else 0 <= k < rep.layout.pp
    # Forward, backward and optimizer are its played ops; exposed communication is at most its total.
    assert p.forward_s == crit.by_kind_s.get("forward", 0.0)
    assert p.backward_s == crit.by_kind_s.get("backward", 0.0) + crit.by_kind_s.get("recompute", 0.0)
    assert p.optimizer_s == crit.by_kind_s.get("optimizer", 0.0)
    assert 0 <= p.exposed_comm_s <= p.comm_s * (1 + TOL)
    assert rep.ep_comm_s == rep.stages[k].ep_comm_s and rep.etp_comm_s == rep.stages[k].etp_comm_s


def _llama(stage_layers: str | None, **changes):
    kw = dict(model="llama-3-8b", gpus=16, tp=2, pp=4, sequence_parallel=True, global_batch=32,
              stage_layers=stage_layers, **changes)
    return predict(PredictConfig(**BASE, **kw))


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "zb-h1"])
def test_a_heavy_last_stage_takes_the_headline(schedule):
    """20 of Llama-3-8B's 32 blocks on the last of 4 stages: that stage paces the pipeline, and stage 0
    (which with 1F1B still ends the step after the drain) spends most of the step waiting for it."""
    p = _llama("4,4,4,20", schedule=schedule)
    rep = p.layout
    assert rep.critical_stage == 3
    last, first = rep.pipeline.stages[3], rep.pipeline.stages[0]
    assert p.forward_s == last.by_kind_s["forward"] > 3 * first.by_kind_s["forward"]
    assert rep.stages[0].bubble_s > rep.stages[3].bubble_s
    assert p.step_time_s >= last.busy_s
    # Its tensor-parallel collectives: 20 blocks' (and the head's) against stage 0's 4 (and the embedding's).
    heavy_first = _llama("20,4,4,4", schedule=schedule).layout
    assert heavy_first.critical_stage == 0
    assert rep.tp_comm_s == pytest.approx(heavy_first.tp_comm_s, rel=0.05)
    assert rep.tp_comm_s > 3 * _llama("8,8,8,8", schedule=schedule).layout.tp_comm_s / 2


def test_a_heavy_first_stage_keeps_the_headline_on_stage_0():
    """What the report always gave, where stage 0 is the bottleneck."""
    p = _llama("20,4,4,4")
    rep = p.layout
    assert rep.critical_stage == 0
    st0 = rep.pipeline.stages[0]
    assert st0.end_s == rep.pipeline.step_time_s
    assert p.forward_s == st0.by_kind_s["forward"]
    assert p.exposed_comm_s == pytest.approx(rep.tp_exposed_s + st0.exposed_comm_s, rel=1e-12)


def test_uniform_blocks_put_the_headline_on_the_stage_with_the_output_layer():
    """Even stages of Llama-3-8B are not uniform work: the last holds the output layer over a 128k
    vocabulary and the loss, stage 0 only the embedding lookup, so the last stage paces the
    pipeline (its own time is the most) and is the headline; stage 0 ends the step after the drain."""
    p = _llama(None)
    rep = p.layout
    own = [_own(st) for st in rep.pipeline.stages]
    assert rep.critical_stage == 3 and own[3] > own[0]
    assert rep.pipeline.stages[0].end_s == rep.pipeline.step_time_s > rep.pipeline.stages[3].end_s


def _result(own: list[float]) -> PipelineResult:
    stages = tuple(StageTiming(end_s=10.0, busy_s=o, wait_transfer_s=10.0 - o) for o in own)
    return PipelineResult(step_time_s=10.0, stages=stages, trace=())


def test_ties_go_to_the_lowest_stage():
    assert critical_stage(_result([5.0])) == 0
    assert critical_stage(_result([5.0, 5.0, 5.0])) == 0
    assert critical_stage(_result([5.0, 5.0 * (1 + 1e-12), 5.0])) == 0  # float noise of alike stages
    assert critical_stage(_result([5.0, 5.0 * (1 + 1e-6), 5.0])) == 1
    assert critical_stage(_result([4.0, 5.0, 6.0])) == 2
    # Waiting for its own collectives counts as its own time; waiting for another stage does not.
    waits = (StageTiming(end_s=10.0, busy_s=5.0, wait_comm_s=2.0, wait_transfer_s=3.0),
             StageTiming(end_s=9.0, busy_s=6.0, wait_transfer_s=3.0))
    assert critical_stage(PipelineResult(step_time_s=10.0, stages=waits, trace=())) == 0


def test_one_stage_is_unchanged_and_names_no_critical_stage():
    p = _predict("8b-tp4-cp2")
    st0 = p.layout.pipeline.stages[0]
    assert p.layout.critical_stage == 0 and p.forward_s == st0.by_kind_s["forward"]
    assert "critical_stage" not in p.to_dict()["layout"]
    assert p.to_dict()["layout"]["stages"][0]["tail_s"] == 0.0


def test_the_table_shows_the_critical_stage_with_its_tail(capsys, monkeypatch):
    from dpsim.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    args = ["predict", "--model", "llama-3-8b", "--gpus", "16", "--tp", "2", "--pp", "4", "--sequence-parallel",
            "--link", "infiniband", "--gpu", "h100", "--micro-batch", "1", "--global-batch", "32",
            "--stage-layers", "4,4,4,20"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "step of stage 3 (critical)" in out and "done, until another stage ends the step" in out
    assert "(stage 0:" in out  # the bubble fraction quoted is stage 0's fill and drain
    with contextlib.redirect_stdout(io.StringIO()) as buf:
        assert main(args + ["--json"]) == 0
    assert json.loads(buf.getvalue())["layout"]["critical_stage"] == 3


# ------------------------------------------------------------------ the after-wait charge, once


def _provenance(extra_s: float, wait_s: float) -> Provenance:
    o = Origin(source="model", detail="d")
    return Provenance(compute=o, network=o, overlap=o, device=o, after_comm=AfterComm(extra_s=extra_s, wait_s=wait_s))


def test_a_stage_idle_at_the_end_absorbs_its_charge():
    prov = _provenance(0.004, 0.1)
    full, p0 = charge_after_comm(prov, 0.1)
    assert full == 0.004 and p0.after_comm.charged_s == 0.004
    same, p1 = charge_after_comm(prov, 0.1, slack_s=0.0)
    assert same == full and p1 == p0  # one stage: exactly as before
    part, p2 = charge_after_comm(prov, 0.1, slack_s=0.001, stage=2)
    assert part == pytest.approx(0.003) and p2.after_comm.charged_s == part
    assert "on pipeline stage 2" in p2.compute.detail and "within that stage's" in p2.compute.detail
    none, _ = charge_after_comm(prov, 0.1, slack_s=0.01, stage=1)
    assert none == 0.0


@pytest.mark.parametrize("pp,gpus", [(2, 4), (4, 8)])
def test_the_layout_charge_moves_the_step_once_by_the_stage_it_binds_on(tmp_path, pp, gpus):
    """Each stage pays extra_s x min(1, its waits / wait_s) in its optimizer step at its end; the
    step is the last end, so it moves by the most any stage's charge exceeds its idle tail (not by
    their sum, nor by a stage's charge that its tail absorbs)."""
    base = predict(profile_config(cpu_profile(tmp_path, step=measured_step(), name=f"b{pp}"), gpus=gpus, pp=pp,
                                  global_batch=8))
    stages = base.layout.pipeline.stages
    step = base.layout.pipeline.step_time_s
    extra_s, wait_s = 0.05, 0.5 * max(st.exposed_comm_s for st in stages)
    # tp = cp = 1: a stage's waits are its collectives' exposed time.
    expected = max(extra_s * min(1.0, st.exposed_comm_s / wait_s) - (step - st.end_s) for st in stages)
    step_p = measured_step(after_comm_extra_s=extra_s, after_comm_wait_s=wait_s)
    p = predict(profile_config(cpu_profile(tmp_path, step=step_p, name=f"c{pp}"), gpus=gpus, pp=pp, global_batch=8))
    assert p.step_time_s - base.step_time_s == pytest.approx(max(0.0, expected), rel=1e-9)
    assert p.provenance.after_comm.charged_s == pytest.approx(max(0.0, expected), rel=1e-9)
    assert expected < pp * extra_s  # never every stage's charge summed


def test_a_dense_critical_stage_still_says_where_the_all_to_alls_are():
    """Should the critical stage hold only dense blocks (DeepSeek-V3's first three), its all-to-all
    row says none are there and which stage waits on them, as it did for stage 0."""
    import dataclasses

    from rich.console import Console

    from dpsim.report.layout import layout_tables

    p = predict(PredictConfig(**BASE, **{**GRID["deepseek-v3-pp8-ep8"], "pp": 16}))
    rep = dataclasses.replace(p.layout, critical_stage=0, ep_comm_s=0.0, etp_comm_s=0.0, ep_exposed_s=0.0)
    console = Console(width=200, record=True)
    for table in layout_tables(dataclasses.replace(p, layout=rep)):
        console.print(table)
    out = console.export_text()
    assert "step of stage 0 (critical)" in out and "none on stage 0 (stage 1 waits" in out
