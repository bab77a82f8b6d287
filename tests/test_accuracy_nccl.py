"""Predicted vs measured nccl-tests all-reduce on the reference systems (issue: accuracy).

The score is the issue's: for message sizes >= 1 MiB, the geometric mean of
|predicted / measured - 1| must be <= 10 % per system, using only the presets
(`dgx-a100`, `aws-p4de`, `aws-p5`) and, for p5, the one NCCL tuning constant fitted on
*another* system (OCI H100, row C059; see dpsim.collectives.nccl_tuning.FITTED_TUNING). Preset
numbers that come from rows come from rows below 1 MiB (launch overheads), so no
scored row feeds its own prediction. The symmetric log error exp(mean |ln(p/m)|) - 1 is
held too, so a few good points cannot hide many bad ones.

Points that miss by more than 10 % (printed by `python validation/accuracy_collectives.py`):
- dgx-a100 C002 (1 MiB, -37 %): the measured 101.9 us is twice NCCL's own LL/LL128
  estimate; the same table's 32 KiB point (C001) is explained by a 28 us launch
  overhead, so 1 MiB carries ~40 us nothing in NCCL's model accounts for (fewer channels
  at that size on that machine, or timing noise: busbw 18 GB/s where 8 MiB reaches 110).
- dgx-a100 C004/C005 (64/256 MiB, -14 %): busbw ramps 172 -> 194 -> 229 GB/s between 64
  MiB and 1 GiB on that node, past where any latency term matters; a bandwidth ramp the
  ring's alpha-beta model (and NCCL's) does not have.
- aws-p4de C045 (8 MiB, -11 %): where NCCL switches from ring to tree on 2 servers the
  measured time sits above both models' (EFA's mid-size cost; the 64 KiB row the launch
  overhead comes from does not capture it).
- aws-p5 C053-C055 (8-256 MiB, -17 to -22 %): NVLS tree on EFA streams slowly in 32-128
  KiB chunks; NCCL's chunk rule switches to 128 KiB at 64 MiB, the measurements keep
  ramping until ~1 GiB.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from dpsim.collectives.nccl_tuning import FITTED_TUNING
from dpsim.topology.load import load_preset

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "validation"))
import accuracy_collectives as accuracy  # noqa: E402

SHARED = REPO.parent / "shared" / "reference" / "collectives.csv"


@pytest.mark.parametrize("system", list(accuracy.SYSTEMS))
def test_geomean_error_at_least_1mib_is_at_most_10_percent(system):
    points = accuracy.compare(system)
    scored = [p for p in points if p.scored]
    assert len(scored) >= 6
    geo = accuracy.geomean_abs_error(points)
    log = accuracy.log_error(points)
    assert geo <= 0.10, f"{system}: geomean |error| {geo:.3f}\n{accuracy.table(points)}"
    assert log <= 0.16, f"{system}: log error {log:.3f}\n{accuracy.table(points)}"
    # No scored point is off by more than a factor 1.6 either way.
    assert all(0.6 < p.predicted_s / p.measured_s < 1.6 for p in scored), accuracy.table(points)


def test_two_server_busbw_exceeds_the_nic_bound_of_a_ring_like_the_measurements():
    # C049: p4de reaches 78 GB/s busbw on 4x100 Gb/s EFA (a ring could not pass 50 x 0.97):
    # NCCL's tree sends S per server instead of the ring's 2(N-1)/N S, and so does dpsim.
    points = {p.row: p for p in accuracy.compare("aws-p4de")}
    big = points["C049"]
    assert big.algorithm == "tree"
    busbw = big.size_bytes / big.predicted_s * 2 * 15 / 16
    assert busbw > 50e9 * 0.97 * 1.4


def test_the_fitted_constant_comes_from_oci_and_reproduces():
    assert accuracy.fit_nvls_tree_rtt_scale() == pytest.approx(FITTED_TUNING.nvls_tree_rtt_scale, abs=0.01)


@pytest.mark.parametrize("system", list(accuracy.SYSTEMS))
def test_row_derived_preset_numbers_use_rows_below_1mib(system):
    row_id, overhead_us = accuracy.derive_launch_overhead_us(system)
    row = next(r for r in accuracy.load_rows() if r["id"] == row_id)
    assert int(row["message_bytes_or_batch"]) < accuracy.SCORED_FROM_BYTES
    assert load_preset(system).launch_overhead_s * 1e6 == pytest.approx(overhead_us, abs=1.0)
    cited = {m for s in load_preset(system).sources for m in re.findall(r"\bC\d{3}\b", s)}
    scored = {r["id"] for r in accuracy.rows_of(system) if int(r["message_bytes_or_batch"]) >= accuracy.SCORED_FROM_BYTES}
    assert cited and not (cited & scored), "a preset number comes from a scored row"


def test_reference_rows_are_a_verbatim_copy():
    rows = accuracy.load_rows()
    assert {r["id"] for r in rows} >= {"C001", "C007", "C043", "C049", "C050", "C058", "C059"}
    if SHARED.exists():
        assert (REPO / "tests" / "data" / "nccl_tests_reference.csv").read_text() == SHARED.read_text()


def test_accuracy_script_prints_the_table(capsys):
    assert accuracy.main([]) == 0
    out = capsys.readouterr()[0]
    for system in accuracy.SYSTEMS:
        assert f"== {system}" in out
    assert out.count("geomean |error|") == 3 and "C058" in out
