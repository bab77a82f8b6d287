"""Whole-process time of `dpsim predict` per link preset and cluster size, each against a
baseline preset (infiniband unless ``--baseline``) measured in the same run (the machine is shared:
wall and CPU time, median of repeats, or the best of them with ``--best``).

    python validation/preset_speed.py [--repeats 3] [--best] [--gpus 4096,65536,1048576] [--links ...]
    python validation/preset_speed.py --gpus 65536 --links gb200-nvl72 --baseline ethernet --best
        (issue 24's "65,536 GPUs under 1 s whole process", gb200-nvl72 against ethernet)
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _one(gpus: int, link: str) -> tuple[float, float]:
    """Wall and CPU seconds of one `dpsim predict` process (its children's rusage)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([str(Path(sys.executable).with_name("dpsim")), "predict", "--gpus", str(gpus), "--link", link],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gpus", default="4096,65536,1048576")
    ap.add_argument("--links", default="gb200-nvl72,dgx-b200")
    ap.add_argument("--baseline", default="infiniband", help="the preset every other is compared with")
    ap.add_argument("--best", action="store_true", help="the fastest of the repeats instead of their median "
                    "(what a loaded machine leaves least disturbed)")
    args = ap.parse_args()
    stat = min if args.best else statistics.median
    links = [args.baseline] + [x for x in args.links.split(",") if x and x != args.baseline]
    print(f"{'gpus':>9} {'link':<13} {'wall s':>7} {'cpu s':>7} {'wall/base':>9} {'cpu/base':>8}  "
          f"({'best' if args.best else 'median'} of {args.repeats})")
    for gpus in (int(g) for g in args.gpus.split(",")):
        base = None
        for link in links:
            runs = [_one(gpus, link) for _ in range(args.repeats)]
            wall = stat(r[0] for r in runs)
            cpu = stat(r[1] for r in runs)
            if base is None:
                base = (wall, cpu)
            print(f"{gpus:>9} {link:<13} {wall:7.2f} {cpu:7.2f} {wall / base[0]:9.2f} {cpu / base[1]:8.2f}", flush=True)


if __name__ == "__main__":
    main()
