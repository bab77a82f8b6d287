"""Benchmark: 1,024 ranks x 100 steps with stragglers (target < 30 s), and its baselines.

Run: ``python tests/benchmarks/bench_variability.py``. Prints, for GPT-2 XL on the
``infiniband`` preset (DDP program and collective model from ``predict``, so every slowdown is against the same
step the noise-free prediction ran):

* baseline 1: the homogeneous engine (one SimPy rank) for 100 steps, what ``predict``
  does without variability flags;
* baseline 2: the explicit SimPy engine with one process per rank (per-step factors) at
  16 and 64 ranks x 100 steps, and that cost extrapolated linearly to 1,024 ranks;
* the per-rank fast path (:func:`dpsim.variability.simulate_ranks` via ``monte_carlo``)
  at 1,024 ranks x 100 steps: stragglers only; stragglers + 5 % noise + hiccups
  (1 sample); and 10 samples; then 16,384 ranks x 100 steps with noise;
* the order-statistics check at 1,024 ranks (simulated mean vs expected max of normals).

Not a test: these machines are shared and noisy.
"""

from __future__ import annotations

import math
import time

import numpy as np


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    from dpsim.engine.replay import simulate_ranks
    from dpsim.engine.simulate import run_program
    from dpsim.predict.config import PredictConfig
    from dpsim.predict.run import predict
    from dpsim.stats import expected_max_normal
    from dpsim.variability.monte_carlo import factor_sampler, monte_carlo
    from dpsim.variability.spec import VariabilitySpec, parse_straggler

    steps = 100
    cfg = PredictConfig(gpus=1024, link="infiniband", model="gpt2-xl", steps=steps)
    t_base, p = timed(lambda: predict(cfg))
    coll = p.collectives  # the collective model the noise-free step ran on
    program = p.program
    print(f"GPT-2 XL, 1,024 x H100 on infiniband: {len(program.tasks)} tasks, {len(program.comms)} buckets/step, "
          f"noise-free step {p.step_time_s * 1e3:.1f} ms")
    print(f"baseline 1  homogeneous engine, 1 rank x {steps} steps (predict):       {t_base:8.3f} s")
    per_rank = []
    for n in (16, 32):
        rng = np.random.default_rng(0)
        f = np.maximum(1 + 0.05 * rng.standard_normal((steps, n)), 0.05)
        t, _ = timed(lambda: run_program(program, coll, steps=steps, overlap_slowdown=0.1,
                                         rank_compute_scale=f.tolist()))
        per_rank.append(t / n)
        print(f"baseline 2  explicit SimPy engine, {n:>4} ranks x {steps} steps:          {t:8.3f} s")
    print(f"            -> extrapolated to 1,024 ranks:                          {1024 * per_rank[-1]:8.1f} s")

    kw = dict(n_ranks=1024, gpus_per_node=8, steps=steps, overlap_slowdown=0.1, nominal_step_s=p.step_time_s,
              global_batch=4 * 1024)
    strag = (parse_straggler("node3:1.3x"), parse_straggler("gpu100:1.5x"))
    cases = [
        ("stragglers only (node3:1.3x, gpu100:1.5x)", VariabilitySpec(stragglers=strag)),
        ("stragglers + 5 % noise + hiccups, 1 sample",
         VariabilitySpec(stragglers=strag, noise_cv=0.05, hiccup_rate_per_s=0.01, hiccup_s=0.05, samples=1)),
        ("stragglers + 5 % noise + hiccups, 10 samples",
         VariabilitySpec(stragglers=strag, noise_cv=0.05, hiccup_rate_per_s=0.01, hiccup_s=0.05, samples=10)),
    ]
    worst = 0.0
    for label, spec in cases:
        t, s = timed(lambda: monte_carlo(program, coll, spec, **kw))
        worst = max(worst, t)
        print(f"fast path   1,024 ranks x {steps} steps, {label:<46} {t:8.3f} s   "
              f"mean {s.mean_s * 1e3:.1f} ms (x{s.slowdown:.3f}), p99 {s.p99_s * 1e3:.1f} ms, "
              f"{s.ranks_simulated} rank groups, front <= {s.max_front}")
    print(f"1,024 ranks x {steps} steps with stragglers: worst {worst:.3f} s (target < 30 s) -> "
          f"{'OK' if worst < 30 else 'TOO SLOW'}")

    big = PredictConfig(gpus=16384, link="infiniband", model="gpt2-xl", steps=1)
    pb = predict(big)
    cb = pb.collectives
    spec = VariabilitySpec(stragglers=strag, noise_cv=0.05, samples=1)
    t, s = timed(lambda: monte_carlo(pb.program, cb, spec, n_ranks=16384, gpus_per_node=8, steps=steps,
                                     overlap_slowdown=0.1, nominal_step_s=pb.step_time_s, global_batch=4 * 16384))
    print(f"fast path   16,384 ranks x {steps} steps, stragglers + 5 % noise:        {t:8.3f} s   front <= {s.max_front}")

    # Order statistics: compute then all-reduce, N = 1,024, i.i.d. normal noise.
    from dpsim.collectives.ops import CollectiveResult
    from dpsim.engine.program import CommOp, ComputeTask, StepProgram

    class Fixed:
        n_ranks = 1024

        def time(self, op, size_bytes):
            return CollectiveResult(op=op, algorithm="fixed", n_ranks=1024, size_bytes=size_bytes,
                                    time_s=0.25 * size_bytes, latency_s=0.0)

    prog = StepProgram(
        tasks=(ComputeTask(kind="backward", name="b", duration_s=1.0, launch_after=(0,)),
               ComputeTask(kind="optimizer", name="opt", duration_s=0.0, wait_for=(0,))),
        comms=(CommOp(name="bucket 0", op="all_reduce", size_bytes=1.0),))
    cv, n, samples, st = 0.05, 1024, 8, 1000
    spec = VariabilitySpec(noise_cv=cv, seed=1, samples=samples)
    draw = factor_sampler(spec, np.ones(n), sample_ids=range(samples), compute_s=1.0, exposure_s=1.0)
    t, run = timed(lambda: simulate_ranks(prog, Fixed(), draw, steps=st))
    iv = run.step_interval_s.ravel()
    expected = 1.0 + cv * expected_max_normal(n) + 0.25
    se = iv.std(ddof=1) / math.sqrt(iv.size)
    print(f"order stats N=1,024, cv 5 %, {samples}x{st} steps ({t:.2f} s): simulated mean {iv.mean():.6f} s, "
          f"expected 1 + cv E[max] + comm = {expected:.6f} s, error {iv.mean() - expected:+.2e} s "
          f"({(iv.mean() - expected) / expected:+.2e} relative, {abs(iv.mean() - expected) / se:.1f} SE)")


if __name__ == "__main__":
    main()
