"""Benchmark: ``dpsim plan`` over every layout of a 405B dense model and of DeepSeek-V3 on 16,384 H100s
(issue 28: under 10 s each, whole process), with the data-parallel strategies it searches.

Run: ``python tests/benchmarks/bench_plan_strategies.py``. Prints, per model: candidates by strategy, how
many fit, the best layout, the in-process search time and the whole ``dpsim plan`` process (wall and CPU
seconds, imports included). Not a test: these machines are shared and noisy.
"""

from __future__ import annotations

import collections
import time

from bench_plan import whole_process  # one timer for both plan benchmarks (the script's folder is on sys.path)


def main() -> None:
    from dpsim.plan.planner import Planner, plan_layouts
    from dpsim.predict.config import PredictConfig
    from dpsim.predict.resolve import resolve

    for model in ("llama-3-405b", "deepseek-v3"):
        base = PredictConfig(model=model, link="infiniband", precision="bf16-params")
        t0 = time.perf_counter()
        result = plan_layouts(base, gpus=[16384], global_batch=2048)
        wall = time.perf_counter() - t0
        planner = Planner(resolve(PredictConfig(model=model, link="infiniband", precision="bf16-params",
                                                micro_batch=1)).config)
        cands, _ = planner.candidates(16384, global_batch=2048)
        by = collections.Counter(c.strategy if getattr(c, "zero_group", None) is None
                                 else f"{c.strategy}/{c.zero_group}" for c in cands)
        v = result.verification
        print(f"{model}: {result.counts['candidates']:,} candidates ({dict(sorted(by.items()))}), "
              f"{result.counts['ranked']:,} fit; in process {wall:.2f} s ({v['simulated']} simulated in "
              f"{v['seconds']:.2f} s, stopped by {v['stopped_by']}); best {result.best.candidate.flags()} "
              f"{result.best.step_time_s:.3f} s")
        w, cpu = whole_process(["plan", "--model", model, "--gpus", "16384", "--link", "infiniband",
                                "--global-batch", "2048", "--precision", "bf16-params"])
        print(f"  process dpsim plan --model {model} --gpus 16384: {w:.2f} s wall, {cpu:.2f} s CPU")


if __name__ == "__main__":
    main()
