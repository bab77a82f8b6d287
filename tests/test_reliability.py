"""Failures and goodput: the simulation against closed forms, Young/Daly, elastic choice, CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from dpsim.cli import main
from dpsim.errors import ConfigError
from dpsim.plan.goodput import (
    elastic_choice,
    interval_study,
    simulate_goodput,
    simulate_run,
)
from dpsim.plan.reliability import (
    DAY_S,
    HOUR_S,
    CheckpointPolicy,
    ClusterShape,
    FailureRates,
    TrainingJob,
    continuous_optimum_s,
    daly_interval_s,
    expected_wall_time_s,
    model_optimum_s,
    parse_long_duration_s,
    young_interval_s,
)
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import resolve_topology

NEVER = math.inf


def _job(*, mtbf_h=50.0, work_d=20.0, tau_h=1.0, write_s=60.0, restart_s=600.0, replace_s=0.0, nodes=16,
         policy="wait") -> TrainingJob:
    # Failures from nodes only, so the job's MTBF is exactly mtbf_h.
    rates = FailureRates(gpu_mtbf_s=NEVER, link_mtbf_s=NEVER, node_mtbf_s=mtbf_h * HOUR_S * nodes)
    return TrainingJob(
        work_s=work_d * DAY_S, cluster=ClusterShape(n_nodes=nodes, gpus_per_node=8, links_per_node=1),
        rates=rates, policy=policy, replace_s=replace_s,
        checkpoint=CheckpointPolicy(interval_s=tau_h * HOUR_S, write_s=write_s, restart_s=restart_s),
    )


def _within(stats, expected, k=4.0):
    walls = stats.walls_s
    mean = sum(walls) / len(walls)
    sd = math.sqrt(sum((w - mean) ** 2 for w in walls) / (len(walls) - 1))
    return abs(mean - expected) <= k * sd / math.sqrt(len(walls))


# ----------------------------------------------------------------------------- closed forms

def test_no_failures_is_work_plus_checkpoints_exactly():
    job = _job(mtbf_h=NEVER, work_d=1.0, tau_h=1.0, write_s=30.0)
    out = simulate_run(job, seed=0)
    assert out.failures == 0
    assert out.wall_s == pytest.approx(DAY_S + 23 * 30.0)  # 24 segments, no write after the last
    assert out.goodput == pytest.approx(DAY_S / (DAY_S + 23 * 30.0))
    assert expected_wall_time_s(DAY_S, HOUR_S, 30.0, 600.0, NEVER) == pytest.approx(out.wall_s)


def test_intervals_never_promise_more_than_a_failure_free_run():
    """Few runs, most of them failure-free: the t-interval on the mean wall time reached below the
    failure-free wall (work + writes), i.e. a goodput interval above 100 %."""
    job = _job(mtbf_h=400.0, work_d=10.0, tau_h=4.0, write_s=90.0)
    floor = expected_wall_time_s(10 * DAY_S, 4 * HOUR_S, 90.0, 600.0, NEVER)
    for policy in ("wait", "shrink"):
        stats = simulate_goodput(dataclasses.replace(job, policy=policy), runs=5, seed=0)
        assert min(stats.walls_s) == pytest.approx(floor)  # some runs saw no failure
        assert max(stats.walls_s) > floor  # and some did: the interval is not a point
        assert stats.wall_ci_s[0] >= floor * (1 - 1e-12)
        assert stats.goodput_ci[1] <= 10 * DAY_S / floor * (1 + 1e-12) < 1.0
        assert stats.goodput_ci[0] <= stats.goodput <= stats.goodput_ci[1]


def test_exponential_failures_without_overhead_match_the_closed_form():
    """delta = R = 0: each tau-segment takes M (e^{tau/M} - 1) on average (restart from its start)."""
    job = _job(mtbf_h=10.0, work_d=10.0, tau_h=2.0, write_s=0.0, restart_s=0.0)
    m, tau, w = 10 * HOUR_S, 2 * HOUR_S, 10 * DAY_S
    closed = (w / tau) * m * math.expm1(tau / m)
    assert expected_wall_time_s(w, tau, 0.0, 0.0, m) == pytest.approx(closed, rel=1e-12)
    stats = simulate_goodput(job, runs=400, seed=1)
    assert _within(stats, closed)
    assert stats.goodput == pytest.approx(w / closed, rel=0.01)
    # As the interval shrinks, goodput tends to 1 (nothing is lost, nothing is paid).
    assert expected_wall_time_s(w, 1.0, 0.0, 0.0, m) == pytest.approx(w, rel=1e-4)


@pytest.mark.parametrize("write_s,restart_s,replace_s", [(60.0, 600.0, 0.0), (300.0, 120.0, 0.0),
                                                         (120.0, 300.0, 3600.0)])
def test_wait_policy_matches_daly_closed_form(write_s, restart_s, replace_s):
    job = _job(mtbf_h=20.0, work_d=15.0, tau_h=1.5, write_s=write_s, restart_s=restart_s, replace_s=replace_s)
    stats = simulate_goodput(job, runs=400, seed=2)
    assert stats.expected_wall_s == pytest.approx(
        expected_wall_time_s(15 * DAY_S, 1.5 * HOUR_S, write_s, restart_s, 20 * HOUR_S, replace_s))
    assert _within(stats, stats.expected_wall_s)


def test_time_is_accounted_for():
    for policy, replace_s in (("wait", 1800.0), ("shrink", 7200.0)):
        out = simulate_run(_job(mtbf_h=5.0, replace_s=replace_s, policy=policy), seed=5)
        assert out.failures > 10
        assert sum(out.failures_by_component.values()) == out.failures
        if policy == "wait":
            # Full speed all the time: wall = useful + lost + writes + restarts + waits.
            assert out.wall_s == pytest.approx(out.work_s + out.lost_s + out.checkpoint_s + out.restart_s
                                               + out.down_s, rel=1e-12)
        else:
            assert out.reduced_s > 0 and out.wall_s > out.work_s


def test_same_seed_same_run():
    job = _job(mtbf_h=8.0)
    assert simulate_run(job, 3) == simulate_run(job, 3)
    assert simulate_run(job, 3).wall_s != simulate_run(job, 4).wall_s
    a, b = simulate_goodput(job, runs=20, seed=9), simulate_goodput(job, runs=20, seed=9)
    assert a == b


def test_failure_classes_follow_their_rates():
    rates = FailureRates(gpu_mtbf_s=1000 * HOUR_S, node_mtbf_s=250 * HOUR_S, link_mtbf_s=NEVER)
    cluster = ClusterShape(n_nodes=10, gpus_per_node=4, links_per_node=2)
    job = TrainingJob(work_s=100 * DAY_S, cluster=cluster, rates=rates,
                      checkpoint=CheckpointPolicy(interval_s=HOUR_S, write_s=0.0, restart_s=0.0))
    counts = {"gpu": 0, "node": 0, "link": 0}
    for seed in range(20):
        for k, v in simulate_run(job, seed).failures_by_component.items():
            counts[k] += v
    # gpu: 40/1000 per h, node: 10/250 per h -> equal shares.
    assert counts["link"] == 0
    assert counts["gpu"] / (counts["gpu"] + counts["node"]) == pytest.approx(0.5, abs=0.05)


def _same_run(a, b) -> bool:
    return (a.failures == b.failures and a.failures_by_component == b.failures_by_component
            and all(math.isclose(getattr(a, f), getattr(b, f), rel_tol=1e-9, abs_tol=1e-6)
                    for f in ("wall_s", "lost_s", "checkpoint_s", "restart_s", "down_s", "reduced_s")))


@pytest.mark.parametrize("kw", [dict(mtbf_h=5.0), dict(mtbf_h=20.0, write_s=300.0, restart_s=120.0),
                                dict(mtbf_h=2.0, tau_h=0.3, write_s=30.0), dict(mtbf_h=NEVER, work_d=1.0),
                                dict(mtbf_h=10.0, write_s=0.0, restart_s=0.0, tau_h=2.0),
                                dict(mtbf_h=1.0, nodes=3, restart_s=1200.0),
                                dict(mtbf_h=0.5, work_d=2.0, tau_h=0.05, write_s=10.0)])
@pytest.mark.slow
def test_fast_path_is_the_event_by_event_simulation_run_for_run(kw):
    """simulate_goodput skips whole segments (wait: no loop over events at all; shrink: one numpy
    step per event); simulate_run plays every segment. Same seeds, same runs."""
    seeds = list(range(8))
    jobs = [_job(**kw, policy="wait"), _job(**kw, policy="wait", replace_s=3600.0),
            _job(**kw, policy="shrink"), _job(**kw, policy="shrink", replace_s=7200.0)]
    if kw.get("nodes", 16) >= 2:
        jobs.append(dataclasses.replace(_job(**kw, policy="shrink", replace_s=7200.0), min_nodes=2))
    if kw.get("nodes", 16) >= 4:
        jobs.append(dataclasses.replace(_job(**kw, policy="shrink", replace_s=7200.0), replica_nodes=4))
    from dpsim.plan.goodput import _simulate_jobs

    for job, runs in zip(jobs, _simulate_jobs(jobs, seeds)):
        for seed, fast in zip(seeds, runs):
            assert _same_run(fast, simulate_run(job, seed)), (job.policy, job.replace_s, seed)


def test_huge_jobs_do_not_overflow():
    """The closed form is inf, not an OverflowError, for segments far longer than the MTBF; the
    optimum interval stays finite; a job that would fail a million times per run is refused in
    one line with the reason."""
    assert expected_wall_time_s(30 * DAY_S, 30 * DAY_S, 60.0, 600.0, 60.0) == math.inf
    assert expected_wall_time_s(30 * DAY_S, 3600.0, 60.0, 1e6, 60.0) == math.inf
    assert 0 < continuous_optimum_s(1e6, 60.0) <= 60.0
    assert 0 < model_optimum_s(30 * DAY_S, 10.0, 600.0, 2800.0) < 30 * DAY_S
    hopeless = _job(mtbf_h=0.02, restart_s=600.0, tau_h=0.01, write_s=1.0)
    with pytest.raises(ConfigError) as exc:
        simulate_goodput(hopeless, runs=2)
    assert "fails every" in str(exc.value) and "\n" not in str(exc.value)


# ----------------------------------------------------------------------------- the optimum interval

def test_young_and_daly_formulas():
    assert young_interval_s(60.0, 3600.0 * 10) == pytest.approx(math.sqrt(2 * 60 * 36000))
    d, m = 60.0, 36000.0
    x = d / (2 * m)
    assert daly_interval_s(d, m) == pytest.approx(math.sqrt(2 * d * m) * (1 + math.sqrt(x) / 3 + x / 9) - d)
    assert daly_interval_s(3 * m, m) == m
    # Daly's estimate is the exact continuous optimum to high order when delta << M.
    for d in (10.0, 60.0, 600.0):
        assert daly_interval_s(d, m) == pytest.approx(continuous_optimum_s(d, m), rel=2e-3)
        assert young_interval_s(d, m) > continuous_optimum_s(d, m)


def test_model_optimum_beats_young_and_daly_in_expectation():
    w, d, r, m = 30 * DAY_S, 120.0, 600.0, 6 * HOUR_S
    opt = model_optimum_s(w, d, r, m)
    cost = lambda tau: expected_wall_time_s(w, tau, d, r, m)  # noqa: E731
    assert cost(opt) <= cost(young_interval_s(d, m)) + 1e-9
    assert cost(opt) <= cost(daly_interval_s(d, m)) + 1e-9
    for f in (0.5, 0.8, 1.25, 2.0):
        assert cost(opt) <= cost(opt * f)


def test_interval_study_simulated_optimum_agrees_with_the_model():
    job = _job(mtbf_h=3.0, work_d=20.0, write_s=90.0, restart_s=300.0)
    st = interval_study(job, runs=60, seed=0)
    assert abs(st.young_vs_optimum) < 0.1 and abs(st.daly_vs_optimum) < 0.01
    # The simulated best grid point is the model optimum, or within a hair of its goodput.
    gap, lo, hi = st.simulated_gap
    assert gap >= 0 and gap < 2e-3
    # Goodput is flat near the optimum and falls away from it.
    ends = (st.grid[0].goodput, st.grid[-1].goodput)
    assert max(ends) < st.goodput_at_model_optimum
    for g in st.grid:
        assert _within(g, g.expected_wall_s, k=5.0)


# ----------------------------------------------------------------------------- elastic choice

def test_elastic_shrink_wins_with_slow_replacements_and_loses_with_spares():
    slow = elastic_choice(_job(mtbf_h=10.0, replace_s=8 * HOUR_S, nodes=32), runs=40, seed=0)
    assert slow["shrink"].goodput > slow["wait"].goodput
    assert slow["shrink"].down_s == 0 and slow["wait"].down_s > 0
    spare = elastic_choice(_job(mtbf_h=10.0, replace_s=0.0, nodes=32), runs=40, seed=0)
    # With a hot spare, shrinking only adds a rejoin restart and a slower segment.
    assert spare["wait"].goodput > spare["shrink"].goodput


def test_shrink_trains_on_whole_replicas_only():
    """A failed node stops its whole model replica: with one replica on every node shrinking is
    waiting, run for run; with two replicas of 8 nodes a failure halves the speed, so shrinking
    gains less than it does on 16 one-node replicas (the old count: 15 of 16 nodes kept training)."""
    base = _job(mtbf_h=10.0, replace_s=8 * HOUR_S, nodes=16)
    seeds = list(range(6))
    wait = [simulate_run(base, s) for s in seeds]
    whole = dataclasses.replace(base, policy="shrink", replica_nodes=16)
    assert whole.training_nodes_floor == 16
    for a, b in zip(wait, (simulate_run(whole, s) for s in seeds)):
        assert a.wall_s == pytest.approx(b.wall_s, rel=1e-12) and a.failures == b.failures
    walls = {r: simulate_goodput(dataclasses.replace(base, policy="shrink", replica_nodes=r), runs=40, seed=0).wall_s
             for r in (1, 8, 16)}
    assert walls[1] < walls[8] < walls[16]
    with pytest.raises(ConfigError, match="replica nodes"):
        dataclasses.replace(base, replica_nodes=17)


def test_goodput_of_a_layout_shrinks_by_its_replicas():
    from dpsim.plan.job import goodput
    config = PredictConfig(gpus=128, link="infiniband", model="llama-3-70b", micro_batch=1, global_batch=256,
                           tp=8, pp=8)
    assert goodput(config, duration_s=86400.0, runs=2).job.replica_nodes == 8  # tp 8 x pp 8 = 64 GPUs
    assert goodput(dataclasses.replace(config, tp=1, pp=1), duration_s=86400.0, runs=2).job.replica_nodes == 1


def test_shrink_below_min_nodes_waits():
    job = _job(mtbf_h=2.0, replace_s=6 * HOUR_S, nodes=2, policy="shrink")
    out = simulate_run(dataclasses.replace(job, min_nodes=2), seed=1)
    assert out.down_s > 0 and out.reduced_s == 0


# ----------------------------------------------------------------------------- inputs

def test_default_rates_reproduce_rsc1_projected_mttf():
    topo = resolve_topology(PredictConfig(gpus=16384, link="infiniband"))
    cluster = ClusterShape.from_topology(topo)
    assert (cluster.n_nodes, cluster.links_per_node) == (2048, 8)
    # Kokolis et al. 2024 (arXiv:2410.21680): r_f = 6.50 failures per 1,000 node-days on RSC-1,
    # projected to a 16,384-GPU job's MTTF of 1.8 h; 8 GPUs per node, as on RSC-1's A100 servers.
    assert cluster.mtbf_s(FailureRates()) / HOUR_S == pytest.approx(24 / (2048 * 6.50 / 1000), rel=1e-9)
    assert cluster.mtbf_s(FailureRates()) / HOUR_S == pytest.approx(1.8, abs=0.05)


@pytest.mark.parametrize("raw,seconds", [("90s", 90), ("10min", 600), ("4h", 14400), ("1.5d", 129600),
                                         (30, 30), (2.5, 2.5), ("none", math.inf)])
def test_parse_long_duration(raw, seconds):
    assert parse_long_duration_s(raw, "--x") == seconds


def test_a_duration_as_text_needs_its_unit():
    """'--mtbf-gpu 80000' was read as 80,000 seconds (the user meant hours: a 16,384-GPU job then
    fails every few seconds); text must say its unit."""
    with pytest.raises(ConfigError) as exc:
        parse_long_duration_s("80000", "--mtbf-gpu")
    message = str(exc.value)
    assert "--mtbf-gpu: '80000' has no unit" in message and "80000h" in message and "\n" not in message


@pytest.mark.parametrize("raw", ["4 hours", "-1h", "h", ""])
def test_parse_long_duration_rejects(raw):
    with pytest.raises(ConfigError, match="--restart"):
        parse_long_duration_s(raw, "--restart")


def test_job_validation_names_flags():
    cluster = ClusterShape(n_nodes=4, gpus_per_node=8, links_per_node=1)
    ck = CheckpointPolicy(interval_s=3600, write_s=10)
    with pytest.raises(ConfigError, match="--elastic: 'later'"):
        TrainingJob(work_s=1e6, cluster=cluster, checkpoint=ck, policy="later")
    with pytest.raises(ConfigError, match="--min-nodes: 5"):
        TrainingJob(work_s=1e6, cluster=cluster, checkpoint=ck, min_nodes=5)
    with pytest.raises(ConfigError, match="--checkpoint-interval"):
        CheckpointPolicy(interval_s=0, write_s=10)
    with pytest.raises(ConfigError, match="--mtbf-gpu"):
        FailureRates(gpu_mtbf_s=0.0)


# ----------------------------------------------------------------------------- CLI

def test_goodput_cli_json(capsys):
    rc = main(["goodput", "--gpus", "256", "--link", "infiniband", "--model", "llama-2-7b", "--micro-batch", "1",
               "--tokens", "200B", "--replace", "4h", "--runs", "20", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    d = json.loads(out)
    assert d["schema"] == "dpsim.goodput/1"
    assert d["work_s"] == pytest.approx(200e9 / d["tokens_per_s"])
    for key in ("wall_s", "goodput", "lost_s", "failures", "expected_wall_s"):
        assert key in d["result"]
    assert 0 < d["result"]["goodput"] < 1
    st = d["interval_study"]
    assert st["young_s"] == pytest.approx(math.sqrt(2 * d["checkpoint_write_s"] * d["mtbf_s"]))
    assert d["checkpoint_interval_s"] == pytest.approx(st["model_optimum_s"])
    assert d["elastic"]["better"] in ("wait", "shrink")


def test_goodput_cli_table(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    rc = main(["goodput", "--gpus", "64", "--duration", "10d", "--checkpoint-interval", "1h",
               "--checkpoint-write", "2min", "--runs", "10"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    for label in ("goodput", "lost work", "Young", "Daly", "elastic choice", "shrink", "wait"):
        assert label in out, label


def test_goodput_takes_the_jobs_strategy_as_predict_and_memory_do(capsys, monkeypatch):
    """Without --strategy every goodput job was DDP: a 70B model on 64 H100s (1.5 TiB per GPU) was
    simulated at DDP's throughput, one replica writing its checkpoint, with no word that it cannot run."""
    job = ["--gpus", "64", "--link", "infiniband", "--model", "llama-3-70b", "--micro-batch", "1"]
    fsdp = ["--strategy", "fsdp", "--activation-checkpointing"]
    runs = ["--duration", "10d", "--runs", "3"]
    assert main(["goodput", *job, *fsdp, *runs, "--json"]) == 0
    sharded = json.loads(capsys.readouterr().out)
    assert main(["predict", *job, *fsdp, "--json"]) == 0
    assert sharded["tokens_per_s"] == json.loads(capsys.readouterr().out)["tokens_per_s"]
    assert main(["goodput", *job, *runs, "--json"]) == 0
    replicated = json.loads(capsys.readouterr().out)
    # The same state, written by every node's ranks (8 nodes) instead of one replica's node.
    assert sharded["checkpoint_bytes"] == replicated["checkpoint_bytes"]
    assert sharded["checkpoint_write_s"] == pytest.approx(replicated["checkpoint_write_s"] / 8)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["goodput", *job, *runs]) == 0
    assert "does not fit" in capsys.readouterr().out
    assert main(["goodput", *job, *fsdp, *runs]) == 0
    assert "does not fit" not in capsys.readouterr().out


@pytest.mark.parametrize("args,needles", [
    (["--mtbf-gpu", "soon"], ["--mtbf-gpu", "'soon'"]),
    (["--tokens", "1T", "--duration", "3d"], ["--tokens and --duration"]),
    (["--model", "resnet50", "--tokens", "1T"], ["--tokens", "resnet50", "--duration"]),
    (["--elastic", "pray"], ["--elastic", "'pray'", "wait, shrink"]),
    (["--restart", "-5min"], ["--restart"]),
    (["--runs", "0"], ["--runs", "0"]),
    (["--min-nodes", "100"], ["--min-nodes", "100"]),
    (["--checkpoint-bandwidth", "fast"], ["--checkpoint-bandwidth", "'fast'"]),
    # Both given: the bandwidth was never read, not even checked (a mix file refuses both).
    (["--checkpoint-write", "1s", "--checkpoint-bandwidth", "1GB/s"], ["--checkpoint-write and "
                                                                       "--checkpoint-bandwidth", "not both"]),
    # No upper bound: --duration 1e30d (MTBFs none) and --checkpoint-interval 1e30d printed 31-digit days.
    (["--duration", "1e30d", "--mtbf-node", "none"], ["--duration: 8.64e+34 s is not valid", "(a century)"]),
    (["--checkpoint-interval", "1e30d"], ["--checkpoint-interval: 8.64e+34 s is not valid", "(a century)"]),
    # 1e18 tokens on 16 GPUs: ~85,000 failures a run, under the per-run bound; x 100 runs it simulated for
    # half an hour (--runs 5 alone took 34 s).
    (["--gpus", "16", "--link", "nvlink", "--model", "gpt2", "--runs", "100", "--tokens", "1e18"],
     ["--runs: 100 runs of about", "failures to simulate; expected at most 5e+06"]),
])
def test_goodput_cli_bad_input_one_line(capsys, args, needles):
    rc = main(["goodput", "--gpus", "64", "--runs", "5"] + args)
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpsim: error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_optimum_with_a_write_far_past_the_mtbf_warns_nothing():
    # A 100-day write against a 30-min MTBF: (k - 1) x expm1(inf) at k = 1 was 0 x inf, a NaN and a
    # RuntimeWarning printed on stderr above dpsim's one error line.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert model_optimum_s(3600.0, 8.64e6, 600.0, 1800.0) == pytest.approx(3600.0)


def test_goodput_of_a_tensor_pipeline_layout_writes_each_stage_shard(capsys):
    # goodput read tp off the layout's report (an AttributeError traceback for any --tp or --pp). The
    # checkpoint is costed with the layout's sizes: tp 2 x pp 2, and 16 / 4 = 4 data-parallel ranks.
    from dpsim.plan.layout_goodput import checkpoint_cost

    rc = main(["goodput", "--model", "llama-2-7b", "--link", "nvlink", "--gpus", "16", "--tp", "2", "--pp", "2",
               "--runs", "3", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    d = json.loads(out)
    ck = checkpoint_cost(state_bytes=d["checkpoint_bytes"], gpus_per_node=8, tp=2, pp=2, dp=4)
    assert d["checkpoint_write_s"] == pytest.approx(ck.write_s)


def test_the_optimal_interval_of_an_absurd_mtbf_is_found_quickly():
    # An MTBF of seconds put millions of whole-division intervals in [k_c/2, 2 k_c]: 0.3 s of numpy per
    # call, and plan --rank goodput --mtbf-node 1s took minutes over its ~900 layouts. Now a window
    # of intervals around the continuous optimum is ranked.
    import time

    from dpsim.plan.reliability import continuous_optimum_s, model_optimum_s

    t0 = time.process_time()  # this process's work, not the other processes' turns on a shared core
    for i in range(30):
        work = 3e6 + i
        best = model_optimum_s(work, 1.0, 600.0, 1.0 + i * 1e-3)
        tau_c = continuous_optimum_s(1.0, 1.0 + i * 1e-3)
        assert abs(best / tau_c - 1) < 1e-3
    assert time.process_time() - t0 < 3.0


def test_plan_writes_an_aeons_long_time_to_train_in_powers_of_ten():
    from dpsim.report.layout import _days

    assert _days(86400 * 2.5) == "2.50 d" and _days(86400 * 1e300) == "1e+300 d"
