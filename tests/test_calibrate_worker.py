"""A calibration rank's process: a Python error exits with status 1 and its traceback, never through
interpreter shutdown where gloo's threads could abort it (-6, read as the machine's failure)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dpsim.calibrate import worker


class _Exit(Exception):
    pass


def test_a_python_error_exits_1_through_os_exit_after_its_traceback(monkeypatch, capsys):
    def boom(argv):
        raise ValueError("plan field x is broken")

    def exit_(code):
        raise _Exit(code)
    monkeypatch.setattr(worker, "worker_main", boom)
    monkeypatch.setattr(os, "_exit", exit_)
    with pytest.raises(_Exit) as exc:
        worker.run_as_process(["plan.json", "result.json"])
    assert exc.value.args == (1,)
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: plan field x is broken" in err


def test_a_clean_rank_exits_with_worker_mains_status(monkeypatch):
    monkeypatch.setattr(worker, "worker_main", lambda argv: 0)
    monkeypatch.setattr(os, "_exit", lambda code: pytest.fail("os._exit on a clean exit"))
    with pytest.raises(SystemExit) as exc:
        worker.run_as_process([])
    assert exc.value.code == 0


def test_a_rank_whose_plan_fails_after_gloo_started_exits_1_with_the_error(tmp_path):
    """A real rank: the process group is up (gloo's threads run) when the plan's missing field raises."""
    pytest.importorskip("torch.distributed")
    from dpsim.calibrate.runner import free_port

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"backend": "gloo", "timeout_s": 30}))  # no sizes, ops, ...: a KeyError
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "dpsim.calibrate.worker", str(plan), str(tmp_path / "r.json")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert "KeyError" in done.stderr
    assert not (tmp_path / "r.json").exists()
