"""The user's step timed in a fresh process: ``python -m dpsim.measure.step_probe``.

On CPU hosts the same step runs at a speed that differs from process to process by more
than its spread within one process (VALIDATION.md part 2: one model's step measured
68.1 and 79.1 ms by two calibrations minutes apart on an idle machine, each known to
+-3 %). A training run is a process of its own, so calibrate times the step in a few
fresh processes too (:func:`dpsim.measure.bench_compute.bench_fresh_processes`) and
takes the level from them.

The calibrating rank drives this process step by step, so that each of its steps is timed
next to one of the rank's own (a pair): a change of the machine's load between two moments
then moves both sides of a pair alike, and their ratio is the processes' difference, not the
load's. Protocol, one JSON line each way: the plan on stdin; once the step is built and warm,
``{"ready": true}`` on stdout; then for every line ``step`` on stdin one timed step,
``{"step_s": ...}``; end of stdin ends the process.
"""

from __future__ import annotations

import json
import sys

import torch

from dpsim.measure.bench_compute import make_step
from dpsim.measure.trainstep import timed_run


def main() -> int:
    plan = json.loads(sys.stdin.readline())
    torch.set_num_threads(int(plan["threads"]))
    step = make_step(plan, torch.device("cpu"))
    for _ in range(max(2, int(plan.get("warmup") or 2))):
        step.run()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() != "step":
            raise SystemExit(f"step_probe: unexpected request {line.strip()!r}")
        print(json.dumps({"step_s": timed_run(step)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
