"""Reading users' YAML files strictly: safe types only, no duplicate keys, one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dpsim.errors import DpsimError


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML loader that refuses a key given twice in one mapping."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def load_yaml_text(text: str) -> Any:
    """Parse YAML text with the strict loader (raises ``yaml.YAMLError``)."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


def read_yaml_file(path: str | Path, flag: str, error: type[DpsimError]) -> Any:
    """Read and parse a user's YAML file; every failure is ``error`` with one line naming ``flag``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{flag}: cannot read {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise error(f"{flag}: {str(path)!r} is not a UTF-8 text file; expected a YAML file") from None
    try:
        return load_yaml_text(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = f" ({exc.problem})" if getattr(exc, "problem", None) else ""
        raise error(f"{path}: not valid YAML{where}{problem}") from None
