"""The notebooks in notebooks/ are stored without outputs and execute cleanly (nbclient),
each in under a minute, and every plotly figure they show is valid."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import nbformat
import plotly.io as pio
import pytest
from nbclient import NotebookClient

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
PLOTLY_MIME = "application/vnd.plotly.v1+json"
KERNEL = "dpsim-test-python"


@pytest.fixture
def kernel(tmp_path, monkeypatch) -> str:
    """A kernelspec that runs *this* interpreter (the stock one runs whatever ``python`` is on PATH)."""
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "dpsim tests", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return KERNEL


def execute(path: Path, kernel: str, prepend: str | None = None) -> tuple[nbformat.NotebookNode, float]:
    nb = nbformat.read(path, as_version=4)
    if prepend:
        nb.cells.insert(0, nbformat.v4.new_code_cell(prepend))
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=120, kernel_name=kernel, allow_errors=False,
                   resources={"metadata": {"path": str(NOTEBOOKS_DIR)}}).execute()
    return nb, time.perf_counter() - t0


def outputs(nb) -> list[dict]:
    return [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]


def text_of(nb) -> str:
    parts = []
    for out in outputs(nb):
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out and "text/plain" in out["data"]:
            parts.append(out["data"]["text/plain"])
    return "\n".join(parts)


def test_there_are_five_notebooks():
    assert [p.name for p in NOTEBOOKS] == ["01_fabric_and_scale.ipynb", "02_overlap_and_buckets.ipynb",
                                          "03_memory.ipynb", "04_calibrate_predict.ipynb",
                                          "05_buying_for_a_mix.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: a code cell has outputs (strip them)"
            assert cell.execution_count is None, f"{path.name}: a code cell has an execution count"
        assert "execution" not in cell.get("metadata", {})


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_and_its_figures_are_valid(path, kernel):
    nb, elapsed = execute(path, kernel)
    assert elapsed < 60, f"{path.name} took {elapsed:.0f} s"
    figures = [out["data"][PLOTLY_MIME] for out in outputs(nb) if PLOTLY_MIME in out.get("data", {})]
    skipped = "rest of this notebook is skipped" in text_of(nb)
    assert figures or skipped, f"{path.name} shows no figure"
    for fig in figures:
        parsed = pio.from_json(json.dumps(fig))
        assert parsed.data, "a figure without traces"
        for trace in parsed.data:
            values = trace.x if trace.x is not None else trace.y
            assert values is not None and len(values) > 0, f"{path.name}: trace {trace.name!r} is empty"
    for out in outputs(nb):  # plotly.js is inlined: figures draw offline (plotly's own notebook
        html = out.get("data", {}).get("text/html", "")  # renderer links MathJax, used only for LaTeX)
        assert not re.search(r"<script[^>]*\bsrc=[\"']?https?://[^\"'>]*plotly", html)
        assert not re.search(r"https?://cdn\.plot\.ly/plotly-", html)


@pytest.mark.slow
def test_calibration_notebook_skips_without_dpsim_calibrate(kernel):
    """Without dpsim.calibrate (or any profile) notebook 4 says so and runs to the end."""
    hide = ("import importlib.util as _u\n_find = _u.find_spec\n"
            "_u.find_spec = lambda name, *a, **k: None if name == 'dpsim.calibrate' else _find(name, *a, **k)")
    nb, _ = execute(NOTEBOOKS_DIR / "04_calibrate_predict.ipynb", kernel, prepend=hide)
    text = text_of(nb)
    assert "dpsim.calibrate is not installed" in text and "skipped" in text
    assert not [o for o in outputs(nb) if PLOTLY_MIME in o.get("data", {})]


@pytest.mark.slow
def test_calibration_notebook_takes_a_profile_path(kernel, monkeypatch):
    profile = pytest.importorskip("dpsim.profile.io")
    names = profile.shipped_profile_names()
    if not names:
        pytest.skip("no shipped calibration profile yet")
    path = profile.shipped_profiles_dir() / f"{names[-1]}.json"
    monkeypatch.setenv("DPSIM_PROFILE", str(path))
    nb, _ = execute(NOTEBOOKS_DIR / "04_calibrate_predict.ipynb", kernel)
    assert f"profiles: ['{path}']" in text_of(nb)
