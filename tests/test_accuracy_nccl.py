"""Predicted vs measured nccl-tests all-reduce on published systems, leave one system out.

``validation/accuracy_collectives.py`` predicts every row of
``tests/data/collectives_reference.csv`` from its system's datasheet description
(``validation/systems/<system>.yaml``) and the model's fitted constants refitted without the
system's hardware platform; ``--write`` stores the fits and scores in
``validation/collectives_loso.json`` and VALIDATION.md's section. These tests hold what is
committed: the rows are cited, the stored fits are what the fitting gives, the stored scores
are what the stored fits predict, and VALIDATION.md shows them. Refitting every system takes
minutes, so one system's leave-one-out fit is redone here; the rest is checked from the
stored fits (deterministic: no timing, no randomness).

The issue's target (>= 1 MiB, geomean |pred/meas - 1| <= 8 % per system class) is *not*
met by every class; the scores are held as they are (a change that worsens one fails) and
VALIDATION.md says which classes miss and why.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

from dpsim.collectives.nccl_tuning import FITTED_TUNING

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "validation"))
import accuracy_collectives as accuracy

SHARED = REPO.parent / "shared" / "reference" / "collectives.csv"
TOLERANCE = 1e-3
"""How far a recomputed score may sit from the stored one (the JSON keeps 4 decimals)."""


def test_every_row_is_cited_and_its_system_described():
    with accuracy.DATA.open(newline="") as fh:
        raw = list(csv.DictReader(fh))
    ids = [r["id"] for r in raw]
    assert len(ids) == len(set(ids)) and len(ids) >= 150
    for r in raw:
        assert r["source"].strip() and r["tool"].strip(), r["id"]
        assert r["system_class"] in accuracy.CLASSES, r["id"]
        assert r["op"] == "all_reduce", r["id"]
        assert (accuracy.SYSTEMS_DIR / f"{r['system']}.yaml").exists(), r["system"]
    # A system's description cites its numbers.
    for system in accuracy.systems():
        assert accuracy.system_spec(system).sources, system


@pytest.mark.slow
def test_the_default_tuning_is_the_fit_on_every_system():
    assert accuracy.fit(accuracy.systems()) == FITTED_TUNING


@pytest.mark.slow
def test_a_stored_fit_leaves_its_platform_out():
    # aws-p5-x2: its per-call overhead (EFA) and ramp come from the other systems only.
    stored = accuracy.load_results()["fits"]
    system = "aws-p5-x2"
    train = [s for s in accuracy.systems() if accuracy.platform(s) != accuracy.platform(system)]
    assert system not in train
    assert accuracy.tuning_dict(accuracy.fit(train)) == stored[system]
    # Systems of one platform are left out together and so share one fit.
    assert stored["p6-b200-node"] == stored["p6-b200-x4"] == stored["p6-b200-x2"]


def test_stored_scores_are_what_the_stored_fits_predict():
    stored = accuracy.load_results()
    tunings = {s: accuracy.tuning_from(d) for s, d in stored["fits"].items()}
    assert set(tunings) == set(accuracy.systems())
    got = accuracy.summary(accuracy.evaluate(tunings))
    for level in ("systems", "classes"):
        assert set(got[level]) == set(stored[level])
        for name, v in got[level].items():
            for key in ("geomean_abs_error", "log_error"):
                assert v[key] == pytest.approx(stored[level][name][key], abs=TOLERANCE), (level, name, key)
            assert v["scored"] == stored[level][name]["scored"]


def test_validation_md_shows_the_stored_scores():
    text = (REPO / "VALIDATION.md").read_text()
    assert accuracy.HEADING in text
    assert accuracy.markdown(accuracy.load_results()) in text, \
        "VALIDATION.md's collectives section is stale: rerun python validation/accuracy_collectives.py --write"


@pytest.mark.parametrize("system_class", ["nvswitch", "ib", "efa", "roce", "tcpxo"])
def test_classes_with_many_rows_stay_within_their_committed_error(system_class):
    # The classes with six rows or more: under 16 % geomean; all five meet the 8 % target
    # (Google's TCPXO settings, Simple only and no NVLS, brought tcpxo there; NCCL's own
    # NVLS-tree round trip, no longer fitted, brought efa back from 8.1 %; NVLS's chunk steps
    # brought nvswitch from 10.3 %; ib, first scored on four systems, meets it with NCCL's
    # per-channel tree bound and the verbs transport's own ramp).
    v = accuracy.load_results()["classes"][system_class]
    assert v["scored"] >= 6 and v["geomean_abs_error"] <= 0.16
    if system_class in ("roce", "tcpxo", "efa", "nvswitch", "ib"):
        assert v["geomean_abs_error"] <= accuracy.TARGET


def test_accuracy_script_prints_every_system(capsys):
    assert accuracy.main(["--committed"]) == 0
    out = capsys.readouterr()[0]
    for system in accuracy.systems():
        assert f"== {system} " in out
    assert "| class | systems |" in out


def test_nccl_tests_reference_rows_are_a_verbatim_copy():
    # The older reference set (tests/data/README.md) the presets cite for their launch overheads.
    copy = REPO / "tests" / "data" / "nccl_tests_reference.csv"
    assert {"C001", "C043", "C050", "C059"} <= {r["id"] for r in csv.DictReader(copy.open(newline=""))}
    if SHARED.exists():
        assert copy.read_text() == SHARED.read_text()


def test_four_ndr_servers_ll128_rows_land_within_their_per_channel_bound():
    # NVIDIA/nccl-tests#309 (four XE9680 VMs, 8x 400 Gb/s NDR each, NCCL 2.26.2), rows I053-I057
    # (8-128 MiB, ring/LL128), each predicted with the fit that leaves the platform out: NCCL's
    # perChMaxRingLL128Bw (8 NIC channels x 36.7 GB/s) brings them within 5 %; without it the
    # 32-128 MiB rows came out 9-11 % fast.
    stored = accuracy.load_results()["fits"]
    tuning = accuracy.tuning_from(stored["hgx-h100-ndr-x4-vm"])
    rows = {r.id: r for r in accuracy.load_rows()}
    for row_id in ("I053", "I054", "I055", "I056", "I057"):
        point = accuracy.predict(rows[row_id], tuning)
        assert (point.algorithm, point.protocol) == ("ring", "LL128"), row_id
        assert abs(point.error) <= 0.05, (row_id, point.error)
