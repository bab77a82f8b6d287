"""A fast-forward cut short by a failure-handling event that changes none of the jumping jobs (a free
server failing, a cable no job crosses) goes on as the uncut jump: no job loses its step in progress."""

from __future__ import annotations

import pytest

from dpsim.mix import simulate_mix
from tests.test_mix_outages import A, B, _down, _mix


def _same(hit, quiet) -> None:
    for h, q in zip(hit.jobs, quiet.jobs):
        assert h.steps == pytest.approx(q.steps, rel=0, abs=1e-9), h.name
        assert h.end_s == pytest.approx(q.end_s, abs=1e-9) and h.start_s == q.start_s
        assert h.step_time_s == pytest.approx(q.step_time_s, rel=1e-9)


@pytest.mark.parametrize("event", [{"node": 7}, {"uplink": "leaf3.0"}, {"uplink": "leaf2.0"}])
@pytest.mark.parametrize("at", ["7s", "12.3456s", "30s"])
def test_an_event_no_job_feels_changes_no_job_with_fast_forwarding(event, at):
    quiet = simulate_mix(_mix(A, B, failures={"repair": "1h"}), sample_steps=20)
    hit = simulate_mix(_mix(A, B, failures={"repair": "1h", "events": [{"at": at, "repair": "5s", **event}]}),
                       sample_steps=20)
    _same(hit, quiet)


def test_a_job_with_a_step_count_ends_where_the_uncut_jump_ends_it():
    a, b = ({**{k: v for k, v in job.items() if k != "duration"}, "steps": n} for job, n in ((A, 900), (B, 700)))
    quiet = simulate_mix(_mix(a, b, failures={"repair": "1h"}), sample_steps=20)
    for at in ("3s", "9.87s"):
        hit = simulate_mix(_mix(a, b, failures=_down("leaf3.0", at=at, repair="2s")), sample_steps=20)
        _same(hit, quiet)
        assert [j.steps for j in hit.jobs] == [900.0, 700.0]


@pytest.mark.parametrize("intervals", [("5s", "7s"), ("3.3s", "11s")])
def test_jobs_checkpointing_between_jumps_lose_no_step_in_progress(intervals):
    # Each checkpoint cuts the jumps short; the jobs come back to the jump's means mid-step, and the part
    # of its step each had run counts. The exact run counts whole steps only (the fast-forward also the
    # part of the last one at the horizon).
    jobs = [{**job, "checkpoint": {"interval": every, "write": "0.5s"}} for job, every in zip((A, B), intervals)]
    mix = _mix(*jobs, failures={"repair": "1h"})
    exact, quick = simulate_mix(mix, sample_steps=None), simulate_mix(mix, sample_steps=20)
    assert quick.events < exact.events / 10  # it did fast-forward
    for e, q in zip(exact.jobs, quick.jobs):
        assert -1e-9 <= q.steps - e.steps < 1, e.name
        assert (q.end_s, q.checkpoint_s, q.failures) == (e.end_s, e.checkpoint_s, e.failures)


@pytest.mark.parametrize("at", ["7s", "12.3456s", "30s"])
def test_a_job_arriving_where_no_running_job_goes_changes_none_of_them_with_fast_forwarding(at):
    # c's servers (leaf 3) share no link with a's and b's: its arrival cuts their jump short, and
    # the jump they come back to counts the part of its step each had run (it restarted it).
    c = {"name": "c", "model": "gpt2", "gpus": 4, "nodes": [6, 7], "duration": "20s", "start": at}
    quiet = simulate_mix(_mix(A, B), sample_steps=20)
    busy = simulate_mix(_mix(A, B, c), sample_steps=20)
    _same(busy, quiet)  # a and b (zip stops at quiet's two jobs)
    exact = simulate_mix(_mix(A, B, c), sample_steps=None)
    for e, q in zip(exact.jobs, busy.jobs):
        assert -1e-9 <= q.steps - e.steps < 1, e.name
