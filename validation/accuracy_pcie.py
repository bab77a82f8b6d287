"""PCIe-only servers and clusters (issue 26) against published nccl-tests, never fitted on.

``python validation/accuracy_pcie.py`` predicts every row of
``tests/data/pcie_collectives_reference.csv`` with the default tuning (``FITTED_TUNING``, fitted
on the NVLink, InfiniBand, EFA, RoCE and TCPXO systems of ``collectives_reference.csv``, none of
them PCIe-only: every PCIe system is left out of it) and prints the errors and the geomean
|pred/meas - 1| of the rows of 1 MiB and more, per system.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy_collectives import geomean_abs_error, load_rows, predict, table  # noqa: E402

from dpsim.collectives.nccl_tuning import FITTED_TUNING  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "pcie_collectives_reference.csv"


def main() -> int:
    points = [predict(r, FITTED_TUNING) for r in load_rows(DATA)]
    for system in dict.fromkeys(p.row.system for p in points):
        mine = [p for p in points if p.row.system == system]
        print(f"== {system} ({mine[0].row.system_class})")
        print(table(mine))
        print(f"   sizes >= 1 MiB: geomean |error| {100 * geomean_abs_error(mine):.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
