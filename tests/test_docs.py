"""The front door: README.md is a front page of at most 10 KB, and the rest of the documentation
is a MkDocs site (``mkdocs.yml``, ``docs/``) that builds with ``--strict``.

The commands and code blocks of both are run by tests/test_readme.py; the accuracy table they
carry by tests/test_validation_summary.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from dpsim.cli.commands import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"

README_LIMIT_BYTES = 10_000
"""Issue 25: a front page a newcomer reads in a minute."""


def _nav_pages(nav) -> list[str]:
    pages = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_readme_is_a_front_page():
    assert len(README.encode()) <= README_LIMIT_BYTES
    # It starts with the two commands, then says what they do; the fast lane is named.
    assert README.startswith("# dpsim\n\n```bash\npython -m pip install . && dpsim predict --gpus 64 --link ethernet\n"
                             "python -m pip install '.[test]' && python -m pytest -q\n```\n")
    assert '\npython -m pytest -q -m "not slow"\n' in README
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings == ["A short tour", "Main flags", "Accuracy", "Documentation"]
    flags = re.findall(r"^\| `(--[\w-]+)", README.split("## Main flags", 1)[1].split("\n## ", 1)[0], re.M)
    assert {"--gpus", "--link", "--model", "--strategy", "--tp"} <= set(flags)


def test_the_readme_links_every_page_of_the_site():
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", README))
    assert set(pages) == linked, set(pages) ^ linked


def test_every_page_is_in_the_nav_once():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = _nav_pages(config["nav"])
    assert len(nav) == len(set(nav))
    assert sorted(nav) == sorted(p.name for p in DOCS.glob("*.md"))


def test_the_command_reference_names_every_command():
    rows = re.findall(r"^\| `([\w-]+)` \|", (DOCS / "cli.md").read_text(), re.M)
    assert rows == list(COMMANDS)


def test_the_site_builds_strictly(tmp_path):
    # --strict turns every warning into a failure: a link to a missing page or anchor, a page
    # left out of the nav, a link out of docs/ (it would break on the built site).
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for page in DOCS.glob("*.md"):
        built = tmp_path / "site" / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.is_file(), page.name
    accuracy = (tmp_path / "site" / "accuracy" / "index.html").read_text()
    assert "<table>" in accuracy and "inside its 80 % interval" in accuracy


def _bullet(page: str, flag: str) -> str:
    """The text of the bullet of ``page`` that describes ``flag`` (``- `--flag`...`` up to the next bullet)."""
    text = (DOCS / page).read_text()
    start = text.index(f"- `{flag}`")
    end = text.find("\n- `", start + 1)
    return text[start:] if end < 0 else text[start:end]


def _named(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def test_the_docs_name_every_gpu_and_cluster_preset():
    from dpsim.hardware import GPU_PRESETS
    from dpsim.topology.load import preset_names

    gpus = _bullet("predict.md", "--gpu")
    missing = [g for g in GPU_PRESETS if not _named(g, gpus)]
    assert not missing, f"docs/predict.md's --gpu bullet does not name the GPU presets {missing}"
    links = _bullet("topologies.md", "--link")
    link_row = next(l for l in README.splitlines() if l.startswith("| `--link"))
    for name in preset_names():
        assert _named(name, links), f"docs/topologies.md's --link bullet does not name the preset {name!r}"
        assert _named(name, link_row), f"README's --link row does not name the preset {name!r}"


def test_the_main_flags_are_predicts(capsys, monkeypatch):
    from dpsim.cli import main

    monkeypatch.setenv("COLUMNS", "250")
    assert main(["predict", "--help"]) == 0
    shown = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", capsys.readouterr().out))
    table = README.split("## Main flags", 1)[1].split("\n## ", 1)[0]
    flags = {f for row in table.splitlines() if row.startswith("| `") for f in re.findall(r"`(--[\w-]+)", row.split("|")[1])}
    assert len(flags) >= 12 and flags <= shown, sorted(flags - shown)
