"""Benchmark: sweeps of 1,000 points serially and 10,000 points serially vs ``--workers 2``.

Run: ``python tests/benchmarks/bench_sweep.py [--skip-10k]``. Prints, against the import floor
measured in the same run (``python -c 'import numpy, networkx, simpy, yaml, rich, typer'``,
what any dpsim command pays before its work), wall and CPU seconds (user + system of the
process and of every worker it started and reaped):

* a 1,000-point ``dpsim sweep`` (10 GPU counts x 5 presets x 4 models x 5 micro-batches),
  whole CLI process, serial: target <= 5 s;
* where the time of a point goes (in-process profile of the same grid, inclusive shares);
* the engine alone on a sample of those points: the SimPy engine (``run_program``, the
  reference) vs the player ``predict`` uses (``play_program``), CPU per point;
* a 10,000-point sweep (the same grid x 10 bucket caps), serial and with ``--workers 2``:
  target ``--workers 2`` faster than serial (the local cluster starts only once the
  points left would take longer than ``LOCAL_CLUSTER_PAYOFF_S`` serially). On a machine
  whose cores other jobs keep busy two workers cannot run in parallel; the CPU seconds and
  the load average printed with them tell whether the wall-clock comparison meant anything.

Not a test: these machines are shared and noisy; every figure is also printed as a ratio
to the floor measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wall_time import FLOOR, cpu, wall

GRID_1K = ["--gpus", "8,16,32,64,128,256,512,1024,2048,4096",
           "--link", "infiniband,ethernet,nvlink,aws-p5,dgx-a100",
           "--model", "gpt2,llama-2-7b,resnet50,bert-large", "--micro-batch", "1,2,4,8,16"]
BUCKETS = ["--bucket-cap-mb", "default,1,2,5,10,25,50,100,200,400"]


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, the process and the children it reaped) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall_s = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall_s, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-10k", action="store_true", help="only the 1,000-point sweep")
    args = ap.parse_args()
    floor, floor_cpu = wall(FLOOR), cpu(FLOOR)
    print(f"floor: python -c 'import numpy, networkx, simpy, yaml, rich, typer' = {floor:.3f} s wall, "
          f"{floor_cpu:.3f} s CPU; {load()}")
    cli = [sys.executable, "-m", "dpsim", "sweep", "--no-progress"]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "rows.parquet")
        t1k, c1k = timed(cli + GRID_1K + ["-o", out])
        print(f"1,000 points, serial, whole CLI: {t1k:6.2f} s wall = floor x {t1k / floor:5.1f} "
              f"({1000 / t1k:,.0f} points/s; target <= 5 s), {c1k:6.2f} s CPU")
        _profile()
        _engine()
        if args.skip_10k:
            return
        print(f"10,000 points ({load()}):")
        t10s, c10s = timed(cli + GRID_1K + BUCKETS + ["-o", out])
        print(f"  serial:      {t10s:6.2f} s wall = floor x {t10s / floor:6.1f}, {c10s:6.2f} s CPU")
        t10p, c10p = timed(cli + GRID_1K + BUCKETS + ["--workers", "2", "-o", out])
        print(f"  --workers 2: {t10p:6.2f} s wall = floor x {t10p / floor:6.1f}, {c10p:6.2f} s CPU "
              f"(workers included)")
        print(f"  --workers 2 vs serial: x{t10s / t10p:.2f} wall (target > 1), CPU x{c10p / c10s:.2f} "
              f"(the cluster's start-up and cold caches); {load()}")
        if t10p >= t10s:
            print("  missed on wall time: with other jobs on the cores two workers get less than two cores; "
                  "the CPU seconds above are what the cluster costs")


def _grid_configs():
    from dpsim.plan.grid import SweepSpec

    grid = dict(zip(GRID_1K[::2], GRID_1K[1::2]))
    return SweepSpec.from_grid({k.lstrip("-").replace("-", "_"): v.split(",") for k, v in grid.items()})


def _engine(sample: int = 7) -> None:
    """Every ``sample``-th point of the 1,000: the step played by SimPy and by the player (CPU)."""
    from dpsim.engine.play import play_program
    from dpsim.engine.simulate import run_program
    from dpsim.predict.run import predict

    cases = []
    for config in _grid_configs().configs()[::sample]:
        p = predict(config)  # costs every collective once: what follows times the engine only
        cases.append((p.program, p.collectives, dict(steps=config.workload.steps, overlap_slowdown=config.calibration.overlap_slowdown)))
    times = {}
    for name, engine in (("SimPy engine (run_program)", run_program), ("player (play_program)", play_program)):
        c0 = time.process_time()
        for program, collectives, kw in cases:
            engine(program, collectives, **kw)
        times[name] = (time.process_time() - c0) / len(cases)
    simpy_s, play_s = times.values()
    print(f"  engine alone, {len(cases)} points of the 1,000 (3 steps each): SimPy {1e3 * simpy_s:.2f} ms CPU "
          f"per point, player {1e3 * play_s:.2f} ms (x{simpy_s / play_s:.1f})")


def _profile() -> None:
    """Where a point's time goes, in-process (cProfile adds its own overhead: compare shares)."""
    import cProfile
    import pstats

    from dpsim.plan.sweep import sweep_records

    spec = _grid_configs()
    prof = cProfile.Profile()
    prof.enable()
    sweep_records(spec)
    prof.disable()
    stats = pstats.Stats(prof).stats
    total = sum(v[3] for k, v in stats.items() if k[2] == "sweep_records")
    steps = {"engine (play_program, collective costs included)": ("engine/play.py", "play_program"),
             "  collective costs it asked for": ("engine/play.py", "_comm_times"),
             "collective choice (NCCL, every caller)": ("collectives/selection.py", "fastest"),
             "memory + fit advice": ("predict/run.py", "memory_with_advice"),
             "step program (strategies)": ("strategies/build.py", "build_step_program"),
             "compute profile": ("workload/compute.py", "compute_profile"),
             "link report": ("collectives/links.py", "link_report"),
             "topology": ("predict/run.py", "resolve_topology"),
             "collective models": ("predict/run.py", "build_collectives"),
             "config checks (PredictConfig)": ("predict/config.py", "__post_init__"),
             "sweep row": ("plan/sweep.py", "prediction_record")}
    shares = dict.fromkeys(steps, 0.0)
    memo_self = 0.0
    for (path, _, name), v in stats.items():
        for label, (suffix, fn) in steps.items():
            if path.endswith(suffix) and name == fn:
                shares[label] += v[3]
        if path.endswith("predict/memo.py"):
            memo_self += v[2]
    shares["memo keys and eviction (memo.py's own time)"] = memo_self
    print(f"  in-process, by step (inclusive share of {total:.1f} s under cProfile):")
    for label, t in shares.items():
        print(f"    {label:<52} {100 * t / total:5.1f} %")


if __name__ == "__main__":
    main()
