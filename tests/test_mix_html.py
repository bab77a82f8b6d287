"""dpsim mix --html: the page of a small mix holds its jobs, slowdowns, hot links and failures, and parses."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

from dpsim.cli import main
from tests.test_mix import JOB_A, JOB_B, TOPO

_VOID = {"meta", "br", "hr", "img", "input", "link", "area", "base", "col", "embed", "source", "track", "wbr"}


class _Checker(HTMLParser):
    """Every element closed, in order (a well-formed page), the text collected."""

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1] not in ("script", "style"):
            self.text.append(data)


def test_mix_page_shows_jobs_slowdowns_hot_links_and_failures(tmp_path, capsys):
    path = tmp_path / "mix.yaml"
    path.write_text(f"cluster: {{topology: {TOPO}, gpus: 16}}\nspares: 1\n"
                    "failures: {repair: 1h, events: [{at: 0.5s, node: 0}]}\n"
                    "checkpoint: {interval: 0.2s, write: 0.01s, restart: 0.1s}\n"
                    f"jobs:\n  - {json.dumps(JOB_A)}\n  - {json.dumps(JOB_B)}\n")
    out = tmp_path / "mix.html"
    assert main(["mix", str(path), "--html", str(out), "--json", "--sample-steps", "0"]) == 0
    data = json.loads(capsys.readouterr().out)
    page = out.read_text()
    checker = _Checker()
    checker.feed(page)
    checker.close()
    assert page.startswith("<!DOCTYPE html>") and not checker.errors and not checker.stack
    text = " ".join(checker.text)
    for job in data["jobs"]:
        row = re.search(rf"\b{job['name']}\b.*?{job['slowdown']:.3f}", text)
        assert row, f"job {job['name']} and its slowdown {job['slowdown']:.3f} are on the page"
        for b in job["bottlenecks"]:
            assert b["link"] in text  # the hot link, by name
    assert data["jobs"][0]["bottlenecks"] and data["failures"][0]["job"] == "a"
    for heading in ("Jobs on servers", "Slowdown per job", "Failures' cost per job"):
        assert heading in text
    assert page.count('class="plotly-graph-div"') == 3 and "node failure of server 0, stops a" in page


def test_html_path_is_checked_before_the_simulation(tmp_path, capsys):
    path = tmp_path / "mix.yaml"
    path.write_text(f"cluster: {{topology: {TOPO}, gpus: 16}}\njobs:\n  - {json.dumps(JOB_A)}\n")
    assert main(["mix", str(path), "--html", str(tmp_path / "out.txt")]) == 2
    err = capsys.readouterr().err
    assert "--html" in err and err.count("\n") == 1 and not (tmp_path / "out.txt").exists()
