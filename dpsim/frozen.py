"""``@frozen_dataclass``: the house's frozen keyword-only dataclass, made with one compile instead of six.

``@frozen_dataclass`` is ``@dataclasses.dataclass(frozen=True, kw_only=True)``: the same fields,
``__init__`` (the same text), frozenness and ``FrozenInstanceError`` messages, ``dataclasses.fields``/
``replace``/``asdict``, ``__dataclass_params__``, and the same ``repr``, ``==`` and ``hash`` of every
instance (tests/test_frozen.py holds both side by side). What differs is how the class is made.
Before Python 3.13 the standard decorator writes each method it adds as source text and compiles it
with an ``exec`` of its own: six per frozen class (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__``, ``__delattr__``), ~0.15 ms each on a 2-core machine, ~1.1 ms per class, and
``dpsim predict`` makes ~170 classes at start-up: ~0.2 s of CPU, its largest single share (more than
importing numpy). Here ``__init__`` is compiled from the standard text (its signature is the fields'),
when it is first used (:class:`_LazyInit`), and the other five are closures over the class's field
names: nothing to compile. A six-field class: 0.84 ms standard, 0.08 ms here, 0.35 ms once an instance
is made (best of 5 x 200, 2 cores under load).

A class with a dataclass base is made by the standard frozen decorator (the base's frozenness is
checked against it), with the three closures; there are a few.
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
import reprlib
import sys
from typing import Any, Callable, TypeVar

T = TypeVar("T", bound=type)


class _Factory:
    """The default of a field with a ``default_factory`` in ``__init__``'s signature (``<factory>``, as the
    standard decorator shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()

_PARAMS = {init: dataclasses.dataclass(frozen=True, kw_only=True, init=init)(type("_Params", (), {})).__dataclass_params__
           for init in (True, False)}
"""``__dataclass_params__`` of a standard frozen keyword-only dataclass, with and without ``init``: what
``dataclasses`` and a subclass's decorator read (``frozen``, ``eq``, ...)."""


def frozen_dataclass(cls: T | None = None, /, *, init: bool = True) -> Any:
    """``@dataclasses.dataclass(frozen=True, kw_only=True)``, without compiling ``__repr__``, ``__eq__``,
    ``__hash__``, ``__setattr__`` and ``__delattr__`` per class. ``@frozen_dataclass(init=False)``: the
    class writes its own ``__init__``."""
    if cls is None:
        return lambda c: _make(c, init)
    return _make(cls, init)


def _make(cls: T, init: bool) -> T:
    own = cls.__dict__
    # The standard decorator's rules, read before it runs: a __hash__ = None that Python put there because
    # the class defines __eq__ is not the class's own hash; a class without a docstring gets its signature.
    class_hash = own.get("__hash__", dataclasses.MISSING)
    explicit_hash = not (class_hash is dataclasses.MISSING or (class_hash is None and "__eq__" in own))
    documented = bool(own.get("__doc__"))
    if any(hasattr(base, "__dataclass_fields__") for base in cls.__mro__[1:]):
        cls = dataclasses.dataclass(frozen=True, kw_only=True, init=init, repr=False, eq=False)(cls)
        fields = dataclasses.fields(cls)
    else:
        # frozen=False and no __init__: the standard decorator compiles nothing.
        cls = dataclasses.dataclass(kw_only=True, init=False, repr=False, eq=False)(cls)
        fields = dataclasses.fields(cls)
        pseudo = [f for name, f in cls.__dataclass_fields__.items() if f not in fields]
        if any("InitVar" in str(f.type) for f in pseudo) or not all(f.kw_only for f in fields):
            raise TypeError(f"{cls.__qualname__}: @frozen_dataclass takes neither an InitVar nor a positional field; "
                            f"use @dataclass(frozen=True, kw_only=True)")
        for name in ("__setattr__", "__delattr__"):
            if name in own:
                raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
        if init and "__init__" not in own:
            cls.__init__ = _LazyInit(cls, fields, hasattr(cls, "__post_init__"))  # type: ignore[misc,assignment]
        _frozen(cls, tuple(f.name for f in fields))
        if not documented:
            try:
                cls.__doc__ = cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")
            except (TypeError, ValueError):
                cls.__doc__ = cls.__name__

    cls.__dataclass_params__ = _PARAMS[init]  # type: ignore[attr-defined]
    if "__repr__" not in own:
        shown = tuple(f.name for f in fields if f.repr)

        @reprlib.recursive_repr()
        def __repr__(self: Any) -> str:
            return self.__class__.__qualname__ + "(" + ", ".join(
                [f"{name}={getattr(self, name)!r}" for name in shown]) + ")"

        _method(cls, __repr__)

    compared = _values(tuple(f.name for f in fields if f.compare))
    if "__eq__" not in own:
        def __eq__(self: Any, other: Any) -> Any:
            if other.__class__ is self.__class__:
                return compared(self) == compared(other)
            return NotImplemented

        _method(cls, __eq__)

    if not explicit_hash:
        hashed = _values(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))

        def __hash__(self: Any) -> int:
            return hash(hashed(self))

        _method(cls, __hash__)
    return cls


def _values(names: tuple[str, ...]) -> Callable[[Any], tuple]:
    """``obj -> (obj.a, obj.b, ...)``: the tuple the standard methods compare and hash (attrgetter gives a
    bare value for one name, and takes no zero)."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    if names:
        name = names[0]
        return lambda obj: (getattr(obj, name),)
    return lambda obj: ()


def _method(cls: type, function: Callable) -> None:
    function.__qualname__ = f"{cls.__qualname__}.{function.__name__}"
    function.__module__ = cls.__module__
    setattr(cls, function.__name__, function)


def _frozen(cls: type, names: tuple[str, ...]) -> None:
    """The standard frozen ``__setattr__`` and ``__delattr__``: a field, or anything on the class itself
    (not on a subclass that is no dataclass), cannot be assigned or deleted."""
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    _method(cls, __setattr__)
    _method(cls, __delattr__)


class _LazyInit:
    """A class's ``__init__`` until it is first looked up (the first instance, ``inspect.signature``), then
    the compiled function in its place: ``dpsim predict`` makes an instance of about half the classes it
    imports (86 of 159), and the other half never pay for the compile."""

    def __init__(self, cls: type, fields: tuple[dataclasses.Field, ...], post_init: bool) -> None:
        self.cls, self.fields, self.post_init = cls, fields, post_init

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        function = self.cls.__dict__.get("__init__")
        if function is self:
            function = _init(self.cls, self.fields, self.post_init)
            type.__setattr__(self.cls, "__init__", function)
        return function.__get__(obj, owner)


def _init(cls: type, fields: tuple[dataclasses.Field, ...], post_init: bool) -> Callable:
    """The standard decorator's ``__init__`` of a frozen keyword-only class (Python 3.10-3.12's text): one
    compile."""
    self_name = "__dataclass_self__" if any(f.name == "self" for f in fields) else "self"
    local: dict[str, Any] = {f"_type_{f.name}": f.type for f in fields}
    local.update({"_HAS_DEFAULT_FACTORY": _FACTORY, "__dataclass_builtins_object__": object, "_return_type": None})
    params, body = [], []
    for f in fields:
        default = f"_dflt_{f.name}"
        if f.default_factory is not dataclasses.MISSING:
            local[default] = f.default_factory
            value = f"{default}() if {f.name} is _HAS_DEFAULT_FACTORY else {f.name}" if f.init else f"{default}()"
        elif f.init:
            if f.default is not dataclasses.MISSING:
                local[default] = f.default
            value = f.name
        else:
            continue  # read from the class attribute (its default), or left unset
        body.append(f"__dataclass_builtins_object__.__setattr__({self_name},{f.name!r},{value})")
    for f in fields:
        if f.init:
            default = "" if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING else \
                f"=_dflt_{f.name}" if f.default is not dataclasses.MISSING else "=_HAS_DEFAULT_FACTORY"
            params.append(f"{f.name}:_type_{f.name}{default}")
    if post_init:
        body.append(f"{self_name}.__post_init__()")
    args = ",".join([self_name] + (["*"] + params if params else []))
    lines = "\n".join(f"  {b}" for b in body or ["pass"])
    text = f"def __create_fn__({', '.join(local)}):\n def __init__({args})->_return_type:\n{lines}\n return __init__"
    module = sys.modules.get(cls.__module__)
    namespace: dict[str, Any] = {}
    # Compiled without this module's ``from __future__ import annotations`` (exec would inherit it), as the
    # standard decorator compiles it: the annotations are the fields' types, not strings of the local names.
    code = compile(text, "<string>", "exec", dont_inherit=True)
    exec(code, module.__dict__ if module is not None else {}, namespace)  # noqa: S102 - the standard decorator's way
    function = namespace["__create_fn__"](**local)
    function.__qualname__ = f"{cls.__qualname__}.__init__"
    return function
