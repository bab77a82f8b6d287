"""dpsim.processes: a run's leftovers are removed only once the process named in them is gone."""

from __future__ import annotations

import os
import subprocess
import sys

from dpsim.processes import alive, reap_dead_owner_dirs


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)  # reaped by run(): nothing has that id now (reuse within the test is negligible)


def test_alive():
    assert alive(os.getpid()) and alive(1)  # pid 1 is root's init: counted even when signalling is refused
    assert not alive(0) and not alive(-5) and not alive(_dead_pid())


def test_only_a_dead_owners_directories_are_removed(tmp_path):
    dead = tmp_path / f"dpsim-x-{_dead_pid()}-abc"
    mine = tmp_path / f"dpsim-x-{os.getpid()}-abc"
    other = tmp_path / "dpsim-x-notapid"
    for d in (dead, mine, other):
        d.mkdir()
    (dead / "f").write_text("left by a killed run")
    assert reap_dead_owner_dirs("dpsim-x-", str(tmp_path)) == [dead]
    assert not dead.exists() and mine.exists() and other.exists()
