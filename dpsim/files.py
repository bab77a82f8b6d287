"""Users' files: YAML read strictly, output paths checked before any work, writes that are atomic.

Reading: safe types only, no duplicate keys, one-line errors naming the flag. Writing:
a temporary file in the target directory, flushed and fsynced, then ``os.replace``, so an
existing file is either kept whole or replaced whole, never left half-written.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from dpsim.errors import ConfigError, DpsimError


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


def check_output_path(path: str | Path, flag: str, suffixes: tuple[str, ...] = (".html", ".htm")) -> Path:
    """``path`` if it ends in one of ``suffixes`` and its directory exists, else a ConfigError naming ``flag``.

    Called before any work starts, so a bad output path never costs a computation.
    """
    p = Path(path)
    if p.suffix.lower() not in suffixes:
        raise ConfigError(f"{flag}: {str(path)!r} is not an {suffixes[0]} file; give a path ending in {suffixes[0]}")
    if not p.parent.is_dir():
        raise ConfigError(f"{flag}: directory {str(p.parent)!r} does not exist")
    return p


def write_text_atomic(path: str | Path, text: str, *, mode: int | None = None) -> Path:
    """Write ``text`` to ``path`` atomically (UTF-8); ``mode``: permission bits (default: the umask's)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
