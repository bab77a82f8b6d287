"""The SimPy-free player of a homogeneous job (dpsim/engine/play.py) against the SimPy engine.

Invariant: for one distinct rank, :func:`play_program` gives :func:`run_program`'s
``SimulationResult`` -- every step's timings and every trace event. On the programs every
strategy builds (accumulation, checkpointing, overlap on and off, FSDP hybrid's two
sub-communicators, with and without both slowdowns) the numbers are bit for bit SimPy's
(the golden outputs of ``predict`` rely on it); on random programs (hypothesis: zero and
sub-femtosecond durations, ops carried into the next step, exact ties between the two
streams, per-step compute factors) they agree to 1e-9.
"""

from __future__ import annotations

import math
import pickle
import subprocess
import sys
from dataclasses import dataclass, fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpsim.collectives.ops import CollectiveResult
from dpsim.engine.play import play_program
from dpsim.engine.program import CommOp, ComputeTask, StepProgram
from dpsim.engine.simulate import COMPUTE_KINDS, run_program
from dpsim.errors import ConfigError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict
from dpsim.strategies.registry import STRATEGIES, UNIT_STRATEGIES


def _canonical(trace):
    """The trace as a sorted list: at one instant SimPy's queue, not the schedule, orders events."""
    return sorted(trace, key=lambda e: (e.step, e.kind in COMPUTE_KINDS, e.start_s, e.end_s, e.name,
                                        e.bucket if e.bucket is not None else -1))


def assert_same(played, reference, *, rel: float = 0.0):
    """``played`` equals ``reference``: exactly (``rel=0``) or to ``rel`` relative (1e-12 s absolute)."""
    assert len(played.steps) == len(reference.steps)
    a, b = _canonical(played.trace), _canonical(reference.trace)
    if rel == 0.0:
        assert played.steps == reference.steps
        assert a == b
        return
    close = lambda x, y: math.isclose(x, y, rel_tol=rel, abs_tol=1e-12)
    for s, r in zip(played.steps, reference.steps):
        for f in fields(s):
            assert close(getattr(s, f.name), getattr(r, f.name)), (f.name, s, r)
    assert len(a) == len(b)
    # Events that tie at one instant may sort differently when their times differ by rounding.
    by_name = lambda t: sorted(t, key=lambda e: (e.step, e.kind, e.name, e.bucket or 0))
    for x, y in zip(by_name(a), by_name(b)):
        assert (x.rank, x.step, x.kind, x.name, x.bucket) == (y.rank, y.step, y.kind, y.name, y.bucket)
        assert close(x.start_s, y.start_s) and close(x.end_s, y.end_s), (x, y)


# ------------------------------------------------------------------ the strategies' programs

_CASES = [dict(strategy=s, grad_accum=k, activation_checkpointing=ckpt, overlap=overlap)
          for s in STRATEGIES for k in (1, 3) for ckpt in (False, True) for overlap in (True, False)
          # Per-unit strategies alone have no overlap switch (--no-overlap is refused for them: fuzz8).
          if overlap or s not in UNIT_STRATEGIES]


@pytest.mark.slow
@pytest.mark.parametrize("case", _CASES, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_every_strategy_plays_bit_for_bit_as_simpy(case):
    # 16 GPUs = two 8-GPU nodes: fsdp-hybrid runs on its intra- and inter-node communicators.
    p = predict(PredictConfig(gpus=16, link="infiniband", model="gpt2", micro_batch=2, steps=1, **case))
    groups = {c.group for c in p.program.comms}
    if case["strategy"] == "fsdp-hybrid":
        assert groups == {"intra", "inter"}
    for overlap_slowdown, comm_slowdown, steps in ((0.1, 0.0, 3), (0.0, 0.0, 2), (0.35, 0.2, 3)):
        kw = dict(steps=steps, overlap_slowdown=overlap_slowdown, comm_slowdown=comm_slowdown)
        assert_same(play_program(p.program, p.collectives, **kw), run_program(p.program, p.collectives, **kw))


@pytest.mark.parametrize("argv", [
    dict(gpus=64, link="ethernet", model="llama-2-7b", micro_batch=1),
    dict(gpus=32, link="infiniband", model="llama-2-7b", micro_batch=2, strategy="fsdp",
         activation_checkpointing=True),
    dict(gpus=8, link="dgx-a100", calibration="a100-nvswitch-8gpu"),  # a profile's collective model
    dict(gpus=1, link="nvlink"),
], ids=["llama-ddp", "llama-fsdp-ckpt", "calibrated", "one-gpu"])
def test_predict_is_simpys_prediction(argv, monkeypatch):
    """predict() plays with the fast player; with SimPy swapped in it predicts the very same numbers."""
    from dpsim.predict import run

    fast = predict(PredictConfig(**argv))
    monkeypatch.setattr(run, "play_program", run_program)
    slow = predict(PredictConfig(**argv))
    assert fast.to_dict() == slow.to_dict()
    assert_same(fast.simulation, slow.simulation)


def test_predict_does_not_import_simpy():
    code = ("import sys; from dpsim.predict import PredictConfig, predict; "
            "predict(PredictConfig(gpus=16, link='infiniband')); "
            "assert 'simpy' not in sys.modules, 'predict imported simpy'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ random programs

@dataclass
class _Fixed:
    """A collective of ``size_bytes`` lasts ``size_bytes x seconds_per_byte``; sub-communicators
    are faster (``intra``) or slower (``inter``)."""

    seconds_per_byte: float = 1.0

    def time(self, op, size_bytes):
        return CollectiveResult(op=op, algorithm="fixed", n_ranks=8, size_bytes=size_bytes,
                                time_s=size_bytes * self.seconds_per_byte, latency_s=0.0)

    def group(self, name):
        return _Fixed(self.seconds_per_byte * {"intra": 0.5, "inter": 3.0}[name])


# Round values make exact ties between the rank and the stream likely; 1e-16 is below the
# engine's 1e-15 s threshold of work left.
_DURATION = st.one_of(st.sampled_from([0.0, 1e-16, 0.25, 0.5, 1.0, 1.5, 2.0]),
                      st.floats(0.0, 3.0, allow_nan=False))


@st.composite
def _programs(draw):
    n_tasks = draw(st.integers(1, 8))
    n_ops = draw(st.integers(0, 7))
    # Where each op is launched: before the first task (-1) or after task k, in a drawn order.
    point = [draw(st.integers(-1, n_tasks - 1)) for _ in range(n_ops)]
    order = draw(st.permutations(range(n_ops)))
    at = {k: [i for i in order if point[i] == k] for k in range(-1, n_tasks)}
    launched, tasks = list(at[-1]), []
    for k in range(n_tasks):
        waits = draw(st.lists(st.sampled_from(launched), max_size=3, unique=True)) if launched else []
        tasks.append(ComputeTask(kind=draw(st.sampled_from(sorted(COMPUTE_KINDS))), name=f"t{k}",
                                 duration_s=draw(_DURATION), wait_for=tuple(sorted(waits)),
                                 launch_after=tuple(at[k])))
        launched += at[k]
    comms = tuple(CommOp(name=f"op{i}", op="all_reduce", size_bytes=draw(_DURATION),
                         kind=draw(st.sampled_from(["allreduce", "allgather", "reducescatter"])),
                         group=draw(st.sampled_from(["world", "world", "intra", "inter"])))
                  for i in range(n_ops))
    return StepProgram(tasks=tuple(tasks), comms=comms, launch_at_start=tuple(at[-1]))


_SLOWDOWN = st.one_of(st.sampled_from([0.0, 0.1, 0.5, 1.0]), st.floats(0.0, 2.0, allow_nan=False))


@settings(max_examples=400, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(program=_programs(), steps=st.integers(1, 4), overlap_slowdown=_SLOWDOWN,
       comm_slowdown=st.one_of(st.just(0.0), _SLOWDOWN), seconds_per_byte=st.sampled_from([1.0, 0.5, 0.3]),
       factors=st.one_of(st.none(), st.lists(st.sampled_from([0.5, 1.0, 2.0, 0.7]), min_size=4, max_size=4)))
@pytest.mark.slow
def test_random_programs_play_as_simpy(program, steps, overlap_slowdown, comm_slowdown, seconds_per_byte, factors):
    kw = dict(steps=steps, overlap_slowdown=overlap_slowdown, comm_slowdown=comm_slowdown)
    if factors is not None:  # one rank whose compute factor changes from step to step
        kw["rank_compute_scale"] = [[f] for f in factors[:steps]]
    collectives = _Fixed(seconds_per_byte)
    assert_same(play_program(program, collectives, **kw), run_program(program, collectives, **kw), rel=1e-9)


def test_ops_carried_into_the_next_step():
    """The last task waits for nothing: step 1 starts while step 0's op still runs (and slows it)."""
    program = StepProgram(tasks=(ComputeTask(kind="backward", name="b", duration_s=1.0, launch_after=(0,)),
                                 ComputeTask(kind="optimizer", name="o", duration_s=0.5)),
                          comms=(CommOp(name="g", op="all_reduce", size_bytes=2.0),))
    kw = dict(steps=3, overlap_slowdown=1.0)
    played = play_program(program, _Fixed(), **kw)
    assert_same(played, run_program(program, _Fixed(), **kw))
    # Step 0: b 0-1, g 1-3, o 1-2 (slowed); step 1 starts at 2 while g runs: b 2-3.5 (slowed 1 s).
    b1 = next(e for e in played.trace if e.step == 1 and e.name == "b")
    assert (b1.start_s, b1.end_s) == (2.0, 3.5)


def test_the_trace_is_built_when_read_and_equals_simpys_tuple():
    p = predict(PredictConfig(gpus=16, link="infiniband", model="gpt2", steps=2))
    trace = play_program(p.program, p.collectives, steps=2, overlap_slowdown=0.1).trace
    reference = run_program(p.program, p.collectives, steps=2, overlap_slowdown=0.1).trace
    n = len(trace)  # known before any event is built
    assert trace._events is None and n == len(reference)
    assert sorted(trace, key=lambda e: (e.start_s, e.end_s, e.name)) == \
        sorted(reference, key=lambda e: (e.start_s, e.end_s, e.name))
    assert trace == tuple(trace) and tuple(trace) == trace and hash(trace) == hash(tuple(trace))
    assert trace[0] == tuple(trace)[0] and trace[-3:] == tuple(trace)[-3:]
    assert type(pickle.loads(pickle.dumps(trace))) is tuple and pickle.loads(pickle.dumps(trace)) == trace


# ------------------------------------------------------------------ several ranks, errors

def test_several_distinct_ranks_go_to_simpy():
    program = StepProgram(tasks=(ComputeTask(kind="backward", name="b", duration_s=1.0, launch_after=(0,)),
                                 ComputeTask(kind="optimizer", name="o", duration_s=0.5, wait_for=(0,))),
                          comms=(CommOp(name="g", op="all_reduce", size_bytes=2.0),))
    kw = dict(steps=2, overlap_slowdown=0.1, rank_compute_scale=(1.0, 1.5))
    played = play_program(program, _Fixed(), **kw)
    assert played == run_program(program, _Fixed(), **kw)
    assert {e.rank for e in played.trace} == {0, 1}


@pytest.mark.parametrize("kw, match", [
    (dict(steps=0), "--steps"),
    (dict(overlap_slowdown=-0.5), "--overlap-slowdown"),
    (dict(comm_slowdown=float("nan")), "comm slowdown"),
    (dict(rank_compute_scale=(0.0,)), "rank_compute_scale"),
    (dict(steps=2, rank_compute_scale=[[1.0]]), "rank_compute_scale"),
])
def test_bad_arguments_are_refused_as_simpy_refuses_them(kw, match):
    program = StepProgram(tasks=(ComputeTask(kind="forward", name="f", duration_s=1.0),), comms=())
    for engine in (play_program, run_program):
        with pytest.raises(ConfigError, match=match):
            engine(program, _Fixed(), **kw)
