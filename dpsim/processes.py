"""Child processes that cannot outlive their supervisor, and leftovers of supervisors that died.

``dpsim calibrate``, ``dpsim validate`` and the testbed start ranks and keep per-run state
(working directories, namespaces) named with the supervisor's process id, so whatever a
SIGKILLed supervisor leaves can be told from a running one's and removed by the next run.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import tempfile
from pathlib import Path


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
