"""Users' files: read with a size cap, YAML read strictly, output paths checked before any work, atomic writes.

Reading: only a regular file (``/dev/zero`` or a FIFO would never end or never start), at
most :data:`~dpsim.limits.MAX_INPUT_FILE_BYTES`, UTF-8; YAML with safe types only, no
duplicate keys, and aliases expanding to at most :data:`~dpsim.limits.MAX_YAML_NODES`
nodes (a "billion laughs" file is refused before anything walks it). Every failure is
one line naming the flag. Writing: a temporary file in the target directory, flushed and
fsynced, then ``os.replace``, so an existing file is either kept whole or replaced whole,
never left half-written, and an interrupted write leaves no temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from dpsim.errors import ConfigError, DpsimError
from dpsim.limits import MAX_INPUT_FILE_BYTES, MAX_YAML_NODES, short


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML loader that refuses a key given twice in one mapping and oversized alias expansions."""

    def compose_document(self) -> yaml.Node | None:
        node = super().compose_document()
        if node is not None:
            _check_expanded_size(node)
        return node


def _check_expanded_size(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand to more than MAX_YAML_NODES nodes, or refer to themselves.

    Aliases share nodes, so the document is a graph; the size of its expansion is counted
    with one memo per node (linear in the file), without building anything.
    """
    size: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            children = _children(node)
            total = 1 + sum(size[id(c)] for c in children)
            if total > MAX_YAML_NODES:
                raise yaml.YAMLError(f"more than {MAX_YAML_NODES:,} values once its aliases are expanded")
            size[key] = total
            continue
        if key in size:
            continue
        if key in active:
            raise yaml.YAMLError("an alias refers to the collection that contains it")
        active.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            # ``<<: *base``: YAML's merge key, flattened by construct_mapping below (keys written here
            # override merged ones, as YAML says). Constructing it as a key failed: "could not determine
            # a constructor for the tag 'tag:yaml.org,2002:merge'".
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # a list or mapping as a key: unhashable, and never a valid key here
            raise yaml.constructor.ConstructorError(None, None, "a key is a list or a mapping",
                                                    key_node.start_mark) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"key {short(key)} appears twice",
                                                    key_node.start_mark)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)

# YAML 1.2 (and JSON) read ``4e2`` and ``1e-3`` as numbers; PyYAML follows YAML 1.1, whose float needs a
# dot, so ``nic_gbit_per_s: 4e2`` was the text '4e2' and refused as "'4e2' is not valid; expected
# number>0". Resolved after PyYAML's own float and int patterns, so only that spelling changes.
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


class DuplicateJsonKey(ValueError):
    """A JSON object names one key twice (``json`` keeps the last in silence)."""


def json_object_no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    """``object_pairs_hook`` for a user's JSON: a key written twice is an error, as in the YAML files
    (a profile with two ``"bus_bandwidth_bytes_per_s"`` used whichever came last)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateJsonKey(f"key {short(key)} appears twice in one object")
        out[key] = value
    return out


def load_yaml_text(text: str) -> Any:
    """Parse YAML text with the strict loader (raises ``yaml.YAMLError`` for every problem of the text)."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise yaml.YAMLError("nested too deeply") from None
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit limit
        text = " ".join(str(exc).split())
        raise yaml.YAMLError("a number has too many digits" if "digits" in text else text[:120]) from None


def read_text_capped(path: str | Path, flag: str, error: type[DpsimError], *, what: str = "file",
                     max_bytes: int = MAX_INPUT_FILE_BYTES) -> str:
    """The UTF-8 text of a user's regular file of at most ``max_bytes``; else ``error`` naming ``flag``.

    A device, FIFO or directory is refused before it is opened (``/dev/zero`` never ends,
    a FIFO blocks until a writer comes), and at most ``max_bytes + 1`` bytes are read.
    """
    if isinstance(path, str) and not path.strip():
        # Path('') is '.': ``dpsim mix ''`` was "cannot read '.': it is a directory", a folder nobody named.
        raise error(f"{flag}: {path!r} is not a file name; give the path of a {what}")
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise error(f"{flag}: cannot read {str(path)!r}: {exc.strerror}") from None
    except ValueError:  # an embedded NUL byte
        raise error(f"{flag}: {short(str(path))} is not a valid file name") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, FIFO or socket)"
        raise error(f"{flag}: cannot read {str(path)!r}: it is {kind}; expected a {what}")
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"{flag}: cannot read {str(path)!r}: {exc.strerror}") from None
    if len(data) > max_bytes:
        raise error(f"{flag}: {str(path)!r} is larger than {max_bytes:,} bytes; expected a {what} of at most "
                    f"{max_bytes // 1024:,} KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{flag}: {str(path)!r} is not a UTF-8 text file; expected a {what}") from None


def read_yaml_file(path: str | Path, flag: str, error: type[DpsimError]) -> Any:
    """Read and parse a user's YAML file; every failure is ``error`` with one line naming ``flag``."""
    text = read_text_capped(path, flag, error, what="YAML file")  # the name as given: '' is not '.'
    path = Path(path)
    try:
        data = load_yaml_text(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or (str(exc) if type(exc) is yaml.YAMLError else None)
        detail = f" ({' '.join(str(problem).split())[:160]})" if problem else ""
        raise error(f"{path}: not valid YAML{where}{detail}") from None
    if data is None:
        # Every caller reads a mapping; an empty file was "mix: None is not valid", "the document is NoneType"
        # or "(top level): None is not valid", each naming a value the user never wrote.
        raise error(f"{path}: holds no YAML document (the file is empty or only comments); expected a mapping "
                    f"of keys")
    return data


def path_kind(path: str | Path, flag: str, error: type[DpsimError] = ConfigError) -> str | None:
    """``"dir"``, ``"file"`` (regular), ``"other"`` (device, FIFO, socket) or ``None`` where nothing is.

    ``Path.exists()``/``is_file()``/``is_dir()`` raise for a name the file system cannot hold (too
    long: ENAMETOOLONG) or may not look at (EACCES): an OSError traceback. Here those are ``error``
    naming ``flag`` in one line.
    """
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise error(f"{flag}: cannot use {short(str(path))}: {exc.strerror}") from None
    except ValueError:  # an embedded NUL byte
        raise error(f"{flag}: {short(str(path))} is not a valid file name") from None
    return "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"


def refuse_special_output(path: str | Path, flag: str, error: type[DpsimError] = ConfigError) -> None:
    """Refuse an output path that names a device, FIFO or socket: the atomic write renames its
    temporary file over the name, so ``calibrate --out /dev/zero --force`` run as root replaced the
    machine's /dev/zero with a JSON profile."""
    if path_kind(path, flag, error) == "other":
        raise error(f"{flag}: {short(str(path))} is a device, FIFO or socket, not a file; writing would "
                    f"replace it; choose another path")


def refuse_output_over_inputs(path: str | Path, flag: str,
                              inputs: Iterable[tuple[str, str | Path | None]] = ()) -> None:
    """Refuse an output ``path`` that is one of the ``inputs`` ((what names it, path) pairs) the command
    reads: ``dpsim mix jobs.html --html jobs.html`` replaced the mix file with its page, ``report --topology
    t.html -o t.html`` the topology. A missing input or a name that is no path (a shipped profile's) is skipped."""
    for what, source in inputs:
        if source is None or str(source).strip() == "":
            continue
        try:
            same = os.path.samefile(path, source)
        except (OSError, ValueError):  # either missing, or not a path at all
            same = False
        if same:
            raise ConfigError(f"{flag}: {short(str(path))} is the {what} file this command reads; writing would "
                              f"replace it; choose another {flag.split('/')[-1]}")


def check_output_path(path: str | Path, flag: str, suffixes: tuple[str, ...] = (".html", ".htm"), *,
                      inputs: Iterable[tuple[str, str | Path | None]] = ()) -> Path:
    """``path`` if it ends in one of ``suffixes`` and its directory exists, else a ConfigError naming ``flag``;
    never one of the ``inputs`` the command reads (:func:`refuse_output_over_inputs`).

    Called before any work starts, so a bad output path never costs a computation.
    """
    p = Path(path)
    refuse_output_over_inputs(p, flag, inputs)
    if p.suffix.lower() not in suffixes:
        raise ConfigError(f"{flag}: {str(path)!r} is not an {suffixes[0]} file; give a path ending in {suffixes[0]}")
    # Checked where atomic_output writes: through a link (a link into a directory that is gone failed only after
    # the work, "cannot write '/gone/x.html'").
    target = _written_path(p)
    parent = path_kind(target.parent, flag)
    if parent != "dir":
        # A file where the directory should be (out.yaml/t.html) is not a missing directory.
        what = "does not exist" if parent is None else "is not a directory"
        raise ConfigError(f"{flag}: directory {str(target.parent)!r} {what}")
    if path_kind(p, flag) == "dir":
        raise ConfigError(f"{flag}: {str(path)!r} is a directory; give a file path ending in {suffixes[0]}")
    refuse_special_output(p, flag)
    check_writable_dir(p, flag)
    return p


def check_writable_dir(path: str | Path, flag: str) -> None:
    """Create and remove a temporary file next to ``path``, as the atomic write will, before any work.

    A directory the user cannot write (read-only, /proc, no permission) or a file name too long
    for its file system failed only at the end, with an OSError traceback after the computation.
    """
    with contextlib.suppress(OSError):
        os.unlink(_temp_beside(_written_path(Path(path)), flag))


def _written_path(path: Path) -> Path:
    """Where :func:`atomic_output` writes ``path``: through a symbolic link, as ``open(path, "w")`` does."""
    try:
        return Path(os.path.realpath(path)) if path.is_symlink() else path
    except OSError:  # a name too long to look at: the checks that follow name it
        return path


def _temp_beside(path: Path, flag: str, error: type[DpsimError] = ConfigError) -> Path:
    """An empty temporary file in ``path``'s directory, named after it (what an atomic write
    renames over ``path``); a directory that cannot take it is a ConfigError naming ``flag``."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise error(f"{flag}: cannot write {short(str(path))}: {exc.strerror}") from None
    os.close(fd)
    return Path(tmp)


def _umask_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _existing_or_umask_mode(path: Path) -> int:
    """The permission bits a plain ``open(path, "w")`` leaves: an existing file keeps its own (a report
    or sweep written over a 0600 file came out 0644, readable by all), a new one gets the umask's."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return _umask_mode()
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else _umask_mode()


@contextlib.contextmanager
def atomic_output(path: str | Path, *, mode: int | None = None, flag: str = "output",
                  error: type[DpsimError] = ConfigError) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; when the block ends normally it becomes ``path`` atomically.

    For writers that want a file name (pandas, pyarrow). If the block raises (or is
    interrupted) the temporary file is removed and ``path`` is left as it was. ``mode``:
    permission bits (default: what a plain ``open`` gives: an existing file's own, else the umask's). A write that
    fails (no permission, a full disk) is an ``error`` (ConfigError) naming ``flag``, not an OSError.
    """
    # Written through the link, as open(path, "w") writes: the rename replaced the link itself with a file and left
    # its target as it was (report -o latest.html -> runs/7/report.html), and a link to a missing directory became
    # a file where open() says the directory does not exist.
    path = _written_path(Path(path))
    refuse_special_output(path, flag, error)  # (again: a FIFO may have been made there since the check)
    tmp = _temp_beside(path, flag, error)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, _existing_or_umask_mode(path) if mode is None else mode)
        refuse_special_output(path, flag, error)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise error(f"{flag}: cannot write {short(str(path))}: {exc.strerror or exc}; it is left as it "
                          f"was") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | Path, text: str, *, mode: int | None = None, flag: str = "output",
                      error: type[DpsimError] = ConfigError) -> Path:
    """Write ``text`` to ``path`` atomically (UTF-8); ``mode``: permission bits (default: an existing file's own, else the umask's);
    ``flag``: named by the one-line ``error`` of a failed write."""
    path = Path(path)
    with atomic_output(path, mode=mode, flag=flag, error=error) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path
