"""Defects the twenty-first fuzz round found (fuzz21).

Each case says what it did before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz_harness import check_outcome, refused, run_cli

REPO = Path(__file__).resolve().parent.parent
_LOG = REPO / "calibration" / "reference" / "nccl-tests" / "8x-a100-sxm-node-nvlink3-via-nvswitch.all_reduce_perf.log"


# --- 1. an nccl-tests log whose device list was cut --------------------------------------------------------------
@pytest.mark.parametrize("dropped, words", [
    ("Rank  7", ("line 26", "gives 8 ranks", "device list has 7 ranks")),
    ("Rank  3", ("lacks rank(s) 3",)),
])
def test_a_cut_device_list_is_refused(dropped, words, tmp_path, capsys):
    """Before: an 8-GPU all_reduce_perf log with its last ``#  Rank  7`` line lost was fitted as a 7-rank
    communicator (``world_size: 7``, every busbw recomputed 2 % low against the log's own busbw column), and one
    with rank 3's line lost likewise: the device list was counted, never checked. Now the list must number ranks
    0..N-1 and agree with the busbw/algbw ratio nccl-tests printed (within its two-decimal rounding)."""
    log = tmp_path / "cut.all_reduce_perf.log"
    log.write_text("".join(line for line in _LOG.read_text().splitlines(keepends=True) if dropped not in line))
    out = tmp_path / "p.json"
    refused(["calibrate", "--from-nccl-tests", str(log), "--out", str(out), "--quiet"], capsys,
            "--from-nccl-tests", *words)
    assert not out.exists()
    # The whole log is still taken.
    args = ["calibrate", "--from-nccl-tests", str(_LOG), "--out", str(out), "--quiet"]
    check_outcome(run_cli(args, capsys), args, "ok")
