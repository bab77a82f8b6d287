"""Stragglers and variability: the per-rank fast path against the explicit engine,
order statistics, reproducibility, link degradation and the predict flags."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest

from dpsim.cli import main
from dpsim.collectives.nccl import NcclCollectives
from dpsim.collectives.ops import CollectiveResult
from dpsim.engine.program import CommOp, ComputeTask, StepProgram
from dpsim.engine.replay import pareto_front, simulate_ranks
from dpsim.engine.simulate import run_program
from dpsim.errors import ConfigError
from dpsim.network.degrade import (
    LinkDegradation,
    communicator_degradations,
    parse_degradation,
)
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict, resolve_topology
from dpsim.stats import expected_max_normal, t_quantile
from dpsim.topology.cluster import Topology
from dpsim.variability.monte_carlo import factor_sampler, monte_carlo
from dpsim.variability.run import predict_with_variability
from dpsim.variability.spec import VariabilitySpec, parse_straggler, rank_factors
from tests.conftest import variant


@dataclass
class FixedCollectives:
    """Every op costs ``seconds_per_byte`` per byte."""

    seconds_per_byte: float
    n_ranks: int = 8

    def time(self, op, size_bytes):
        t = size_bytes * self.seconds_per_byte
        return CollectiveResult(op=op, algorithm="fixed", n_ranks=self.n_ranks, size_bytes=size_bytes,
                                time_s=t, latency_s=0.0)


@pytest.fixture(scope="module")
def gpt2_ethernet():
    cfg = PredictConfig(gpus=16, link="ethernet", model="gpt2", steps=1)
    p = predict(cfg)
    return p, p.collectives


def _engine_reference(program, collectives, factors, slowdown):
    """Step times, collective schedule and every rank's step ends from the SimPy engine."""
    steps, n = factors.shape
    sim = run_program(program, collectives, steps=steps, overlap_slowdown=slowdown,
                      rank_compute_scale=factors.tolist())
    step_time = np.array([s.step_time_s for s in sim.steps])
    comm = sorted((e.start_s, e.end_s) for e in sim.trace if e.bucket is not None)
    ends = np.zeros((steps, n))
    for e in sim.trace:
        if e.bucket is None:
            ends[e.step, e.rank] = max(ends[e.step, e.rank], e.end_s)
    return step_time, np.array(comm), ends


def _fsdp_like_program() -> StepProgram:
    """A program with a start-of-step launch and a last task that waits for nothing."""
    tasks = (
        ComputeTask(kind="forward", name="f0", duration_s=1.0, wait_for=(0,)),
        ComputeTask(kind="forward", name="f1", duration_s=0.5),
        ComputeTask(kind="backward", name="b1", duration_s=1.0, launch_after=(1,)),
        ComputeTask(kind="backward", name="b0", duration_s=2.0, launch_after=(2,)),
        ComputeTask(kind="optimizer", name="opt-a", duration_s=0.3, wait_for=(1,)),
        ComputeTask(kind="optimizer", name="opt-b", duration_s=0.2),
    )
    comms = (CommOp(name="ag", op="all_gather", size_bytes=1.0, kind="allgather"),
             CommOp(name="rs1", op="reduce_scatter", size_bytes=1.5, kind="reducescatter"),
             CommOp(name="rs0", op="reduce_scatter", size_bytes=2.0, kind="reducescatter"))
    return StepProgram(tasks=tasks, comms=comms, launch_at_start=(0,))


# ----------------------------------------------------------------------------- exact against the engine

@pytest.mark.parametrize("n_ranks", [1, 4, 9, 16])
@pytest.mark.parametrize("slowdown", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("overlap", [True, False])
def test_fast_path_equals_explicit_engine_on_ddp(gpt2_ethernet, n_ranks, slowdown, overlap):
    p, coll = gpt2_ethernet
    program = p.program if overlap else ddp_program_from(p, overlap=False)
    rng = np.random.default_rng(n_ranks * 7 + int(slowdown * 10))
    factors = np.maximum(1 + 0.15 * rng.standard_normal((4, n_ranks)), 0.2)
    factors[:, 0] *= 1.4  # one persistent straggler
    step_time, comm, ends = _engine_reference(program, coll, factors, slowdown)
    for use_front in (True, False):
        fast = simulate_ranks(program, coll, factors, overlap_slowdown=slowdown, record_ranks=True,
                              use_front=use_front)
        np.testing.assert_allclose(fast.step_time_s[0], step_time, rtol=1e-9)
        np.testing.assert_allclose(fast.comm_start_s[0], comm[:, 0], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(fast.comm_end_s[0], comm[:, 1], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(fast.rank_end_s[0], ends, rtol=1e-9)
    assert fast.ranks_simulated == n_ranks


def ddp_program_from(prediction, *, overlap):
    """The DDP program of a prediction with overlap switched (same compute and buckets)."""
    tasks = prediction.program.tasks
    # Rebuild: forward tasks, backward launching nothing, all buckets after the last backward.
    n_ops = len(prediction.program.comms)
    fwd = [t for t in tasks if t.kind == "forward"]
    bwd = [t for t in tasks if t.kind == "backward"]
    opt = [ComputeTask(kind=t.kind, name=t.name, duration_s=t.duration_s, wait_for=tuple(range(n_ops)))
           for t in tasks if t.kind == "optimizer"]
    bwd = [ComputeTask(kind=t.kind, name=t.name, duration_s=t.duration_s) for t in bwd[:-1]] + [
        ComputeTask(kind="backward", name=bwd[-1].name, duration_s=bwd[-1].duration_s,
                    launch_after=tuple(range(n_ops)))]
    return StepProgram(tasks=tuple(fwd + bwd + opt), comms=prediction.program.comms)


def _compute_after_last_launch_program() -> StepProgram:
    """The last op is launched, then more compute runs before the optimizer waits for it."""
    tasks = (
        ComputeTask(kind="backward", name="b1", duration_s=1.0, launch_after=(0,)),
        ComputeTask(kind="backward", name="b0", duration_s=1.0, launch_after=(1,)),
        ComputeTask(kind="recompute", name="extra", duration_s=2.5),
        ComputeTask(kind="optimizer", name="opt", duration_s=0.4, wait_for=(0, 1)),
    )
    comms = (CommOp(name="bucket 0", op="all_reduce", size_bytes=1.0),
             CommOp(name="bucket 1", op="all_reduce", size_bytes=0.5))
    return StepProgram(tasks=tasks, comms=comms)


@pytest.mark.parametrize("slowdown", [0.0, 0.3])
@pytest.mark.parametrize("make", [_fsdp_like_program, _compute_after_last_launch_program])
def test_fast_path_equals_engine_on_a_program_without_synchronous_end(slowdown, make):
    program = make()
    coll = FixedCollectives(0.7)
    rng = np.random.default_rng(3)
    factors = np.maximum(1 + 0.3 * rng.standard_normal((5, 6)), 0.2)
    step_time, comm, ends = _engine_reference(program, coll, factors, slowdown)
    fast = simulate_ranks(program, coll, factors, overlap_slowdown=slowdown, record_ranks=True)
    np.testing.assert_allclose(fast.step_time_s[0], step_time, rtol=1e-9)
    np.testing.assert_allclose(fast.comm_end_s[0], comm[:, 1], rtol=1e-9)
    np.testing.assert_allclose(fast.rank_end_s[0], ends, rtol=1e-9)


def test_homogeneous_ranks_equal_the_one_rank_engine(gpt2_ethernet):
    p, coll = gpt2_ethernet
    ref = run_program(p.program, coll, steps=3, overlap_slowdown=0.1)
    fast = simulate_ranks(p.program, coll, np.ones((3, 5)), overlap_slowdown=0.1)
    np.testing.assert_allclose(fast.step_time_s[0], [s.step_time_s for s in ref.steps], rtol=1e-12)
    # A homogeneous cluster: the front is one rank.
    assert fast.max_front == 1


def test_batched_samples_equal_separate_runs(gpt2_ethernet):
    p, coll = gpt2_ethernet
    rng = np.random.default_rng(5)
    factors = np.maximum(1 + 0.1 * rng.standard_normal((3, 4, 32)), 0.2)
    together = simulate_ranks(p.program, coll, factors, overlap_slowdown=0.2)
    for b in range(3):
        alone = simulate_ranks(p.program, coll, factors[b], overlap_slowdown=0.2)
        np.testing.assert_allclose(together.step_end_s[b], alone.step_end_s[0], rtol=1e-12)


def test_pareto_front_keeps_exactly_the_undominated_ranks():
    rng = np.random.default_rng(0)
    start = rng.integers(0, 5, size=(3, 40)).astype(float)
    factor = rng.integers(0, 5, size=(3, 40)).astype(float) + 1
    idx = pareto_front(start, factor)
    for b in range(3):
        pts = set(zip(start[b], factor[b]))
        front = {(s, f) for s, f in pts if not any(s2 >= s and f2 >= f and (s2, f2) != (s, f) for s2, f2 in pts)}
        chosen = set(zip(start[b, idx[b]], factor[b, idx[b]]))
        assert front <= chosen  # every undominated point is played
        # Padding only repeats dominated ranks; no undominated one is lost.
        assert len({p for p in chosen if p in front}) == len(front)


# ----------------------------------------------------------------------------- stragglers

@pytest.mark.parametrize("f", [1.0, 1.3, 2.0])
def test_one_straggler_slows_the_compute_part_by_f(gpt2_ethernet, f):
    p, coll = gpt2_ethernet
    program = ddp_program_from(p, overlap=False)  # synchronous: compute, then all-reduce
    compute = sum(t.duration_s for t in program.tasks)
    comm = sum(coll.time(c.op, c.size_bytes).time_s for c in program.comms)
    factors = np.ones((6, 16))
    factors[:, 5] = f
    run = simulate_ranks(program, coll, factors)
    np.testing.assert_allclose(run.step_time_s[0, 0], f * compute + comm, rtol=1e-12)
    # Every later step too: everyone waits for the straggler, whose optimizer ends the step.
    np.testing.assert_allclose(run.step_interval_s[0], f * compute + comm, rtol=1e-9)


def test_rank_factors_from_node_and_gpu_stragglers():
    fac = rank_factors([parse_straggler("node1:1.5x"), parse_straggler("gpu9:2")], 16, 8)
    assert fac[:8].tolist() == [1.0] * 8
    assert fac[8] == 1.5 and fac[9] == 3.0 and fac[15] == 1.5
    with pytest.raises(ConfigError, match=r"--straggler: 'node2:1.5x' names node 2, but there are 2 nodes"):
        rank_factors([parse_straggler("node2:1.5")], 16, 8)
    with pytest.raises(ConfigError, match="--straggler.*gpu16"):
        rank_factors([parse_straggler("rank16:1.5")], 16, 8)


@pytest.mark.parametrize("raw", ["node3", "node:1.3x", "nodeX:2", "node1:0x", "node1:-1", "cpu1:2x", ""])
def test_bad_straggler_names_the_flag_and_the_format(raw):
    with pytest.raises(ConfigError, match=r"--straggler: .* expected node<K>:<factor>x"):
        parse_straggler(raw)


def test_stragglers_only_collapse_identical_ranks():
    p = predict(PredictConfig(gpus=1024, link="infiniband", model="gpt2", steps=1))
    coll = p.collectives
    spec = VariabilitySpec(stragglers=(parse_straggler("node3:1.3x"),))
    stats = monte_carlo(p.program, coll, spec, n_ranks=1024, gpus_per_node=8, steps=20, overlap_slowdown=0.1,
                        nominal_step_s=p.step_time_s, global_batch=4 * 1024)
    assert stats.ranks_simulated == 2
    assert stats.mean_s > p.step_time_s


# ----------------------------------------------------------------------------- order statistics

def test_expected_max_normal_reference_values():
    assert expected_max_normal(1) == pytest.approx(0.0, abs=1e-9)
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-9)
    assert expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), abs=1e-9)
    assert expected_max_normal(5) == pytest.approx(1.1629644736, abs=1e-8)  # tabulated (Harter 1961)
    assert expected_max_normal(10) == pytest.approx(1.5387527308, abs=1e-8)
    values = [expected_max_normal(n) for n in (8, 64, 1024)]
    assert values == sorted(values)


def _compute_then_allreduce(compute_s: float, size: float) -> StepProgram:
    """One compute task, one all-reduce, a zero-length optimizer: every step starts in sync."""
    return StepProgram(
        tasks=(ComputeTask(kind="backward", name="b", duration_s=compute_s, launch_after=(0,)),
               ComputeTask(kind="optimizer", name="opt", duration_s=0.0, wait_for=(0,))),
        comms=(CommOp(name="bucket 0", op="all_reduce", size_bytes=size),))


@pytest.mark.slow
@pytest.mark.parametrize("n_ranks", [8, 64, 1024])
def test_mean_step_is_the_expected_max_of_n_normals(n_ranks):
    cv, compute_s, comm_s = 0.05, 1.0, 0.25
    program = _compute_then_allreduce(compute_s, 1.0)
    spec = VariabilitySpec(noise_cv=cv, seed=11, samples=4)
    steps = 1000
    draw = factor_sampler(spec, np.ones(n_ranks), sample_ids=range(4), compute_s=compute_s, exposure_s=1.0)
    run = simulate_ranks(program, FixedCollectives(comm_s), draw, steps=steps)
    intervals = run.step_interval_s.ravel()
    expected = compute_s * (1 + cv * expected_max_normal(n_ranks)) + comm_s
    se = intervals.std(ddof=1) / math.sqrt(intervals.size)
    assert abs(intervals.mean() - expected) < 4 * se + 1e-12, (intervals.mean(), expected, se)
    # The sampling error is tiny against the effect: the max of N draws, not the mean.
    assert expected - (compute_s + comm_s) > 20 * se


@pytest.mark.slow
def test_ddp_step_grows_with_n_as_the_max_of_n_draws(gpt2_ethernet):
    """No overlap: interval between all-reduce ends = comm + max_r(opt a_r + fb b_r) (a, b i.i.d.)."""
    p, coll = gpt2_ethernet
    program = ddp_program_from(p, overlap=False)
    opt = sum(t.duration_s for t in program.tasks if t.kind == "optimizer")
    fb = sum(t.duration_s for t in program.tasks if t.kind != "optimizer")
    comm = sum(coll.time(c.op, c.size_bytes).time_s for c in program.comms)
    cv = 0.04
    means = []
    for n in (4, 32, 256):
        spec = VariabilitySpec(noise_cv=cv, seed=2, samples=2)
        draw = factor_sampler(spec, np.ones(n), sample_ids=range(2), compute_s=opt + fb, exposure_s=1.0)
        run = simulate_ranks(program, coll, draw, steps=1500)
        last = run.comm_end_s[:, len(program.comms) - 1::len(program.comms)]  # each step's last all-reduce
        gaps = np.diff(last, axis=1).ravel()
        sd = cv * math.sqrt(opt ** 2 + fb ** 2)
        expected = comm + opt + fb + sd * expected_max_normal(n)
        se = gaps.std(ddof=1) / math.sqrt(gaps.size)
        assert abs(gaps.mean() - expected) < 4 * se + 1e-12, (n, gaps.mean(), expected, se)
        means.append(gaps.mean())
    assert means == sorted(means)


# ----------------------------------------------------------------------------- reproducibility

def test_same_seed_same_numbers_and_batching_does_not_matter(gpt2_ethernet):
    p, coll = gpt2_ethernet
    kw = dict(n_ranks=64, gpus_per_node=8, steps=20, overlap_slowdown=0.1, nominal_step_s=p.step_time_s,
              global_batch=256)
    spec = VariabilitySpec(noise_cv=0.05, hiccup_rate_per_s=0.5, hiccup_s=0.02, seed=7, samples=5,
                           stragglers=(parse_straggler("gpu3:1.2x"),))
    a = monte_carlo(p.program, coll, spec, **kw)
    b = monte_carlo(p.program, coll, spec, **kw)
    c = monte_carlo(p.program, coll, spec, **kw, max_batch_elements=64 * 2)  # samples in batches of 2
    assert a == b
    assert a.mean_s == pytest.approx(c.mean_s, rel=1e-12) and a.p99_s == pytest.approx(c.p99_s, rel=1e-12)
    d = monte_carlo(p.program, coll, VariabilitySpec(noise_cv=0.05, hiccup_rate_per_s=0.5, hiccup_s=0.02, seed=8,
                                                     samples=5, stragglers=spec.stragglers), **kw)
    assert d.mean_s != a.mean_s
    assert a.p50_s <= a.p90_s <= a.p99_s
    lo, hi = a.samples_per_s_ci
    assert lo <= a.samples_per_s <= hi


@pytest.mark.slow
def test_hiccups_add_their_expected_stall():
    program = _compute_then_allreduce(1.0, 1.0)
    spec = VariabilitySpec(hiccup_rate_per_s=0.2, hiccup_s=0.1, seed=1, samples=1)
    draw = factor_sampler(spec, np.ones(1), sample_ids=[0], compute_s=1.0, exposure_s=1.0)
    run = simulate_ranks(program, FixedCollectives(0.0), draw, steps=20000)
    # One rank: mean step = 1 + 0.1 x E[Poisson(0.2)].
    assert run.step_interval_s.mean() == pytest.approx(1.0 + 0.1 * 0.2, rel=3e-3)


def test_t_quantile_matches_known_values():
    assert t_quantile(0.975, 1) == pytest.approx(12.706, rel=1e-3)
    assert t_quantile(0.975, 4) == pytest.approx(2.776, rel=2e-3)
    assert t_quantile(0.975, 9) == pytest.approx(2.262, rel=1e-3)
    assert t_quantile(0.975, 1000) == pytest.approx(1.962, rel=1e-3)


def test_spec_validation_names_flags():
    for kw, flag in [({"noise_cv": -0.1}, "--noise-cv"), ({"noise_distribution": "cauchy"}, "--noise-dist"),
                     ({"hiccup_rate_per_s": 1.0}, "--hiccup-rate-per-s / --hiccup-s"),
                     ({"samples": 0}, "--mc-samples"), ({"seed": -1}, "--seed")]:
        with pytest.raises(ConfigError, match=flag):
            VariabilitySpec(**kw)


# ----------------------------------------------------------------------------- link degradation

def _spec(*degs: str) -> VariabilitySpec:
    return VariabilitySpec(degradations=tuple(parse_degradation(d) for d in degs))


@pytest.mark.parametrize("name,n,changes,link,expected", [
    # (u, v) of the degraded cable in the full graph; both directions are scaled.
    ("ethernet", 32, {}, "node3.nic0", ("n3.nic0", "leaf0.0")),
    ("infiniband", 48, {"fabric__nodes_per_leaf": 2}, "node5.nic3", ("n5.nic3", "leaf2.3")),  # 3 leaf groups
    ("infiniband", 32, {}, "node1.gpu6", ("n1.gpu6", "n1.nvswitch")),
    ("pcie", 24, {}, "node2.nic0", ("n2.nic0", "leaf0.0")),
    ("pcie", 24, {}, "node2.gpu3", ("n2.gpu3", "n2.pcie")),
])
def test_a_named_link_scales_both_directions_of_that_link_in_the_nccl_network(name, n, changes, link, expected):
    topo = Topology(spec=variant(name, **changes), n_gpus=n)
    healthy = NcclCollectives(topo)
    degraded = NcclCollectives(topo, degradations=[LinkDegradation(link=link, capacity_fraction=0.3)])
    changed = np.flatnonzero(degraded.plans.capacity_bytes_per_s != healthy.plans.capacity_bytes_per_s)
    names = {degraded.network.link_name(int(i)) for i in changed}
    u, v = expected
    assert names == {(u, v), (v, u)}
    assert {(a, b) for a, b in names} <= set(topo.graph.edges)  # the graph's own links
    np.testing.assert_allclose(degraded.plans.capacity_bytes_per_s[changed], 0.3 * healthy.plans.capacity_bytes_per_s[changed],
                               rtol=1e-15)
    assert (degraded.plans.capacity_scale[changed] == 0.3).all()


def test_a_nic_of_a_bundle_scales_its_share_and_classes_multiply():
    # AWS p5: 32 NICs for 8 GPUs, merged four per GPU: one NIC at 50 % leaves 3.5 of 4.
    topo = resolve_topology(PredictConfig(gpus=32, link="aws-p5"))
    coll = NcclCollectives(topo, degradations=[parse_degradation("node1.nic5:50%")])
    assert sorted(set(coll.plans.capacity_scale)) == [0.875, 1.0]
    assert {coll.network.link_name(int(i)) for i in np.flatnonzero(coll.plans.capacity_scale < 1)} == {
        ("n1.nic1", "leaf0.0"), ("leaf0.0", "n1.nic1")}
    both = NcclCollectives(topo, degradations=[parse_degradation("node1.nic5:50%"), parse_degradation("ethernet:50%")])
    assert sorted(set(both.plans.capacity_scale)) == [0.4375, 0.5, 1.0]


@pytest.mark.parametrize("link,n,degrade", [
    ("ethernet", 64, "ethernet:100%"),
    ("infiniband", 64, "nvlink:100%"),
    ("infiniband", 64, "node3.nic2:100%"),
    ("infiniband", 64, "node5.gpu1:100%"),
])
def test_degrading_to_100_percent_is_exactly_the_healthy_prediction(link, n, degrade):
    cfg = PredictConfig(gpus=n, link=link, model="gpt2")
    p, report = predict_with_variability(cfg, _spec(degrade))
    healthy = predict(cfg)
    assert p.to_dict() == healthy.to_dict()
    d = report.degradation
    assert d.step_s == d.healthy_step_s == healthy.step_time_s
    assert d.comm_s == d.healthy_comm_s == healthy.comm_s


def test_degraded_and_healthy_use_the_same_collective_model():
    cfg = PredictConfig(gpus=64, link="infiniband", model="gpt2", algo="ring,tree", proto="^LL", jobs=2,
                        placement="interleaved")
    p, _ = predict_with_variability(cfg, _spec("infiniband:80%"))
    healthy = predict(cfg)
    for coll in (p.collectives.world, healthy.collectives.world):
        assert isinstance(coll, NcclCollectives)
        assert coll.algorithms == ("ring", "tree") and coll.protocols == ("LL128", "Simple")
        assert coll.jobs == 2 and coll.placement == "interleaved"
    assert p.collectives.world.degradations == (parse_degradation("infiniband:80%"),)
    assert healthy.collectives.world.degradations == ()
    assert p.step_time_s > healthy.step_time_s


def test_degrading_the_bottleneck_class_slows_communication_and_the_report_names_it():
    cfg = PredictConfig(gpus=64, link="ethernet", model="gpt2")
    p, report = predict_with_variability(cfg, _spec("ethernet:50%"))
    d = report.degradation
    assert d.bottleneck_class == "ethernet" and p.links.bottleneck_class == "ethernet"
    assert all("nic0" in name for name in d.bottleneck_links)
    # Bandwidth-bound all-reduces on the NICs: the time beyond the latency doubles.
    healthy = predict(cfg).collectives
    for c in p.program.comms:
        a, b = p.collectives.time(c.op, c.size_bytes), healthy.time(c.op, c.size_bytes)
        if a.algorithm == b.algorithm == "ring" and b.protocol == a.protocol == "Simple":
            assert a.time_s - a.latency_s == pytest.approx(2 * (b.time_s - b.latency_s), rel=1e-9)
    assert d.comm_s > 1.8 * d.healthy_comm_s and d.step_s > d.healthy_step_s
    # A class that does not bind (NVLink on an Ethernet cluster), a little slower: nothing changes.
    same, _ = predict_with_variability(cfg, _spec("nvlink:90%"))
    assert same.step_time_s == predict(cfg).step_time_s


@pytest.mark.parametrize("link,n,degrade,fraction", [
    ("ethernet", 64, "node5.nic0:25%", 0.25),       # one NIC per server: every ring crosses it
    ("infiniband", 64, "node3.nic2:50%", 0.5),      # rail 2's NIC of one server
    ("infiniband", 128, "node15.nic7:40%", 0.4),    # the last server's last NIC
])
def test_one_degraded_nic_slows_the_step_by_its_slowest_flow(link, n, degrade, fraction):
    cfg = PredictConfig(gpus=n, link=link, model="gpt2")
    p, report = predict_with_variability(cfg, _spec(degrade))
    d = report.degradation
    assert d.step_s > d.healthy_step_s and d.comm_s > d.healthy_comm_s
    # The report names it: both directions of that NIC's cable are the busiest links.
    node, nic = degrade.split(":")[0].split(".")
    assert d.bottleneck_class == link and d.bottleneck_count == 2
    assert all(f"n{node[4:]}.{nic}" in name.split(" -> ") for name in d.bottleneck_links), d.bottleneck_links
    # The ring's flows through that NIC run at fraction x their healthy rate: the ring's
    # bandwidth term (slowest flow of each step) grows by exactly 1 / fraction.
    topo = resolve_topology(cfg)
    healthy = NcclCollectives(topo, algorithms=("ring",))
    slow = NcclCollectives(topo, algorithms=("ring",), degradations=[parse_degradation(degrade)])
    ratio = slow.plan_cost("ring", "all_reduce").seconds_per_byte / healthy.plan_cost("ring", "all_reduce").seconds_per_byte
    assert ratio == pytest.approx(1 / fraction, rel=1e-12)


def test_a_degraded_gpu_link_on_any_server_counts_like_on_server_0():
    """Server 0's intra-server flows stand for every server's only while all servers are alike."""
    topo = resolve_topology(PredictConfig(gpus=64, link="infiniband"))
    steps = {}
    for node in (0, 3, 7):
        coll = NcclCollectives(topo, degradations=[parse_degradation(f"node{node}.gpu2:10%")])
        steps[node] = [coll.plan_cost(a, "all_reduce").seconds_per_byte for a in ("ring", "tree", "nvls_tree")]
    healthy = NcclCollectives(topo)
    assert steps[0] == steps[3] == steps[7]
    ref = [healthy.plan_cost(a, "all_reduce").seconds_per_byte for a in ("ring", "tree", "nvls_tree")]
    assert all(a > b for a, b in zip(steps[3], ref)), (steps[3], ref)


def test_a_class_that_carries_nothing_changes_nothing():
    # Eight servers under one rail-optimised leaf group: NCCL's plans stay on their rails,
    # so the leaf -> spine links exist but carry nothing.
    cfg = PredictConfig(gpus=64, link="infiniband", model="gpt2")
    healthy = predict(cfg)
    assert "leaf-spine" in healthy.collectives.world.network.link_classes
    assert "leaf-spine" not in healthy.links.by_class
    p, report = predict_with_variability(cfg, _spec("leaf-spine:50%"))
    assert p.to_dict() == healthy.to_dict()
    assert report.degradation.comm_s == report.degradation.healthy_comm_s


def test_degraded_links_reach_hybrid_sharding_communicators():
    cfg = PredictConfig(gpus=64, link="infiniband", model="gpt2", strategy="fsdp-hybrid")
    healthy = predict(cfg)
    same, _ = predict_with_variability(cfg, _spec("infiniband:100%"))
    assert same.to_dict() == healthy.to_dict()
    for degrade in ("infiniband:50%", "node3.nic2:50%", "node3.gpu2:10%"):
        p, report = predict_with_variability(cfg, _spec(degrade))
        assert report.degradation.comm_s > report.degradation.healthy_comm_s, degrade


def test_communicator_degradations_map_names_onto_hybrid_groups():
    from dpsim.collectives.groups import hybrid_topologies

    topo = resolve_topology(PredictConfig(gpus=32, link="aws-p5"))
    intra, inter = hybrid_topologies(topo)
    degs = [parse_degradation(x) for x in ("node3.gpu2:50%", "node1.nic5:50%", "ethernet:80%")]
    assert [d.label for d in communicator_degradations(degs, topo, intra)] == ["node0.gpu2:50%", "ethernet:80%"]
    # Four NICs behind each GPU: one at 50 % leaves the GPU's group 87.5 %.
    assert [d.label for d in communicator_degradations(degs, topo, inter)] == [
        "node3.gpu0:50%", "node1.nic0:87.5%", "ethernet:80%"]
    assert communicator_degradations(degs, topo, topo) == tuple(degs)


def test_per_message_overhead_on_a_degraded_nic_is_that_of_its_slower_rate():
    topo = Topology(spec=variant("infiniband", fabric__nic_message_overhead_s=2e-6), n_gpus=32)
    coll = NcclCollectives(topo, degradations=[parse_degradation("node1.nic3:50%")])
    s = 0.8
    scale = coll.plans.nic_link_scale(s)
    f = coll.plans.capacity_scale[coll.network.nic_links()]
    assert (scale[f == 1.0] == s).all()
    # Same time g per message at half the rate: 1 / (1 + g (r/2) / c) with 1 / (1 + g r / c) = s.
    assert scale[f < 1] == pytest.approx(1 / (1 + 0.5 * (1 / s - 1)), rel=1e-15)
    assert NcclCollectives(topo).plans.nic_link_scale(s) == s


@pytest.mark.parametrize("raw,needle", [
    ("node3.nic0", "--degrade: 'node3.nic0' is not valid"),
    ("node3.nic0:0%", "PCT in (0, 100]"),
    ("node3.nic0:150%", "PCT in (0, 100]"),
])
def test_bad_degradation_format(raw, needle):
    with pytest.raises(ConfigError) as exc:
        parse_degradation(raw)
    assert needle in str(exc.value)


@pytest.mark.parametrize("link,gpus,raw,needle", [
    ("ethernet", 64, "node8.nic0:50%", "names node 8, but there are 8 nodes (node0..node7)"),
    ("ethernet", 64, "node0.nic1:50%", "names NIC 1; ethernet with 8 nodes has nic0"),
    ("ethernet", 64, "node0.gpu8:50%", "gpu0..gpu7"),
    ("ethernet", 64, "token-ring:50%", "not a link of ethernet"),
    ("ethernet", 64, "leaf-spine:50%", "link class present here: ethernet, host-memory, nvlink, pcie"),
    ("infiniband", 16, "node0.nic8:50%", "nic0..nic7"),
    ("nvlink", 8, "node0.nic0:50%", "no NIC carrying traffic between servers"),
    ("nvlink", 8, "node1.gpu0:50%", "names node 1, but there is 1 node (node0)"),
])
def test_degradation_must_name_a_link_of_the_cluster(link, gpus, raw, needle):
    topo = resolve_topology(PredictConfig(gpus=gpus, link=link))
    with pytest.raises(ConfigError, match="--degrade") as exc:
        NcclCollectives(topo, degradations=[parse_degradation(raw)])
    assert needle in str(exc.value)
    assert str(exc.value).count("\n") == 0


def test_with_jobs_node_numbers_count_every_jobs_servers():
    cfg = PredictConfig(gpus=64, link="infiniband", model="gpt2", jobs=2)
    p, report = predict_with_variability(cfg, _spec("node12.nic2:50%"))  # a server of job 1
    assert report.degradation.step_s > report.degradation.healthy_step_s
    with pytest.raises(ConfigError, match="names node 16, but there are 16 nodes"):
        predict_with_variability(cfg, _spec("node16.nic0:50%"))


def _calibrated_world(cfg, *degrade):
    from dpsim.predict.run import build_collectives, resolve_topology
    from dpsim.predict.resolve import resolve

    config = resolve(cfg).config
    return build_collectives(config, resolve_topology(config),
                             degradations=tuple(parse_degradation(d) for d in degrade)).group("world")


def test_a_degraded_link_runs_at_a_fraction_of_its_calibrated_rate():
    """--degrade with --calibration: the profile's bus bandwidth of the kind of link degraded (its NIC-bound
    inter_node ring here) is scaled, its latency kept: the transfer term exactly 1 / f times the healthy one."""
    cfg = PredictConfig(gpus=16, link="infiniband", model="gpt2", calibration="aws-p4de-2node")
    size = 256e6
    healthy = _calibrated_world(cfg).time("all_reduce", size)
    for degrade in (("infiniband:50%",), ("node1.nic0:50%",), ("infiniband:80%", "node0.nic1:62.5%")):
        slow = _calibrated_world(cfg, *degrade).time("all_reduce", size)
        assert slow.latency_s == healthy.latency_s
        assert slow.time_s - slow.latency_s == pytest.approx(2 * (healthy.time_s - healthy.latency_s), rel=1e-12)
    p, report = predict_with_variability(cfg, _spec("infiniband:50%"))
    assert report.degradation.step_s > report.degradation.healthy_step_s == predict(cfg).step_time_s
    assert p.step_time_s == predict(cfg, degradations=(parse_degradation("infiniband:50%"),)).step_time_s


def test_slowed_gpu_links_pace_a_multi_node_ring_only_below_the_profiles_headroom():
    from dpsim.profile.calibrated import peak_bus_bandwidth
    from dpsim.profile.io import load_profile

    cfg = PredictConfig(gpus=16, link="infiniband", model="gpt2", calibration="aws-p4de-2node")
    profile = load_profile("aws-p4de-2node")
    headroom = peak_bus_bandwidth(profile, "intra_node") / peak_bus_bandwidth(profile, "inter_node")
    assert headroom > 2  # NVLink far above the NICs: at half rate it is still not the ring's bottleneck
    assert _calibrated_world(cfg, "nvlink:50%").bandwidth_factor == 1.0
    slow = _calibrated_world(cfg, "nvlink:5%", "infiniband:90%")
    assert slow.bandwidth_factor == pytest.approx(min(0.9, 0.05 * headroom))
    # One server's ring runs on its GPU links alone: they are its calibrated rate.
    one = PredictConfig(gpus=8, link="dgx-a100", model="gpt2", calibration="a100-nvswitch-8gpu")
    assert _calibrated_world(one, "node0.gpu3:25%").bandwidth_factor == 0.25


def test_a_degradation_a_calibration_cannot_place_is_refused_saying_why():
    import dataclasses

    from dpsim.errors import ProfileError
    from dpsim.profile.calibrated import degraded_bandwidth_factor
    from dpsim.profile.io import load_profile

    cfg = PredictConfig(gpus=16, link="aws-p4de", model="gpt2", calibration="aws-p4de-2node")
    with pytest.raises(ConfigError, match=r"^--degrade: 'pcie:50%' with --calibration: .* pcie has no rate of its own"):
        predict(cfg, degradations=(parse_degradation("pcie:50%"),))
    # Without the one-node fit, how far the GPU links are above the NICs is unknown.
    profile = load_profile("aws-p4de-2node")
    inter_only = dataclasses.replace(profile, ops={k: v for k, v in profile.ops.items() if k[0] != "intra_node"})
    with pytest.raises(ProfileError, match="no intra_node all_reduce fit"):
        degraded_bandwidth_factor(inter_only, "inter_node", {"gpu": 0.5})
    assert degraded_bandwidth_factor(inter_only, "inter_node", {"nic": 0.5}) == 0.5


# ----------------------------------------------------------------------------- predict and the CLI

def test_predict_with_variability_keeps_the_plain_prediction():
    cfg = PredictConfig(gpus=64, link="infiniband", model="gpt2")
    plain = predict(cfg)
    p, report = predict_with_variability(cfg, VariabilitySpec(noise_cv=0.05, samples=3), steps=20)
    assert p.step_time_s == plain.step_time_s and p.to_dict() == plain.to_dict()
    s = report.statistics
    assert s.nominal_step_s == plain.step_time_s
    assert s.mean_s > plain.step_time_s  # the slowest of 64 ranks paces every step
    assert s.samples == 3 and s.steps == 20 and s.ci_method == "samples"


def test_cli_without_variability_flags_is_the_plain_prediction(capsys):
    rc = main(["predict", "--gpus", "32", "--link", "infiniband", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    d = json.loads(out)
    assert "variability" not in d
    ref = predict(PredictConfig(gpus=32, link="infiniband")).to_dict()
    assert d["step_time_s"] == ref["step_time_s"] and d["samples_per_s"] == ref["samples_per_s"]


def test_cli_variability_json_and_table(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    args = ["predict", "--gpus", "64", "--link", "ethernet", "--model", "gpt2", "--noise-cv", "0.05",
            "--straggler", "node3:1.3x", "--degrade", "node2.nic0:50%", "--hiccup-rate-per-s", "0.01",
            "--hiccup-s", "0.05", "--mc-samples", "3", "--mc-steps", "10", "--seed", "4"]
    assert main(args + ["--json"]) == 0
    out, err = capsys.readouterr()
    v = json.loads(out)["variability"]
    assert v["schema"] == "dpsim.variability/2"
    assert v["stragglers"] == ["node3:1.3x"] and v["degradations"] == ["node2.nic0:50%"]
    d = v["degradation"]
    assert d["comm_s"] > d["healthy_comm_s"] and d["step_s"] > d["healthy_step_s"]
    assert d["bottleneck_class"] == "ethernet"
    assert set(d["bottleneck_links"]) == {"n2.nic0 -> leaf0.0", "leaf0.0 -> n2.nic0"}
    assert v["statistics"]["nominal_step_s"] == d["step_s"]
    st = v["statistics"]
    for key in ("mean_step_s", "p50_step_s", "p90_step_s", "p99_step_s", "samples_per_s", "samples_per_s_ci"):
        assert key in st
    assert main(args) == 0
    out, _ = capsys.readouterr()
    for label in ("variability", "mean step", "p50 / p90 / p99 step", "95 % CI", "healthy", "communication / step",
                  "bottleneck", "n2.nic0 -> leaf0.0"):
        assert label in out, label


@pytest.mark.parametrize("args,needles", [
    (["--straggler", "node99:1.3x"], ["--straggler", "node99", "nodes"]),
    (["--straggler", "slow"], ["--straggler", "'slow'", "node<K>:<factor>x"]),
    (["--degrade", "node1.nic0"], ["--degrade", "LINK:PCT%"]),
    (["--degrade", "infiniband:50%"], ["--degrade", "'infiniband'", "ethernet"]),
    (["--degrade", "node99.nic0:50%"], ["--degrade", "'node99.nic0:50%'", "node0..node7"]),
    (["--degrade", "pcie:50%", "--calibration", "aws-p4de-2node"], ["--degrade", "--calibration", "pcie"]),
    (["--noise-cv", "-1"], ["--noise-cv", "-1"]),
    (["--hiccup-s", "0.1"], ["--hiccup-rate-per-s / --hiccup-s"]),
    (["--noise-cv", "0.1", "--mc-samples", "0"], ["--mc-samples", "0"]),
    (["--noise-cv", "0.1", "--mc-steps", "0"], ["--mc-steps", "0"]),
])
def test_cli_bad_variability_flags_one_line(capsys, args, needles):
    rc = main(["predict", "--gpus", "64", "--link", "ethernet"] + args)
    out, err = capsys.readouterr()
    assert rc == 2
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpsim: error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_throughput_counts_every_accumulated_micro_batch():
    # With K micro-batches per step, the global batch is micro_batch x K x GPUs.
    from dpsim.predict.config import PredictConfig
    from dpsim.variability.run import predict_with_variability
    from dpsim.variability.spec import VariabilitySpec

    cfg = PredictConfig(gpus=16, link="infiniband", model="gpt2", micro_batch=2, grad_accum=4)
    spec = VariabilitySpec(noise_cv=0.02, seed=1, samples=2)
    prediction, report = predict_with_variability(cfg, spec, steps=5)
    stats = report.statistics
    assert stats.samples_per_s == pytest.approx(2 * 4 * 16 / stats.mean_s, rel=1e-9)


@pytest.mark.parametrize("args", [["--seed", "3"], ["--mc-samples", "4"], ["--mc-steps", "7"],
                                  ["--noise-dist", "lognormal"], ["--degrade", "ethernet:50%", "--seed", "3"]])
def test_cli_sampling_flags_without_variability_are_refused(capsys, args):
    # They used to be dropped without a word: the plain prediction came back as if they were not given.
    rc = main(["predict", "--gpus", "32", "--link", "ethernet"] + args)
    out, err = capsys.readouterr()
    flag = [a for a in args if a in ("--seed", "--mc-samples", "--mc-steps", "--noise-dist")][0]
    lines = err.splitlines()
    assert rc == 2 and len(lines) == 1, err
    for needle in (flag, "only applies with variability", "--noise-cv", "--straggler", "--hiccup-rate-per-s",
                   "--calibration", "--moe-routing"):
        assert needle in lines[0], (needle, lines[0])


def test_api_sampling_fields_without_variability_are_refused_too():
    from dpsim.errors import ConfigError

    for spec, steps, flag in ((VariabilitySpec(seed=3), None, "--seed"), (VariabilitySpec(samples=4), None,
                                                                          "--mc-samples"),
                              (VariabilitySpec(noise_distribution="lognormal"), None, "--noise-dist"),
                              (VariabilitySpec(), 7, "--mc-steps")):
        with pytest.raises(ConfigError, match=flag):
            predict_with_variability(PredictConfig(gpus=16, link="ethernet"), spec, steps=steps)
    # Anything that spreads the steps keeps them.
    for spec in (VariabilitySpec(noise_cv=0.05, seed=3, samples=2, noise_distribution="lognormal"),
                 VariabilitySpec(stragglers=(parse_straggler("gpu1:1.2x"),), seed=3, samples=2),
                 VariabilitySpec(hiccup_rate_per_s=1.0, hiccup_s=0.01, seed=3, samples=2)):
        _, report = predict_with_variability(PredictConfig(gpus=16, link="ethernet"), spec, steps=3)
        assert report is not None and report.statistics is not None
