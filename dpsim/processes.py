"""Child processes that cannot outlive their supervisor, and leftovers of supervisors that died.

``dpsim calibrate``, ``dpsim validate`` and the testbed start ranks and keep per-run state
(working directories, namespaces) named with the supervisor's process id, so whatever a
SIGKILLed supervisor leaves can be told from a running one's and removed by the next run.
Under torchrun the ranks are started by torchrun instead: the variables it sets are checked here
(:func:`check_torchrun_env`), one place for calibrate and validate.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from dpsim.errors import ConfigError
from dpsim.limits import MAX_GPUS


def run_as_rank(main: Callable[[], int | None]) -> None:
    """Run ``main`` as a rank's whole process (calibrate's and validate's workers): a Python error exits
    with status 1 after its traceback, never through interpreter shutdown, where the gloo process
    group's threads can be destroyed while running and C++'s std::terminate aborts the rank (status -6,
    "terminate called without an active exception": a validate rank in CI on 2026-12-07, on an unknown
    --model). A supervisor reads a signal as the machine's failure (measured again), a status 1 as the
    error it is (its traceback's tail reported). A clean return exits with ``main``'s status."""
    try:
        code = main()
    except Exception:
        sys.excepthook(*sys.exc_info())
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    sys.exit(code)


def die_with_parent() -> None:
    """``preexec_fn`` of a rank: the kernel sends it SIGKILL when this process dies (even by SIGKILL).

    Linux ``prctl(PR_SET_PDEATHSIG)``; kept across ``ip netns exec``'s ``execve``. Elsewhere a
    no-op (the caller's deadline and ``finally`` still stop the ranks).
    """
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts: signalling it is merely refused)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_dead_owner_dirs(prefix: str, tmp: str | None = None) -> list[Path]:
    """Remove the directories ``<tmp>/<prefix><pid>-*`` whose process ``pid`` is gone; returns them."""
    removed = []
    for d in Path(tmp or tempfile.gettempdir()).glob(f"{prefix}*"):
        m = re.fullmatch(rf"{re.escape(prefix)}(\d+)-.*", d.name)
        if m and d.is_dir() and not alive(int(m.group(1))):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def _env_int(raw: str | None) -> int | None:
    """A non-negative integer of at most 8 digits as an environment variable gives it, else ``None``."""
    text = (raw or "").strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 8 else None


def torchrun_count(name: str, default: int | None = None) -> int:
    """An integer torchrun sets in the environment (``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``), checked:
    ``WORLD_SIZE=abc`` was a ValueError traceback, ``WORLD_SIZE=-3`` reached torch's rendezvous."""
    raw = os.environ.get(name)
    if not raw and default is not None:
        return default
    value = _env_int(raw)
    if value is None or not 1 <= value <= MAX_GPUS:
        raise ConfigError(f"environment {name}: {raw!r} is not valid; expected an integer >= 1 and <= {MAX_GPUS:,} "
                          f"(torchrun sets it)")
    return value


def check_torchrun_env() -> None:
    """The variables a torchrun rank starts from, checked before torch reads them: ``RANK`` below
    ``WORLD_SIZE`` and a ``MASTER_PORT`` (validate under torchrun without one, or with ``abc``, ended in
    torch's ValueError traceback from its env:// rendezvous)."""
    world = torchrun_count("WORLD_SIZE")
    for name, hi, what in (("RANK", world - 1, f"below WORLD_SIZE {world}"), ("MASTER_PORT", 65535, "a TCP port")):
        raw = os.environ.get(name)
        value = _env_int(raw)
        lo = 0 if name == "RANK" else 1
        if value is None or not lo <= value <= hi:
            given = "is not set" if raw is None else f"{raw!r} is not valid"
            raise ConfigError(f"environment {name}: {given}; expected an integer from {lo} to {hi:,} "
                              f"({what}; torchrun sets it)")


def meminfo_bytes(field: str) -> int | None:
    """``field`` of this host's ``/proc/meminfo`` (``MemTotal``, ``MemAvailable``, ...) in bytes; ``None``
    where it cannot be read (not Linux, no such field)."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
