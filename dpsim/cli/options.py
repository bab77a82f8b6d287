"""Command-line options made from :class:`~dpsim.predict.config.PredictConfig`'s fields.

``predict``, ``memory``, ``report`` and ``goodput`` all describe a ``PredictConfig``;
writing their shared flags once per command let the flags' help drift apart. Here a
field *is* its flag:

- the flag is :func:`~dpsim.predict.config.flag_name` (``micro_batch`` -> ``--micro-batch``,
  or the spelling in the field's metadata: ``topology_file`` -> ``--topology``,
  ``single_gpu_step_s`` -> ``--single-gpu-step-ms`` with its ``flag_scale``); a boolean
  field is a ``--name/--no-name`` pair;
- the help is the field's attribute docstring, read once from the class source with
  :mod:`ast` (the way tyro and torchtitan read theirs), whitespace folded;
- the choices of a ``Literal`` field are its metavar (``[fp32|amp|...]``); the default
  shown is the field's default, in the flag's units;
- ``--help`` shows it in the panel :data:`~dpsim.cli.panels.CONFIG_PANELS` gives the field.

A command names the fields it exposes (:func:`config_options`) and receives the flags
the user gave as ``{field: value in SI units}``, from which it builds its config; the
values are checked once, by ``PredictConfig`` itself. ``sweep`` takes comma-separated
lists of some fields (:func:`axis_options`): same flags, same help, prefixed.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

import typer

from dpsim.cli.panels import FIELD_PANEL
from dpsim.predict.config import (
    PARTS,
    PROFILE_DEFAULTED,
    SETTINGS,
    derived_flags,
    field_kind,
    flag_name,
    flag_scale,
    range_help,
    setting_field,
    setting_key,
)

ALL_FIELDS: tuple[str, ...] = SETTINGS
"""Every ``PredictConfig`` setting by its flat name, in :data:`~dpsim.predict.config.SETTINGS` order
(``predict`` and ``report`` expose all)."""

_KEYWORD = inspect.Parameter.KEYWORD_ONLY


@functools.cache
def field_docs() -> dict[str, str]:
    """Setting (flat name) -> its field's attribute docstring (the string right after the field in its
    part's class), whitespace folded."""
    # Parsed once, on every CLI start: inspect.getsource tokenizes the file to find each class
    # (three times as long as parsing the whole module), and the whole module is three times
    # the parts' classes (~20 ms of a 2-core machine's start-up against ~7).
    text = Path(inspect.getfile(next(iter(PARTS.values())))).read_text(encoding="utf-8")
    keys = {cls.__name__: {f.name: setting_key(f) for f in dataclasses.fields(cls)}
            for cls in PARTS.values()}
    module = _class_sources(text, set(keys))
    docs = {}
    for cls in (n for n in module.body if isinstance(n, ast.ClassDef) and n.name in keys):
        for node, after in itertools.pairwise(cls.body):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str) and node.target.id in keys[cls.name]):
                docs[keys[cls.name][node.target.id]] = " ".join(after.value.value.split())
    return docs


def _class_sources(text: str, names: set[str]) -> ast.Module:
    """The classes ``names`` of the module source ``text``, parsed alone: each from its ``class``
    line to the next line that starts a top-level statement; the whole module when a class is
    not found or its text does not parse alone (a line at column 0 inside a class is inside a
    string or brackets, which cutting there leaves open: a syntax error)."""
    lines = text.splitlines(keepends=True)
    chunks, found = [], set()
    for i, line in enumerate(lines):
        name = line[6:].split("(")[0].split(":")[0].strip() if line.startswith("class ") else None
        if name in names:
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or lines[j][0] in " \t#"):
                j += 1
            chunks.append("".join(lines[i:j]))
            found.add(name)
    if found == names:
        try:
            return ast.parse("".join(chunks))
        except SyntaxError:
            pass
    return ast.parse(text)


def field_help(name: str) -> str:
    """The ``--help`` text of field ``name``'s flag: its docstring, then its range if it has one."""
    allowed = range_help(name)
    return field_docs()[name] + (f" Allowed: {allowed}." if allowed else "")


def choices_metavar(name: str) -> str | None:
    """``[a|b|c]`` for a ``Literal`` field, as click shows a choice; ``None`` otherwise."""
    choices = field_kind(name)[2]
    return "[" + "|".join(choices) + "]" if choices else None


def _flag_default(name: str) -> Any:
    # A field a calibration profile decides shows its value without one (it is left out
    # unless given, so a profile still decides it).
    default = PROFILE_DEFAULTED.get(name, setting_field(name).default)
    scale = flag_scale(name)
    return default * scale if scale is not None and default is not None else default


def config_parameter(name: str) -> inspect.Parameter:
    """The typer option of field ``name``, as a keyword parameter of a command."""
    kind, optional, _ = field_kind(name)
    flag = flag_name(name)
    if kind is bool:
        decls = f"{flag}/--no-{flag.removeprefix('--')}"
        annotation: Any = bool
    else:
        decls = flag
        annotation = float if flag_scale(name) is not None else kind
        if optional:
            annotation = Optional[annotation]
    option = typer.Option(_flag_default(name), decls, help=field_help(name), metavar=choices_metavar(name),
                          rich_help_panel=FIELD_PANEL.get(name))
    return inspect.Parameter(name, _KEYWORD, annotation=annotation, default=option)


def _from_flag(name: str, value: Any) -> Any:
    scale = flag_scale(name)
    return value / scale if scale is not None and value is not None else value


def _given(ctx: typer.Context, name: str) -> bool:
    # A flag left at its default is left out, so the command sees only what the user chose
    # (predict's --calibration supplies some defaults of its own).
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _with_parameters(fn: Callable, params: list[inspect.Parameter],
                     collect: Callable[[typer.Context, dict[str, Any]], Any]) -> Callable:
    """``fn(collected, **own)`` as a command whose options are ``params`` followed by ``fn``'s own.

    ``fn``'s first parameter receives ``collect(ctx, values of params)``.
    """
    own = list(inspect.signature(fn, eval_str=True).parameters.values())
    assert own, f"{fn.__name__} needs a first parameter for the collected flags"
    names = [p.name for p in params]
    assert not set(names + ["ctx"]) & {p.name for p in own}, f"{fn.__name__} redeclares a generated parameter"

    @functools.wraps(fn)
    def command(ctx: typer.Context, **kwargs: Any) -> Any:
        collected = collect(ctx, {n: kwargs.pop(n) for n in names})
        return fn(collected, **kwargs)

    context = inspect.Parameter("ctx", _KEYWORD, annotation=typer.Context)
    command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [context, *params, *(p.replace(kind=_KEYWORD) for p in own[1:])], return_annotation=None)
    return command


def config_options(names: Sequence[str]) -> Callable[[Callable], Callable]:
    """Give a command the flags of the ``PredictConfig`` fields ``names``.

    The command's first parameter receives ``{field: value}`` of the flags given on the
    command line, in SI units (``--single-gpu-step-ms 180`` -> ``single_gpu_step_s: 0.18``);
    ``PredictConfig(**flags)`` is then the config they describe, checked.
    """
    params = [config_parameter(n) for n in names]

    def collect(ctx: typer.Context, values: dict[str, Any]) -> dict[str, Any]:
        return derived_flags({n: _from_flag(n, v) for n, v in values.items() if _given(ctx, n)})

    return lambda fn: _with_parameters(fn, params, collect)


def axis_parameter(name: str) -> inspect.Parameter:
    """``sweep``'s comma-separated option of field ``name`` (values in the field's own units)."""
    assert flag_scale(name) is None, f"{name}: a sweep axis flag takes the field's own units"
    _, optional, choices = field_kind(name)
    help_text = f"Comma-separated values of: {field_help(name)}"
    if optional:
        help_text += " Use none for the default."
    metavar = "[" + "|".join(choices) + "],..." if choices else "V1,V2,..."
    option = typer.Option(None, flag_name(name), help=help_text, metavar=metavar,
                          rich_help_panel=FIELD_PANEL.get(name))
    return inspect.Parameter(name, _KEYWORD, annotation=Optional[str], default=option)


def axis_options(names: Sequence[str]) -> Callable[[Callable], Callable]:
    """Give a command comma-separated list flags of the fields ``names`` (``sweep``).

    The command's first parameter receives ``{field: raw text}`` of the flags given.
    """
    params = [axis_parameter(n) for n in names]

    def collect(ctx: typer.Context, values: dict[str, Any]) -> dict[str, str]:
        return {n: v for n, v in values.items() if v is not None}

    return lambda fn: _with_parameters(fn, params, collect)
