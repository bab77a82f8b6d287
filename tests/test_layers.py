"""The package's layers: imports only go down, and no module imports itself back.

Every ``import`` in ``dpsim/`` (at module level or inside a function) is read with the
standard library's :mod:`ast`. A module's layer is its top-level unit under ``dpsim``
(``dpsim.collectives.nccl`` -> ``collectives``); :data:`LAYERS` orders them bottom-up.
An import may go to the same unit or to a lower layer; units that share a layer may not
import each other. The module graph (every import, nested ones included) has no cycle.
The documentation's "How it works" tree (docs/internals.md) names the same units in the same order.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dpsim"
LAYOUT_DOC = PACKAGE.parent / "docs" / "internals.md"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("frozen",),
    ("errors", "lazy"),
    ("units", "limits", "wording", "api_args"),
    ("files", "stats", "processes", "shipped"),
    ("hardware",),
    ("topology",),
    ("network",),
    ("collectives", "workload"),
    ("profile", "measure"),
    ("engine",),
    ("strategies",),
    ("memory",),
    ("predict",),
    ("variability",),
    ("plan",),
    ("mix",),
    ("report",),
    ("calibrate", "validate"),
    ("cli",),
    ("__main__",),
)
"""Bottom-up; a unit imports only from its own unit and from units of lower rows."""

RANK = {unit: i for i, row in enumerate(LAYERS) for unit in row}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


# The package is walked and each file parsed once per test session: every test below reads the
# same trees, and the cycle test used to walk the folder again for each import it looked up.
@functools.cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@functools.cache
def syntax_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _statements(node: ast.AST):
    """Every statement under ``node``, at any depth. An import is a statement, and no statement sits inside
    an expression, so this finds every import that ``ast.walk`` would without visiting the expressions (most
    of a module's nodes)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
            if isinstance(child, ast.stmt):
                yield child
            yield from _statements(child)


@functools.cache
def import_nodes(path: Path) -> tuple[ast.Import | ast.ImportFrom, ...]:
    """The file's import statements, nested ones included."""
    return tuple(n for n in _statements(syntax_tree(path)) if isinstance(n, (ast.Import, ast.ImportFrom)))


@functools.cache
def imports_of(name: str, path: Path) -> tuple[tuple[str, int], ...]:
    """(imported dpsim module, line) for every import in the file, nested ones included."""
    known = modules()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in import_nodes(path):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # ``from pkg import submodule`` imports the submodule.
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        out += [(t, node.lineno) for t in targets if t == "dpsim" or t.startswith("dpsim.")]
    return tuple(out)


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_unit_has_a_layer():
    units = {unit(m) for m in modules()} - {""}
    assert units <= set(RANK), f"units without a layer: {sorted(units - set(RANK))}"


def test_imports_only_go_down():
    bad = []
    for name, path in modules().items():
        here = unit(name)
        for target, line in imports_of(name, path):
            there = unit(target)
            if there == here:
                continue
            if not there or RANK.get(there, -1) >= RANK.get(here, 10**6):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {name} ({here}) imports {target} ({there})")
    assert not bad, "imports that do not go down:\n" + "\n".join(bad)


def test_no_import_cycles():
    known = modules()
    graph = {name: sorted({t for t, _ in imports_of(name, path) if t in known and t != name})
             for name, path in known.items()}
    # A package's __init__ is imported with its submodules; an __init__ that only
    # re-exports its own package's submodules lazily adds no edge back to itself.
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in graph[m]:
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_documented_tree_lists_the_layers_in_order():
    text = LAYOUT_DOC.read_text()
    block = text.split("# How it works", 1)[1].split("```", 2)[1]
    shown = [m.group(1) for m in re.finditer(r"^\s*(?:dpsim/)?([a-z_]+)(?:/|\.py)", block, re.M)]
    units = [u for row in LAYERS for u in row if u not in ("__main__", "lazy")]
    order = [u for u in shown if u in units]
    assert set(order) == set(units), f"docs/internals.md tree misses {sorted(set(units) - set(order))}"
    assert order == sorted(order, key=RANK.__getitem__), f"docs/internals.md tree not bottom-up: {order}"


HEAVY_LIBRARIES = ("torch", "plotly", "pandas", "dask", "pyarrow")
"""Imported only where needed: a module importing one of them at its top is itself heavy."""


def _heavy_modules() -> set[str]:
    heavy = set()
    for name, path in modules().items():
        for node in syntax_tree(path).body:
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(m.split(".")[0] in HEAVY_LIBRARIES for m in mods):
                heavy.add(name)
    return heavy


def test_function_level_imports_are_for_laziness_only():
    """With the layers in order no import needs to hide in a function to dodge a cycle: a
    dpsim import inside a function is allowed only in the command line (a command loads its
    machinery when it runs, so ``dpsim --help`` starts fast) or when the module it imports
    pulls in torch, plotly or pandas."""
    heavy = _heavy_modules()
    bad = []
    for name, path in modules().items():
        if unit(name) in ("cli", "__main__"):
            continue
        top = {id(n) for n in syntax_tree(path).body}
        for node in import_nodes(path):
            if isinstance(node, ast.ImportFrom) and id(node) not in top and node.level == 0 \
                    and (node.module or "").startswith("dpsim") and node.module not in heavy:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)}")
    assert not bad, "imports inside functions that could be at the top:\n" + "\n".join(bad)
