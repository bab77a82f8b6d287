"""A user's model reference: ``path/file.py:fn``, ``package.module:fn`` and the ``--input-shape`` of its example input.

Parsed and imported without torch (only the builder's own module may import it), so predict,
calibrate and validate accept exactly the same references.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.util
import keyword
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dpsim.errors import WorkloadError
from dpsim.files import path_kind
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_INPUT_ELEMENTS, short
from dpsim.workload.library_models import parse_call
from dpsim.workload.shapes import is_shape_ref

_INPUT_DTYPES = {"float32": "float32", "float": "float32", "float16": "float16", "half": "float16",
                 "bfloat16": "bfloat16", "int64": "int64", "long": "int64", "int32": "int32", "int": "int32",
                 "bool": "bool"}


def is_torch_model_ref(model: str) -> bool:
    """Whether ``--model`` names a torch builder (``file.py:fn``, ``pkg.mod:fn``) rather than a catalog
    key or a shape (``transformer:KEY=VALUE,...``)."""
    return isinstance(model, str) and ":" in model and not is_shape_ref(model)


def model_ref_next_to(value: Any, base_dir: Path) -> Any:
    """``value`` with a relative builder file (``net.py:build``) read from ``base_dir``: a mix or
    sweep file names its model files, as its topology and profiles, next to itself."""
    if not (isinstance(value, str) and is_torch_model_ref(value)):
        return value
    text = value.strip()
    target = text.split(":", 1)[0]
    if not target.endswith(".py") or Path(target).is_absolute():
        return value  # package.module:fn, or a file given in full
    return str(Path(base_dir) / target) + text[len(target):]


@frozen_dataclass
class ModelRef:
    """A parsed ``--model`` reference to a builder function."""

    target: str
    """A ``.py`` file path or a dotted module name."""
    function: str
    """Name of the function returning the ``nn.Module``."""
    example_function: str | None
    """Name of the function returning the example input (``None``: ``example_input`` if the
    module defines it)."""
    loss_function: str | None = None
    """Name of the training loss function, ``loss(output)`` or ``loss(output, batch)``, named
    after a third colon (``None``: ``loss`` if the module defines it). ``dpsim calibrate`` and
    ``dpsim validate`` time the step with it; ``predict`` only traces the model."""
    is_file: bool
    """``target`` is a file path."""
    kwargs: tuple[tuple[str, Any], ...] = ()
    """Keyword arguments of ``module:fn(key=literal, ...)`` (:mod:`dpsim.workload.library_models`)."""


def parse_model_ref(ref: str, *, calls: bool = False) -> ModelRef:
    """Validate ``file.py:fn[:example_fn[:loss_fn]]`` or ``pkg.mod:fn[:example_fn[:loss_fn]]``;
    with ``calls``, also ``pkg.mod:fn(key=literal, ...)`` (:mod:`dpsim.workload.library_models`:
    what ``predict`` traces; ``calibrate`` and ``validate`` build a model without arguments)."""
    usage = ("expected path/to/file.py:build or package.module:build (optionally :example_fn for "
             "the input, then :loss_fn for the loss), or a catalog name")
    if not isinstance(ref, str) or not ref.strip():
        raise WorkloadError(f"--model: {ref!r} is not valid; {usage}")
    if "(" in ref:
        if not calls:
            raise WorkloadError(f"--model: {ref!r} calls its builder with arguments, which only predict, memory, "
                                f"report and sweep read; here give a builder without arguments")
        target, _, rest = ref.strip().partition(":")
        call = parse_call(rest, ref)
        parsed = parse_model_ref(f"{target}:{call.name}")
        return ModelRef(target=parsed.target, function=parsed.function, example_function=None,
                        is_file=parsed.is_file, kwargs=call.kwargs)
    parts = ref.strip().split(":")
    if len(parts) not in (2, 3, 4) or not all(p.strip() for p in parts):
        raise WorkloadError(f"--model: {ref!r} is not valid; {usage}")
    target, function = parts[0].strip(), parts[1].strip()
    example = parts[2].strip() if len(parts) >= 3 else None
    loss = parts[3].strip() if len(parts) == 4 else None
    for fn in (function, example, loss):
        if fn is not None and (not fn.isidentifier() or keyword.iskeyword(fn)):
            raise WorkloadError(f"--model: {fn!r} in {ref!r} is not a Python function name; {usage}")
    is_file = target.endswith(".py") or "/" in target or "\\" in target
    if is_file:
        if not target.endswith(".py"):
            raise WorkloadError(f"--model: {target!r} is not a .py file; {usage}")
        kind = path_kind(target, "--model", WorkloadError)  # (a name too long is its own error)
        if kind is None:
            raise WorkloadError(f"--model: file {target!r} does not exist")
        if kind != "file":  # a directory or a FIFO named x.py was told "does not exist"
            what = "a directory" if kind == "dir" else "not a regular file (a device, FIFO or socket)"
            raise WorkloadError(f"--model: {target!r} is {what}; expected a Python file with the builder")
    elif not all(p.isidentifier() and not keyword.iskeyword(p) for p in target.split(".")):
        raise WorkloadError(f"--model: {target!r} is not a module name (dotted identifiers); {usage}")
    return ModelRef(target=target, function=function, example_function=example, loss_function=loss,
                    is_file=is_file)


def parse_input_shape(text: str) -> tuple[tuple[int, ...], str]:
    """``"4,3,224,224"`` or ``"2x1024:int64"`` -> (shape, dtype). The first dimension is the batch."""
    usage = ("expected comma- or x-separated sizes >= 1, batch first, optionally :DTYPE "
             f"({', '.join(sorted(set(_INPUT_DTYPES)))}), e.g. 8,3,224,224 or 4,1024:int64")
    if not isinstance(text, str) or not text.strip():
        raise WorkloadError(f"--input-shape: {text!r} is not valid; {usage}")
    shape_text, _, dtype_text = text.strip().partition(":")
    dtype = _INPUT_DTYPES.get(dtype_text.strip().lower() or "float32")
    if dtype is None:
        raise WorkloadError(f"--input-shape: dtype {dtype_text!r} is not known; {usage}")
    items = [s.strip() for s in re.split(r"[,x×]", shape_text.strip().lower())]
    if not items or not all(re.fullmatch(r"\d{1,20}", s) for s in items) or any(int(s) < 1 for s in items):
        raise WorkloadError(f"--input-shape: {short(text)} is not valid; {usage}")
    shape = tuple(int(s) for s in items)
    if math.prod(shape) > MAX_INPUT_ELEMENTS:
        raise WorkloadError(f"--input-shape: {short(text)} is {math.prod(shape):.3g} elements; expected at most "
                            f"{MAX_INPUT_ELEMENTS:.3g} (2^48) in all")
    return shape, dtype


def import_builder(ref: ModelRef) -> Any:
    """The module that holds ``ref``'s builder (a file imported under a private name, or a
    package module), or a one-line :class:`~dpsim.errors.WorkloadError` saying why not."""
    try:
        if ref.is_file:
            path = Path(ref.target).resolve()
            mod_name = f"_dpsim_user_model_{abs(hash(str(path)))}"
            spec = importlib.util.spec_from_file_location(mod_name, path)
            if spec is None or spec.loader is None:
                raise WorkloadError(f"--model: cannot import {ref.target!r} as a Python file")
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            # Let the file import its neighbours.
            sys.path.insert(0, str(path.parent))
            try:
                spec.loader.exec_module(module)
            finally:
                try:
                    sys.path.remove(str(path.parent))
                except ValueError:
                    pass
            return module
        # ``package.module:fn`` is looked up from the current directory too, as ``python -m``
        # would: the ``dpsim`` script's own directory, not the user's, heads sys.path.
        cwd = os.getcwd()
        added = cwd not in sys.path
        if added:
            sys.path.insert(0, cwd)
        try:
            return importlib.import_module(ref.target)
        finally:
            if added:
                try:
                    sys.path.remove(cwd)
                except ValueError:
                    pass
    except WorkloadError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure while importing user code (sys.exit too:
        # SystemExit would end dpsim with its status and no word, 0 looking like success)
        raise WorkloadError(f"--model: importing {ref.target!r} failed: {type(exc).__name__}: {_one_line(exc)}") from None


def builder_attribute(module: Any, name: str, target: str) -> Any:
    """``module``'s attribute ``name``, or ``None`` where it has none; a one-line
    :class:`~dpsim.errors.WorkloadError` where looking it up fails. Lazy packages (transformers)
    import the attribute's own module on first access, so a broken or mismatched dependency
    (a torchvision built for another torch, say) surfaces here, not at ``import_builder``."""
    try:
        return getattr(module, name, None)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever the lazy import raises: one line, no traceback
        raise WorkloadError(f"--model: importing {name!r} from {target!r} failed: {type(exc).__name__}: "
                            f"{_one_line(exc)} (a package it imports is missing or built for another "
                            f"torch; check `python -c \"from {target} import {name}\"`)") from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


class _Expired(BaseException):
    """Raised into the user's code when its time is up. A ``BaseException``, so that the user's own
    ``except Exception`` (or ours around its calls) does not swallow it; raised again every second
    in case a bare ``except`` did."""


RUNAWAY_GRACE_S = 30.0
"""Seconds the stop goes on being raised (every second) into user code past its time limit before a
command-line run (``dpsim ...``, :func:`end_process_on_runaway`) ends its own process: code that catches
``BaseException`` in a loop swallows every stop, and nothing else in the process can end it."""

_END_PROCESS = [False]
"""Whether a run-away builder ends the process (set by the console entry point only: a library caller's
process is its own)."""


def end_process_on_runaway(enabled: bool = True) -> None:
    """Let the time limit end this process, with its error line on stderr and status 2, when the user's code
    has swallowed the stop for :data:`RUNAWAY_GRACE_S` (the ``dpsim`` command; never the API's default)."""
    _END_PROCESS[0] = enabled


def _end_process(message: str) -> None:
    sys.stderr.write(f"dpsim: error: {message} (its code caught every stop for {RUNAWAY_GRACE_S:g} s more, as an "
                     f"except BaseException does; dpsim ended)\n")
    sys.stderr.flush()
    os._exit(2)  # the user's code is still running: no clean-up of ours could run past it


_LIMITED = threading.local()
"""``active``: a limit is already running on this thread (a nested one would only cut it short)."""


@contextlib.contextmanager
def user_code_time_limit(seconds: float, message: str) -> Iterator[None]:
    """Run the ``with`` body (a user's builder being imported, called and traced) for at most
    ``seconds`` of wall-clock time; past that, a :class:`~dpsim.errors.WorkloadError` with ``message``.

    On the main thread (the command line; most API callers) a ``SIGALRM`` interval timer raises
    into the running Python code, interrupting ``time.sleep`` and blocking reads too. Elsewhere
    (another thread, or a timer already armed by the caller, such as a test runner's) a watchdog
    thread raises it asynchronously (``PyThreadState_SetAsyncExc``), which reaches Python code
    but not a blocking call until it returns. Code in C that never returns (a torch kernel) is
    out of reach of both.
    """
    if getattr(_LIMITED, "active", False):
        yield
        return
    _LIMITED.active = True
    try:
        with _alarm(seconds, message) if _alarm_usable() else _watchdog(seconds, message):
            yield
    except _Expired:
        raise WorkloadError(message) from None
    finally:
        _LIMITED.active = False


def _alarm_usable() -> bool:
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return False
    # A caller's own timer or a handler installed from C (``None``: it could not be put back) is left alone.
    return signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and signal.getsignal(signal.SIGALRM) is not None


@contextlib.contextmanager
def _alarm(seconds: float, message: str) -> Iterator[None]:
    deadline = time.monotonic() + seconds

    def expired(signum, frame) -> None:
        if _END_PROCESS[0] and time.monotonic() - deadline >= RUNAWAY_GRACE_S:
            _end_process(message)
        raise _Expired()

    previous = signal.signal(signal.SIGALRM, expired)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _watchdog(seconds: float, message: str) -> Iterator[None]:
    target = ctypes.c_ulong(threading.get_ident())
    lock = threading.Lock()
    done = threading.Event()

    def watch() -> None:
        wait = seconds
        deadline = time.monotonic() + seconds
        while not done.wait(wait):
            with lock:
                if done.is_set():
                    return
                if _END_PROCESS[0] and time.monotonic() - deadline >= RUNAWAY_GRACE_S:
                    _end_process(message)
                ctypes.pythonapi.PyThreadState_SetAsyncExc(target, ctypes.py_object(_Expired))
            wait = 1.0

    watcher = threading.Thread(target=watch, name="dpsim-model-time-limit", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        with lock:
            done.set()
        # One raised just now and not yet delivered would surface later, in the caller's code.
        ctypes.pythonapi.PyThreadState_SetAsyncExc(target, None)
