"""Ctrl-C and kill are honest: exit 130 on SIGINT, 143 on SIGTERM, one line on stderr, no half-written file.

Whole processes first: ``dpsim sweep -o`` and ``dpsim report -o`` are started with a
grid that takes many seconds, and SIGINT, SIGTERM or SIGKILL arrives in the middle of
the work. The exit status must say so (a script must not carry on as if an interrupted
sweep had succeeded), stderr must be one line (no traceback), the output file that was
there before must be unchanged and no temporary file may be left next to it. Then the
pieces in-process: :func:`dpsim.cli.main`'s statuses, its signal handlers put back, and
:func:`dpsim.files.atomic_output` keeping the old file when a write fails.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpsim.cli import main
from dpsim.errors import Interrupted
from dpsim.files import atomic_output, write_text_atomic

ROOT = Path(__file__).resolve().parent.parent

SWEEP = ["sweep", "--gpus", "8,16,32,64,128,256,512,1024,2048,4096", "--link", "ethernet,infiniband,nvlink,pcie",
         "--micro-batch", "1,2,3,4,5,6,7,8", "--model", "gpt2,gpt2-xl,llama-2-7b,bert-large", "--steps", "1,2,3,4,5",
         "--no-progress"]
"""6,400 points: about a minute of CPU, far more than the time before the signal."""
REPORT = ["report", "--scaling-gpus", ",".join(str(1024 * (i + 1)) for i in range(64))]
"""A report whose scaling figure has 64 GPU counts up to 65,536: several seconds of CPU."""

# The launcher says "ready" on stdout once dpsim is imported, right before main() installs its
# handlers and runs the command; the signal comes AFTER_READY_S later, in the middle of the work.
LAUNCHER = ("import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True); "
            "from dpsim.cli import main; print('ready', flush=True); sys.exit(main(sys.argv[1:]))")
"""SIGUSR1 makes a launched command print where it is (a hang reports its own traceback)."""
AFTER_READY_S = 2.0
BEFORE = "the file that was there before\n"


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", LAUNCHER, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"still running 120 s after the signal; where it was:\n{err[-4000:]}") from None
    return proc.returncode, out, err


CASES = [(cmd, output, sig, status)
         for cmd, output in ((SWEEP, "results.csv"), (REPORT, "report.html"))
         for sig, status in ((signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGKILL, -signal.SIGKILL))]


@pytest.mark.slow
def test_signals_mid_run_exit_honestly_and_leave_no_partial_file(tmp_path):
    # All six runs at once: each waits its few seconds in parallel.
    runs = []
    for i, (cmd, output, sig, status) in enumerate(CASES):
        where = tmp_path / f"run{i}"
        where.mkdir()
        (where / output).write_text(BEFORE)
        runs.append((where, output, sig, status, _start([*cmd, "-o", output], where)))
    # Each command gets its signal AFTER_READY_S after it said "ready" (they start at different speeds).
    waiting = {proc.stdout.fileno(): (output, sig, proc) for _, output, sig, _, proc in runs}
    due: list[tuple[float, str, int, subprocess.Popen]] = []
    while waiting or due:
        ready, _, _ = select.select(list(waiting), [], [], 0.05)
        for fd in ready:
            output, sig, proc = waiting.pop(fd)
            assert proc.stdout.readline() == "ready\n", output
            due.append((time.monotonic() + AFTER_READY_S, output, sig, proc))
        for item in [d for d in due if d[0] <= time.monotonic()]:
            due.remove(item)
            _, output, sig, proc = item
            assert proc.poll() is None, f"{output}: the command finished before the signal: make its work longer"
            proc.send_signal(sig)
    for where, output, sig, status, proc in runs:
        code, out, err = _finish(proc)
        name = f"{signal.Signals(sig).name} on {output}"
        assert code == status, (name, code, err[-2000:])
        if sig == signal.SIGKILL:
            assert err == "", (name, err)
        else:
            assert len(err.splitlines()) == 1 and err.startswith("dpsim: "), (name, err)
            assert ("SIGINT" if sig == signal.SIGINT else "SIGTERM") in err, (name, err)
            assert "Traceback" not in err
        assert out == "", (name, out)  # after "ready": no table, no "written" line
        assert (where / output).read_text() == BEFORE, name
        assert sorted(p.name for p in where.iterdir()) == [output], (name, list(where.iterdir()))


def test_main_returns_130_and_143_and_puts_the_handlers_back(capsys, monkeypatch):
    import dpsim.cli.models as models_module

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for exc, status, word in ((KeyboardInterrupt(), 130, "interrupted"), (Interrupted(signal.SIGINT), 130, "SIGINT"),
                              (Interrupted(signal.SIGTERM), 143, "SIGTERM")):
        def boom(*args, exc=exc, **kwargs):
            raise exc

        monkeypatch.setattr(models_module, "list_models", boom, raising=False)
        monkeypatch.setattr("dpsim.workload.catalog.list_models", boom)
        assert main(["models"]) == status
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and word in err, err
        assert {s: signal.getsignal(s) for s in before} == before


def test_the_handlers_raise_while_a_command_runs(capsys, monkeypatch):
    seen = []

    def send(*args, **kwargs):
        seen.append(signal.getsignal(signal.SIGTERM))
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # never reached: the handler raises at once
        return []

    monkeypatch.setattr("dpsim.workload.catalog.list_models", send)
    assert main(["models"]) == 143
    assert "SIGTERM" in capsys.readouterr().err
    assert seen and callable(seen[0]) and seen[0] not in (signal.SIG_DFL, signal.SIG_IGN)


def test_an_interrupted_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "out.csv"
    path.write_text(BEFORE)
    with pytest.raises(Interrupted):
        with atomic_output(path) as tmp:
            tmp.write_text("half a fi")
            raise Interrupted(signal.SIGINT)
    assert path.read_text() == BEFORE
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]
    write_text_atomic(path, "new\n")
    assert path.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["out.csv"]
