"""Run golden cases in-process and compare them with the frozen files.

``python tests/golden/regenerate.py`` rewrites the files; ``tests/test_golden.py``
compares. Both go through :func:`run_case`, the CLI exactly as a user runs it.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def run_case(argv: list[str]) -> dict:
    """The JSON a CLI invocation prints (run from the repository root)."""
    import os

    from dpsim.cli import main

    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    finally:
        os.chdir(cwd)
    if code != 0:
        raise RuntimeError(f"dpsim {' '.join(argv)} exited {code}: {err.getvalue().strip()}")
    return json.loads(out.getvalue())


def golden_path(family: str) -> Path:
    return HERE / f"{family}.json"


def load_golden(family: str) -> dict:
    return json.loads(golden_path(family).read_text())


def differences(expected, actual, path: str = "", rel_tol: float = 0.0) -> list[str]:
    """Every place where ``actual`` differs from ``expected`` (``rel_tol`` for floats)."""
    out: list[str] = []
    if isinstance(expected, dict) and isinstance(actual, dict):
        for k in sorted(set(expected) | set(actual), key=str):
            if k not in actual:
                out.append(f"{path}.{k}: missing")
            elif k not in expected:
                out.append(f"{path}.{k}: new")
            else:
                out += differences(expected[k], actual[k], f"{path}.{k}", rel_tol)
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: {len(expected)} items -> {len(actual)}"]
        for i, (a, b) in enumerate(zip(expected, actual)):
            out += differences(a, b, f"{path}[{i}]", rel_tol)
        return out
    if isinstance(expected, float) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        if expected == actual or math.isclose(expected, actual, rel_tol=rel_tol, abs_tol=0.0):
            return []
        return [f"{path}: {expected!r} -> {actual!r}"]
    if expected != actual:
        return [f"{path}: {expected!r} -> {actual!r}"]
    return []
