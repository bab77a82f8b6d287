"""Defects the twenty-third fuzz round took up (fuzz23, round 22's leftovers): a sweep grid at the point limit whose
points each simulate thousands of micro-batches, taken and run for days; ``dpsim.plan`` refusing the single number
``dpsim.sweep`` takes; a sweep file's quoted price refused though the flag takes the same text; a mix file's
``failures.repair: 0`` taken where the other two repair times refuse 0; ``--scaling-gpus x`` leaving out the
range; ``dpsim collective`` printing one size in several rows under a docstring that said "rounded down".

Each case says what it did before.
"""

from __future__ import annotations

import json

import pytest

import dpsim
from dpsim.errors import ConfigError
from dpsim.mix import mix_from_dict
from dpsim.plan.grid import SweepSpec
from dpsim.plan.sweep import sweep_records
from tests.fuzz_harness import refused, run_cli


# --- 1. a grid's work, not only its point count ---------------------------------------------------------------------
def test_a_sweep_of_heavy_points_is_refused_before_any_runs():
    """Before: only the point count was bounded (100,000), so 1,000 points of 3,000 micro-batches each (gpt2-xl,
    ~2-6 s a point: about an hour) started running; 100,000 of them would take days. Now the grid's simulation
    work is counted before the first point and refused in one line naming the axes, the points and the limit.
    Since predict extrapolates past 512 micro-batches (dpsim/predict/extrapolate.py) a point of 3,000 costs its
    four sampled counts (~0.13 s), so the grid refused here is of 500 micro-batches x 3 steps, every one simulated."""
    grid = {"gpus": [8, 16, 32, 64], "micro_batch": list(range(1, 251)), "grad_accum": 500, "steps": 3}
    spec = SweepSpec.from_grid(grid)

    def ran(n: int) -> None:
        raise AssertionError("a point ran before the grid's work was checked")

    with pytest.raises(ConfigError) as exc:
        sweep_records(spec, on_result=ran)
    line = str(exc.value)
    assert "\n" not in line
    for word in ("4 gpus x 250 micro_batch", "1,000 points", "pipeline slots", "expected at most 10,000,000"):
        assert word in line, line
    # The cheapest points stay allowed up to the point limit's size of work (100,000 default points ~8.5e6 slots).
    from dpsim.plan.sweep import sweep_work
    small = SweepSpec.from_grid({"gpus": [8, 16]})
    assert sweep_work(small, small.configs()) < 200
    extrapolated = SweepSpec.from_grid({**grid, "grad_accum": 3000, "steps": 1})  # 2.5e7 slots as counted before: 1.4e6 now
    assert sweep_work(extrapolated, extrapolated.configs()) < 2e6


# --- 2. a single number as a one-value search axis ------------------------------------------------------------------
def test_plan_takes_a_single_number_as_sweep_does():
    """Before: ``dpsim.plan(base, gpus=8)`` was refused "--gpus: 8 is not valid; expected a list" (and ``tps=2``,
    ``strategies="ddp"`` likewise) where ``dpsim.sweep(gpus=8)`` ran: both now take a single value as one."""
    base = dpsim.PredictConfig(model="gpt2")
    one = dpsim.plan(base, gpus=8, global_batch=64, verify=0, strategies="ddp", micro_batches=8)
    listed = dpsim.plan(base, gpus=[8], global_batch=64, verify=0, strategies=["ddp"], micro_batches=[8])
    assert one.to_dict() == listed.to_dict()
    with pytest.raises(ConfigError, match=r"^--gpus: 8\.0 is not valid; expected an integer or a list"):
        dpsim.plan(base, gpus=8.0, global_batch=64, verify=0)


# --- 3. a sweep file's quoted price -----------------------------------------------------------------------------------
def test_a_sweep_files_quoted_price_is_read_as_the_flag_reads_it(tmp_path, capsys):
    """Before: ``gpu_hour_usd: "2.5"`` in a sweep file was refused "'2.5' is not a price" though
    ``--gpu-hour-usd 2.5`` (text) was taken; per-GPU prices ({h100: "2.5"}) likewise. Text that is no number is
    still refused the same way in both."""
    quoted = tmp_path / "quoted.yaml"
    quoted.write_text('grid:\n  gpus: [8]\ngpu_hour_usd: "2.5"\n')
    plain = tmp_path / "plain.yaml"
    plain.write_text("grid:\n  gpus: [8]\ngpu_hour_usd: 2.5\n")
    rows = [json.loads(run_cli(["sweep", "--config", str(p), "--json"], capsys).out) for p in (quoted, plain)]
    assert rows[0] == rows[1]
    assert SweepSpec.from_grid({"gpus": [8]}, gpu_hour_usd={"h100": "2.5"}).gpu_hour_usd == {"h100": 2.5}
    bad = tmp_path / "bad.yaml"
    bad.write_text('grid:\n  gpus: [8]\ngpu_hour_usd: "x"\n')
    refused(["sweep", "--config", str(bad)], capsys, "gpu_hour_usd: 'x' is not a price")
    refused(["sweep", "--gpus", "8", "--gpu-hour-usd", "x"], capsys, "--gpu-hour-usd: 'x' is not a price")


# --- 4. one rule for a mix's three repair times -----------------------------------------------------------------------
@pytest.mark.parametrize("failures, field", [
    ({"repair": 0}, "failures.repair"),
    ({"repair": "0s"}, "failures.repair"),
    ({"repair": "1h", "uplink_repair": 0}, "failures.uplink_repair"),
    ({"repair": "1h", "events": [{"at": "1h", "node": 0, "repair": 0}]}, "failures.events[0].repair"),
])
def test_every_repair_time_of_a_mix_must_be_above_zero(failures, field):
    """Before: ``failures.repair: 0`` was taken while ``uplink_repair: 0`` and an event's ``repair: 0`` were
    refused. One rule now: a repair time > 0 (at 0 a switch cable's failure changes nothing, and a server back at
    once is what ``spares:`` model)."""
    with pytest.raises(ConfigError) as exc:
        mix_from_dict({"cluster": {"link": "infiniband", "gpus": 64}, "horizon": "4h",
                       "jobs": [{"name": "a", "model": "gpt2", "gpus": 16, "duration": "3h"}], "failures": failures})
    line = str(exc.value)
    assert line.startswith(f"{field}: ") and "expected a time > 0" in line and "\n" not in line


# --- 5. --scaling-gpus: one message with the range -----------------------------------------------------------------
@pytest.mark.parametrize("value", ["x", "0", "99999999"])
def test_scaling_gpus_refusals_give_the_range(value, capsys):
    """Before: ``--scaling-gpus x`` said "expected integers >= 1" and left out the upper bound that ``0`` gave."""
    refused(["report", "--scaling-gpus", value], capsys, "--scaling-gpus:", "is not a GPU count",
            "expected integers >= 1 and <= 1,048,576")


# --- 6. collective: each size once in the table ---------------------------------------------------------------------
def test_collective_table_prints_each_size_once(capsys):
    """Before: ``collective --op all_gather -b 8 -e 256 --gpus 8`` printed three 32 B rows (8 and 16 B round up to
    one float per rank) under a docstring saying sizes are "rounded down". The table now prints each size once and
    says how many rows it left out; the JSON keeps one result per requested size (the goldens pin them)."""
    args = ["collective", "--op", "all_gather", "-b", "8", "-e", "256", "--gpus", "8"]
    out = run_cli(args, capsys).out
    sizes = [int(line.split()[0]) for line in out.splitlines() if line.strip() and not line.startswith("#")]
    assert sizes == [32, 64, 128, 256]
    assert "# 2 repeated row(s) left out" in out
    data = json.loads(run_cli(args + ["--json"], capsys).out)
    assert [r["size_bytes"] for r in data["rows"]] == [32, 32, 32, 64, 128, 256]
    doc = dpsim.predict_collective.__doc__
    assert "rounded *up*" in doc


# --- fuzzing after the six: a mix job's start named as the file writes it ------------------------------------------
def test_a_job_starting_after_the_horizon_is_named_as_written():
    """Before: ``start: 2h`` with ``horizon: 1h`` was refused "jobs[0].start: 7200.0 is not valid", a number the file
    does not hold, where ``failures.events[k].at`` names its '5h'."""
    with pytest.raises(ConfigError) as exc:
        mix_from_dict({"cluster": {"link": "infiniband", "gpus": 64}, "horizon": "1h",
                       "jobs": [{"name": "a", "model": "gpt2", "gpus": 16, "duration": "1h", "start": "2h"}]})
    assert str(exc.value).startswith("jobs[0].start: '2h' is not valid; it must start before the horizon")
