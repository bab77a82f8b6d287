"""The README stays true: its first commands, its tour and the example topologies."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from dpsim.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_first_two_commands_and_ci_agree():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert first_block[0] == "pip install -e . && dpsim predict --gpus 64 --link ethernet"
    assert first_block[1] == "pip install -e '.[test]' && python -m pytest -q"
    ci = (ROOT / ".ci" / "run").read_text()
    assert first_block[1] in ci


def _tour_lines():
    tour = README.split("## A short tour", 1)[1]
    block = re.search(r"```bash\n(.*?)```", tour, re.S).group(1)
    for line in block.strip().splitlines():
        cmd = line.split("  #", 1)[0].strip()
        if cmd.startswith("dpsim ") and not cmd.startswith("dpsim calibrate"):
            yield cmd


@pytest.mark.parametrize("cmd", list(_tour_lines()))
def test_tour_commands_run(cmd, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    rc = main(shlex.split(cmd)[1:])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "Traceback" not in out + err


def test_example_topologies_match_the_schema_document():
    doc = (ROOT / "topologies" / "README.md").read_text()
    blocks = {re.search(r"^name: (\S+)", b, re.M).group(1): b
              for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if re.search(r"^name: ", b, re.M)}
    examples = sorted((ROOT / "topologies" / "examples").glob("*.yaml"))
    assert examples
    for path in examples:
        body = "".join(l for l in path.read_text().splitlines(keepends=True) if not l.startswith("#"))
        assert body == blocks[path.stem], path.name
