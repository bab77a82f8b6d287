"""Predicted vs measured nccl-tests all-reduce on the reference systems.

``python validation/accuracy_collectives.py`` prints the full comparison table;
``--fit`` redoes the one fit (see :data:`~dpsim.algorithms.nccl.FITTED_TUNING`) and the
derivations of the presets' numbers that come from rows. The rows are
``tests/data/nccl_tests_reference.csv``, a verbatim copy of
``../shared/reference/collectives.csv`` (each row cites its source):

============  ==========================================  =====================================
system        rows (sizes >= 1 MiB are scored)            model
============  ==========================================  =====================================
dgx-a100      C001-C007 (8x A100, one NVSwitch server)    preset ``dgx-a100`` only
aws-p4de      C043-C049 (2x p4de, 4x100G EFA v1)          preset ``aws-p4de`` only
aws-p5        C050-C058 (2x p5, 32x100G EFA v2)           preset ``aws-p5`` + the NVLS-tree
                                                          tuning fitted on OCI (C059)
============  ==========================================  =====================================

Preset numbers derived from rows use only rows *below* 1 MiB (launch overhead: the
smallest message) or another system (OCI C059), so no scored row feeds its own
prediction. The score is the geometric mean of |predicted / measured - 1| over the
scored rows (the issue's metric); the symmetric log error exp(mean |ln(pred/meas)|) - 1
and the mean absolute error are printed too.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from dpsim.collectives.nccl import NcclCollectives
from dpsim.collectives.nccl_tuning import FITTED_TUNING, NcclTuning
from dpsim.topology.cluster import Topology
from dpsim.topology.load import load_preset
from dpsim.units import MiB

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "nccl_tests_reference.csv"

SYSTEMS = {
    "dgx-a100": ("8x A100 SXM node", 8),
    "aws-p4de": ("AWS p4de.24xlarge x2", 16),
    "aws-p5": ("AWS p5.48xlarge x2", 16),
}
"""Preset -> (prefix of the rows' ``system`` column, GPUs)."""

OCI_ROW = "C059"
SCORED_FROM_BYTES = 1 * MiB


@dataclass(frozen=True, kw_only=True)
class Point:
    """One row against its prediction."""

    row: str
    size_bytes: int
    measured_s: float
    predicted_s: float
    algorithm: str
    protocol: str

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted_s / self.measured_s - 1

    @property
    def scored(self) -> bool:
        return self.size_bytes >= SCORED_FROM_BYTES


def load_rows(path: Path = DATA) -> list[dict]:
    """The reference rows (all-reduce times in us)."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: reference rows missing (copy of ../shared/reference/collectives.csv)")
    with path.open(newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["metric"] == "time_us"]


def rows_of(system: str, rows: list[dict] | None = None) -> list[dict]:
    """Rows of one reference system (by preset name)."""
    prefix = SYSTEMS[system][0]
    return [r for r in (rows or load_rows()) if r["system"].startswith(prefix)]


def model(system: str, tuning: NcclTuning | None = None, spec=None) -> NcclCollectives:
    """The collective model of a reference system (its preset, or ``spec``)."""
    spec = spec or load_preset(system)
    return NcclCollectives(Topology.from_spec(spec, SYSTEMS[system][1]), tuning=tuning)


def compare(system: str, tuning: NcclTuning | None = None, spec=None) -> list[Point]:
    """Every row of ``system`` against the model's prediction."""
    m = model(system, tuning, spec)
    out = []
    for r in rows_of(system):
        size = int(r["message_bytes_or_batch"])
        res = m.time("all_reduce", size)
        out.append(Point(row=r["id"], size_bytes=size, measured_s=float(r["value"]) * 1e-6,
                         predicted_s=res.time_s, algorithm=res.algorithm, protocol=res.protocol))
    return out


def geomean_abs_error(points: list[Point]) -> float:
    """Geometric mean of |pred/meas - 1| over the scored points (the issue's metric)."""
    errs = [max(abs(p.error), 1e-12) for p in points if p.scored]
    return math.exp(sum(math.log(e) for e in errs) / len(errs))


def log_error(points: list[Point]) -> float:
    """exp(mean |ln(pred/meas)|) - 1 over the scored points (a typical factor off)."""
    logs = [abs(math.log(p.predicted_s / p.measured_s)) for p in points if p.scored]
    return math.exp(sum(logs) / len(logs)) - 1


def mean_abs_error(points: list[Point]) -> float:
    """Mean |pred/meas - 1| over the scored points."""
    errs = [abs(p.error) for p in points if p.scored]
    return sum(errs) / len(errs)


# ----------------------------------------------------------------------------- derivations

def oci_spec():
    """OCI BM.GPU.H100.8: the p5 server (8x H100 NVSwitch) with 16x 200 Gb/s RoCE NICs and
    no launch overhead (no small-message row to take it from)."""
    p5 = load_preset("aws-p5")
    fabric = dataclasses.replace(p5.fabric, nics_per_node=16, nic_bandwidth_bytes_per_s=200e9 / 8)
    return dataclasses.replace(p5, name="oci-h100", fabric=fabric, launch_overhead_s=0.0)


def fit_nvls_tree_rtt_scale() -> float:
    """The NVLS-tree slot round trip scale that makes OCI's 1 GiB all-reduce (C059) exact."""
    row = next(r for r in load_rows() if r["id"] == OCI_ROW)
    size, target = int(row["message_bytes_or_batch"]), float(row["value"]) * 1e-6
    topo = Topology.from_spec(oci_spec(), int(row["gpus"]))

    def predicted(scale: float) -> float:
        return NcclCollectives(topo, tuning=NcclTuning(nvls_tree_rtt_scale=scale)).time("all_reduce", size).time_s

    lo, hi = 0.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if predicted(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def derive_launch_overhead_us(system: str) -> tuple[str, float]:
    """Launch overhead that makes the system's smallest-message row exact (sizes < 1 MiB)."""
    rows = rows_of(system)
    row = min(rows, key=lambda r: int(r["message_bytes_or_batch"]))
    spec = dataclasses.replace(load_preset(system), launch_overhead_s=0.0)
    t = model(system, spec=spec).time("all_reduce", int(row["message_bytes_or_batch"])).time_s
    return row["id"], float(row["value"]) - t * 1e6


# ----------------------------------------------------------------------------- report

def table(points: list[Point]) -> str:
    lines = [f"{'row':<5} {'size':>12} {'measured us':>12} {'predicted us':>13} {'error':>8}  choice"]
    for p in points:
        mark = "" if p.scored else "  (< 1 MiB, not scored)"
        lines.append(f"{p.row:<5} {p.size_bytes:>12d} {p.measured_s * 1e6:>12.1f} {p.predicted_s * 1e6:>13.1f} "
                     f"{100 * p.error:>+7.1f}%  {p.algorithm}/{p.protocol}{mark}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fit", action="store_true", help="redo the fit and the row-derived preset numbers")
    args = parser.parse_args(argv)
    if args.fit:
        scale = fit_nvls_tree_rtt_scale()
        print(f"nvls_tree_rtt_scale fitted on {OCI_ROW} (OCI H100, 1 GiB): {scale:.3f} "
              f"(FITTED_TUNING has {FITTED_TUNING.nvls_tree_rtt_scale})")
        for system in SYSTEMS:
            row, us = derive_launch_overhead_us(system)
            print(f"{system}: launch_overhead_us from {row}: {us:.1f} "
                  f"(preset has {load_preset(system).launch_overhead_s * 1e6:.1f})")
        print()
    for system in SYSTEMS:
        points = compare(system)
        print(f"== {system} ({SYSTEMS[system][0]}, {SYSTEMS[system][1]} GPUs)")
        print(table(points))
        print(f"   sizes >= 1 MiB: geomean |error| {100 * geomean_abs_error(points):.1f} %, "
              f"log error {100 * log_error(points):.1f} %, mean |error| {100 * mean_abs_error(points):.1f} %")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
