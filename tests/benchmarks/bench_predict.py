"""Benchmark: ``dpsim predict`` from 8 to 262,144 GPUs on every preset, against the import floor.

Run: ``python tests/benchmarks/bench_predict.py [--presets infiniband,ethernet]``. Prints, per
preset and GPU count, the wall time of the whole CLI process (``dpsim predict ... --json``,
median of 3), its peak memory, the in-process ``predict()`` time and how the collectives were
evaluated, then, measured in the same run, the import floor (``python -c 'import numpy,
networkx, simpy, yaml, rich, typer'``) and the targets:

* 65,536 and 262,144 GPUs: whole process <= floor + 0.3 s, peak memory <= 150 MiB;
* flat from 8 to 262,144 GPUs: the largest time and memory within 10 % of the smallest.

Not a test: these machines are shared and noisy (a busy machine slows every figure, the
floor too); compare ratios, and rerun when one looks off.
"""

from __future__ import annotations

import argparse
import sys
import time

from wall_time import FLOOR, REPEATS, peak_mib, wall

GPU_COUNTS = (8, 64, 1024, 16384, 65536, 262144)


def main() -> None:
    from dpsim.predict.config import PredictConfig
    from dpsim.predict.run import predict
    from dpsim.topology.load import preset_names

    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default=",".join(preset_names()))
    args = ap.parse_args()
    floor = wall(FLOOR)
    print(f"floor: python -c 'import numpy, networkx, simpy, yaml, rich, typer' = {floor:.3f} s "
          f"(median of {REPEATS})")
    print(f"{'preset':<11} {'gpus':>7} {'CLI wall s':>10} {'- floor s':>9} {'peak MiB':>8} {'predict() s':>11} "
          f"evaluated")
    verdicts = []
    for link in args.presets.split(","):
        walls, mems = [], []
        for n in GPU_COUNTS:
            cmd = [sys.executable, "-m", "dpsim", "predict", "--gpus", str(n), "--link", link, "--json"]
            t_cli, mem = wall(cmd), peak_mib(cmd)
            t0 = time.perf_counter()
            p = predict(PredictConfig(gpus=n, link=link))
            inproc = time.perf_counter() - t0
            walls.append(t_cli)
            mems.append(mem)
            evaluated = p.links.evaluation if p.links is not None else "-"
            print(f"{link:<11} {n:>7} {t_cli:>10.3f} {t_cli - floor:>9.3f} {mem:>8.1f} {inproc:>11.4f} {evaluated}")
            if n >= 65536:
                verdicts.append((link, n, t_cli - floor <= 0.3, mem <= 150))
        flat_t, flat_m = max(walls) / min(walls) - 1, max(mems) / min(mems) - 1
        print(f"{link:<11} flat from {GPU_COUNTS[0]} to {GPU_COUNTS[-1]:,} GPUs: time +{100 * flat_t:.1f} %, "
              f"memory +{100 * flat_m:.1f} % (target within 10 %)")
    for link, n, t_ok, m_ok in verdicts:
        print(f"target {link} {n:,} GPUs: time <= floor + 0.3 s {'OK' if t_ok else 'MISSED'}, "
              f"peak <= 150 MiB {'OK' if m_ok else 'MISSED'}")


if __name__ == "__main__":
    main()
