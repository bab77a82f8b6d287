"""Benchmark: ``dpsim predict`` from 8 to 262,144 GPUs on every preset, against the import floor.

Run: ``python tests/benchmarks/bench_predict.py [--presets infiniband,ethernet]``. Prints, per
preset and GPU count, the wall time of the whole CLI process (``dpsim predict ... --json``,
median of 3), its peak memory, the in-process ``predict()`` time and how the collectives were
evaluated, then, measured in the same run, the import floor (``python -c 'import numpy,
networkx, simpy, yaml, rich, typer'``) and the targets:

* 65,536 and 262,144 GPUs: whole process <= floor + 0.3 s, peak memory <= 150 MiB;
* flat from 8 to 262,144 GPUs: the largest time and memory within 10 % of the smallest.

Each time is also given as CPU seconds (user + system, median of 3), which other jobs on a
shared machine disturb far less than wall time; the targets are checked on both. Not a test:
these machines are shared and noisy; compare ratios, and rerun when one looks off.
"""

from __future__ import annotations

import argparse
import sys
import time

from wall_time import FLOOR, REPEATS, cpu, peak_mib, wall

GPU_COUNTS = (8, 64, 1024, 16384, 65536, 262144)


def main() -> None:
    from dpsim.predict.config import PredictConfig
    from dpsim.predict.run import predict
    from dpsim.topology.load import preset_names

    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default=",".join(preset_names()))
    args = ap.parse_args()
    floor, floor_cpu = wall(FLOOR), cpu(FLOOR)
    print(f"floor: python -c 'import numpy, networkx, simpy, yaml, rich, typer' = {floor:.3f} s wall, "
          f"{floor_cpu:.3f} s CPU (median of {REPEATS})")
    print(f"{'preset':<11} {'gpus':>7} {'wall s':>7} {'-floor':>7} {'CPU s':>6} {'-floor':>7} {'peak MiB':>8} "
          f"{'predict() s':>11} evaluated")
    verdicts = []
    for link in args.presets.split(","):
        walls, cpus, mems = [], [], []
        for n in GPU_COUNTS:
            cmd = [sys.executable, "-m", "dpsim", "predict", "--gpus", str(n), "--link", link, "--json"]
            t_cli, c_cli, mem = wall(cmd), cpu(cmd), peak_mib(cmd)
            t0 = time.perf_counter()
            p = predict(PredictConfig(gpus=n, link=link))
            inproc = time.perf_counter() - t0
            walls.append(t_cli)
            cpus.append(c_cli)
            mems.append(mem)
            evaluated = p.links.evaluation if p.links is not None else "-"
            print(f"{link:<11} {n:>7} {t_cli:>7.3f} {t_cli - floor:>7.3f} {c_cli:>6.3f} {c_cli - floor_cpu:>7.3f} "
                  f"{mem:>8.1f} {inproc:>11.4f} {evaluated}")
            if n >= 65536:
                verdicts.append((link, n, t_cli - floor <= 0.3, c_cli - floor_cpu <= 0.3, mem <= 150))
        flat = lambda xs: max(xs) / min(xs) - 1  # noqa: E731
        print(f"{link:<11} flat from {GPU_COUNTS[0]} to {GPU_COUNTS[-1]:,} GPUs: wall +{100 * flat(walls):.1f} %, "
              f"CPU +{100 * flat(cpus):.1f} %, memory +{100 * flat(mems):.1f} % (target within 10 %)")
    for link, n, t_ok, c_ok, m_ok in verdicts:
        ok = lambda b: "OK" if b else "MISSED"  # noqa: E731
        print(f"target {link} {n:,} GPUs: <= floor + 0.3 s wall {ok(t_ok)}, CPU {ok(c_ok)}; "
              f"peak <= 150 MiB {ok(m_ok)}")


if __name__ == "__main__":
    main()
