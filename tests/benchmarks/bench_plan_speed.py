"""Benchmark: ``dpsim plan`` and ``predict`` on the largest inputs a user can give, whole process, against
the default ``dpsim predict`` measured in the same run (issues 25 and 28: every ``plan`` in seconds).

Run: ``python tests/benchmarks/bench_plan_speed.py [--repeats N]``. Prints, per case, the median wall time
and CPU seconds of the whole ``dpsim`` process (imports included) and their ratio to the baseline, with the
line of ``plan``'s output that says how many layouts it simulated and what stopped it. The cases: a huge
global batch (plan simulated layouts of thousands of micro-batches one by one: 293 s before its counted
budget, :data:`dpsim.plan.planner.VERIFY_WORK`), every layout of a 405B dense model and DeepSeek-V3 on
16,384 GPUs (issue 28: under 10 s), 262,144 GPUs, many pipeline sizes, mixtures of experts with their
expert-parallel sizes, a long sequence (context parallelism), and ``predict`` with a long accumulation
and a 16,384-GPU MoE layout (issue 28: under 2 s). Not a test: these machines are shared and noisy (the
CPU seconds are steadier than the wall time on a loaded machine).

``--extrapolation`` (or ``--only extrapolation``) also times ``plan`` of llama-2-7b at a global batch of 1M and 16M
samples on 16 and 64 GPUs twice in the same run: after (predict extrapolates a step past 512 micro-batches, so
plan keeps those layouts and counts their sampled work) and before (the same code with
:func:`~dpsim.predict.extrapolate.full_simulation` forced: every micro-batch simulated, layouts past the full
path's limits left out, work counted at the full count; main refused 16M samples outright, its global batch
being capped at 1,048,576).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import wall_time  # noqa: F401  (compiles dpsim's bytecode once, as an installed package has it)

BASELINE = ["predict"]
"""The default ``dpsim predict`` (gpt2-xl on its default GPUs): start-up plus one small prediction."""
CASES = {
    "plan 16 GPUs llama-2-7b gb 1,048,576": ["plan", "--gpus", "16", "--model", "llama-2-7b", "--global-batch",
                                             "1048576", "--link", "infiniband"],
    "plan 64 GPUs llama-2-7b gb 1,048,576": ["plan", "--gpus", "64", "--model", "llama-2-7b", "--global-batch",
                                             "1048576"],
    "plan 8 GPUs gpt2-xl gb 65,536": ["plan", "--gpus", "8", "--model", "gpt2-xl", "--global-batch", "65536",
                                      "--link", "nvlink"],
    "plan 512 GPUs llama-2-70b gb 1,048,576": ["plan", "--gpus", "512", "--model", "llama-2-70b", "--global-batch",
                                               "1048576", "--link", "infiniband"],
    "plan 16,384 GPUs llama-3-405b": ["plan", "--model", "llama-3-405b", "--gpus", "16384", "--link", "infiniband",
                                      "--global-batch", "2048", "--precision", "bf16-params"],
    "plan 16,384 GPUs deepseek-v3": ["plan", "--model", "deepseek-v3", "--gpus", "16384", "--link", "infiniband",
                                     "--global-batch", "2048", "--precision", "bf16-params"],
    "plan 262,144 GPUs llama-3-405b": ["plan", "--model", "llama-3-405b", "--gpus", "262144", "--link",
                                       "infiniband", "--global-batch", "65536", "--precision", "bf16-params"],
    "plan 256 GPUs mixtral-8x7b": ["plan", "--model", "mixtral-8x7b", "--gpus", "256", "--link", "infiniband",
                                   "--global-batch", "1024"],
    "plan 1,024 GPUs llama-3-8b seq 1M": ["plan", "--model", "llama-3-8b", "--gpus", "1024", "--seq-len",
                                          "1048576", "--link", "infiniband", "--global-batch", "64"],
    "predict tp2 pp4 32,768 micro-batches": ["predict", "--gpus", "64", "--model", "llama-2-7b", "--tp", "2",
                                             "--pp", "4", "--global-batch", "262144", "--micro-batch", "1",
                                             "--link", "infiniband"],
    "predict 16,384 GPUs deepseek-v3 ep 64": ["predict", "--model", "deepseek-v3", "--gpus", "16384", "--link",
                                              "infiniband", "--tp", "1", "--pp", "16", "--ep", "64",
                                              "--global-batch", "16384", "--micro-batch", "1",
                                              "--precision", "bf16-params"],
}


EXTRAPOLATION_CASES = {f"plan {g} GPUs llama-2-7b gb {gb:,}": ["plan", "--gpus", str(g), "--model", "llama-2-7b",
                                                                 "--global-batch", str(gb), "--link", "infiniband"]
                       for gb in (1 << 20, 1 << 24) for g in (16, 64)}
"""Plan at a huge global batch, before and after the extrapolation (see the module docstring)."""
FULL_PATH = ("import sys\nfrom dpsim.predict.extrapolate import full_simulation\nfrom dpsim.cli.app import run\n"
             "sys.argv = ['dpsim', *sys.argv[1:]]\nwith full_simulation():\n    run()")
"""``dpsim`` with every prediction simulating every micro-batch (the path and the counting before it)."""


def run(args: list[str], repeats: int, *, full_path: bool | None = None) -> tuple[float, float, str]:
    """Median wall and CPU seconds of ``dpsim ARGS`` as its own process, and plan's verification line (or its
    error line, for a run that fails); ``full_path``: run with :data:`FULL_PATH` (``False``: without, ``None``:
    without, and only the verification line)."""
    walls, cpus, line = [], [], ""
    head = [sys.executable, "-c", FULL_PATH] if full_path else [sys.executable, "-m", "dpsim"]
    for _ in range(repeats):
        before = os.times()
        t0 = time.perf_counter()
        done = subprocess.run([*head, *args], check=False, capture_output=True, text=True,
                              env={**os.environ, "COLUMNS": "400"})
        walls.append(time.perf_counter() - t0)
        after = os.times()
        cpus.append((after.children_user - before.children_user) + (after.children_system - before.children_system))
        line = next((l for l in done.stdout.splitlines() if l.startswith("* simulated step by step")), "")
        if full_path is not None:  # the extrapolation cases: how many layouts the table ranks, then the line
            fit = next((l.strip() for l in done.stdout.splitlines() if "layouts for a global batch" in l), "")
            line = f"{fit[fit.find('('):]} {line[line.find(': ') + 2:]}"
        if done.returncode:
            line = f"exit {done.returncode}: " + (done.stderr.strip().splitlines() or [""])[-1]
    return statistics.median(walls), statistics.median(cpus), line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="runs per case (the median is printed)")
    parser.add_argument("--only", default=None, help="only the cases whose name contains this")
    parser.add_argument("--extrapolation", action="store_true",
                        help="also plan at 1M and 16M samples before and after the extrapolation")
    args = parser.parse_args()
    base_wall, base_cpu, _ = run(BASELINE, max(3, args.repeats))
    print(f"{'case':<42} {'wall s':>8} {'x base':>7} {'CPU s':>7} {'x base':>7}")
    print(f"{'baseline: dpsim predict (default)':<42} {base_wall:>8.2f} {1:>7.1f} {base_cpu:>7.2f} {1:>7.1f}")
    for name, cmd in CASES.items():
        if args.only and args.only not in name:
            continue
        w, c, line = run(cmd, args.repeats)
        print(f"{name:<42} {w:>8.2f} {w / base_wall:>7.1f} {c:>7.2f} {c / base_cpu:>7.1f}")
        if line:
            print(f"    {line[:160]}")
    if args.extrapolation or (args.only and "extrapolation" in args.only):
        extrapolation(args.repeats)


def extrapolation(repeats: int) -> None:
    """Each :data:`EXTRAPOLATION_CASES` plan before (:data:`FULL_PATH`) and after, in the same run."""
    print(f"\n{'plan, before -> after the extrapolation':<42} {'wall s':>17} {'CPU s':>17} {'after/before':>12}")
    for name, cmd in EXTRAPOLATION_CASES.items():
        bw, bc, bline = run(cmd, repeats, full_path=True)
        aw, ac, aline = run(cmd, repeats, full_path=False)
        print(f"{name:<42} {bw:>7.2f} -> {aw:>6.2f} {bc:>7.2f} -> {ac:>6.2f} {aw / bw:>12.1f}")
        print(f"    before: {bline[:200]}")
        print(f"    after:  {aline[:200]}")


if __name__ == "__main__":
    main()
