"""Interference both ways in the engine: compute slowed by a collective, and a collective slowed by compute.

Invariants and small closed forms: without ``comm_slowdown`` the engine is exactly what it
was (golden outputs rely on it); with it, a collective that overlaps compute lasts longer
by exactly the overlapped share, and the per-rank replay plays the durations the engine
gave each collective.
"""

from __future__ import annotations

import pytest

from dpsim.collectives.ops import CollectiveResult
from dpsim.engine.program import CommOp, ComputeTask, StepProgram
from dpsim.engine.replay import simulate_ranks
from dpsim.engine.simulate import PlayedCollectives, played_durations, run_program


class Fixed:
    """Every collective takes ``t`` seconds."""

    n_ranks = 2

    def __init__(self, t: float):
        self.t = t

    def time(self, op, size_bytes):
        return CollectiveResult(op=op, algorithm="fixed", n_ranks=2, size_bytes=size_bytes, time_s=self.t,
                                latency_s=0.0)


def _program(backward_s=(0.010, 0.010), comm_after=0) -> StepProgram:
    """Forward 5 ms, two backward layers, a bucket launched after layer ``comm_after``, optimizer 2 ms."""
    tasks = [ComputeTask(kind="forward", name="f", duration_s=0.005)]
    for i, d in enumerate(backward_s):
        tasks.append(ComputeTask(kind="backward", name=f"b{i}", duration_s=d,
                                 launch_after=(0,) if i == comm_after else ()))
    tasks.append(ComputeTask(kind="optimizer", name="optimizer", duration_s=0.002, wait_for=(0,)))
    return StepProgram(tasks=tuple(tasks), comms=(CommOp(name="bucket 0", op="all_reduce", size_bytes=1e6),))


def test_zero_comm_slowdown_is_the_engine_as_it_was():
    program = _program()
    a = run_program(program, Fixed(0.030), steps=3, overlap_slowdown=0.1)
    b = run_program(program, Fixed(0.030), steps=3, overlap_slowdown=0.1, comm_slowdown=0.0)
    assert a == b


def test_collective_overlapping_compute_is_stretched_by_exactly_the_overlap():
    # The bucket starts after b0 (t = 15 ms) while b1 computes for 10 ms: with compute slowdown 0
    # and comm slowdown s, the collective does 10 ms / (1 + s) of its work during b1, the rest
    # at full speed afterwards: it ends at 15 + 10 + (30 - 10 / (1 + s)) ms.
    s = 0.5
    program = _program()
    sim = run_program(program, Fixed(0.030), steps=1, comm_slowdown=s)
    comm = [e for e in sim.trace if e.kind == "allreduce"][0]
    assert comm.start_s == pytest.approx(0.015)
    assert comm.end_s == pytest.approx(0.015 + 0.010 + (0.030 - 0.010 / (1 + s)))
    assert sim.steps[0].comm_s == pytest.approx(comm.end_s - comm.start_s)  # what it took, not the model's
    plain = run_program(program, Fixed(0.030), steps=1)
    assert sim.steps[0].step_time_s > plain.steps[0].step_time_s


def test_both_directions_at_once_follow_the_rates():
    # While both run, compute goes at 1/(1+c) and the collective at 1/(1+m): the 10 ms of b1
    # take 10(1+c) ms if the collective outlasts them.
    c, m = 0.25, 0.5
    sim = run_program(_program(), Fixed(0.030), steps=1, overlap_slowdown=c, comm_slowdown=m)
    comm = [e for e in sim.trace if e.kind == "allreduce"][0]
    b1 = [e for e in sim.trace if e.name == "b1"][0]
    assert b1.end_s - b1.start_s == pytest.approx(0.010 * (1 + c))
    done_during = 0.010 * (1 + c) / (1 + m)
    assert comm.end_s == pytest.approx(b1.end_s + 0.030 - done_during)


def test_a_collective_after_all_compute_is_not_slowed():
    program = _program(comm_after=1)  # launched after the last backward layer: nothing overlaps it
    a = run_program(program, Fixed(0.030), steps=2, comm_slowdown=0.7)
    b = run_program(program, Fixed(0.030), steps=2)
    assert [s.step_time_s for s in a.steps] == pytest.approx([s.step_time_s for s in b.steps])


def test_replay_plays_the_durations_the_engine_gave():
    program = _program()
    sim = run_program(program, Fixed(0.030), steps=3, comm_slowdown=0.5)
    played = PlayedCollectives(Fixed(0.030), played_durations(program, sim))
    run = simulate_ranks(program, played, [[1.0, 1.0]] * 3)
    assert run.step_interval_s[0, -1] == pytest.approx(sim.steps[-1].step_time_s, rel=1e-9)
    assert played.n_ranks == 2  # anything else is the wrapped model's


def test_bad_comm_slowdown_is_refused():
    from dpsim.errors import ConfigError

    with pytest.raises(ConfigError, match="comm slowdown"):
        run_program(_program(), Fixed(0.03), comm_slowdown=-0.1)
