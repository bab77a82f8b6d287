"""One read of each calibration profile per command (issue 25: "read a profile once per command").

A command reaches its profile from many places (a sweep's grid check and each of its points, ``report``'s
scaling and memory tables, ``plan``'s search and the layouts it simulates, ``mix``'s jobs), each naming it
by path. Inside :func:`profiles_read_once` (the CLI's :func:`~dpsim.cli.app.main` and the API entries that
fan out: :func:`~dpsim.plan.sweep.sweep`, :func:`~dpsim.plan.planner.plan_layouts`,
:func:`~dpsim.report.html.write_report`, ``mix``) :func:`~dpsim.profile.io.load_profile` reads and
validates a file once and hands every later caller the same frozen :class:`~dpsim.profile.schema.Profile`.
Outside one, each call reads the file, as a library function that is called once should.

Standard library only: the CLI enters the scope before it knows whether the command reads a profile.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

_READ: ContextVar[dict | None] = ContextVar("dpsim_profiles_read", default=None)
"""The profiles read in the current scope by file (its resolved path, modification time and size: a file
rewritten within the command, as ``validate`` writes its own, is read again); ``None``: no scope."""

F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def profiles_read_once() -> Iterator[None]:
    """Within the block, each profile file is read once (nested blocks share the outermost's)."""
    if _READ.get() is not None:
        yield
        return
    token = _READ.set({})
    try:
        yield
    finally:
        _READ.reset(token)


def reads_profiles_once(fn: F) -> F:
    """``fn`` run inside :func:`profiles_read_once`."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with profiles_read_once():
            return fn(*args, **kwargs)
    return wrapper  # type: ignore[return-value]


def read_profiles() -> dict | None:
    """The current scope's profiles by file key (``None`` outside a scope)."""
    return _READ.get()
