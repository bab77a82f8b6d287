"""The step engine: golden cases and invariants of overlap, played on DDP programs.

Every case runs on the SimPy engine (the reference) and on the SimPy-free player of a
homogeneous job that ``predict`` uses (``tests/test_engine_play.py`` compares them in depth).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest

from dpsim.collectives.ops import CollectiveResult
from dpsim.engine.play import play_program
from dpsim.engine.simulate import run_program
from dpsim.strategies.ddp import ddp_program
from dpsim.workload.buckets import Bucket, BucketPlan
from dpsim.workload.compute import ComputeProfile, LayerTime


@dataclass
class FixedCollectives:
    """All-reduce costs a fixed time per byte (a stand-in network)."""

    seconds_per_byte: float
    n_ranks: int = 8

    def time(self, op, size_bytes):
        t = size_bytes * self.seconds_per_byte
        return CollectiveResult(op=op, algorithm="fixed", n_ranks=self.n_ranks, size_bytes=size_bytes,
                                time_s=t, latency_s=0.0)


_ENGINE = run_program


@pytest.fixture(autouse=True, params=[run_program, play_program], ids=["simpy", "play"])
def engine(request, monkeypatch):
    """Each test once per engine."""
    monkeypatch.setattr(sys.modules[__name__], "_ENGINE", request.param)


def simulate(compute, buckets, collectives, *, overlap=True, **kw):
    """The engine playing the DDP step of ``buckets`` (the engine itself knows no strategy)."""
    return _ENGINE(ddp_program(compute, buckets, overlap=overlap).program, collectives, **kw)


def _profile(fwd, bwd, opt=0.0):
    layers = tuple(LayerTime(name=f"l{i}", forward_s=f, backward_s=b, param_names=(f"p{i}",))
                   for i, (f, b) in enumerate(zip(fwd, bwd)))
    return ComputeProfile(layers=layers, optimizer_s=opt, flops_per_step=1.0)


def _plan(groups, bytes_per_param=1):
    buckets = tuple(Bucket(index=i, param_names=tuple(f"p{j}" for j in g), size_bytes=len(g) * bytes_per_param,
                           dtype="float32", size_limit_bytes=1) for i, g in enumerate(groups))
    return BucketPlan(buckets=buckets, bucket_cap_bytes=1, first_bucket_cap_bytes=1)


def test_golden_two_layers_two_buckets():
    # Forward 1 + 1; backward layer1 (2 s) then layer0 (2 s); opt 0.5.
    # Bucket 0 = p1 ready at 4, all-reduce 3 s -> ends 7; bucket 1 = p0 ready at 6,
    # starts when stream frees at 7, ends 10; optimizer 10 -> 10.5.
    compute = _profile([1, 1], [2, 2], opt=0.5)
    sim = simulate(compute, _plan([[1], [0]]), FixedCollectives(3.0))
    s = sim.steps[0]
    assert s.step_time_s == pytest.approx(10.5)
    assert s.forward_s == pytest.approx(2.0)
    assert s.backward_s == pytest.approx(4.0)
    assert s.comm_s == pytest.approx(6.0)
    # Communication runs 4..10; compute covers 4..6: 4 s exposed.
    assert s.exposed_comm_s == pytest.approx(4.0)
    kinds = [(e.kind, e.name) for e in sim.trace]
    assert ("allreduce", "bucket 0") in kinds and ("optimizer", "optimizer") in kinds


def test_no_overlap_is_compute_plus_comm():
    compute = _profile([1, 1, 1], [2, 2, 2], opt=0.5)
    sim = simulate(compute, _plan([[2], [1], [0]]), FixedCollectives(1.0), overlap=False, overlap_slowdown=0.5)
    assert sim.steps[0].step_time_s == pytest.approx(9.5 + 3.0)
    assert sim.steps[0].exposed_comm_s == pytest.approx(3.0)


@pytest.mark.parametrize("spb", [0.01, 0.5, 1.0, 2.0, 10.0])
@pytest.mark.parametrize("groups", [[[3], [2], [1], [0]], [[3, 2], [1, 0]], [[3, 2, 1, 0]]])
def test_step_between_max_and_sum(spb, groups):
    compute = _profile([1, 2, 1, 3], [2, 4, 2, 6], opt=0.25)
    plan = _plan(groups)
    s = simulate(compute, plan, FixedCollectives(spb)).steps[0]
    total_compute = compute.step_s
    comm = 4 * spb
    assert s.step_time_s >= max(total_compute, comm) - 1e-12
    assert s.step_time_s <= total_compute + comm + 1e-12
    assert 0 <= s.exposed_comm_s <= comm + 1e-12
    # With overlap, never slower than without.
    s_no = simulate(compute, plan, FixedCollectives(spb), overlap=False).steps[0]
    assert s.step_time_s <= s_no.step_time_s + 1e-12


def test_overlap_slowdown_stretches_overlapped_compute_exactly():
    # Bucket of layer 1 is reduced (4 s) while layer 0's backward (2 s of work) runs at
    # 1/(1+0.5): it takes 3 s; then the last bucket (1 s) follows.
    compute = _profile([1, 1], [2, 2])
    plan = _plan([[1], [0]])
    coll = FixedCollectives(1.0)
    plan = BucketPlan(buckets=(Bucket(index=0, param_names=("p1",), size_bytes=4, dtype="float32", size_limit_bytes=1),
                               Bucket(index=1, param_names=("p0",), size_bytes=1, dtype="float32", size_limit_bytes=1)),
                      bucket_cap_bytes=1, first_bucket_cap_bytes=1)
    s = simulate(compute, plan, coll, overlap_slowdown=0.5).steps[0]
    # fwd 0..2, bwd l1 2..4, bwd l0 4..7 (slowed), bucket0 4..8, bucket1 8..9.
    assert s.backward_s == pytest.approx(5.0)
    assert s.step_time_s == pytest.approx(9.0)
    s0 = simulate(compute, plan, coll, overlap_slowdown=0.0).steps[0]
    assert s0.backward_s == pytest.approx(4.0)
    assert s.step_time_s >= s0.step_time_s


def test_identical_ranks_equal_one_rank_and_straggler_sets_pace():
    compute = _profile([1, 1], [2, 2], opt=0.5)
    plan = _plan([[1], [0]])
    one = simulate(compute, plan, FixedCollectives(0.5), steps=2)
    many = simulate(compute, plan, FixedCollectives(0.5), steps=2, rank_compute_scale=(1.0, 1.0, 1.0))
    assert [s.step_time_s for s in one.steps] == pytest.approx([s.step_time_s for s in many.steps])
    slow = simulate(compute, plan, FixedCollectives(0.5), steps=2, rank_compute_scale=(1.0, 1.5))
    # The fast rank waits for the straggler's buckets: its step is the straggler's.
    assert slow.steps[1].step_time_s == pytest.approx(1.5 * one.steps[1].step_time_s, rel=0.2)
    assert slow.steps[1].step_time_s > one.steps[1].step_time_s


def test_steps_repeat_identically():
    compute = _profile([1, 1], [2, 2], opt=0.5)
    sim = simulate(compute, _plan([[1], [0]]), FixedCollectives(3.0), steps=4)
    assert len(sim.steps) == 4
    assert len({round(s.step_time_s, 12) for s in sim.steps}) == 1


def test_bad_steps_and_slowdown_rejected():
    from dpsim.errors import ConfigError

    with pytest.raises(ConfigError, match="--steps"):
        simulate(_profile([1], [2]), _plan([[0]]), FixedCollectives(1.0), steps=0)
    with pytest.raises(ConfigError, match="--overlap-slowdown"):
        simulate(_profile([1], [2]), _plan([[0]]), FixedCollectives(1.0), overlap_slowdown=-1)
