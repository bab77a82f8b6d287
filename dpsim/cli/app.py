"""The one typer application, its JSON output and the error boundary of the command line.

Every :class:`~dpsim.errors.DpsimError` and every bad flag is caught once, in :func:`main`,
and printed as one line on stderr (exit status 2); nothing prints a traceback. A signal
is honest too: Ctrl-C (SIGINT) exits 130 and SIGTERM 143 with one line, after the
``finally`` blocks on the way have run, so no command reports success for work it did
not finish (output files are written atomically: an interrupted command leaves the old
file or none). A feature whose optional dependency is missing (torch, Dask, pyarrow)
names the extra to install. Commands live in their own modules and are registered in
:mod:`dpsim.cli` (one table).
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import sys
import threading
from collections.abc import Iterator

import typer

from dpsim.errors import DpsimError, Interrupted

try:  # typer >= 0.22 parses with its own vendored copy of click (the click package may be absent)
    from typer._click import exceptions as _click_exceptions
except ImportError:  # older typer uses click itself
    from click import exceptions as _click_exceptions  # type: ignore[no-redef]
_CLICK_ERRORS = (_click_exceptions.ClickException,)
_ABORTS = tuple({typer.Abort, getattr(_click_exceptions, "Abort", typer.Abort)})

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Discrete-event simulator of data-parallel GPU training clusters.")


def _json_safe(obj):
    # JSON has no inf/nan (e.g. the ring bandwidth of a 1-GPU "ring" is inf): write null.
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _emit_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(_json_safe(obj), indent=2, allow_nan=False) + "\n")


EXTRAS = {"torch": "torch", "torchvision": "torch", "dask": "plan", "distributed": "plan", "pyarrow": "plan",
          "nbclient": "notebooks", "nbformat": "notebooks", "ipykernel": "notebooks"}
"""Optional dependency (top-level module) -> the ``pip install 'dpsim[EXTRA]'`` that brings it (pyproject.toml)."""

_SIGNAL_NAMES = {signal.SIGINT: "interrupted (SIGINT)", signal.SIGTERM: "terminated (SIGTERM)"}


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`~dpsim.errors.Interrupted` while a command runs.

    SIGTERM's default would end the process at once, skipping every ``finally`` (temporary
    files, Dask clusters, testbeds); SIGINT gets its own exception so that typer, which
    turns ``KeyboardInterrupt`` into a return code, does not swallow it. Signals can only
    be set from the main thread; elsewhere (a test calling :func:`main` from a thread)
    the process's handlers stay as they are.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in _SIGNAL_NAMES}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


MAX_ERROR_WORD_CHARS = 120
"""A word of an error line longer than this (a value the user gave, repeated) is cut in the middle."""
MAX_ERROR_CHARS = 800
"""... and the whole line is cut to this: the line names the value, it need not repeat it."""


def error_line(message: str) -> str:
    """``message`` as one bounded line: whitespace folded, each overlong word and the whole cut."""
    words = []
    for word in message.split():
        if len(word) > MAX_ERROR_WORD_CHARS:
            word = f"{word[:MAX_ERROR_WORD_CHARS - 24]}...({len(word):,} chars)...{word[-8:]}"
        words.append(word)
    line = " ".join(words)
    return line if len(line) <= MAX_ERROR_CHARS else line[:MAX_ERROR_CHARS - 3] + "..."


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The one-line error for an optional dependency that is not installed, or ``None`` for any other module."""
    module = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(module)
    if extra is None:
        return None
    return f"this needs {module}, which is not installed; install it with: pip install 'dpsim[{extra}]'"


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning every user error into one line on stderr.

    Returns the exit status: 0, 2 for a user error, 130 after SIGINT (Ctrl-C), 143 after SIGTERM.
    """
    command = typer.main.get_command(app)
    try:
        with _signals_raise():
            status = command.main(args=argv, prog_name="dpsim", standalone_mode=False)
    except Interrupted as exc:
        print(f"dpsim: {_SIGNAL_NAMES.get(exc.signum, f'stopped by signal {exc.signum}')}; the command did "
              f"not finish", file=sys.stderr)
        return exc.exit_status
    except _ABORTS:
        print("dpsim: aborted", file=sys.stderr)
        return 130
    except _CLICK_ERRORS as exc:
        message = error_line(exc.format_message())
        if type(exc).__name__ == "NoArgsIsHelpError":
            # Bare ``dpsim``: typer's rich help is already on stdout (or is the message).
            if message:
                print(exc.format_message())
            message = f"missing command; choose one of {', '.join(sorted(command.commands))}"
        print(f"dpsim: error: {message}", file=sys.stderr)
        return 2
    except DpsimError as exc:
        print(f"dpsim: error: {error_line(str(exc))}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        message = missing_extra(exc)
        if message is None:
            raise
        print(f"dpsim: error: {message}", file=sys.stderr)
        return 2
    # typer returns the code of a ``typer.Exit``, and 130 for a KeyboardInterrupt raised
    # by code (not the signal, which raises Interrupted above); a command returns None.
    if isinstance(status, int) and not isinstance(status, bool) and status != 0:
        if status == 130:
            print("dpsim: interrupted; the command did not finish", file=sys.stderr)
        return status
    return 0


def run() -> None:
    """Console-script entry point (``dpsim``)."""
    sys.exit(main())
