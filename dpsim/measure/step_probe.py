"""The user's step timed in a fresh process: ``python -m dpsim.measure.step_probe`` (plan on stdin).

On CPU hosts the same step runs at a speed that differs from process to process by more
than its spread within one process (VALIDATION.md part 2: one model's step measured
68.1 and 79.1 ms by two calibrations minutes apart on an idle machine, each known to
+-3 %). A training run is a process of its own, so calibrate times the step in a few
fresh processes too (:func:`dpsim.measure.bench_compute.bench_fresh_processes`) and
takes the level from them. This process builds the step as the plan names it, times it
on its own (no process group) and prints ``{"median_s": ...}``.
"""

from __future__ import annotations

import json
import statistics
import sys

import torch

from dpsim.measure.bench_compute import make_step
from dpsim.measure.trainstep import measure_step


def main() -> int:
    plan = json.loads(sys.stdin.read())
    torch.set_num_threads(int(plan["threads"]))
    step = make_step(plan, torch.device("cpu"))
    r = measure_step(step, warmup=max(2, plan.get("warmup", 2)), min_iters=plan["iters"],
                     max_iters=plan["max_iters"], target_rel_ci=plan.get("target_rel_ci", 0.02),
                     budget_s=plan["budget_s"])
    print(json.dumps({"median_s": statistics.median(r["own_step_times_s"]), "iterations": r["iterations"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
