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


_TORCHRUN_ENV_CASES = [
    ({"WORLD_SIZE": "abc"}, "environment WORLD_SIZE: 'abc' is not valid"),  # was a ValueError traceback
    ({"WORLD_SIZE": "-3"}, "environment WORLD_SIZE: '-3' is not valid"),  # reached torch's rendezvous
    ({"LOCAL_WORLD_SIZE": "x"}, "environment LOCAL_WORLD_SIZE: 'x' is not valid"),  # a traceback
    ({"RANK": "5"}, "environment RANK: '5' is not valid; expected an integer from 0 to 1 (below WORLD_SIZE 2"),
    ({"MASTER_PORT": None}, "environment MASTER_PORT: is not set; expected an integer from 1 to 65,535"),
    ({"MASTER_PORT": "abc"}, "environment MASTER_PORT: 'abc' is not valid"),
]


# validate does not read LOCAL_WORLD_SIZE (with it alone wrong it would join a process group and wait).
@pytest.mark.parametrize("command_line, env, needle", [
    (command_line, env, needle) for command_line in (["calibrate", "--no-compute"], ["validate", "--model", "mlp"])
    for env, needle in _TORCHRUN_ENV_CASES if command_line[0] == "calibrate" or "LOCAL_WORLD_SIZE" not in env])
def test_a_bad_torchrun_environment_is_one_line(capsys, tmp_path, monkeypatch, command_line, env, needle):
    """fuzz5: calibrate and validate under torchrun read WORLD_SIZE/LOCAL_WORLD_SIZE with int() (a
    traceback for 'abc') and handed RANK/MASTER_PORT to torch unchecked (validate: torch's ValueError
    traceback without MASTER_PORT)."""
    monkeypatch.setattr(subprocess, "Popen", _no_ranks)
    base = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for name, value in {**base, **env}.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    out = tmp_path / "node.json"
    extra = ["--out", str(out)] if command_line[0] == "calibrate" else []
    rc = main([*command_line, *extra])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and needle in err, err
    assert not out.exists()
