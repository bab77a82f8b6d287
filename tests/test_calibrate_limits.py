"""``dpsim calibrate`` refuses, in one line and before any rank starts, more local ranks than the
machine can run (issue 25 part 7: ``--nproc 1000`` on a 2-core machine used to fork them all)."""

from __future__ import annotations

import subprocess

import pytest

pytest.importorskip("torch.distributed")

from dpsim.calibrate import command  # noqa: E402
from dpsim.cli.app import main  # noqa: E402


def _no_ranks(*args, **kwargs):
    raise AssertionError("a rank was started")


@pytest.mark.parametrize("nproc", ["1000", "9"])
def test_too_many_local_ranks_are_refused_before_any_starts(capsys, tmp_path, monkeypatch, nproc):
    monkeypatch.setattr(command, "usable_cores", lambda: 2)
    monkeypatch.setattr(subprocess, "Popen", _no_ranks)
    out = tmp_path / "node.json"
    rc = main(["calibrate", "--backend", "gloo", "--nproc", nproc, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert f"--nproc: {nproc} local gloo ranks" in err and "(8: 2 usable cores x 4 ranks per core)" in err
    assert "use --nproc 8 or fewer" in err
    assert not out.exists()


def test_the_bound_is_the_cores_or_the_memory_whichever_is_smaller(monkeypatch):
    monkeypatch.setattr(command, "usable_cores", lambda: 16)
    monkeypatch.setattr(command, "_available_memory_bytes", lambda: 100.0 * 2**30)
    limit, why = command.local_rank_capacity(32 * 2**20)
    assert limit == 16 * command.LOCAL_RANKS_PER_CORE and "16 usable cores" in why
    # 1 GiB buffers: each rank needs 256 MiB + 2 GiB, so 90 % of 4 GiB holds one rank
    monkeypatch.setattr(command, "_available_memory_bytes", lambda: 4.0 * 2**30)
    limit, why = command.local_rank_capacity(2**30)
    per_rank = command.RANK_PROCESS_BYTES + 2 * 2**30
    assert limit == int(0.9 * 4 * 2**30 // per_rank) == 1 and "available memory" in why


def test_a_machine_that_can_run_the_ranks_is_not_refused(monkeypatch):
    monkeypatch.setattr(command, "usable_cores", lambda: 2)
    opts = command.CalibrateOptions(nproc=8, backend="gloo")
    command.check_local_ranks(8, opts)  # 4 per core: allowed
