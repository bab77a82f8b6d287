"""The fuzz suites' harness: run one command in-process under a time limit and judge what it did.

A hostile input must end in one of two ways: exit status 0 with finite, humanly sized
numbers, or exit status 2 with exactly one line on stderr, ``dpsim: error: ...``, naming
the flag or file that was wrong. Never a traceback, never another status, never a hang
(each case runs under ``signal.setitimer``), never ``nan``/``inf`` or a 25-digit number.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass

from dpsim.cli import main

CASE_TIME_LIMIT_S = 30.0
"""No case may take longer (a hang or runaway work); the slowest valid case takes ~2 s here."""


class CaseTimeout(BaseException):
    """A case ran past its time limit (a BaseException: nothing in dpsim may swallow it)."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`CaseTimeout` in the main thread after ``seconds``."""
    def expire(signum, frame):
        raise CaseTimeout(f"past {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class Outcome:
    """What one command did."""

    status: int
    out: str
    err: str
    seconds: float


def run_cli(args: list[str], capsys, *, limit_s: float = CASE_TIME_LIMIT_S) -> Outcome:
    """``dpsim ARGS`` in this process (capsys captures its output)."""
    capsys.readouterr()
    t0 = time.perf_counter()
    with time_limit(limit_s):
        status = main(list(args))
    out, err = capsys.readouterr()
    return Outcome(status, out, err, time.perf_counter() - t0)


def run_json(args: list[str], capsys) -> dict:
    """``dpsim ARGS`` that must succeed: its ``--json`` output, parsed."""
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    return json.loads(outcome.out)


_BAD_WORD = re.compile(r"(?<![\w.])-?(nan|inf|infinity)(?![\w…])", re.I)  # "inf…" is rich's cut "infiniband"
_LONG_NUMBER = re.compile(r"\d{25,}")
ABSURD = 1e40
"""No number dpsim prints is this large (FLOPs of a 405B model's sample are ~1e16)."""


def _json_numbers(obj) -> Iterator[float]:
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _json_numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _json_numbers(v)


def check_sane_output(text: str, what: str) -> None:
    """Finite, humanly sized numbers only (JSON: every number; text: no nan/inf, no 25-digit runs)."""
    stripped = text.strip()
    if stripped.startswith("{"):
        doc = json.loads(stripped, parse_constant=lambda c: math.nan)
        for x in _json_numbers(doc):
            assert math.isfinite(x) and abs(x) < ABSURD, f"{what}: {x!r} in the JSON output"
        return
    assert not _BAD_WORD.search(text), f"{what}: {_BAD_WORD.search(text).group(0)!r} in: {text[-1500:]}"
    digits = re.sub(r"(?<=\d),(?=\d)", "", text)
    assert not _LONG_NUMBER.search(digits), f"{what}: a {len(_LONG_NUMBER.search(digits).group(0))}-digit number"


def check_outcome(outcome: Outcome, args: list[str], expect: str, needles: tuple[str, ...] = ()) -> None:
    """``expect``: ``"error"`` (status 2, one line naming every needle), ``"ok"`` (status 0, sane
    output) or ``"either"`` (one of the two, judged the same way)."""
    what = "dpsim " + " ".join(a if len(a) < 80 else a[:77] + "..." for a in args)
    both = outcome.out + outcome.err
    assert "Traceback" not in both, f"{what}: traceback\n{both[-3000:]}"
    assert outcome.status in (0, 2), f"{what}: exit status {outcome.status}\n{outcome.err[-2000:]}"
    if expect != "either":
        wanted = 2 if expect == "error" else 0
        assert outcome.status == wanted, f"{what}: exit status {outcome.status}, expected {wanted}\n{both[-2000:]}"
    if outcome.status == 2:
        lines = outcome.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("dpsim: error: "), f"{what}: stderr {outcome.err!r}"
        assert len(lines[0]) < 1000, f"{what}: a {len(lines[0])}-character error line"
        for needle in needles:
            assert needle in lines[0], f"{what}: {needle!r} not named in {lines[0]!r}"
    else:
        check_sane_output(outcome.out, what)


def refused(args: list[str], capsys, *words: str) -> str:
    """Run ``dpsim ARGS``, check it was refused in one line with no traceback, naming every one of ``words``;
    return that line (every fuzz round's refusal check)."""
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "error")
    line = outcome.err.strip()
    assert "\n" not in line and "Traceback" not in line, line
    for word in words:
        assert word in line, line
    return line
