"""The one typer application, its JSON output and the error boundary of the command line.

Every :class:`~dpsim.errors.DpsimError` and every bad flag is caught once, in :func:`main`,
and printed as one line on stderr (exit status 2); nothing prints a traceback. A signal
is honest too: Ctrl-C (SIGINT) exits 130 and SIGTERM 143 with one line, after the
``finally`` blocks on the way have run, so no command reports success for work it did
not finish (output files are written atomically: an interrupted command leaves the old
file or none). A feature whose optional dependency is missing (torch, Dask, pyarrow)
names the extra to install. Commands live in their own modules and are named in
:mod:`dpsim.cli.commands` (one table), each imported when it is first looked up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gc
import importlib
import json
import math
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, MutableMapping
from typing import Any

import typer
from typer.core import TyperGroup

from dpsim.cli.commands import COMMANDS
from dpsim.cli.panels import panel_rank
from dpsim.errors import DpsimError, DpsimWarning, Interrupted
from dpsim.profile.once import profiles_read_once

try:  # typer >= 0.22 parses with its own vendored copy of click (the click package may be absent)
    from typer._click import exceptions as _click_exceptions
except ImportError:  # older typer uses click itself
    from click import exceptions as _click_exceptions  # type: ignore[no-redef]
_CLICK_ERRORS = (_click_exceptions.ClickException,)
_ABORTS = tuple({typer.Abort, getattr(_click_exceptions, "Abort", typer.Abort)})
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
"""Errors of a write that the machine, not dpsim, caused (a full disk under ``dpsim plan --json > out.json``):
one line, not a traceback. Files dpsim writes itself already say so (dpsim.files); this is the standard output."""

try:  # typer >= 0.2x converts every value through a pydantic TypeAdapter built on first use
    from typer._coercion import RuntimeParam as _RuntimeParam
    from typer.core import _TyperParameter
except ImportError:  # older typer converts with click's own types: nothing to replace
    _RuntimeParam = _TyperParameter = None  # type: ignore[assignment,misc]

_PLAIN = {int: ("integer", int), float: ("float", float), str: ("string", str), bool: ("boolean", bool)}
"""Annotations converted without pydantic: what a bad value is called, and the conversion."""

if _RuntimeParam is not None and hasattr(_TyperParameter, "get_runtime_param"):
    @dataclasses.dataclass(frozen=True)
    class _PlainRuntimeParam(_RuntimeParam):  # type: ignore[misc,valid-type]
        """int, float, str, bool and list[str] converted as Python converts them, without pydantic.

        Typer builds a pydantic adapter for each parameter the first time a value (or a
        default, None included) passes through it; importing pydantic costs ~60 ms of every
        ``dpsim predict``, a third of its start-up above the libraries it needs
        (tests/benchmarks/bench_cli_startup.py). A flag of these types needs no more than
        ``int(text)``, and bad text gets the same one-line "Invalid value for '--flag'" error.
        """

        kind: type = str
        """The annotation (``str`` for ``list[str]``)."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if isinstance(value, (list, tuple)):
                return [self._one(v, param, ctx) for v in value]
            return self._one(value, param, ctx)

        def _one(self, value: Any, param: Any, ctx: Any) -> Any:
            name, convert = _PLAIN[self.kind]
            if isinstance(value, self.kind) and (self.kind is bool or not isinstance(value, bool)):
                return value
            if self.kind is not bool:
                try:
                    return convert(value)
                except (TypeError, ValueError):
                    pass
            shown = value if len(str(value)) <= 60 else str(value)[:57] + "..."
            raise _click_exceptions.BadParameter(f"{shown!r} is not a valid {name}.", ctx=ctx, param=param)

    _typers_runtime_param = _TyperParameter.get_runtime_param

    def _runtime_param(self: Any) -> Any:
        # Answer for the plain annotations; every other one is typer's to convert.
        if getattr(self, "_runtime_param", 1) is None:
            annotation = self.type_descriptor.annotation
            kind = str if annotation == list[str] else annotation if annotation in _PLAIN else None
            if kind is not None:
                self._runtime_param = _PlainRuntimeParam(parameter_info=self.type_descriptor.parameter_info,
                                                         annotation=annotation, kind=kind)
        return _typers_runtime_param(self)

    _TyperParameter.get_runtime_param = _runtime_param


BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "1")
"""The thread count numpy's OpenBLAS starts with in a ``dpsim`` process, unless the user set it. OpenBLAS
starts one worker per core when numpy is imported, and each spins a while for work before it sleeps: ~40 ms of
CPU of every ``dpsim predict`` (0.14 -> 0.10 s CPU for ``import numpy`` alone, best of 7, 2 cores) for
work dpsim never gives BLAS (a few short dot products and least-squares fits; the golden outputs are the same
bytes either way). Read once, when numpy loads; the variable is put back afterwards, so the processes a
command starts (calibrate's and validate's ranks, Dask's workers) get the user's environment."""


_OWN_PROCESS = False
"""Whether this process is the ``dpsim`` command's own (:func:`run`: the console script, ``python -m dpsim``).
Only then does :func:`loading` freeze what the collector tracks and start numpy's OpenBLAS on
:data:`BLAS_THREADS`: :func:`gc.freeze` takes every object the process holds, and in a notebook or script
that calls :func:`main` those are the caller's too, whose cycles were then never freed (a 10 MB cycle dropped
after one ``main(["predict", ...])`` stayed for good), and OpenBLAS would run the caller's numpy on one thread
for the rest of the session."""


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """Imports of a command's machinery, with the cyclic collector off and what they made frozen after.

    Importing makes ~100,000 objects (modules, classes, functions) and frees almost none, so the collector's
    passes during it (~90 of them in ``dpsim predict``) walked them and found nothing: ~20-30 ms of CPU.
    Afterwards, in dpsim's own process (:data:`_OWN_PROCESS`), the objects go to the permanent generation
    (:func:`gc.freeze`), as :func:`run` does for the CLI itself, and garbage made from then on is collected as
    before; numpy, if this loads it, starts with :data:`BLAS_THREADS` there.
    """
    collecting, loaded, own = gc.isenabled(), len(sys.modules), _OWN_PROCESS
    variable, threads = BLAS_THREADS
    ours = own and variable not in os.environ and "numpy" not in sys.modules
    if ours:
        os.environ[variable] = threads
    gc.disable()
    try:
        yield
    finally:
        if ours:
            os.environ.pop(variable, None)
        if own and len(sys.modules) != loaded:  # a second run in one process imports nothing: nothing to freeze
            gc.freeze()
        if collecting:
            gc.enable()


class LazyCommands(MutableMapping):
    """The commands of :data:`dpsim.cli.commands.COMMANDS`, each module imported when its command is first looked up.

    Importing every command module costs about 0.1 s (half of dpsim's own start-up) that
    ``dpsim predict`` would otherwise pay for ``calibrate``, ``plan`` and the rest. Names
    iterate in the table's order without importing anything; ``--help`` on the whole app
    looks every command up (it shows each one's summary).
    """

    def __init__(self, table: dict[str, str], built: dict[str, Any]) -> None:
        self._table = dict(table)
        self._built = dict(built)
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            module, _, attribute = self._table[name].partition(":")
            with self._lock:  # the group is shared by every main() call (command()): one build per command
                if name not in self._built:
                    with loading():
                        target = getattr(importlib.import_module(module), attribute)
                    self._built[name] = _click_command(name, target)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command
        self._table.setdefault(name, "")

    def __delitem__(self, name: str) -> None:
        del self._table[name]
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


def _click_command(name: str, target: Any) -> Any:
    """The click command typer builds for a command function or a ``typer.Typer`` group, named ``name``."""
    if isinstance(target, typer.Typer):
        command = typer.main.get_command(target)
    else:
        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
        # Typer shows panels in the order their first flag comes; parsing does not depend on it.
        command.params.sort(key=panel_rank)
    command.name = name
    return command


class _LazyGroup(TyperGroup):
    """The app's group: its commands are :class:`LazyCommands` over :data:`dpsim.cli.commands.COMMANDS`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = LazyCommands(COMMANDS, self.commands)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # typer's own walks items(), importing every command


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=_LazyGroup,
                  help="Discrete-event simulator of data-parallel GPU training clusters.",
                  # -h as well: `dpsim predict -h` was "No such option: -h", status 2. Every command's context
                  # inherits its parent's help names (click), and no command has a -h of its own.
                  context_settings={"help_option_names": ["-h", "--help"]})


def version_text() -> str:
    """``dpsim X.Y.Z``: the installed distribution's version (pyproject.toml's), as ``pip show dpsim`` reads it."""
    from importlib import metadata

    try:
        return f"dpsim {metadata.version('dpsim')}"
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "dpsim (version unknown: not installed; pip install -e . records it)"


def _print_version(value: bool) -> None:
    if value:
        print(version_text())
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print dpsim's version and exit."),
) -> None:
    # A typer app with no registered command needs a callback to be built as a group. `dpsim --version`
    # was "No such option: --version" with status 2, the first thing a user types to report a problem.
    pass


_GROUP_LOCK = threading.Lock()
_GROUP: tuple[tuple, Any] | None = None
"""The click group :func:`command` built last, with the registrations it was built from."""


def command() -> Any:
    """The click group of :data:`app`, built once per process and reused by every :func:`main` call.

    A notebook or a test calls :func:`main` many times; typer built the group and the command asked for afresh each
    time (3.7 ms of ``predict``'s 12 ms in-process, every command 29 ms). Nothing of one call stays on the group:
    click parses into a new context each time, and a parameter keeps only its converter. Built again when what it
    is built from changed (a command added to :data:`app` or to :data:`dpsim.cli.commands.COMMANDS`)."""
    global _GROUP
    key = (len(app.registered_commands), len(app.registered_groups), app.registered_callback,
           tuple(COMMANDS.items()))
    with _GROUP_LOCK:  # two threads' first calls build one group, not two half-filled ones
        if _GROUP is None or _GROUP[0] != key:
            _GROUP = (key, typer.main.get_command(app))
        return _GROUP[1]


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
    text = json.dumps(_json_safe(obj), indent=2, allow_nan=False) + "\n"
    raw = getattr(sys.stdout, "buffer", None)
    if raw is None:  # a StringIO (tests, a caller's redirect)
        sys.stdout.write(text)
        return
    # Bytes in a loop, not one text write: on a nearly full disk the buffered writer writes what fits and
    # returns that count, which the text layer drops, so `plan --json > out.json` was cut at 8 KiB with
    # exit status 0. The next write raises ENOSPC, which main() reports in one line.
    sys.stdout.flush()
    view = memoryview(text.encode(sys.stdout.encoding or "utf-8", errors="replace"))
    while view:
        view = view[raw.write(view):]
    raw.flush()


EXTRAS = {"torch": "torch", "torchvision": "torch", "dask": "plan", "distributed": "plan", "pyarrow": "plan",
          "nbclient": "notebooks", "nbformat": "notebooks", "ipykernel": "notebooks"}
"""Optional dependency (top-level module) -> the ``pip install 'dpsim[EXTRA]'`` that brings it (pyproject.toml)."""

_SIGNAL_NAMES = {signal.SIGINT: "interrupted (SIGINT)", signal.SIGTERM: "terminated (SIGTERM)"}


@contextlib.contextmanager
def _signals_raise(received: list[int]) -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`~dpsim.errors.Interrupted` while a command runs.

    SIGTERM's default would end the process at once, skipping every ``finally`` (temporary
    files, Dask clusters, testbeds); SIGINT gets its own exception so that typer, which
    turns ``KeyboardInterrupt`` into a return code, does not swallow it. Signals can only
    be set from the main thread; elsewhere (a test calling :func:`main` from a thread)
    the process's handlers stay as they are. Each signal is also recorded in ``received``:
    an exception raised while Python runs a finalizer is printed and dropped, and the
    command must not then report success.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum, frame) -> None:
        received.append(signum)
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, interrupted) for sig in _SIGNAL_NAMES}
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
    """``message`` as one bounded line: line breaks made spaces, every other unprintable character escaped, each
    overlong word and the whole cut."""
    line = re.sub(r"\s*[\r\n\v\f]+\s*", " ", message.strip())
    # A right-to-left override (U+202E) or another format or control character from the command line reached the
    # terminal as it was typed ("No such option: --X<U+202E>..."), where it reorders or restyles what follows.
    line = "".join(ch if ch.isprintable() else ("\\x%02x" % ord(ch) if ord(ch) < 256 else "\\u%04x" % ord(ch))
                   for ch in line)
    line = re.sub(r"\S{%d,}" % (MAX_ERROR_WORD_CHARS + 1),
                  lambda m: f"{m.group(0)[:MAX_ERROR_WORD_CHARS - 24]}...({len(m.group(0)):,} chars)..."
                            f"{m.group(0)[-8:]}", line)
    return line if len(line) <= MAX_ERROR_CHARS else line[:MAX_ERROR_CHARS - 3] + "..."


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The one-line error for an optional dependency that is not installed, or ``None`` for any other module."""
    module = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(module)
    if extra is None:
        return None
    why = " (PyTorch runs calibrate and validate, and traces --model file.py:fn)" if extra == "torch" else ""
    return f"this needs {module}, which is not installed{why}; install it with: pip install 'dpsim[{extra}]'"


def _sane_terminal_size() -> None:
    """Drop a ``COLUMNS``/``LINES`` that is not a positive integer: rich took ``COLUMNS=0`` as a
    zero-wide console, and predict, memory, goodput and models printed nothing at all (status 0)."""
    for name in ("COLUMNS", "LINES"):
        value = os.environ.get(name)
        # isascii: "²".isdigit() is true and int("²") raised ValueError, a traceback before any command ran.
        if value is not None and not (value.strip().isascii() and value.strip().isdigit() and int(value) > 0):
            del os.environ[name]


def _sweep_axis_hint(exc: Exception) -> str:
    """For ``dpsim sweep --recompute full``: sweep lists a few predict flags as its own and takes
    every other PredictConfig field as ``--axis NAME=V1,V2``; click's "No such option" said
    neither."""
    ctx = getattr(exc, "ctx", None)
    name = getattr(exc, "option_name", None)
    if type(exc).__name__ != "NoSuchOption" or ctx is None or ctx.info_name != "sweep" or not name:
        return ""
    from dpsim.plan.grid import axis_name

    try:
        field = axis_name(name.lstrip("-"))
    except DpsimError:
        return ""
    return f"; sweep takes it as --axis {field}=V1,V2"


@contextlib.contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """The library's :class:`~dpsim.errors.DpsimWarning` as the command line's own warning lines
    (``dpsim: warning: ...``, as ``dpsim calibrate`` prints its), each message once; others as Python shows them."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001 - warnings' signature
        if issubclass(category, DpsimWarning):
            print(f"dpsim: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("default", DpsimWarning)  # once per message, whatever PYTHONWARNINGS says of others
        warnings.showwarning = show
        yield


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning every user error into one line on stderr.

    Returns the exit status: 0, 2 for a user error, 130 after SIGINT (Ctrl-C), 143 after SIGTERM.
    """
    received: list[int] = []
    _sane_terminal_size()
    try:
        # One read of each calibration profile however many places the command needs it (dpsim.profile.once).
        with _signals_raise(received), profiles_read_once(), _warnings_as_lines():  # first: a signal during start-up is honoured too
            status = command().main(args=argv, prog_name="dpsim", standalone_mode=False)
            # Flushed here, not at exit: a full disk under `dpsim plan --json > out.json` left a truncated
            # file and exit status 0 when the interpreter's own flush failed.
            sys.stdout.flush()
    except Interrupted as exc:
        return _interrupted(exc.signum)
    except _ABORTS:
        print("dpsim: aborted", file=sys.stderr)
        return 130
    except _CLICK_ERRORS as exc:
        message = error_line(exc.format_message())
        if type(exc).__name__ == "NoArgsIsHelpError":
            # Bare ``dpsim``: typer's rich help is already on stdout (or is the message). Exit status 2 kept on
            # purpose: click 8.2 made help shown for missing arguments a usage error (CHANGES.rst 8.2.0, "the exit
            # code is 2 instead of 0", pallets/click PR 1489; pallets/click issue 2909: intended), which typer
            # follows, while ``dpsim --help`` (asked for) exits 0. A script that runs bare ``dpsim`` ran nothing.
            if message:
                print(exc.format_message())
            # The group that lacks its command: a bare `dpsim testbed` listed dpsim's commands, not up/down/status.
            ctx = getattr(exc, "ctx", None)
            group = ctx.command if ctx is not None and hasattr(ctx.command, "commands") \
                else command()
            where = f"{ctx.info_name}: " if ctx is not None and ctx.parent is not None else ""
            message = f"{where}missing command; choose one of {', '.join(sorted(group.commands))}"
        message += _sweep_axis_hint(exc)
        print(f"dpsim: error: {message}", file=sys.stderr)
        return 2
    except DpsimError as exc:
        print(f"dpsim: error: {error_line(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            raise
        where = repr(exc.filename) if exc.filename else "the standard output"
        print(f"dpsim: error: cannot write {where}: {exc.strerror or exc}; what was written is incomplete",
              file=sys.stderr)
        _discard_stdout()
        return 2
    except ModuleNotFoundError as exc:
        message = missing_extra(exc)
        if message is None:
            raise
        print(f"dpsim: error: {message}", file=sys.stderr)
        return 2
    if received:  # the signal's exception was dropped on the way (raised inside a finalizer)
        return _interrupted(received[0])
    # typer returns the code of a ``typer.Exit``, and 130 for a KeyboardInterrupt raised
    # by code (not the signal, which raises Interrupted above); a command returns None.
    if isinstance(status, int) and not isinstance(status, bool) and status != 0:
        if status == 130:
            print("dpsim: interrupted; the command did not finish", file=sys.stderr)
        return status
    return 0


def _discard_stdout() -> None:
    """Drop what the standard output still buffers after a failed write, so that the interpreter's
    flush at exit does not fail again (a second message, 'Exception ignored ...', on stderr)."""
    try:
        sys.stdout.flush()
    except OSError:
        pass
    with contextlib.suppress(AttributeError, ValueError, OSError):
        # The buffered bytes that cannot be written are dropped: flush() failed and would fail again.
        sys.stdout = sys.__stdout__ = open(os.dup(sys.stdout.fileno()), "w", closefd=True)  # noqa: SIM115


def _interrupted(signum: int) -> int:
    print(f"dpsim: {_SIGNAL_NAMES.get(signum, f'stopped by signal {signum}')}; the command did not finish",
          file=sys.stderr)
    return 128 + signum


def run() -> None:
    """Console-script entry point (``dpsim``)."""
    # What the process holds once the CLI is imported (modules, classes, functions: ~30,000
    # tracked objects, kept to the end) leaves the cyclic collector's passes, which walked them
    # again and freed nothing: predict 65,536 GPUs 0.51 -> 0.43 s CPU (median of 10, 2 cores,
    # tests/benchmarks/bench_predict_startup.py's way). Garbage made from here on is collected
    # as before; no result depends on when it is.
    global _OWN_PROCESS
    _OWN_PROCESS = True
    gc.freeze()
    from dpsim.workload.model_ref import end_process_on_runaway

    # A user's model builder that swallows every stop of its time limit would hold the command for ever:
    # the process is the command's own here, so it ends (an API caller's process is left to its caller).
    end_process_on_runaway()
    sys.exit(main())
