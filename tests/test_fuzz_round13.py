"""Defects found by the thirteenth fuzz round (fuzz13): ``--rack-placement contiguous`` across layouts, ``dpsim
plan``'s determinism, metamorphic checks of the step (a larger batch, more GPUs, a healthier network) and the
Python API's configs and results.

Each case says what it did before.
"""

from __future__ import annotations

import pytest

from tests.fuzz_harness import check_outcome, run_cli

PLAN_SMALL = ["plan", "--gpus", "64", "--link", "dgx-a100", "--model", "llama-2-7b", "--global-batch", "256",
              "--tp", "2,4,8", "--pp", "1,2", "--micro-batches", "1,2", "--recompute", "off,selective",
              "--tokens", "10B", "--top", "5"]
"""The golden ``small`` search without ``--verify 1``: several layouts simulated, each in a blink."""


# --- (b) dpsim plan prints the same bytes every time ------------------------------------------------------------------
@pytest.mark.parametrize("json_out", [False, True], ids=["table", "json"])
def test_plan_prints_the_same_bytes_however_slow_the_machine(json_out, capsys, monkeypatch):
    """Before: which layouts ``plan`` simulated was cut by wall time (``--verify-seconds``, 2 s by default), so
    the ranking and the chosen layout depended on the machine's load: DeepSeek-V3 on 16,384 GPUs simulated 17
    layouts in one run and 15 in the next, and their --json differed; and the table's title and --json printed
    the search's own run time (``searched in 1.2 s``, ``wall_s``, ``verification.seconds``). Here the clock jumps
    an hour at every reading (a machine that slow stopped after the first layout); the output is unchanged."""
    import dpsim.plan.planner as planner

    args = PLAN_SMALL + (["--json"] if json_out else [])
    first = run_cli(args, capsys)
    check_outcome(first, args, "ok")
    clock = iter(range(0, 10**9, 3600))
    monkeypatch.setattr(planner.time, "perf_counter", lambda: float(next(clock)))
    slow = run_cli(args, capsys)
    assert slow.status == 0 and slow.out == first.out
    if json_out:
        import json

        doc = json.loads(first.out)
        assert doc["verification"]["simulated"] > 1 and doc["verification"]["stopped_by"] == "bound"
        assert "wall_s" not in doc and "seconds" not in doc["verification"]


# --- (d) configs with one meaning compare equal -----------------------------------------------------------------------
def test_an_etp_equal_to_its_default_is_the_config_that_leaves_it_out(capsys):
    """Before: ``PredictConfig(tp=2) != PredictConfig(tp=2, etp=2)`` (the same job: --etp defaults to --tp with
    --ep 1), and on a dense model ``--tp 2 --etp 2`` was refused ("splits the experts") while ``--tp 2 --etp 1``
    was taken, though neither splits anything there. Now an --etp equal to its default is kept as left out, and a
    dense model refuses every other."""
    import dpsim

    assert dpsim.PredictConfig(tp=2) == dpsim.PredictConfig(tp=2, etp=2)
    assert hash(dpsim.PredictConfig(tp=2)) == hash(dpsim.PredictConfig(tp=2, etp=2))
    assert dpsim.PredictConfig(model="mixtral-8x7b", ep=8, etp=1) == dpsim.PredictConfig(model="mixtral-8x7b", ep=8)
    assert dpsim.PredictConfig(tp=2, etp=1) != dpsim.PredictConfig(tp=2)
    base = ["predict", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--steps", "1", "--json"]
    plain = run_cli(base + ["--tp", "2"], capsys)
    same = run_cli(base + ["--tp", "2", "--etp", "2"], capsys)
    check_outcome(same, base, "ok")
    assert same.out == plain.out
    for extra in (["--tp", "2", "--etp", "1"], ["--etp", "2"]):
        check_outcome(run_cli(base + extra, capsys), base + extra, "error", ("--etp:", "gpt2 is dense"))
