"""Work shared between predictions in one process: pure steps memoized by their arguments.

A sweep predicts thousands of points that differ in one or two axes; most steps of a
prediction (the model, its compute times, the DDP step program) depend on a few of the
config's fields only, and :func:`memoized` computes each distinct one once. A key is made
of *every* argument (so a new argument can never be forgotten): plain values as they are,
frozen dataclasses, tuples, lists and dicts field by field, and objects that a memoized
call returned by identity (they are kept alive with the entry, so an identity is never
reused). Topologies and collective costs have their own caches
(:func:`dpsim.topology.load.load_preset`, :class:`dpsim.collectives.nccl.NcclCollectives`).

Entries are kept per function, least recently used dropped first.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any, Callable

MAX_ENTRIES = 128
"""Entries kept per memoized function."""

_CACHES: dict[str, OrderedDict] = {}
_RETURNED: dict[int, Any] = {}  # id -> object returned by a memoized call (kept alive)
_HOLDERS: dict[int, int] = {}  # id -> how many cache entries hold that object


class _Unkeyable(Exception):
    pass


class _Same:
    """A key part that matches one object only (it holds it: its identity cannot be reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj


class _Frozen:
    """The key of a frozen dataclass whose fields hold no list or dict (nothing in it can change),
    with its hash computed once: a model's key is a tree of thousands of ops, and hashing or
    rebuilding it on every call was most of the time of a batch of predictions."""

    __slots__ = ("key", "hash")

    def __init__(self, key: tuple):
        self.key = key
        self.hash = hash(key)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return other is self or (isinstance(other, _Frozen) and other.hash == self.hash and other.key == self.key)

    def __reduce__(self):
        # Hashes of str differ between processes (a sweep's workers): rehash where it lands.
        return _Frozen, (self.key,)


_KEY_ATTR = "_dpsim_memo_key"
"""Where a frozen dataclass keeps its :class:`_Frozen` key once computed (set with
``object.__setattr__``, as a frozen dataclass's own ``__post_init__`` would)."""


def _key(value: Any) -> Any:
    return _key_of(value)[0]


_PLAIN = (bool, int, float, str, bytes)

_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}
"""A type -> its dataclass fields' names (``None``: not a frozen dataclass), found once per type:
:func:`dataclasses.fields` filters a dataclass's fields anew on each call, and a model's key visits
thousands of ops (keying 21 freshly built catalog models: 1.31 -> 0.79 s of CPU)."""


def _field_names(cls: type) -> tuple[str, ...] | None:
    try:
        return _FIELD_NAMES[cls]
    except KeyError:
        pass
    if not dataclasses.is_dataclass(cls):
        names = None
    elif not cls.__dataclass_params__.frozen:
        raise _Unkeyable
    else:
        names = tuple(f.name for f in dataclasses.fields(cls))
    _FIELD_NAMES[cls] = names
    return names


def _key_of(value: Any) -> tuple[Any, bool]:
    """``(key, immutable)``: ``immutable`` when nothing in ``value`` is a list or a dict."""
    if value is None or isinstance(value, _PLAIN):
        return value, True
    if _RETURNED.get(id(value)) is value:
        return _Same(value), True
    cls = type(value)
    names = _field_names(cls)
    if names is not None:
        holder = getattr(value, "__dict__", None)
        cached = holder.get(_KEY_ATTR) if holder is not None else None
        if cached is not None:
            return cached, True
        key = [cls.__qualname__]
        immutable = True
        for name in names:
            k, i = _key_of(getattr(value, name))
            key.append(k)
            immutable = immutable and i
        key = tuple(key)
        if immutable and holder is not None:
            frozen = _Frozen(key)
            object.__setattr__(value, _KEY_ATTR, frozen)
            return frozen, True
        return key, False
    if isinstance(value, tuple):
        key = ["tuple"]
        immutable = True
        for v in value:
            k, i = _key_of(v)
            key.append(k)
            immutable = immutable and i
        return tuple(key), immutable
    if isinstance(value, list):
        return ("list",) + tuple(_key(v) for v in value), False
    if isinstance(value, dict):
        return ("dict",) + tuple(sorted((str(k), _key(v)) for k, v in value.items())), False
    raise _Unkeyable


def memoized(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, computed once per distinct arguments (see the module docstring).

    Arguments that cannot be keyed (a mutable object) make the call run unmemoized.
    """
    try:
        key = (tuple(_key(a) for a in args), tuple(sorted((k, _key(v)) for k, v in kwargs.items())))
        hash(key)
    except (_Unkeyable, TypeError):
        return fn(*args, **kwargs)
    cache = _CACHES.setdefault(f"{fn.__module__}.{fn.__qualname__}", OrderedDict())
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = fn(*args, **kwargs)
    cache[key] = value
    _RETURNED[id(value)] = value
    _HOLDERS[id(value)] = _HOLDERS.get(id(value), 0) + 1
    while len(cache) > MAX_ENTRIES:
        _, old = cache.popitem(last=False)
        # Counted, not searched: scanning every cache on each eviction was a sixth of a sweep.
        left = _HOLDERS[id(old)] - 1
        if left:
            _HOLDERS[id(old)] = left
        else:  # keys still holding it match it only by identity: safe to forget
            del _HOLDERS[id(old)]
            _RETURNED.pop(id(old), None)
    return value


def clear() -> None:
    """Forget every memoized result."""
    _CACHES.clear()
    _RETURNED.clear()
    _HOLDERS.clear()
