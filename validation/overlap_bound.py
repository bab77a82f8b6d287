"""Can a larger compute slowdown under concurrent NCCL explain the multi-node rows? (overlapmn, issue 24; diagnosis).

dpsim slows compute ``1 + s`` times while any collective runs (:data:`dpsim.predict.config.DEFAULT_OVERLAP_SLOWDOWN`,
s = 0.189, Ahmed et al. arXiv:2507.03114, measured on 4-GPU single servers). Inside several systems dpsim is about
10-13 points more optimistic on multi-node rows than on single-node ones (the ecmp section of
``validation/large_model_runs.md``). If the cause were a larger slowdown for collectives that cross the network, the
missing time of a row would have to come out of the compute done beside its *hidden* communication.

That time is bounded. While a collective of wall time ``H`` hides behind compute slowed ``1 + s`` times, the compute
loses ``H x s / (1 + s)``; raising ``s`` from ``s0`` adds ``H x (s / (1 + s) - s0 / (1 + s0))``, at most
``H / (1 + s0)`` (compute stopped outright: the collective fully serialised). A row whose missing time
(published step minus predicted step) exceeds that can not be explained by interference of any size; otherwise the
slowdown it needs is ``s = f / (1 - f)`` with ``f = s0 / (1 + s0) + missing / H`` (first order: ``H`` as played at
``s0``; a longer compute phase hides more of a collective, so the true need is a little larger).

The script prints, for the multi-node rows of the systems with the bias and their single-node rows, the presets
error, the step, the hidden communication, the slowdown each row would need, and the row replayed at the largest
slowdown dpsim accepts (:data:`dpsim.limits.MAX_OVERLAP_SLOWDOWN`, 10: compute at 1/11 speed beside every
collective) as a check of the bound on the engine itself.

``python validation/overlap_bound.py [--only R007,R008] [--what-if 0.4]``
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from pathlib import Path

from dpsim.predict.config import DEFAULT_OVERLAP_SLOWDOWN

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "validation"))

ROWS = {
    # The systems of the ecmp section's table (multi-node minus single-node signed error), all their rows.
    "MosaicML H100": [f"R{i:03d}" for i in (*range(1, 23), *range(41, 48))],
    "MosaicML A100": [f"R{i:03d}" for i in range(23, 41)],
    "XTuner A100": [f"R{i:03d}" for i in range(145, 159)],
    "FlagPerf H100": [f"R{i:03d}" for i in range(160, 165)],
    "GCP A3 (MaxText)": [f"R{i:03d}" for i in range(48, 53)],
    "InternLM A100": [f"R{i:03d}" for i in range(75, 90)],
}
"""Row ids per system (``tests/data/large_model_runs.csv``)."""


def added_loss_fraction(s: float, s0: float) -> float:
    """Compute time lost per second of hidden collective when the slowdown goes from ``s0`` to ``s``."""
    if s < 0 or s0 < 0:
        raise ValueError(f"slowdowns {s}, {s0}: need both >= 0")
    return s / (1.0 + s) - s0 / (1.0 + s0)


def needed_slowdown(missing_s: float, hidden_s: float, s0: float) -> float:
    """The compute slowdown beside a collective that would add ``missing_s`` to a step whose collectives hide
    ``hidden_s`` behind compute slowed ``1 + s0`` times: ``inf`` if even a full stop cannot (``missing_s >=
    hidden_s / (1 + s0)``), 0 if the row is already too slow by more than what ``s0`` costs."""
    if hidden_s < 0 or s0 < 0:
        raise ValueError(f"hidden {hidden_s} s, slowdown {s0}: need both >= 0")
    if hidden_s == 0:
        return 0.0 if missing_s <= 0 else math.inf
    f = s0 / (1.0 + s0) + missing_s / hidden_s
    if f >= 1.0:
        return math.inf
    return max(0.0, f / (1.0 - f))


def system_effects_fit(errors: list[float], systems: list[str], columns: dict[str, list[float]]
                       ) -> dict[str, tuple[float, float]]:
    """Least squares of ``errors`` on ``columns`` with one intercept per system: ``{column: (coefficient,
    standard error)}`` (several regressors at once, where :func:`accuracy_large_models.within_system_slope` takes
    one)."""
    import numpy as np

    names = sorted(set(systems))
    x = np.array([[1.0 if s == n else 0.0 for n in names] + [columns[c][i] for c in columns]
                  for i, s in enumerate(systems)])
    y = np.asarray(errors, dtype=float)
    dof = len(y) - x.shape[1]
    if dof < 1:
        raise ValueError(f"{len(y)} rows for {x.shape[1]} coefficients: nothing left to estimate an error from")
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ beta
    cov = np.linalg.pinv(x.T @ x) * float(resid @ resid) / dof
    k = len(columns)
    return {c: (float(beta[len(names) + i]), math.sqrt(float(cov[len(names) + i, len(names) + i])))
            for i, c in enumerate(columns) if k}


def _evaluate(row: dict, overlap_slowdown: float | None = None):
    import accuracy_large_models as alm
    from dpsim.predict import predict

    job = alm.job_of(row)
    config = job.config if overlap_slowdown is None else dataclasses.replace(job.config,
                                                                             overlap_slowdown=overlap_slowdown)
    p = predict(config, model=job.model)
    tokens = p.samples_per_s * job.model.tokens_per_sample / int(row["gpus"])
    error = alm.to_published_unit(row, job.model, tokens) / float(row["value"]) - 1.0
    return p, error, alm.tokens_per_rank(row, job)


def measure(row: dict) -> dict:
    """One row: presets error, step, hidden communication, needed slowdown, error at the largest slowdown."""
    from dpsim.limits import MAX_OVERLAP_SLOWDOWN

    p, error, tokens_per_rank = _evaluate(row)
    # Published step in the prediction's own time: the metric is a rate, so step scales as 1 / rate.
    missing_s = p.step_time_s * error
    hidden_s = max(0.0, p.comm_s - p.exposed_comm_s)
    _, error_max, _ = _evaluate(row, MAX_OVERLAP_SLOWDOWN)
    return {"id": row["id"], "nodes": int(row["nodes"] or 1), "error": error, "step_s": p.step_time_s,
            "comm_s": p.comm_s, "exposed_s": p.exposed_comm_s, "hidden_s": hidden_s, "missing_s": missing_s,
            "needed": needed_slowdown(missing_s, hidden_s, DEFAULT_OVERLAP_SLOWDOWN), "error_at_max": error_max,
            "tokens_per_rank": tokens_per_rank}


def main(argv=None) -> int:
    import accuracy_large_models as alm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated row ids (default: every row of ROWS)")
    ap.add_argument("--what-if", type=float, action="append", default=[], metavar="S",
                    help="first-order screen: the multi-node rows' hidden communication slowed at S instead of "
                         "the default (a network-only slowdown), the single-node rows as they are; repeatable")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    by_id = {r["id"]: r for r in alm.rows()}
    everything: list[tuple[str, dict]] = []
    print("id, system, nodes, error presets, step s, comm busy s, exposed s, hidden s, missing s, "
          "missing / hidden, slowdown needed, error at slowdown 10")
    for system, ids in ROWS.items():
        done = []
        for rid in ids:
            if (only and rid not in only) or rid not in by_id:
                continue
            try:
                m = measure(by_id[rid])
            except Exception as exc:  # a row dpsim refuses is reported, not fatal
                print(f"{rid} {system}: not predicted ({type(exc).__name__}: {exc})")
                continue
            done.append(m)
            everything.append((system, m))
            ratio = m["missing_s"] / m["hidden_s"] if m["hidden_s"] > 0 else math.inf
            need = "impossible" if math.isinf(m["needed"]) else f"{m['needed']:.2f}"
            print(f"{m['id']} {system:18s} {m['nodes']:4d} {100 * m['error']:+7.1f} % {m['step_s']:10.4g} "
                  f"{m['comm_s']:9.4g} {m['exposed_s']:9.4g} {m['hidden_s']:9.4g} {m['missing_s']:+10.4g} "
                  f"{ratio:+8.2f} {need:>10s} {100 * m['error_at_max']:+7.1f} %")
        multi = [m for m in done if m["nodes"] > 1]
        single = [m for m in done if m["nodes"] == 1]
        for name, group in (("multi-node", multi), ("single-node", single)):
            if not group:
                continue
            finite = [m["needed"] for m in group if not math.isinf(m["needed"])]
            print(f"  {system} {name}: {len(group)} rows, mean error {100 * statistics.mean(m['error'] for m in group):+.1f} %"
                  f", impossible at any slowdown {sum(math.isinf(m['needed']) for m in group)}"
                  f", needed slowdown of the rest median {statistics.median(finite) if finite else float('nan'):.2f}"
                  f", mean error at slowdown 10 {100 * statistics.mean(m['error_at_max'] for m in group):+.1f} %")
    multi = [m for _, m in everything if m["nodes"] > 1]
    if multi:
        finite = sorted(m["needed"] for m in multi if not math.isinf(m["needed"]))
        q = statistics.quantiles(finite, n=4) if len(finite) > 1 else [float("nan")] * 3
        print(f"all multi-node rows: {len(multi)}, impossible at any slowdown {len(multi) - len(finite)}; "
              f"needed slowdown of the rest: min {finite[0] if finite else float('nan'):.2f}, quartiles "
              f"{q[0]:.2f} / {q[1]:.2f} / {q[2]:.2f}, max {finite[-1] if finite else float('nan'):.2f}")
    # A slowdown beside hidden collectives costs in proportion to the hidden share of the step: if it were the
    # missing cost, the signed error would rise with that share inside systems.
    for name, keep in (("multi-node rows", lambda m: m["nodes"] > 1), ("all rows", lambda m: True)):
        sel = [(system, m) for system, m in everything if keep(m)]
        fit = alm.within_system_slope({m["id"]: 100 * m["error"] for _, m in sel}, {m["id"]: s for s, m in sel},
                                      {m["id"]: 100 * m["hidden_s"] / m["step_s"] for _, m in sel})
        if fit:
            print(f"signed error on hidden communication share of the step, inside systems ({name}): "
                  f"{fit[0]:+.2f} points per point (standard error {fit[1]:.2f}; {fit[2]} rows, {fit[3]} systems)")
    if len(everything) > len(ROWS) + 3:
        fit = system_effects_fit([100 * m["error"] for _, m in everything], [s for s, _ in everything], {
            "hidden share (points)": [100 * m["hidden_s"] / m["step_s"] for _, m in everything],
            "multi-node (0/1)": [1.0 if m["nodes"] > 1 else 0.0 for _, m in everything],
            "log2 tokens per micro-batch per rank": [math.log2(m["tokens_per_rank"]) for _, m in everything]})
        print("signed error (points), one intercept per system, all rows: "
              + "; ".join(f"{c} {b:+.2f} ({e:.2f})" for c, (b, e) in fit.items()))
    for s in args.what_if:
        print(f"what-if, network-only slowdown {s:g} (first order: error' = (1 + e) / (1 + added x hidden / step) - 1, "
              f"added {added_loss_fraction(s, DEFAULT_OVERLAP_SLOWDOWN):.3f} per hidden second):")
        for line in what_if_lines(everything, s):
            print("  " + line)
    return 0


def screened_error(m: dict, s: float) -> float:
    """A row's signed error to first order with its hidden communication slowed at ``s`` (see --what-if)."""
    add = added_loss_fraction(s, DEFAULT_OVERLAP_SLOWDOWN)
    return (1.0 + m["error"]) / (1.0 + add * m["hidden_s"] / m["step_s"]) - 1.0


def what_if_lines(everything: list[tuple[str, dict]], s: float) -> list[str]:
    """Per system: multi-node minus single-node mean signed error, and the multi-node rows' median and worst
    |error|, before -> after a network-only slowdown ``s``."""
    out = []
    for system in ROWS:
        multi = [m for n, m in everything if n == system and m["nodes"] > 1]
        single = [m for n, m in everything if n == system and m["nodes"] == 1]
        if not multi or not single:
            continue
        base = statistics.mean(m["error"] for m in single)
        before = statistics.mean(m["error"] for m in multi) - base
        after = statistics.mean(screened_error(m, s) for m in multi) - base
        med = (statistics.median(abs(m["error"]) for m in multi), statistics.median(abs(screened_error(m, s)) for m in multi))
        worst = (max(abs(m["error"]) for m in multi), max(abs(screened_error(m, s)) for m in multi))
        out.append(f"{system}: multi - single {100 * before:+.1f} -> {100 * after:+.1f} points; multi-node median "
                   f"|error| {100 * med[0]:.1f} -> {100 * med[1]:.1f} %, worst {100 * worst[0]:.1f} -> {100 * worst[1]:.1f} %")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
