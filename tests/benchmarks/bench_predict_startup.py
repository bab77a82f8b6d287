"""Benchmark: whole-process time of the ``dpsim`` commands issues 24 and 28 time, against a baseline checkout.

Run: ``python tests/benchmarks/bench_predict_startup.py --base DIR [--repeats N] [--plan]``, where
``DIR`` is another checkout of dpsim (e.g. ``git worktree add /tmp/base main``). Each command runs
as its own process, ``repeats`` times, alternating the baseline (``PYTHONPATH=DIR``) with this
checkout (``PYTHONPATH`` = the repository holding this script), so both see the same load on a shared
machine. ``--base-python PY --this-python PY`` compare two installs instead (e.g. two virtual
environments each with a ``pip install .``, not editable: what a user runs), no ``PYTHONPATH``. Prints, per command and per side, the min and median wall seconds and the min and median
CPU seconds (user + system of the child: steadier than wall while other jobs take the cores), and
the ratios this/base of the medians. Both checkouts' bytecode is compiled first, as ``pip install``
does for a user's install (these machines set ``PYTHONDONTWRITEBYTECODE``).

The commands: README's first ``predict`` (64 GPUs, ethernet) and the same on 65,536 GPUs (issue 24:
under 1 s whole process), a DeepSeek-V3 layout on 16,384 GPUs (issue 28: under 2 s), and with
``--plan`` the ``plan`` searches of llama-3-405b and deepseek-v3 on 16,384 GPUs (issue 28: under
10 s). Not a test: these machines are shared and noisy.

Measured 2026-12-06 on the shared 2-core machine (load 5-8, so wall times were 2-3x the CPU times;
CPU medians of 7 alternated runs, base = 7eb9100): predict 64 GPUs 0.74 -> 0.49 s, 65,536 GPUs
0.78 -> 0.50 s, DeepSeek-V3 pp16 ep64 on 16,384 GPUs 0.94 -> 0.59 s (ratios 0.64-0.66); the same
between two ``pip install .`` environments 0.78 -> 0.54, 0.81 -> 0.51, 0.91 -> 0.61 s. What went:
networkx (with its backends' entry-point scan), numpy.ma, hashlib, a whole-module ast parse for the
flags' help, 35 ms of model-error margins, and the cyclic collector's passes over the imported CLI.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]

COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "import numpy": ["-c", "import numpy"],
    "predict 64 ethernet": ["-m", "dpsim", "predict", "--gpus", "64", "--link", "ethernet"],
    "predict 65536 ethernet": ["-m", "dpsim", "predict", "--gpus", "65536", "--link", "ethernet"],
    "predict deepseek-v3 16384": ["-m", "dpsim", "predict", "--model", "deepseek-v3", "--gpus", "16384",
                                  "--link", "infiniband", "--pp", "16", "--ep", "64", "--micro-batch", "1",
                                  "--global-batch", "16384", "--strategy", "zero1", "--precision", "bf16-params",
                                  "--recompute", "full"],
}
PLANS = {
    f"plan {model} 16384": ["-m", "dpsim", "plan", "--model", model, "--gpus", "16384", "--link", "infiniband",
                            "--global-batch", "2048", "--precision", "bf16-params"]
    for model in ("llama-3-405b", "deepseek-v3")
}


def _env(path: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return env if path is None else {**env, "PYTHONPATH": str(path)}


def run(args: list[str], side: tuple[str, Path | None]) -> tuple[float, float]:
    """Wall and CPU seconds of ``python ARGS`` (``side``: the interpreter and the ``PYTHONPATH``, if
    any), output discarded."""
    python, path = side
    before = os.times()
    t0 = time.perf_counter()
    subprocess.run([python, *args], check=True, stdout=subprocess.DEVNULL, env=_env(path), cwd="/")
    wall = time.perf_counter() - t0
    after = os.times()
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="the baseline checkout")
    parser.add_argument("--base-python", help="the baseline's interpreter (an install; instead of --base)")
    parser.add_argument("--this-python", help="this side's interpreter (an install of this checkout)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--plan", action="store_true", help="also time the two plan searches (slow)")
    parser.add_argument("--only", default="", help="comma-separated substrings of the command names to run")
    opts = parser.parse_args()
    if (opts.base is None) == (opts.base_python is None):
        parser.error("give one of --base and --base-python")
    sides = {"base": (opts.base_python, None) if opts.base is None else (sys.executable, opts.base.resolve()),
             "this": (opts.this_python, None) if opts.this_python else (sys.executable, HERE)}
    for _, path in sides.values():
        if path is not None:
            compileall.compile_dir(str(path / "dpsim"), quiet=1)
    commands = {**COMMANDS, **(PLANS if opts.plan else {})}
    if opts.only:
        commands = {k: v for k, v in commands.items() if any(s in k for s in opts.only.split(","))}
    for side, (python, path) in sides.items():  # the right dpsim is imported
        out = subprocess.run([python, "-c", "import dpsim; print(dpsim.__file__)"], check=True,
                             capture_output=True, text=True, env=_env(path), cwd="/")
        print(f"{side}: {python} {out.stdout.strip()}")
        assert path is None or out.stdout.startswith(str(path)), (side, out.stdout)
    print(f"{'command':<27} {'side':<5} {'wall min':>8} {'wall med':>8} {'cpu min':>8} {'cpu med':>8}"
          f"   (n={opts.repeats}, sides alternated)")
    for name, args in commands.items():
        times: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
        for _ in range(opts.repeats):
            for side, how in sides.items():
                times[side].append(run(args, how))
        med = {}
        for side, rows in times.items():
            walls, cpus = [w for w, _ in rows], [c for _, c in rows]
            med[side] = (statistics.median(walls), statistics.median(cpus))
            print(f"{name:<27} {side:<5} {min(walls):8.3f} {med[side][0]:8.3f} {min(cpus):8.3f} {med[side][1]:8.3f}")
        print(f"{'':<27} {'ratio':<5} {'':>8} {med['this'][0] / med['base'][0]:8.2f} {'':>8} "
              f"{med['this'][1] / med['base'][1]:8.2f}")


if __name__ == "__main__":
    main()
