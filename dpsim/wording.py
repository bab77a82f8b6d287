"""Small English helpers for user-facing lines (errors, extrapolation notes), so that a count, an
article or a range reads right whatever the value: "1 node", "an encoder model", "validated 2.56e+07"."""

from __future__ import annotations

import sys
from collections.abc import Callable


def warn(message: str) -> None:
    """One warning line on stderr, as every command prints them: ``dpsim: warning: ...``."""
    print(f"dpsim: warning: {message}", file=sys.stderr)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is one: ``count(1, "node")`` is "1 node", ``count(8, "GPU")``
    "8 GPUs" (``plural`` where adding an "s" is wrong)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def there_are(n: int, noun: str, plural: str | None = None) -> str:
    """"there is 1 node" or "there are 2 nodes"."""
    return f"there {'is' if n == 1 else 'are'} {count(n, noun, plural)}"


def a_an(word: str) -> str:
    """``word`` with its indefinite article, by its first letter (the words dpsim names here, GPU
    architectures, model families and layout kinds, have no silent or sounded-out first letters)."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def span(low: float, high: float, fmt: Callable[[float], str] = "{:.3g}".format) -> str:
    """"low-high", or one value where both print the same."""
    lo, hi = fmt(low), fmt(high)
    return lo if lo == hi else f"{lo}-{hi}"


def index_range(prefix: str, n: int) -> str:
    """The names of ``n`` numbered things from 0: "node0" or "node0..node3"."""
    return f"{prefix}0" if n == 1 else f"{prefix}0..{prefix}{n - 1}"


def count_are(n: int, noun: str, plural: str | None = None) -> str:
    """"1 server is" or "2 servers are"."""
    return f"{count(n, noun, plural)} {'is' if n == 1 else 'are'}"


def canonical_choice(value: object, choices) -> object:
    """The choice among ``choices`` that ``value`` spells in other letter case (``"InfiniBand"`` ->
    ``"infiniband"``, ``"DDP"`` -> ``"ddp"``), so that every choice flag takes any case as ``--gpu`` and
    ``--model`` always have; ``value`` itself where it is a choice already, is not text, or matches no choice
    or more than one (then the caller's check refuses it, naming the choices). Every choice a command parses
    (the settings of a ``PredictConfig``, ``--link`` presets, ``--rank``, ...) goes through here."""
    if not isinstance(value, str) or value in choices:
        return value
    folded = value.strip().casefold()
    matches = [c for c in choices if isinstance(c, str) and c.casefold() == folded]
    return matches[0] if len(matches) == 1 else value


def canonical_choices(values: object, choices) -> object:
    """Each item of a list or tuple of names in its canonical letter case (:func:`canonical_choice`), the
    container's type kept; anything else is returned as it is, for the caller's check to refuse."""
    if not isinstance(values, (list, tuple)):
        return values
    return type(values)(canonical_choice(v, choices) for v in values)


def param_count(n: int) -> str:
    """A model's parameter count in a title: "6.74 B params" from a million up (the form every title had), the
    count itself below ("20 params"), where billions read "2e-08 B params" (a traced toy module)."""
    return f"{n / 1e9:.3g} B params" if n >= 1e6 else count(int(n), "param")
