"""Which statistic of a measurement's repeats predicts a step's median best: median, trimmed mean or mean?

A DDP step adds up parts measured apart (forward, backward, optimizer, each bucket's
all-reduce), and what validation compares with is the *median* of real steps. For
right-skewed parts the median of a sum lies between the sum of the parts' medians and
the sum of their means, nearer the means as the parts grow many; but a profile holds each
part from a few repeats (5-20), where a mean takes a burst of outside load whole.

This bootstraps the question from real repeats: each pool is one measurement's repeats as
recorded by ``dpsim validate`` (every all-reduce size with 15+ repeats, and the measured
training step), scaled to median 1 so that each weighs the same. A "step" of k parts draws
k pools; its target is the median of 2,001 sums of one draw from each; each statistic is
computed on n repeats drawn from each pool and summed. Printed: the median and p90 of
|estimate / target - 1| over 300 such steps, per k and n.

    python validation/run_matrix.py --subset --record /tmp/runs   # as root, on the emulated cluster
    python validation/statistic_choice.py /tmp/runs/*.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path


def trimmed_mean(xs: list[float], proportion: float = 0.1) -> float:
    """Mean without the ``proportion`` smallest and largest repeats (the candidate dropped)."""
    xs = sorted(xs)
    k = min(int(proportion * len(xs)), (len(xs) - 1) // 2)
    kept = xs[k:len(xs) - k]
    return sum(kept) / len(kept)


STATISTICS = {"median": statistics.median, "trimmed mean": trimmed_mean, "mean": statistics.fmean}


def pools_of(run: dict, min_repeats: int = 15) -> list[list[float]]:
    pools = [c["times_s"] for c in run.get("collectives", []) if len(c["times_s"]) >= min_repeats]
    pools.append(run["compute"]["step_times_s"])
    return [[x / statistics.median(p) for x in p] for p in pools]


def load_runs(paths: list[str]) -> list[dict]:
    runs = []
    for path in paths:
        doc = json.loads(Path(path).read_text())
        for item in doc if isinstance(doc, list) else [doc]:
            runs.append(item["run"] if "run" in item else item)
    return runs


def compare(pools: list[list[float]], parts: int, repeats: int, steps: int = 300, seed: int = 1) -> dict:
    rng = random.Random(seed)
    errors: dict[str, list[float]] = {name: [] for name in STATISTICS}
    for _ in range(steps):
        chosen = [rng.choice(pools) for _ in range(parts)]
        target = statistics.median(sum(rng.choice(p) for p in chosen) for _ in range(2001))
        for name, stat in STATISTICS.items():
            estimate = sum(stat(rng.sample(p, min(len(p), repeats))) for p in chosen)
            errors[name].append(abs(estimate / target - 1))
    return {name: (statistics.median(e), sorted(e)[int(0.9 * len(e))]) for name, e in errors.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="validation run documents (run_matrix.py --record), or lists of them")
    args = ap.parse_args()
    pools = [p for run in load_runs(args.runs) for p in pools_of(run)]
    print(f"{len(pools)} measurements, {min(map(len, pools))}-{max(map(len, pools))} repeats each")
    print("| repeats | parts | " + " | ".join(f"{n}: median (p90)" for n in STATISTICS) + " |")
    print("|---|---|" + "---|" * len(STATISTICS))
    for repeats in (6, 10, 20):
        for parts in (1, 2, 4, 8, 16):
            res = compare(pools, parts, repeats)
            print(f"| {repeats} | {parts} | " + " | ".join(f"{100 * m:.1f} % ({100 * p:.1f} %)"
                                                          for m, p in res.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
