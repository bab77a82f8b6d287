"""Failures in a job mix (dpsim mix's ``failures:``, ``spares:``, ``checkpoint:``): who stops, what is lost,
spares and repairs, seeded random failures, and the file's checks."""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError, DpsimError
from dpsim.mix import simulate_mix
from tests.test_mix import _mix

CK = {"interval": "10s", "write": "1s", "restart": "5s"}
A = {"name": "a", "model": "gpt2", "gpus": 4, "nodes": [0, 1], "duration": "100s", "checkpoint": CK}
B = {"name": "b", "model": "gpt2", "gpus": 4, "nodes": [2, 3], "duration": "100s", "checkpoint": CK}


def _run(*jobs, events=(), spares=0, repair="1h", **failures):
    mix = _mix(*jobs, horizon="200s", spares=spares,
               failures={"repair": repair, "events": list(events), **failures})
    return {j.name: j for j in simulate_mix(mix, sample_steps=None).jobs}


def test_a_failure_on_a_node_of_one_job_stops_that_job_only():
    quiet = _run(A, B)
    hit = _run(A, B, events=[{"at": "25s", "node": 1}], spares=1)
    assert hit["a"].failures == 1 and hit["a"].restarts == 1 and hit["a"].lost_s > 0
    # b shares no server and no fillable link with a: nothing about it changes.
    assert hit["b"].failures == 0 and hit["b"].lost_s == 0 and hit["b"].steps == quiet["b"].steps
    assert [s.phase for s in hit["b"].timeline] == [s.phase for s in quiet["b"].timeline]
    assert hit["a"].steps < quiet["a"].steps


def test_restart_loses_exactly_the_work_since_the_last_checkpoint():
    # Checkpoints end at 11 s and 22 s (10 s of training + 1 s write each); the failure at 25 s loses 3 s.
    a = _run(A, events=[{"at": "25s", "node": 1}], spares=1)["a"]
    step = a.alone_step_time_s
    assert a.lost_s == pytest.approx(3.0, abs=1e-9)
    assert a.lost_steps == pytest.approx(3.0 / step, rel=1e-9)
    # 100 s held = 8 writes + one restart + 3 s lost + the training kept.
    assert a.checkpoint_s == pytest.approx(8.0) and a.restart_s == pytest.approx(5.0) and a.down_s == 0
    assert a.steps == pytest.approx((100 - 8 - 5 - 3) / step, rel=1e-9)
    assert a.goodput == pytest.approx(84 / 100, rel=1e-9)
    # A failure during a write loses the training of that interval too (the write never completed).
    w = _run(A, events=[{"at": "21.5s", "node": 1}], spares=1)["a"]
    assert w.lost_s == pytest.approx(10.0, abs=1e-9) and w.checkpoint_s == pytest.approx(7.5)


def test_with_a_spare_the_job_resumes_after_its_restore_time_on_the_spare():
    a = _run(A, events=[{"at": "25s", "node": 1}], spares=1)["a"]
    stop = [s for s in a.timeline if s.start_s == pytest.approx(25.0)]
    assert [(s.phase, s.end_s) for s in stop] == [("restart", pytest.approx(30.0))]
    after = [s for s in a.timeline if s.start_s >= 30.0]
    assert after[0].phase == "trained" and after[0].servers == (0, 7)  # server 7: the spare


def test_without_a_spare_the_job_waits_for_the_repair():
    a = _run(A, events=[{"at": "25s", "node": 1}], repair="20s")["a"]
    assert [(s.phase, s.start_s, s.end_s) for s in a.timeline if 25 <= s.start_s < 55] == [
        ("down", 25.0, 45.0), ("restart", 45.0, 50.0), ("trained", 50.0, 60.0)]
    assert a.down_s == pytest.approx(20.0) and a.timeline[-1].servers == (0, 1)
    # Still waiting when its time is up: it keeps the steps of its two checkpoints (20 s of training).
    gone = _run(A, events=[{"at": "25s", "node": 1}], repair="1h")["a"]
    assert gone.timeline[-1].phase == "down" and gone.end_s == 100.0
    assert gone.steps == pytest.approx(20.0 / gone.alone_step_time_s, rel=1e-9)


def test_failures_of_free_servers_stop_nobody_and_are_logged():
    mix = _mix(A, horizon="200s", failures={"repair": "1h", "events": [{"at": "5s", "link": 5}]})
    result = simulate_mix(mix, sample_steps=None)
    assert result.jobs[0].failures == 0 and result.failures[0].job is None
    assert result.failures[0].component == "link" and result.gpu_lost_to_failures == 0


def test_cluster_utilisation_lost_to_failures():
    mix = _mix(A, B, horizon="100s", spares=1, failures={"repair": "1h", "events": [{"at": "25s", "node": 1}]})
    result = simulate_mix(mix, sample_steps=None)
    # a's 4 GPUs lose 3 s of work and 5 s of restart, on a 16-GPU cluster over 100 s.
    assert result.gpu_lost_to_failures == pytest.approx(4 * 8 / (16 * 100))
    # b writes 9 checkpoints in 100 s (every 11 s), a 8 (its restart took 5 s): 1 s each on 4 GPUs.
    assert result.gpu_checkpointing == pytest.approx((9 + 8) * 4 / (16 * 100))


def test_seeded_random_failures_reproduce():
    def run(seed):
        mix = _mix({**A, "duration": "2h"}, {**B, "duration": "2h"}, horizon="2h", spares=1,
                   failures={"repair": "30min", "mtbf_node": "2h", "mtbf_link": "4h", "seed": seed})
        return simulate_mix(mix, sample_steps=20)

    one, two, other = run(7), run(7), run(8)
    assert one.failures and one.to_dict() == two.to_dict()
    assert [f.at_s for f in one.failures] != [f.at_s for f in other.failures]
    assert sum(j.failures for j in one.jobs) == sum(f.job is not None for f in one.failures)


def test_default_interval_is_the_goodput_models_optimum():
    from dpsim.plan.reliability import ClusterShape, FailureRates, model_optimum_s
    job = {**A, "duration": "10h", "checkpoint": {"write": "30s", "restart": "5min"}}
    a = simulate_mix(_mix(job, horizon="10h", failures={"repair": "1h", "mtbf_node": "100h"}),
                     sample_steps=20).jobs[0]
    mtbf = ClusterShape(n_nodes=2, gpus_per_node=2, links_per_node=1).mtbf_s(
        FailureRates(gpu_mtbf_s=float("inf"), node_mtbf_s=100 * 3600.0, link_mtbf_s=float("inf")))
    assert a.checkpoint_interval_s == pytest.approx(model_optimum_s(36000.0, 30.0, 300.0, mtbf))


@pytest.mark.parametrize("top, message", [
    ({"failures": {"events": []}}, "failures.repair: missing"),
    ({"failures": {"repair": "4"}}, "failures.repair: '4' is not valid"),
    ({"failures": {"repair": "4h", "mtbf_node": "2000"}}, "failures.mtbf_node: '2000' is not valid"),
    ({"failures": {"repair": "4h", "seed": -1}}, "failures.seed: -1 is not valid"),
    ({"failures": {"repair": "4h", "events": [{"at": "1h"}]}}, "failures.events[0]: give node"),
    ({"failures": {"repair": "4h", "events": [{"at": "1h", "node": -2}]}}, "failures.events[0].node: -2"),
    ({"failures": {"repair": "4h", "events": [{"node": 1}]}}, "failures.events[0].at: missing"),
    ({"failures": {"repair": "4h", "colour": 1}}, "failures.colour: unknown key"),
    ({"spares": -1}, "spares: -1 is not valid"),
    ({"checkpoint": {"bandwidth": "fast"}}, "checkpoint.bandwidth: 'fast' is not valid"),
    ({"checkpoint": {"interval": "0s"}}, "checkpoint.interval: '0s' is not valid"),
    ({"checkpoint": {"write": "1s", "bandwidth": "1GB/s"}}, "checkpoint: give write or bandwidth"),
])
def test_failure_section_errors_name_the_field(top, message):
    with pytest.raises(ConfigError) as exc:
        _mix(A, **top)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_checkpoint_bandwidth_whose_write_takes_past_a_year_is_refused():
    # 1 B/s made the write ~1e8 s: the interval's optimum multiplied 0 by inf (a RuntimeWarning on stderr).
    spec = _mix({**A, "checkpoint": {"bandwidth": "1B/s"}}, failures={"repair": "1h", "mtbf_node": "1h"})
    with pytest.raises(ConfigError, match=r"jobs\[0\] \(a\): checkpoint\.bandwidth: 1 B/s is not valid; "
                                          r"writing its .* over .* \(a year\)"):
        simulate_mix(spec, sample_steps=None)


def test_checkpoint_write_and_restart_past_a_year_are_refused():
    for key in ("write", "restart"):
        with pytest.raises(ConfigError, match=rf"jobs\[0\]\.checkpoint\.{key}: '400d' is not valid; expected a "
                                              r"time of at most 3.1536e\+07 s \(a year\)"):
            _mix({**A, "checkpoint": {key: "400d"}}, failures={"repair": "1h"})


def test_job_checkpoint_errors_name_the_job():
    with pytest.raises(ConfigError, match=r"jobs\[0\]\.checkpoint\.restart: 'soon' is not valid"):
        _mix({**A, "checkpoint": {"restart": "soon"}})


@pytest.mark.parametrize("top, message", [
    # (with failures: job A's checkpoint applies only then; fuzz7 refuses it in a mix without them)
    ({"spares": 8, "failures": {"repair": "1h"}}, "spares: 8 is not valid; the cluster has 8 servers"),
    ({"spares": 7, "failures": {"repair": "1h"}}, "jobs[0].nodes: server 1 is one of the 7 spares"),
    ({"failures": {"repair": "1h", "events": [{"at": "1s", "node": 8}]}}, "failures.events[0].node: 8 is not valid"),
])
def test_spares_and_events_are_checked_against_the_cluster(top, message):
    with pytest.raises(DpsimError) as exc:
        simulate_mix(_mix(A, **top), sample_steps=None)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_a_job_arriving_on_a_failed_server_takes_a_spare_or_waits_without_a_restart():
    late = {**B, "nodes": [1, 2], "start": "10s", "duration": "50s"}
    events = [{"at": "5s", "node": 1}]
    took = _run(late, events=events, spares=1)["b"]
    assert took.timeline[0].start_s == 10.0 and took.timeline[0].phase == "trained"
    assert took.timeline[0].servers == (7, 2) and took.failures == 0 and took.restart_s == 0
    waited = _run(late, events=events, repair="20s")["b"]
    assert [(s.phase, s.start_s) for s in waited.timeline[:2]] == [("down", 10.0), ("trained", 25.0)]


def test_fast_forward_with_checkpoints_agrees_with_every_step():
    from tests.test_mix import JOB_A, JOB_B
    jobs = [{**JOB_A, "steps": None, "duration": "60s", "checkpoint": {"interval": "5s", "write": "0.5s"}},
            {**JOB_B, "steps": None, "duration": "60s", "checkpoint": {"interval": "7s", "write": "0.2s"}}]
    jobs = [{k: v for k, v in j.items() if v is not None} for j in jobs]
    mix = _mix(*jobs, horizon="60s", failures={"repair": "1h", "events": [{"at": "31s", "node": 0}]})
    exact = simulate_mix(mix, sample_steps=None)
    quick = simulate_mix(mix, sample_steps=20)
    assert quick.events < exact.events / 3
    for e, q in zip(exact.jobs, quick.jobs):
        assert e.slowdown > 1.01  # they contend
        assert q.slowdown == pytest.approx(e.slowdown, rel=0.02)
        assert q.steps == pytest.approx(e.steps, rel=0.02) and q.checkpoint_s == pytest.approx(e.checkpoint_s)


# ---------------------------------------------------------------- a storage the checkpoints share

CK_BW = {"interval": "10s", "bandwidth": "10GB/s", "restart": "5s"}


def _writes(job):
    return [s for s in job.timeline if s.phase == "checkpoint"]


def _run_storage(*jobs, storage=None, events=()):
    mix = _mix(*jobs, horizon="200s", spares=1, storage=storage, failures={"repair": "1h", "events": list(events)})
    return {j.name: j for j in simulate_mix(mix, sample_steps=None).jobs}


def test_writes_at_once_share_the_storage_max_min():
    a, b = {**A, "checkpoint": CK_BW}, {**B, "checkpoint": CK_BW}
    alone = _run_storage(a, b)
    w = alone["a"].checkpoint_write_s  # the write alone: state bytes / 10 GB/s
    assert all(s.end_s - s.start_s == pytest.approx(w, rel=1e-9) for s in _writes(alone["a"]))
    # Both jobs write at the same times; a 10 GB/s storage gives each 5 GB/s: every write takes twice as long.
    shared = _run_storage(a, b, storage="10GB/s")
    for name in ("a", "b"):
        assert _writes(shared[name]) and all(s.end_s - s.start_s == pytest.approx(2 * w, rel=1e-9)
                                             for s in _writes(shared[name]))
        assert shared[name].steps < alone[name].steps
    # A storage as fast as both writes together changes nothing; neither does one writer alone.
    wide = _run_storage(a, b, storage="20GB/s")
    assert [(s.start_s, s.end_s) for s in _writes(wide["a"])] == [(s.start_s, s.end_s) for s in _writes(alone["a"])]
    solo = _run_storage(a, storage="10GB/s")["a"]
    assert all(s.end_s - s.start_s == pytest.approx(w, rel=1e-9) for s in _writes(solo))


def test_a_write_cut_by_a_failure_gives_its_share_back():
    a, b = {**A, "checkpoint": CK_BW}, {**B, "checkpoint": CK_BW}
    w = _run_storage(a)["a"].checkpoint_write_s
    # Both start writing at 10 s at 5 GB/s each; a fails half a (solo) write in: b has a quarter of its
    # state written and writes the other three quarters alone at 10 GB/s: it ends 1.25 w after 10 s.
    hit = _run_storage(a, b, storage="10GB/s", events=[{"at": f"{10 + 0.5 * w}s", "node": 1}])
    first = _writes(hit["b"])[0]
    assert first.start_s == pytest.approx(10.0) and first.end_s == pytest.approx(10 + 1.25 * w, rel=1e-9)
    assert hit["a"].failures == 1


@pytest.mark.parametrize("top, message", [
    ({"storage": "fast"}, "storage: 'fast' is not valid; expected a bandwidth"),
    ({"storage": "0GB/s"}, "storage: '0GB/s' is not valid; expected a bandwidth > 0"),
])
def test_storage_errors_name_the_field(top, message):
    with pytest.raises(ConfigError, match=message):
        _mix({**A, "checkpoint": CK_BW}, horizon="200s", failures={"repair": "1h"}, **top)


def test_storage_without_failures_is_refused():
    with pytest.raises(ConfigError, match="storage: .* applies only to a mix with failures"):
        _mix(A, horizon="200s", storage="10GB/s")
