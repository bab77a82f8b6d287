"""The accuracy table of README.md, VALIDATION.md and docs/accuracy.md cannot go stale.

``validation/summary.py`` makes it from the committed validation results; these tests hold that
every committed copy is what the script writes now, and that each figure is the one the area's
own VALIDATION.md section states (the sections are held to their scripts by
tests/test_accuracy_*.py and tests/test_model_error.py).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

import summary  # noqa: E402

VALIDATION = (ROOT / "VALIDATION.md").read_text()


def _between(text: str, begin: str, end: str) -> str:
    return text.split(begin, 1)[1].split(end, 1)[0]


def _section(heading: str) -> str:
    return VALIDATION.split(heading, 1)[1].split("\n## ", 1)[0]


def test_the_committed_tables_are_what_the_script_writes():
    block = summary.table()
    for path in summary.TARGETS:
        text = path.read_text()
        assert summary.BEGIN in text and summary.END in text, path
        assert summary.place(text, block) == text, \
            f"{path.relative_to(ROOT)}: the accuracy table is stale: run python validation/summary.py --write"


def test_validation_md_opens_with_the_table():
    title, rest = VALIDATION.split("\n", 1)
    assert title.startswith("# ") and rest.lstrip("\n").startswith(summary.BEGIN)


def test_each_figure_is_the_one_its_section_states():
    import accuracy_compute
    import accuracy_ddp
    import accuracy_layouts
    import model_error

    sections = {
        "compute": _section(accuracy_compute.HEADING),
        "ddp": _between(VALIDATION, accuracy_ddp.BEGIN, accuracy_ddp.END),
        "layout": _between(VALIDATION, accuracy_layouts.BEGIN, accuracy_layouts.END),
    }
    areas = summary.residual_rows()
    assert [a.pool for a in areas] == ["compute", "ddp", "layout", "collective"]
    for area in areas:
        pct = summary._pct
        if area.pool in sections:  # their headline line: "median ... X %, worst Y %"
            assert re.search(rf"median[^\n]*{re.escape(pct(area.median_abs_error))}[^\n]*worst "
                             rf"{re.escape(pct(area.worst_abs_error))}", sections[area.pool]), area.pool
        # a pool that gathers several tables is reported per table ("layout layouts") as well
        label = f"{area.pool} {summary.AREA_SUITES[area.pool]}" if area.pool in summary.AREA_SUITES else area.pool
        row = next(l for l in _section(model_error.HEADING).splitlines() if l.startswith(f"| {label} | "))
        assert row.startswith(f"| {label} | {area.rows} | ") and f"| {pct(area.coverage)} |" in row, (label, row)


def test_the_fabric_figures_are_the_collectives_sections():
    import accuracy_collectives

    classes = json.loads(summary.COLLECTIVES_LOSO.read_text())["classes"]
    section = _section(accuracy_collectives.HEADING)
    line = next(l for l in summary.table().splitlines() if l.startswith("All-reduce by fabric"))
    for name, v in classes.items():
        figure = summary._pct(v["geomean_abs_error"])
        assert f"| {name} | {v['systems']} | {v['scored']} | {figure} |" in section
        assert f"{name} {figure} ({v['scored']} rows)" in line


def test_the_loops_come_from_parts_1_and_2():
    loops = summary.loop_rows(VALIDATION)
    large = summary._section(VALIDATION, "## Large-model training runs")
    # the large-model headline counts the rows its table lists, one per predicted run
    mix = summary._section(VALIDATION, "## Two DDP jobs sharing")
    # ... and the two-job check two steps per job of its table (alone and together)
    assert [a.rows for a in loops] == [len(re.findall(r"^\| R\d+ \|", large, re.M)), 13, 16,
                                       2 * len(re.findall(r"^\| (mlp|transformer) \|", mix, re.M))]
    assert all(0 < a.median_abs_error <= a.worst_abs_error < 1 for a in loops)
    # the large-model line's coverage is its runs' in the layout pool, every predicted run there once
    import model_error

    row = next(l for l in _section(model_error.HEADING).splitlines() if l.startswith("| layout large-models | "))
    assert row.startswith(f"| layout large-models | {loops[0].rows} | ") and f"| {summary._pct(loops[0].coverage)} |" in row
    assert [a.coverage is None for a in loops] == [False, True, True, True]
    with pytest.raises(summary.StaleSource, match="Part 2"):
        summary.loop_rows(VALIDATION.replace("## Part 2:", "## Part two:"))
    with pytest.raises(summary.StaleSource, match="headline"):
        summary.loop_rows(VALIDATION.replace("**median |error|", "**median error"))


def test_place_replaces_only_between_the_markers():
    block = f"{summary.BEGIN}\nnew\n{summary.END}"
    text = f"# T\n\nbefore\n{summary.BEGIN}\nold\n{summary.END}\nafter\n"
    assert summary.place(text, block) == f"# T\n\nbefore\n{block}\nafter\n"
    assert summary.place("# T\n\nbody\n", block, title="# ") == f"# T\n\n{block}\n\nbody\n"
    with pytest.raises(summary.StaleSource):
        summary.place("no title\n", block)


def test_run_history_stays_last():
    import sections

    assert VALIDATION.count(sections.APPENDIX) == 1
    assert "\n## " not in VALIDATION.split(sections.APPENDIX, 1)[1]


def test_a_new_section_goes_before_the_appendix(tmp_path):
    import sections

    doc = tmp_path / "VALIDATION.md"
    doc.write_text(f"# T\n\n## A\n\na\n{sections.APPENDIX}\nold run\n")
    sections.replace_section(doc, "## B", "b")
    sections.replace_section(doc, "## A", "a2")
    assert doc.read_text() == f"# T\n\n## A\n\na2\n\n## B\n\nb\n{sections.APPENDIX}\nold run\n"
