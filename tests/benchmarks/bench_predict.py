"""Benchmark: wall time of ``dpsim predict`` from 8 to 65,536 GPUs on every preset.

Run: ``python tests/benchmarks/bench_predict.py``. Prints, per preset and GPU count,
the wall time of the whole CLI process (``dpsim predict ... --json``, what a user
waits for; target < 2 s at 65,536 GPUs) and of the in-process ``predict()`` call,
plus, as a baseline measured in the same run, a bare ``python -c pass`` process and
the ratio of each CLI run to it. Not a test: these machines are shared and noisy.
"""

from __future__ import annotations

import sys
import time

from wall_time import REPEATS, wall

GPU_COUNTS = (8, 64, 1024, 16384, 65536)


def main() -> None:
    from dpsim.predict.config import PredictConfig
    from dpsim.predict.run import predict
    from dpsim.topology.load import preset_names

    baseline = wall([sys.executable, "-c", "pass"])
    print(f"baseline: python -c pass = {baseline:.3f} s (median of {REPEATS})")
    print(f"{'preset':<11} {'gpus':>6} {'CLI wall s':>10} {'x baseline':>10} {'predict() s':>11} {'step s':>9}")
    worst = 0.0
    for link in preset_names():
        for n in GPU_COUNTS:
            cli = wall([sys.executable, "-m", "dpsim", "predict", "--gpus", str(n), "--link", link, "--json"])
            t0 = time.perf_counter()
            p = predict(PredictConfig(gpus=n, link=link))
            inproc = time.perf_counter() - t0
            worst = max(worst, cli)
            print(f"{link:<11} {n:>6} {cli:>10.3f} {cli / baseline:>10.1f} {inproc:>11.4f} {p.step_time_s:>9.3f}")
    print(f"worst CLI wall time: {worst:.3f} s (target < 2 s at 65,536 GPUs)")


if __name__ == "__main__":
    main()
