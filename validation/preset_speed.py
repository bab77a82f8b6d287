"""Whole-process time of `dpsim predict` per link preset and cluster size, each against a
baseline preset (infiniband unless ``--baseline``) measured in the same run (the machine is shared:
wall and CPU time, median of repeats, or the best of them with ``--best``).

    python validation/preset_speed.py [--repeats 3] [--best] [--gpus 4096,65536,1048576] [--links ...]
    python validation/preset_speed.py --gpus 65536 --links gb200-nvl72 --baseline ethernet --best
        (issue 24's "65,536 GPUs under 1 s whole process", gb200-nvl72 against ethernet)
    python validation/preset_speed.py --gpus 65536 --links gb200-nvl72 --baseline ethernet --best \
        --src /tmp/after --baseline-src /tmp/before
        (each row also run from another tree, e.g. an install of the commit before, in the same loop:
        before/after CPU on the same load; ``--src``: the tree timed, else the installed ``dpsim``)

``--startup``: instead, the start-up of ``dpsim predict`` (process start to the first line of its own work:
the interpreter, the imports, typer's parse, the config; :data:`TO_WORK`) beside ``dpsim --help``, ``dpsim plan
--help`` and the whole ``predict --gpus 65536``, each against ``python -c pass`` and ``python -c "import numpy"``
measured in the same loop (issue 24: start-up at most ~0.3 s CPU on the shared 2-core machine).

    python validation/preset_speed.py --startup [--repeats 7] [--best]

``--plan``: instead, issue 28's two searches (``dpsim plan`` of DeepSeek-V3 and Llama-3-405B on 16,384
GPUs, bar 10 s whole process), each against a baseline run in the same loop: with ``--baseline-src DIR``
(another source tree, e.g. ``git archive`` of main unpacked) the same command from that tree, else
``dpsim predict --gpus 4096 --link infiniband`` (the preset rows' baseline, a yardstick of the machine).

    python validation/preset_speed.py --plan [--baseline-src /tmp/main] [--repeats 3] [--best]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _one(gpus: int, link: str, src: str | None = None) -> tuple[float, float]:
    """Wall and CPU seconds of one `dpsim predict` process (its children's rusage); ``src``: run from
    that tree (:func:`_process`)."""
    if src is not None:
        return _process(["predict", "--gpus", str(gpus), "--link", link], src)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([str(Path(sys.executable).with_name("dpsim")), "predict", "--gpus", str(gpus), "--link", link],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


PLAN_SEARCHES = {
    "deepseek-v3": ["plan", "--model", "deepseek-v3", "--gpus", "16384", "--global-batch", "4096",
                    "--precision", "bf16-params", "--link", "infiniband"],
    "llama-3-405b": ["plan", "--model", "llama-3-405b", "--gpus", "16384", "--link", "infiniband",
                     "--global-batch", "2048", "--precision", "bf16-params"],
}
"""Issue 28's searches: ``plan`` over every layout of each on 16,384 GPUs in under 10 s whole process."""


def _process(args: list[str], src: str | None = None, python_args: list[str] | None = None) -> tuple[float, float]:
    """Wall and CPU seconds of one ``python -m dpsim ARGS`` process (``src``: a source tree put first on
    its path, run from a neutral directory so that the current one does not shadow it; ``python_args``:
    instead of ``-m dpsim``)."""
    import os
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *(python_args or ["-m", "dpsim"]), *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=env, cwd="/" if src is not None else None)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


TO_WORK = """
import builtins, os, sys
_import = builtins.__import__

def _stop(*args, **kwargs):
    sys.stdout.flush()
    os._exit(0)  # the first line of predict's own work: nothing after it is start-up

def _hook(name, globals=None, locals=None, fromlist=(), level=0):
    module = _import(name, globals, locals, fromlist, level)
    if name == "dpsim.variability.run" and "predict_with_variability" in (fromlist or ()):
        module.predict_with_variability = _stop
    return module

builtins.__import__ = _hook
sys.argv = ["dpsim", "predict", "--gpus", "65536", "--link", "ethernet"]
from dpsim.cli.app import run
run()
"""
"""``python -c TO_WORK``: ``dpsim predict --gpus 65536 --link ethernet`` as the console script runs it, ended
where :func:`dpsim.cli.predict.predict` calls ``predict_with_variability`` (the hook on ``import`` costs a
function call per import statement: well under 1 % of the figure)."""

STARTUP = {
    "python -c pass": ["-c", "pass"],
    "import numpy": ["-c", "import numpy"],
    "dpsim --help": ["-m", "dpsim", "--help"],
    "dpsim plan --help": ["-m", "dpsim", "plan", "--help"],
    "predict start-up": ["-c", TO_WORK],
    "predict 65536 whole": ["-m", "dpsim", "predict", "--gpus", "65536", "--link", "ethernet"],
}
"""Issue 24's start-up figures, each a fresh process; the first two are the machine's yardsticks."""


def startup_speed(repeats: int, stat) -> None:
    """Each of :data:`STARTUP` in turn, ``repeats`` times over (a load that comes and goes hits all alike)."""
    import os
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in STARTUP}
    for _ in range(repeats):
        for name, args in STARTUP.items():
            runs[name].append(_process([], python_args=args))
    base = {name: stat(r[1] for r in runs[name]) for name in ("python -c pass", "import numpy")}
    print(f"{'process':<20} {'wall s':>7} {'cpu s':>7} {'cpu-pass':>8} {'cpu/numpy':>9}  "
          f"({'best' if stat is min else 'median'} of {repeats}; load {os.getloadavg()[0]:.2f})")
    for name, values in runs.items():
        wall, cpu = stat(r[0] for r in values), stat(r[1] for r in values)
        print(f"{name:<20} {wall:7.2f} {cpu:7.3f} {cpu - base['python -c pass']:8.3f} "
              f"{cpu / base['import numpy']:9.2f}", flush=True)


def plan_speed(repeats: int, stat, baseline_src: str | None) -> None:
    """Each search, then its baseline, alternately ``repeats`` times (a load that comes and goes hits both)."""
    import os
    load = os.getloadavg()[0]
    what = f"same command from {baseline_src}" if baseline_src else "predict --gpus 4096 --link infiniband"
    print(f"{'search':<14} {'wall s':>7} {'cpu s':>7} {'base wall':>9} {'base cpu':>8} {'cpu/base':>8}  "
          f"({'best' if stat is min else 'median'} of {repeats}; baseline: {what}; load {load:.2f})")
    for name, args in PLAN_SEARCHES.items():
        runs, base = [], []
        for _ in range(repeats):
            runs.append(_process(args))
            base.append(_process(args, baseline_src) if baseline_src else
                        _process(["predict", "--gpus", "4096", "--link", "infiniband"]))
        wall, cpu = stat(r[0] for r in runs), stat(r[1] for r in runs)
        bwall, bcpu = stat(r[0] for r in base), stat(r[1] for r in base)
        print(f"{name:<14} {wall:7.2f} {cpu:7.2f} {bwall:9.2f} {bcpu:8.2f} {cpu / bcpu:8.2f}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gpus", default="4096,65536,1048576")
    ap.add_argument("--links", default="gb200-nvl72,dgx-b200")
    ap.add_argument("--baseline", default="infiniband", help="the preset every other is compared with")
    ap.add_argument("--best", action="store_true", help="the fastest of the repeats instead of their median "
                    "(what a loaded machine leaves least disturbed)")
    ap.add_argument("--plan", action="store_true", help="time issue 28's two plan searches instead")
    ap.add_argument("--startup", action="store_true", help="time predict's start-up instead (and --help)")
    ap.add_argument("--baseline-src", default=None, help="with --plan: a source tree whose dpsim runs each "
                    "search as the baseline (else a predict run is the yardstick); else: every row run from this "
                    "tree too, alternately, its CPU seconds and the ratio to them printed")
    ap.add_argument("--src", default=None, help="the tree timed (PYTHONPATH, run from /), else the installed dpsim")
    args = ap.parse_args()
    stat = min if args.best else statistics.median
    if args.plan:
        plan_speed(args.repeats, stat, args.baseline_src)
        return
    if args.startup:
        startup_speed(args.repeats, stat)
        return
    import os
    links = [args.baseline] + [x for x in args.links.split(",") if x and x != args.baseline]
    other = args.baseline_src
    print(f"{'gpus':>9} {'link':<13} {'wall s':>7} {'cpu s':>7} {'wall/base':>9} {'cpu/base':>8}"
          + (f" {'src cpu':>7} {'cpu/src':>7}" if other else "")
          + f"  ({'best' if args.best else 'median'} of {args.repeats}; load {os.getloadavg()[0]:.2f}"
          + (f"; src: {other}" if other else "") + ")")
    for gpus in (int(g) for g in args.gpus.split(",")):
        base = None
        for link in links:
            runs, then = [], []
            for _ in range(args.repeats):
                runs.append(_one(gpus, link, args.src))
                if other:
                    then.append(_one(gpus, link, other))
            wall = stat(r[0] for r in runs)
            cpu = stat(r[1] for r in runs)
            if base is None:
                base = (wall, cpu)
            line = f"{gpus:>9} {link:<13} {wall:7.2f} {cpu:7.2f} {wall / base[0]:9.2f} {cpu / base[1]:8.2f}"
            if other:
                cpu_then = stat(r[1] for r in then)
                line += f" {cpu_then:7.2f} {cpu / cpu_then:7.2f}"
            print(line, flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
