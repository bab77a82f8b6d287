"""The public functions' arguments checked before they run: a misspelt keyword is one DpsimError naming it.

``dpsim.goodput(config, duratoin_s=86400)`` or ``dpsim.predict(gpus=8)`` raised Python's bare ``TypeError``
("got an unexpected keyword argument"), which a caller catching :class:`~dpsim.errors.DpsimError` (as the
command line and every notebook example do) saw as a traceback, and which named nothing to give instead.
:func:`checked_arguments` binds the call to the function's signature first and, where Python would refuse it,
raises :class:`~dpsim.errors.ConfigTypeError` (a ``TypeError`` too, as Python's own) naming the function, the
argument, the nearest names and every argument it takes. A call that binds runs exactly as before.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Collection
from typing import Any, Callable, TypeVar

from dpsim.errors import ConfigTypeError

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T", bound=type)


def checked_arguments(public_name: str, config_settings: Collection[str] = ()) -> Callable[[F], F]:
    """Decorate a public function (``public_name``: how users call it, ``dpsim.plan``) so that a call Python
    would refuse for its arguments raises one :class:`~dpsim.errors.ConfigTypeError` instead.
    ``config_settings``: the ``PredictConfig`` settings (``dpsim.predict.config.SETTINGS``), for a function that
    takes its job as a config: ``dpsim.predict(gpus=8)`` is told to give ``gpus`` in the config."""

    def decorate(function: F) -> F:
        signature = inspect.signature(function)
        params = list(signature.parameters.values())
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        keywords = frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
        any_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
        any_positional = any(p.kind is p.VAR_POSITIONAL for p in params)
        required = [(positional.index(p.name) if p.name in positional else None, p.name) for p in params
                    if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

        def binds(args: tuple, kwargs: dict) -> bool:
            # What signature.bind decides, for the calls that bind (~1 us, not bind's ~30 us a PredictConfig: a
            # plan builds thousands); any other call goes through bind for Python's own reason.
            return ((any_positional or len(args) <= len(positional))
                    and (any_keyword or all(key in keywords for key in kwargs))
                    and all((i is not None and i < len(args)) or name in kwargs for i, name in required)
                    and not any(name in kwargs for name in positional[:len(args)]))

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not binds(args, kwargs):
                try:
                    signature.bind(*args, **kwargs)
                except TypeError as exc:
                    raise ConfigTypeError(_explain(public_name, signature, kwargs, exc, config_settings)) from None
            return function(*args, **kwargs)

        return call  # type: ignore[return-value]

    return decorate


def checked_constructor(public_name: str) -> Callable[[T], T]:
    """Decorate a public class (above its dataclass decorator) so that its constructor's arguments are checked as
    :func:`checked_arguments` checks a function's: ``dpsim.VariabilitySpec(nose_cv=0.1)`` is one
    :class:`~dpsim.errors.ConfigTypeError` naming ``noise_cv``."""

    def decorate(cls: T) -> T:
        init = cls.__init__  # a lazily compiled __init__ (dpsim.frozen) is compiled here, once
        cls.__init__ = checked_arguments(public_name)(init)  # type: ignore[misc]
        return cls

    return decorate


def _explain(public_name: str, signature: inspect.Signature, kwargs: dict[str, Any], exc: TypeError,
             config_settings: Collection[str] = ()) -> str:
    """One line: what Python refused, the nearest argument names, and the arguments the function takes."""
    params = [p for p in signature.parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in _SELF]
    names = [p.name for p in params]
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keywords = [name for name in names if name not in positional]
    takes = ", ".join([*positional, *(f"{k}=" for k in keywords)]) or "no arguments"
    if positional and keywords:
        takes = ", ".join(positional) + ", then keywords " + ", ".join(f"{k}=" for k in keywords)
    elif keywords:
        takes = "keywords " + takes
    more = [p.name for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD]
    if more:  # PredictConfig(gpus=8): its settings by name, beside its parts
        takes += f", and more by name (**{more[0]})"
    unknown = [key for key in kwargs if key not in names]
    if not unknown:
        return f"{public_name}(): {exc}; it takes {takes}"
    key = unknown[0]
    near = difflib.get_close_matches(str(key), names, n=3)
    if near:
        hint = f"did you mean {', '.join(near)}? "
    elif key in config_settings:
        where = positional[0] if positional else "config"
        hint = f"{key} is a setting of the job: give it in dpsim.PredictConfig({key}=...) as {where}; "
    else:
        hint = ""
    return f"{public_name}(): {key!r} is not one of its arguments; {hint}it takes {takes}"


_SELF = frozenset({"self", "__dataclass_self__"})
"""The instance a constructor's ``__init__`` is bound to: no argument of the user's."""
