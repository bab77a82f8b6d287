"""Benchmark: ``dpsim plan`` over thousands of layouts (target: seconds), and the pipeline engine at scale.

Run: ``python tests/benchmarks/bench_plan.py``. Prints, measured in the same run:

* baseline: one step of one layout simulated by the pipeline engine (``predict`` of
  llama-2-70b, tp 8 x pp 4 x dp 16, 64 micro-batches, interleaved), i.e. what every
  candidate would cost without the planner's closed form;
* the search itself: Llama-2-70B on 256, 512 and 1,024 H100s (``infiniband``), every
  tensor/pipeline size, strategy, micro-batch, recomputation and schedule: candidates,
  how many fit, wall time, candidates per second, and the ratio to simulating each
  candidate (baseline x candidates);
* the search of a 405B dense model (llama-3-405b) and of DeepSeek-V3 (every expert-parallel
  size too) on 16,384 H100s, every layout (issue 28: under 10 s), in this process and as a whole
  ``dpsim plan`` process (wall and CPU seconds, imports included; the ratio to the 10 s target and
  to the baseline), with how many layouts each simulated (every one whose estimate could beat the
  best simulated one, :data:`dpsim.plan.planner.ESTIMATE_BOUND`) and what stopped it;
* the largest published layout of the accuracy set (1T parameters, 8 x 64 x 6 on 3,072
  A100s, 512 micro-batches: 65,536 stage ops) through the engine.

Not a test: these machines are shared and noisy.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def whole_process(args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of ``dpsim ARGS`` run as its own process (imports included)."""
    before = os.times()
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dpsim", *args], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = os.times()
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def simulated(result) -> str:
    """How many layouts the search simulated and what stopped it (dpsim.plan.planner._verify)."""
    v = result.verification
    return f"{v['simulated']} simulated in {v['seconds']:.2f} s, stopped by {v['stopped_by']}"


def main() -> None:
    from dpsim.plan.planner import plan_layouts
    from dpsim.predict.config import PredictConfig
    from dpsim.predict.run import predict

    one = PredictConfig(gpus=512, tp=8, pp=4, dp=16, micro_batch=1, global_batch=1024, model="llama-2-70b",
                        link="infiniband", precision="bf16-mixed", schedule="1f1b-interleaved", virtual_stages=2,
                        strategy="zero1", sequence_parallel=True, steps=1)
    predict(one)  # warm the caches a search also warms (models, collective models)
    t_one, p = timed(lambda: predict(one))
    ops = sum(1 for e in p.simulation.trace if e.kind in ("forward", "backward", "optimizer"))
    print(f"baseline  one layout through the pipeline engine ({ops:,} stage ops): {t_one:7.3f} s "
          f"(step {p.step_time_s:.2f} s)")
    base = PredictConfig(model="llama-2-70b", link="infiniband", precision="bf16-mixed")
    t_plan, result = timed(lambda: plan_layouts(base, gpus=[256, 512, 1024], global_batch=1024, tokens=1e12,
                                                strategies=("ddp", "zero1", "fsdp")))
    n = result.counts["candidates"]
    print(f"plan      {n:,} candidates on 256/512/1024 GPUs, {result.counts['ranked']:,} fit: {t_plan:7.3f} s "
          f"({n / t_plan:,.0f} candidates/s, {simulated(result)}); simulating each would take "
          f"~{n * t_one:,.0f} s ({n * t_one / t_plan:,.0f}x)")
    best = result.best
    print(f"          best: {best.candidate.flags()}  step {best.step_time_s:.3f} s, "
          f"{best.time_to_train_s / 86400:.1f} days for 1T tokens")
    # Issue 28: a 405B dense model on 16,384 GPUs, every layout (target: under 10 s).
    big_base = PredictConfig(model="llama-3-405b", link="infiniband", precision="bf16-params")
    t_405, r405 = timed(lambda: plan_layouts(big_base, gpus=[16384], global_batch=2048))
    tp8pp16 = [e for e in r405.ranked if e.candidate.tp == 8 and e.candidate.pp == 16]
    print(f"plan      llama-3-405b on 16,384 GPUs: {r405.counts['candidates']:,} candidates, "
          f"{r405.counts['ranked']:,} fit: {t_405:7.3f} s ({simulated(r405)}); best {r405.best.candidate.flags()}"
          + (f"; tp 8 x pp 16 listed, best of them {tp8pp16[0].step_time_s:.2f} s" if tp8pp16 else ""))
    # Issue 28: DeepSeek-V3 on 16,384 GPUs, every layout and expert-parallel size (target: under 10 s).
    moe_base = PredictConfig(model="deepseek-v3", link="infiniband", precision="bf16-params")
    t_moe, rmoe = timed(lambda: plan_layouts(moe_base, gpus=[16384], global_batch=2048, top=50))
    with_ep = [e for e in rmoe.ranked if e.candidate.ep > 1]
    print(f"plan      deepseek-v3 on 16,384 GPUs: {rmoe.counts['candidates']:,} candidates, "
          f"{rmoe.counts['ranked']:,} fit: {t_moe:7.3f} s ({simulated(rmoe)}); best {rmoe.best.candidate.flags()}; "
          f"{len(with_ep)} of the top {len(rmoe.ranked)} with ep > 1")
    for model in ("llama-3-405b", "deepseek-v3"):
        wall, cpu = whole_process(["plan", "--model", model, "--gpus", "16384", "--link", "infiniband",
                                   "--global-batch", "2048", "--precision", "bf16-params"])
        print(f"process   dpsim plan --model {model} --gpus 16384: {wall:7.3f} s wall ({wall / 10:.2f}x issue "
              f"28's 10 s; {wall / t_one:,.0f}x the baseline layout), {cpu:7.3f} s CPU")
    from dpsim.workload.architectures import GPT2Config, build_gpt2
    gpt_1t = build_gpt2(GPT2Config(vocab_size=51200, n_positions=2048, n_embd=25600, n_layer=128, n_head=160),
                        name="gpt-1t")
    big = PredictConfig(gpus=3072, tp=8, pp=64, dp=6, micro_batch=1, global_batch=3072, model="gpt-1t",
                        link="dgx-a100", precision="fp16-mixed", recompute="full", steps=1)
    t_big, q = timed(lambda: predict(big, model=gpt_1t))
    big_ops = sum(1 for e in q.simulation.trace if e.kind in ("forward", "backward", "optimizer"))
    print(f"engine    GPT 1T, 8 x 64 x 6 on 3,072 A100s, 512 micro-batches ({big_ops:,} stage ops): {t_big:7.3f} s "
          f"(step {q.step_time_s:.1f} s)")

if __name__ == "__main__":
    main()
