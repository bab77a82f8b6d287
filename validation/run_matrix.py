"""Regenerate VALIDATION.md: real DDP runs on the emulated cluster vs dpsim's predictions.

Run as root on a quiet machine (the runs share its cores):
    python validation/run_matrix.py            # the full matrix, writes VALIDATION.md
    python validation/run_matrix.py --subset   # the CI subset, prints only
    python validation/run_matrix.py --cases 14,15   # chosen rows of the matrix (1-based), prints only
Each case trains with real torch DDP (gloo) across emulated hosts (network namespaces,
tbf-shaped NICs), measures the steady-state step, and compares it with ``dpsim predict``'s
prediction from a profile of the same run's micro-benchmarks (all-reduce sweep, the
training step per layer with all ranks busy, the step right after an all-reduce of its
gradients, the interference of compute and all-reduce
both ways), never from the DDP steps themselves.

The machine is shared: each run records the CPU time other processes took meanwhile
(``validation/load.py``); a run under more than :data:`OUTSIDE_LOAD_LIMIT` of outside load,
or whose step times spread past :data:`DISTURBED_SPREAD`, is run again (at most twice),
keeping the quietest, and the table reports the outside load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
from pathlib import Path

from dpsim.errors import Interrupted
from dpsim.validate.api import ValidationConfig, validate
from dpsim.validate.runner import RankCrashed
from dpsim.validate.testbed import parse_rate_bits_per_s

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import Load  # noqa: E402
from sections import replace_section  # noqa: E402

SECTION = "## Part 1: `dpsim validate`, predictions from each run's own measurements"

PER_TENSOR_CAP_MB = 1e-5
"""A bucket cap of 10 bytes (``int(1e-5 * 2**20)``), under every built-in model's smallest gradient
(the 40-byte bias of a 10-way classifier): each gradient tensor is its own bucket and its own all-reduce,
as Horovod without tensor fusion does. torch 2.13's ``_BucketCapacityConfig.create``
(torch/nn/parallel/distributed.py) caps the first bucket at the cap itself when ``bucket_cap_mb`` is
given (1 MiB only for the default), and the Reducer closes a bucket once its bytes reach the limit,
so no bucket holds two tensors."""

# (model, micro-batch, bucket cap MiB or None, ranks, NIC, racks, oversubscription)
MATRIX = [
    ("mlp", 32, None, 2, "1gbit", 1, 1.0),
    ("mlp", 64, 1, 2, "100mbit", 1, 1.0),
    ("mlp", 32, 25, 4, "3gbit", 1, 1.0),
    ("mlp", 16, 100, 8, "1gbit", 1, 1.0),
    ("mlp", 32, 4, 4, "500mbit", 2, 2.0),
    ("transformer", 8, 1, 2, "1gbit", 1, 1.0),
    ("transformer", 8, None, 2, "300mbit", 1, 1.0),
    ("transformer", 8, 4, 4, "1gbit", 1, 1.0),
    ("transformer", 4, 25, 8, "3gbit", 1, 1.0),
    ("convnet", 16, None, 2, "100mbit", 1, 1.0),
    ("convnet", 16, 1, 4, "500mbit", 1, 1.0),
    ("convnet", 8, 100, 8, "1gbit", 1, 1.0),
    ("transformer", 8, 100, 2, "3gbit", 1, 1.0),
    ("transformer", 8, PER_TENSOR_CAP_MB, 2, "1gbit", 1, 1.0),
    ("convnet", 16, PER_TENSOR_CAP_MB, 2, "1gbit", 1, 1.0),
]
SUBSET = [MATRIX[0], MATRIX[5], MATRIX[9]]
"""What CI runs: one case per model shape, 2 ranks, a few minutes in all."""

MEDIAN_BAR, WORST_BAR = 0.05, 0.15


DISTURBED_SPREAD = 1.4
"""A run whose p90/p10 step-time ratio exceeds this was disturbed (the steady state of these
runs spreads by a few per cent)."""
OUTSIDE_LOAD_LIMIT = 0.15
"""A run during which other processes took more than this share of the machine is repeated."""
DRIFT_LIMIT = 0.05
"""A run whose control step (timed again after the DDP steps) moved by more than this from the
measured one (before them) ran on a machine that changed speed meanwhile: it is repeated
(:func:`dpsim.validate.runner.speed_drift`; steady runs drift by 1-3 %)."""


def steady(load: float, drift: float | None, *, training_drift: float | None = None,
           network_drift: float | None = None, compute_share: float = 1.0, comm_share: float = 1.0) -> bool:
    """Whether a run measured the model, not the machine: little outside load, no change of speed.

    ``drift``: the control step after the DDP steps against before them
    (:func:`dpsim.validate.runner.speed_drift`), held to :data:`DRIFT_LIMIT`. ``training_drift``: the
    DDP steps' own forward and optimizer step against the measured ones
    (:func:`~dpsim.validate.runner.training_compute_drift`: the machine's speed *during* the steps), and
    ``network_drift``: the largest all-reduce after the steps against before
    (:func:`~dpsim.validate.runner.network_drift`); each is weighed by its part of the predicted step
    (``compute_share``, ``comm_share``), so what is held to :data:`DRIFT_LIMIT` is how far the machine
    alone could have moved the step (CI on 2026-12-07: the convnet at 100 Mbit/s measured -12.0 % and
    -18.6 % with the control before/after within 2.5 % and no outside load, on a shared box whose
    neighbours' load is not in its /proc/stat)."""
    return (load <= OUTSIDE_LOAD_LIMIT and (drift is None or abs(drift) <= DRIFT_LIMIT)
            and (training_drift is None or abs(training_drift) * min(1.0, compute_share) <= DRIFT_LIMIT)
            and (network_drift is None or abs(network_drift) * min(1.0, comm_share) <= DRIFT_LIMIT))


def run_steady(load: float, measured: dict, predicted: dict) -> bool:
    """:func:`steady` of one validation result (its ``measured`` and ``predicted`` documents)."""
    step = predicted.get("step_time_s") or 0.0
    share = (lambda part: predicted.get(part, 0.0) / step if step > 0 else 1.0)
    return steady(load, measured.get("speed_drift"), training_drift=measured.get("training_compute_drift"),
                  network_drift=measured.get("network_drift"), compute_share=share("compute_s"),
                  comm_share=share("comm_s"))


def run_case(case, steps: int = 20, attempts: int = 3) -> dict:
    """One case with the matrix's procedure: re-run while disturbed, keep the quietest run."""
    model, mb, cap, ranks, nic, racks, over = case
    cfg = ValidationConfig(model=model, micro_batch=mb, bucket_cap_mb=cap, world_size=ranks,
                           nic_bits_per_s=parse_rate_bits_per_s(nic), racks=racks, oversubscription=over,
                           steps=steps, optimizer="sgd-momentum")
    best, crash = None, None
    for attempt in range(1, attempts + 1):
        with Load() as load:
            try:
                r = validate(cfg)
            except RankCrashed as exc:  # the runtime ended a rank with a signal: not a measurement
                crash = exc
                continue
        spread = r.measured["p90_s"] / r.measured["p10_s"]
        drift = r.measured.get("speed_drift")
        calm = run_steady(load.outside, r.measured, r.predicted)
        key = (not calm, load.outside, abs(drift or 0.0), spread)
        if best is None or key < best[0]:
            best = (key, r, load.outside)
        if spread <= DISTURBED_SPREAD and calm:
            break
    if best is None:
        raise crash
    _, r, outside = best
    return {"case": case, "measured": r.measured, "predicted": r.predicted, "error": r.error, "runs": attempt,
            "outside_load": outside, "speed_drift": r.measured.get("speed_drift"),
            "training_compute_drift": r.measured.get("training_compute_drift"),
            "network_drift": r.measured.get("network_drift"),
            "steady": run_steady(outside, r.measured, r.predicted), "run": r.run}


def case_name(case) -> str:
    """``mlp-mb32-cap-default-2x1gbit-r1``: a file name for a case."""
    model, mb, cap, ranks, nic, racks, _ = case
    return f"{model}-mb{mb}-cap-{cap if cap else 'default'}-{ranks}x{nic}-r{racks}"


def _cap(cap) -> str:
    if cap is None:
        return "default (25, 1st 1) MiB"
    return "per tensor" if cap == PER_TENSOR_CAP_MB else f"{cap:g} MiB"


def _drift(drift: float | None) -> str:
    return "n/a" if drift is None else f"{100 * drift:+.1f} %"


def table(rows: list[dict], numbers: list[int] | None = None) -> str:
    """The Markdown table of ``rows``, numbered by ``numbers`` (their rows of :data:`MATRIX`; default 1, 2, ...)."""
    lines = ["| # | model | micro-batch | bucket cap | ranks | NIC | racks (oversub.) | measured median (p10-p90) | "
             "predicted | error | predicted comm / compute | runs | outside load | speed drift |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in zip(numbers or range(1, len(rows) + 1), rows):
        model, mb, cap, ranks, nic, racks, over = r["case"]
        m, p = r["measured"], r["predicted"]
        lines.append(
            f"| {i} | {model} | {mb} | {_cap(cap)} | {ranks} | {nic} | "
            f"{racks} ({over:g}:1) | {m['median_s'] * 1e3:.1f} ms ({m['p10_s'] * 1e3:.1f}-{m['p90_s'] * 1e3:.1f}) | "
            f"{p['step_time_s'] * 1e3:.1f} ms | {100 * r['error']:+.1f} % | "
            f"{p['comm_s'] * 1e3:.1f} / {p['compute_s'] * 1e3:.1f} ms | {r.get('runs', 1)} | "
            f"{100 * r.get('outside_load', 0):.0f} % | "
            f"{_drift(r.get('speed_drift'))} |")
    return "\n".join(lines)


def _case_numbers(text: str) -> list[int]:
    try:
        numbers = [int(x) for x in text.split(",")]
    except ValueError:
        numbers = []
    if not numbers or any(not 1 <= i <= len(MATRIX) for i in numbers):
        raise argparse.ArgumentTypeError(f"{text!r} is not valid; expected comma-separated rows in 1..{len(MATRIX)}")
    return numbers


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subset", action="store_true", help="only the CI subset; print, do not write")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "VALIDATION.md"))
    ap.add_argument("--record", default=None, help="also write each kept run's raw document to this directory "
                                                   "(tests/data/validation holds the CI subset's)")
    ap.add_argument("--nice", type=int, default=-10 if os.geteuid() == 0 else 0,
                    help="scheduling priority of the runs (default -10 as root): other users' work on a shared "
                         "machine then takes less of the cores from the measurement")
    ap.add_argument("--cases", type=_case_numbers, default=None,
                    help="only these rows of the matrix, 1-based and comma-separated (e.g. 14,15); print, do not write")
    args = ap.parse_args()
    if args.nice:
        os.nice(args.nice)
    numbers = args.cases or (None if args.subset else list(range(1, len(MATRIX) + 1)))
    cases = SUBSET if numbers is None else [MATRIX[i - 1] for i in numbers]
    rows = []
    for i, case in enumerate(cases, 1):
        rows.append(run_case(case))
        print(f"[{i}/{len(cases)}] {case}: error {100 * rows[-1]['error']:+.1f} % "
              f"(outside load {100 * rows[-1]['outside_load']:.0f} %, {rows[-1]['runs']} run(s))", flush=True)
        if args.record:
            record = Path(args.record) / f"{case_name(case)}.json"
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps({"case": case, "outside_load": rows[-1]["outside_load"],
                                          "run": rows[-1]["run"]}, indent=1) + "\n")
    errors = [abs(r["error"]) for r in rows]
    med, worst = statistics.median(errors), max(errors)
    summary = (f"median |error| {100 * med:.1f} % (bar {100 * MEDIAN_BAR:.0f} %), "
               f"worst {100 * worst:.1f} % (bar {100 * WORST_BAR:.0f} %)")
    print(table(rows, numbers))
    print(summary)
    if not args.subset and not args.cases:
        import torch

        loads = [r["outside_load"] for r in rows]
        body = f"""Generated by `python validation/run_matrix.py` on {datetime.date.today().isoformat()}
({platform.machine()}, {os.cpu_count()} cores shared with other users, torch {torch.__version__}, gloo).

Each row is one `dpsim validate` run: it trains a model with real PyTorch
DistributedDataParallel (gloo, CPU) across emulated hosts: one network namespace per rank,
its NIC shaped with `tc tbf` to the rate shown (racks share an uplink shaped to their NICs'
total over the oversubscription). The measured step is the median of 20 steady-state steps
of rank 0 (after 5 warm-up steps, during which DDP rebuilds its buckets). The prediction is
`dpsim predict` with a profile made of the same run's measurements only, taken before the
DDP steps as `dpsim calibrate` takes them: an all-reduce size sweep on the emulated network
(up to the model's gradient bytes), the training step as trained (forward, cross-entropy,
backward, SGD with momentum) split per traced layer with every rank computing at once
(ranks share {os.cpu_count()} cores, so compute is measured under that sharing), the
memory-copy bandwidth (DDP's bucket copies), the interference of compute and all-reduce
in both directions, and the step right after an all-reduce of its gradients against back to
back (charged in proportion to the step's exposed communication, as `dpsim predict` charges a
calibrated profile's). The DDP steps themselves are never used.

**{summary}**

{table(rows)}

The machine is shared: a run during which other processes took more than
{100 * OUTSIDE_LOAD_LIMIT:.0f} % of it ("outside load", `validation/load.py`), whose measured step, timed again
after the DDP steps, moved by more than {100 * DRIFT_LIMIT:.0f} % ("speed drift": the machine changed speed
between the measurements and the steps), or whose p90/p10 exceeds {DISTURBED_SPREAD}, is run again, at
most twice, keeping the quietest ("runs" column). Outside load
of the kept runs: median {100 * statistics.median(loads):.0f} %, max {100 * max(loads):.0f} %.
"""
        replace_section(Path(args.out), SECTION, body)
        print(f"wrote {args.out}")
    return 0 if med <= MEDIAN_BAR and worst <= WORST_BAR else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Interrupted as exc:  # SIGTERM/SIGHUP while a testbed is up: it is already removed
        print(f"{Path(__file__).name}: stopped by signal {exc.signum}", file=sys.stderr)
        sys.exit(exc.exit_status)
