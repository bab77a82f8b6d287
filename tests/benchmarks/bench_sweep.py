"""Benchmark: sweeps of 1,000 points serially and 10,000 points serially vs ``--workers 2``.

Run: ``python tests/benchmarks/bench_sweep.py [--points-10k N]``. Prints, against the import
floor measured in the same run (``python -c 'import numpy, networkx, simpy, yaml, rich,
typer'``, what any dpsim command pays before its work):

* a 1,000-point ``dpsim sweep`` (10 GPU counts x 5 presets x 4 models x 5 micro-batches),
  whole CLI process, serial: target <= 5 s;
* where the time of a point goes (in-process profile of the same grid: engine, the rest);
* a 10,000-point sweep (the same grid x 10 bucket caps), serial and with ``--workers 2``:
  target ``--workers 2`` faster than serial (the local cluster starts only once the
  points left would take longer than ``LOCAL_CLUSTER_PAYOFF_S`` serially).

Not a test: these machines are shared and noisy; every figure is also printed as a ratio
to the floor measured in the same run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from wall_time import wall

FLOOR = [sys.executable, "-c", "import numpy, networkx, simpy, yaml, rich, typer"]
GRID_1K = ["--gpus", "8,16,32,64,128,256,512,1024,2048,4096",
           "--link", "infiniband,ethernet,nvlink,aws-p5,dgx-a100",
           "--model", "gpt2,llama-2-7b,resnet50,bert-large", "--micro-batch", "1,2,4,8,16"]
BUCKETS = ["--bucket-cap-mb", "default,1,2,5,10,25,50,100,200,400"]


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    import subprocess

    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-10k", action="store_true", help="only the 1,000-point sweep")
    args = ap.parse_args()
    floor = wall(FLOOR)
    print(f"floor: python -c 'import numpy, networkx, simpy, yaml, rich, typer' = {floor:.3f} s")
    cli = [sys.executable, "-m", "dpsim", "sweep", "--no-progress"]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "rows.parquet")
        t1k = timed(cli + GRID_1K + ["-o", out])
        print(f"1,000 points, serial, whole CLI: {t1k:7.2f} s = floor x {t1k / floor:5.1f} "
              f"({1000 / t1k:,.0f} points/s; target <= 5 s)")
        _profile()
        if args.skip_10k:
            return
        t10s = timed(cli + GRID_1K + BUCKETS + ["-o", out])
        t10p = timed(cli + GRID_1K + BUCKETS + ["--workers", "2", "-o", out])
        print(f"10,000 points, serial:      {t10s:7.2f} s = floor x {t10s / floor:6.1f}")
        print(f"10,000 points, --workers 2: {t10p:7.2f} s = floor x {t10p / floor:6.1f}  "
              f"(x{t10s / t10p:.2f} vs serial; target > 1)")


def _profile() -> None:
    """Where a point's time goes, in-process (cProfile adds its own overhead: compare shares)."""
    import cProfile
    import pstats

    from dpsim.plan.grid import SweepSpec
    from dpsim.plan.sweep import sweep_records

    grid = dict(zip(GRID_1K[::2], GRID_1K[1::2]))
    spec = SweepSpec.from_grid({k.lstrip("-").replace("-", "_"): v.split(",") for k, v in grid.items()})
    prof = cProfile.Profile()
    prof.enable()
    sweep_records(spec)
    prof.disable()
    stats = pstats.Stats(prof).stats
    total = sum(v[3] for k, v in stats.items() if k[2] == "sweep_records")
    shares = {}
    for (path, _, name), v in stats.items():
        for label, (suffix, fn) in {"engine (SimPy, run_program)": ("engine/simulate.py", "run_program"),
                                    "compute profile": ("workload/compute.py", "compute_profile"),
                                    "memory": ("predict/run.py", "memory_with_advice"),
                                    "collective costs": ("collectives/nccl.py", "_choose"),
                                    "link report": ("collectives/links.py", "link_report"),
                                    "row": ("plan/sweep.py", "prediction_record")}.items():
            if path.endswith(suffix) and name == fn:
                shares[label] = shares.get(label, 0.0) + v[3]
    print("  in-process, by step (share of the sweep):")
    for label, t in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"    {label:<30} {100 * t / total:5.1f} %")


if __name__ == "__main__":
    main()
