"""``plan``'s DualPipe estimate and memory past the replay limit (issue 28: every search in seconds): the
steady state extrapolated from a few replays equals the replay of every micro-batch, on many-micro-batch
cases small enough to replay in full, and a replay whose increments are not yet settled is replayed whole."""

from __future__ import annotations

import random

import pytest

from dpsim.plan.planner import LINEAR_TOLERANCE, MAX_REPLAY_OPS, dualpipe_extrapolated
from dpsim.strategies.pipeline import (
    dualpipe_peak_in_flight,
    dualpipe_slots,
    dualpipe_stage_times,
    peak_in_flight,
)


def _chunks(p: int, seed: int) -> tuple[list, list, list]:
    """Uneven chunk times (the end stages heavier, as the embedding and the output layer make them)."""
    rng = random.Random(seed)
    forward = [[rng.uniform(1.0, 2.0) * (1.5 if s in (0, p - 1) else 1.0) for _ in range(2)] for s in range(p)]
    backward = [[2.0 * f + rng.uniform(0.0, 1.0) for f in row] for row in forward]
    weight = [[0.4 * b for b in row] for row in backward]
    return forward, backward, weight


def _flat(out) -> list[float]:
    end, grads = out
    return [*end, *(t for pair in grads for t in pair)]


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("ready", [False, True])
def test_extrapolated_dualpipe_equals_the_full_replay(p, ready):
    forward, backward, weight = _chunks(p, seed=p)
    # Parameter gathers before the first forwards, compute slowed beside them: a transient at the start only.
    ready_s = [[0.5, 0.7] for _ in range(p)] if ready else None
    gathers_s = [1.2] * p if ready else None

    def replay(n: int):
        return dualpipe_stage_times(p, n, forward, backward, weight, None, ready_s, gathers_s, 0.3 if ready else 0.0)

    m = 2 * (MAX_REPLAY_OPS // p) + 6  # well past the limit: 2pm > MAX_REPLAY_OPS
    full, fast = _flat(replay(m)), _flat(dualpipe_extrapolated(replay, p, m))
    assert len(full) == 3 * p
    assert all(abs(a - b) <= LINEAR_TOLERANCE * abs(a) for a, b in zip(full, fast))
    # Up to the limit it is the replay itself, bit for bit.
    small = MAX_REPLAY_OPS // (2 * p) // 2 * 2
    assert _flat(dualpipe_extrapolated(replay, p, small)) == _flat(replay(small))


def test_unsettled_increments_replay_every_micro_batch():
    """A replay whose growth per two micro-batches still changes at the extrapolation's counts is
    replayed whole (here a made-up one that grows quadratically)."""
    calls = []

    def replay(n: int):
        calls.append(n)
        return [float(n * n)], [[float(n), float(n)]]

    m = MAX_REPLAY_OPS  # p = 1: 2pm > MAX_REPLAY_OPS
    assert dualpipe_extrapolated(replay, 1, m) == ([float(m * m)], [[float(m), float(m)]])
    assert calls[-1] == m and len(calls) == 4


def test_linear_growth_is_extrapolated_from_three_replays():
    calls = []

    def replay(n: int):
        calls.append(n)
        return [3.0 + 0.5 * n], [[1.0 + 0.25 * n, 2.0 + 0.25 * n]]

    m = 4 * MAX_REPLAY_OPS
    end, grads = dualpipe_extrapolated(replay, 1, m)
    assert len(calls) == 3 and max(calls) < m
    assert end == [pytest.approx(3.0 + 0.5 * m, rel=1e-12)]
    assert grads == [[pytest.approx(1.0 + 0.25 * m, rel=1e-12), pytest.approx(2.0 + 0.25 * m, rel=1e-12)]]


@pytest.mark.parametrize("p", [2, 4, 6, 8, 16])
def test_dualpipe_peak_in_flight_is_the_count_of_every_slot(p):
    for m in (2 * p, 4 * p + 6, 8 * p, 16 * p + 2, 64 * p):
        for stage in range(p):
            assert dualpipe_peak_in_flight(p, m, stage) == peak_in_flight(dualpipe_slots(p, m, stage), 2)
