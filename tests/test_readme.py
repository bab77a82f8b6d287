"""The README and the documentation site stay true: every command they show runs, their examples
exist, the first steps fit in memory.

Every line of every ``bash`` block of README.md and of the site's pages (``docs/*.md``) is
either run here (in-process, in a temporary directory that holds ``topologies/`` and
``examples/``, under :data:`COMMAND_TIME_LIMIT_S`, and judged like the fuzz suite: exit 0,
finite numbers) or listed in :data:`NOT_RUN` with the reason and the test that covers it
instead; a few are run smaller (:data:`SMALLER`). Every ``python`` block (the API) is executed
too. The site's build is tests/test_docs.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz_harness import check_outcome, run_cli

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PAGES = {path.relative_to(ROOT).as_posix(): path.read_text() for path in
         [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
"""README.md and every page of the documentation site, by path."""
ALL_TEXT = "\n".join(PAGES.values())

COMMAND_TIME_LIMIT_S = 60.0
"""No documented command may take longer here (the slowest takes ~7 s on a 2-core machine):
a reader who copies it should not wait minutes."""

NOT_RUN = {
    r"^(python -m )?pip install ": "installs; tests/test_install.py and test_first_two_commands_and_ci_agree below",
    r"^dpsim calibrate --out ": "measures this machine's collectives and compute with torch for minutes; "
                                "tests/test_calibrate_gloo.py runs it on two gloo processes",
    r"^dpsim testbed (up|down)": "needs root and creates network namespaces; tests/test_testbed.py",
    r"^dpsim validate ": "trains with DDP on an emulated cluster for minutes; tests/test_validation.py",
    r"^torchrun ": "needs a cluster",
    r"^python validation/run_matrix\.py": "regenerates VALIDATION.md (tens of minutes)",
    r"^python -m pytest ": "the test suite itself (the first command runs it in CI: .ci/run)",
    r"^mkdocs (build|serve)\b": "builds or serves this site; tests/test_docs.py builds it",
}
"""Documented command (regex) -> why it is not run here: the one place that lists them."""

SMALLER = [
    (r"--workers 8\b", "--workers 2", "eight Dask processes on a two-core CI machine"),
    (r"^(dpsim goodput .*)$", r"\1 --runs 10", "100 failure simulations of 16,384 GPUs take ~10 s"),
]
"""(regex, replacement, why): documented commands run with smaller sizes."""


def _bash_lines() -> list[str]:
    """Every command of every page's ``bash`` blocks, each once, in page order."""
    lines: dict[str, None] = {}
    for text in PAGES.values():
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                cmd = line.split("  #", 1)[0].strip()
                if cmd:
                    lines[cmd] = None
    return list(lines)


def _not_run(cmd: str) -> str | None:
    return next((why for pattern, why in NOT_RUN.items() if re.search(pattern, cmd)), None)


def _runnable() -> list[str]:
    return [cmd for cmd in _bash_lines() if _not_run(cmd) is None]


def test_first_two_commands_and_ci_agree():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert first_block[0] == "python -m pip install . && dpsim predict --gpus 64 --link ethernet"
    assert first_block[1] == "python -m pip install '.[test]' && python -m pytest -q"
    ci = (ROOT / ".ci" / "run").read_text()
    assert first_block[1] in ci


def test_every_documented_command_is_run_or_says_why_not():
    for cmd in _bash_lines():
        assert _not_run(cmd) or re.match(r"^(\(cd \S+ && )?(python -m )?dpsim\b", cmd), cmd
    assert len(_runnable()) >= 25
    # Most of what the pages show runs here (27 of 39 today); what does not installs, builds the
    # site, runs the suite, or needs root, torch for minutes or a cluster.
    assert len(_runnable()) >= 2 * (len(_bash_lines()) - len(_runnable()))
    for page, text in PAGES.items():
        assert text.count("```") % 2 == 0, f"{page}: an unclosed code block hides the commands after it"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    for name in ("topologies", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _argv(cmd: str, workdir: Path, monkeypatch) -> list[str]:
    for pattern, replacement, _ in SMALLER:
        cmd = re.sub(pattern, replacement, cmd)
    m = re.fullmatch(r"\(cd (\S+) && (.*)\)", cmd)
    if m:
        monkeypatch.chdir(workdir / m.group(1))
        cmd = m.group(2)
    words = shlex.split(cmd)
    if words[:3] == ["python", "-m", "dpsim"]:
        words = words[2:]
    assert words[0] == "dpsim", cmd
    return words[1:]


@pytest.mark.slow
@pytest.mark.parametrize("cmd", _bash_lines())
def test_documented_commands_run(cmd, workdir, capsys, monkeypatch):
    why = _not_run(cmd)
    if why:
        pytest.skip(f"not run here: {why}")
    args = _argv(cmd, workdir, monkeypatch)
    if "--workers" in args or "--scheduler" in args:
        # A Dask cluster's threads and processes must not outlive the command inside this test
        # process (they log to its stderr): run it as the user would, as a process.
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        proc = subprocess.run([sys.executable, "-m", "dpsim", *args], cwd=os.getcwd(), env=env, capture_output=True,
                              text=True, timeout=COMMAND_TIME_LIMIT_S * 2)  # + a Dask cluster's start
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        return
    outcome = run_cli(args, capsys, limit_s=COMMAND_TIME_LIMIT_S)
    check_outcome(outcome, args, "ok")


def _json_of(cmd: str, workdir: Path, capsys, monkeypatch) -> dict:
    args = _argv(cmd, workdir, monkeypatch)
    if "--json" not in args:
        args.append("--json")
    outcome = run_cli(args, capsys)
    assert outcome.status == 0, outcome.err
    return json.loads(outcome.out)


def test_the_first_tour_example_and_the_documented_sweeps_fit_in_memory(workdir, capsys, monkeypatch):
    tour = re.search(r"```bash\n(.*?)```", README.split("## A short tour", 1)[1], re.S).group(1)
    first, comment = tour.strip().splitlines()[0].split("  #", 1)
    memory = _json_of(first, workdir, capsys, monkeypatch)["memory"]
    assert memory["fits"], first
    # The comment's figures are the command's (it said 53.3 GiB after activations grew to 72.6 GiB with
    # amp-bf16's fp32 residual stream counted).
    claimed = re.fullmatch(r" fits: ([\d.]+) of ([\d.]+) GiB usable", comment)
    assert claimed, comment
    for page, text in PAGES.items():
        assert first + "  #" + comment in text or first not in text, page  # the same claim wherever it is shown
    assert claimed.groups() == (f"{memory['total_bytes'] / 2**30:.1f}", f"{memory['usable_bytes'] / 2**30:.1f}")
    sweeps = [cmd for cmd in _runnable() if cmd.startswith("dpsim sweep ")]
    assert sweeps
    for cmd in sweeps:
        cmd = re.sub(r"\s-o \S+", "", cmd)
        rows = _json_of(cmd, workdir, capsys, monkeypatch)["rows"]
        assert rows and all(r["memory_fits"] for r in rows), cmd


def test_the_example_files_the_docs_name_exist():
    named = set(re.findall(r"(?<![\w/])examples/[\w./-]+\.(?:py|yaml)", ALL_TEXT))
    assert {"examples/my_model.py", "examples/sweep.yaml", "examples/mypackage/models.py"} <= named
    for name in named:
        assert (ROOT / name).is_file(), name


def test_the_python_blocks_run(workdir):
    blocks = [(page, block) for page, text in PAGES.items() for block in re.findall(r"```python\n(.*?)```", text, re.S)]
    assert any(page == "docs/api.md" for page, _ in blocks)
    for page, block in blocks:
        namespace: dict = {}
        exec(compile(block, f"{page} (python block)", "exec"), namespace)  # noqa: S102 - our own docs
        if page == "docs/api.md":
            assert namespace["p"].step_time_s > 0


def test_a_package_module_model_needs_no_pythonpath(workdir, capsys, monkeypatch):
    # The `dpsim` script's sys.path starts with its own folder, not the current one.
    monkeypatch.chdir(workdir / "examples")
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", os.getcwd())])
    args = ["memory", "--model", "mypackage.models:make_vit", "--input-shape", "2,3,224,224", "--json"]
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    assert json.loads(outcome.out)["model"]


def test_example_topologies_match_the_schema_document():
    doc = (ROOT / "topologies" / "README.md").read_text()
    blocks = {re.search(r"^name: (\S+)", b, re.M).group(1): b
              for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if re.search(r"^name: ", b, re.M)}
    examples = sorted((ROOT / "topologies" / "examples").glob("*.yaml"))
    assert examples
    for path in examples:
        body = "".join(l for l in path.read_text().splitlines(keepends=True) if not l.startswith("#"))
        assert body == blocks[path.stem], path.name
