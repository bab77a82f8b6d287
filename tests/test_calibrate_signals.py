"""Ctrl-C, SIGTERM and SIGKILL during ``dpsim calibrate`` and ``dpsim validate``: honest exit status,
and nothing leaked (rank processes, namespaces, temporary directories) or half-written (profiles).

SIGINT exits 130 and SIGTERM 143 with one line, after stopping every rank and removing the
working directory (and, for validate, the testbed). SIGKILL gives no chance to clean up:
the ranks die with their parent (``PR_SET_PDEATHSIG``), the working directory is removed
by the next calibration (:func:`dpsim.calibrate.runner.reap_stale_workdirs`) and the
testbed by ``testbed down --all`` or the next validate; the profile at ``--out`` is never
half-written (an existing one is kept whole).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed")

from dpsim.calibrate.runner import WORKDIR_PREFIX, reap_stale_workdirs  # noqa: E402
from dpsim.validate.testbed import probe_testbed  # noqa: E402

TESTBED, WHY = probe_testbed()

pytestmark = pytest.mark.slow


def _processes_mentioning(needle: str) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmd and int(d.name) != os.getpid():
            found.append(int(d.name))
    return found


def _wait_for(predicate, timeout_s: float = 60.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def _workdirs(pid: int) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}{pid}-*"))


def _start_calibrate(out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dpsim", "calibrate", "--backend", "gloo", "--nproc", "2", "-b", "4K", "-e", "1M",
         "--ops", "all_reduce", "--no-compute", "--iters", "200", "--max-iters", "200", "--out", str(out), "--force",
         "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))


@pytest.mark.parametrize("signame, status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_calibrate_interrupted_stops_its_ranks_and_keeps_the_old_profile(tmp_path, signame, status):
    out = tmp_path / "node.json"
    out.write_text('{"previous": "profile"}')
    proc = _start_calibrate(out)
    workdir = _wait_for(lambda: _workdirs(proc.pid))[0]
    _wait_for(lambda: len(_processes_mentioning(str(workdir))) >= 2)  # both ranks are up
    time.sleep(1.0)
    proc.send_signal(getattr(signal, signame))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    assert err.strip().count("\n") == 0 and "did not finish" in err
    assert not _processes_mentioning(str(workdir)), "no rank outlives the run"
    assert not workdir.exists()
    assert out.read_text() == '{"previous": "profile"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node.json"]  # no temporary file either


def test_calibrate_killed_takes_its_ranks_along(tmp_path):
    out = tmp_path / "node.json"
    proc = _start_calibrate(out)
    workdir = _wait_for(lambda: _workdirs(proc.pid))[0]
    _wait_for(lambda: len(_processes_mentioning(str(workdir))) >= 2)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    _wait_for(lambda: not _processes_mentioning(str(workdir)), timeout_s=10)  # PR_SET_PDEATHSIG
    assert not out.exists()
    assert workdir in reap_stale_workdirs()  # what the next calibration does first
    assert not workdir.exists()


def _start_validate(state: Path) -> subprocess.Popen:
    """A validate run whose testbed state goes to ``state`` (so only its own testbed is seen here)."""
    return subprocess.Popen([sys.executable, "-m", "dpsim", "validate", "--model", "mlp", "--micro-batch", "8",
                             "--emulate-hosts", "2", "--nic", "1gbit", "--steps", "200"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, DPSIM_TESTBED_STATE=str(state)))


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _tags(state: Path) -> set[str]:
    return {p.stem for p in state.glob("dpsim*.json")} if state.exists() else set()


def _namespaces_of(tags: set[str]) -> set[str]:
    return {ns for ns in _netns() if any(ns.startswith(t) for t in tags)}


@pytest.mark.skipif(not TESTBED, reason=WHY)
@pytest.mark.parametrize("signame, status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_validate_interrupted_removes_ranks_testbed_and_files(tmp_path, signame, status):
    state = tmp_path / "state"
    proc = _start_validate(state)
    needle = f"dpsim-validate-{proc.pid}-"
    _wait_for(lambda: len(_processes_mentioning(needle)) >= 2)  # ranks started inside the testbed
    tags = _tags(state)
    assert _namespaces_of(tags)
    time.sleep(1.0)
    proc.send_signal(getattr(signal, signame))
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == status, err
    assert "did not finish" in err
    assert not _processes_mentioning(needle)
    assert not _namespaces_of(tags) and not _tags(state)
    assert not list(Path(tempfile.gettempdir()).glob(f"{needle}*"))


@pytest.mark.skipif(not TESTBED, reason=WHY)
def test_validate_killed_leaves_only_what_down_all_removes(tmp_path):
    state = tmp_path / "state"
    proc = _start_validate(state)
    needle = f"dpsim-validate-{proc.pid}-"
    _wait_for(lambda: len(_processes_mentioning(needle)) >= 2)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    _wait_for(lambda: not _processes_mentioning(needle), timeout_s=10)  # the ranks died with it
    leftover = _tags(state)
    assert leftover and _namespaces_of(leftover), "the killed run's testbed is recorded"
    out = subprocess.run([sys.executable, "-m", "dpsim", "testbed", "down", "--all"], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ, DPSIM_TESTBED_STATE=str(state)))
    assert out.returncode == 0 and all(f"{t} down" in out.stdout for t in leftover), out.stdout
    assert not _namespaces_of(leftover)
    from dpsim.validate.runner import reap_stale_tmpdirs

    left = set(Path(tempfile.gettempdir()).glob(f"{needle}*"))  # a SIGKILLed process cannot remove its own
    assert left <= set(reap_stale_tmpdirs())  # what the next validate does first
    assert not list(Path(tempfile.gettempdir()).glob(f"{needle}*"))
