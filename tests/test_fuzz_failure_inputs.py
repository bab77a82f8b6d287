"""Hostile values for the failure inputs: the mix's failure fields (``uplink:`` events with
``cables``/``repair``, ``mtbf_uplink``, ``uplink_repair``, ``link:`` events with ``nic:``) and
goodput's checkpoint flags. Each is refused with exit status 2 and one line naming the field,
never a traceback and never silently ignored.

The mix is validated before anything runs, so each mix case is a parse (milliseconds), in-process.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_harness import check_outcome, run_cli

DATA = Path(__file__).parent / "data" / "mix"
WIDE = DATA / "fat-tree-1to1.yaml"      # two uplink cables per leaf, one NIC per server
TWO_NIC = DATA / "fat-tree-2nic.yaml"

BASE = {"cluster": {"topology": str(WIDE), "gpus": 16}, "horizon": "60s",
        "jobs": [{"name": "a", "model": "gpt2", "gpus": 4, "nodes": [0, 2], "duration": "60s"}],
        "failures": {"repair": "1h", "events": [{"at": "1s", "uplink": "leaf0.0", "cables": 1, "repair": "30s"}]}}

BAD_TIMES = ["30 minutes", "-5min", "1e400h", "1e308h", "inf", "nan", "", "5kg", "5", math.nan, math.inf, -1, True,
             None, [], {}, "x" * 5000]
BAD_COUNTS = [0, -1, -0.0, 1.5, math.nan, math.inf, 10**30, True, None, "", "2", [], {}, "x" * 5000]


def _with(path: tuple, value) -> dict:
    doc = copy.deepcopy(BASE)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def _refused(doc: dict, needle: str, tmp_path: Path, capsys) -> None:
    spec = tmp_path / "mix.yaml"
    spec.write_text(yaml.safe_dump(doc))
    args = ["mix", str(spec), "--json"]
    check_outcome(run_cli(args, capsys), args, "error", (needle,))


EVENT = ("failures", "events", 0)
CASES = (
    [(f"at={v!r}"[:40], _with((*EVENT, "at"), v), "failures.events[0].at") for v in BAD_TIMES]
    + [(f"repair={v!r}"[:40], _with((*EVENT, "repair"), v), "failures.events[0].repair") for v in [*BAD_TIMES, 0, "0s"]]
    + [(f"cables={v!r}"[:40], _with((*EVENT, "cables"), v), "cables") for v in BAD_COUNTS]
    + [(f"uplink={v!r}"[:40], _with((*EVENT, "uplink"), v), "uplink") for v in ["", "leaf0", "leaf9.0", "spine0", 3,
                                                                                 None, ["leaf0.0"], "x" * 5000]]
    + [(f"uplink_repair={v!r}"[:40], _with(("failures", "uplink_repair"), v), "failures.uplink_repair")
       for v in [*BAD_TIMES, 0, "0s"]]
    + [(f"mtbf_uplink={v!r}"[:40], _with(("failures", "mtbf_uplink"), v), "failures.mtbf_uplink")
       for v in [0, "100h", [], {}, None, "x" * 5000]]
    + [(f"mtbf_uplink.leaf-spine={v!r}"[:40], _with(("failures", "mtbf_uplink"), {"leaf-spine": v}),
        "failures.mtbf_uplink.leaf-spine") for v in ["30 minutes", "-5min", "0h", "nan", "", [], {}, True]]
    + [("mtbf_uplink unknown class", _with(("failures", "mtbf_uplink"), {"core-x": "10h"}), "core-x"),
       ("unknown event key", _with((*EVENT, "cable"), 2), "failures.events[0].cable"),
       ("unknown failures key", _with(("failures", "mtbf_uplinks"), {"leaf-spine": "10h"}), "mtbf_uplinks"),
       ("too many cables", _with((*EVENT, "cables"), 2), "cables 2"),
       # An event at or past the horizon would never fire; it used to be dropped without a word.
       ("uplink event after the horizon", _with((*EVENT, "at"), "2min"), "failures.events[0].at"),
       ("link event at the horizon", _with(("failures", "events"), [{"at": "60s", "link": 0}]),
        "failures.events[0].at"),
       # nic: on an uplink event used to be ignored whatever its value.
       ("nic on an uplink event", _with((*EVENT, "nic"), 0), "failures.events[0].nic"),
       ("nic on a node event", _with(("failures", "events"), [{"at": "1s", "node": 0, "nic": 0}]),
        "failures.events[0].nic"),
       ("cables on a link event", _with(("failures", "events"), [{"at": "1s", "link": 0, "cables": 1}]),
        "failures.events[0].cables"),
       ("link and uplink at once", _with(("failures", "events"), [{"at": "1s", "link": 0, "uplink": "leaf0.0"}]),
        "failures.events[0]"),
       ("nic past the server's NICs", _with(("failures", "events"), [{"at": "1s", "link": 0, "nic": 1}]),
        "failures.events[0].nic"),
       ("link past the servers", _with(("failures", "events"), [{"at": "1s", "link": 99}]), "failures.events[0].link"),
       # Random failures drawn one by one: an MTBF of 1e-300 s drew forever (a hang), one of 0.01 s
       # took minutes; over the horizon at most MAX_DRAWN_FAILURES are expected.
       ("mtbf_gpu 1e-300s", _with(("failures", "mtbf_gpu"), "1e-300s"), "failures.mtbf_gpu"),
       ("mtbf_node 0.001s", _with(("failures", "mtbf_node"), "0.001s"), "failures.mtbf_node"),
       ("mtbf_uplink 1e-300s", _with(("failures", "mtbf_uplink"), {"leaf-spine": "1e-300s"}), "failures.mtbf_uplink")]
    + [(f"nic={v!r}"[:40], _with(("failures", "events"), [{"at": "1s", "link": 0, "nic": v}]), "failures.events[0].nic")
       for v in [-1, 1.5, math.nan, math.inf, True, None, "", "0", [], 10**30]]
)


@pytest.mark.parametrize("doc,needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_failure_field_is_refused_naming_it(doc, needle, tmp_path, capsys):
    _refused(doc, needle, tmp_path, capsys)


# Each draws MAX_DRAWN_FAILURES (100,000) failures before the refusal (1.5-3 s): the full suite runs it.
@pytest.mark.slow
@pytest.mark.parametrize("failures, needle", [
    ({"repair": "1h", "mtbf_node": "1e-300s"}, "failures.mtbf_node"),
    ({"repair": "1h", "mtbf_uplink": {"leaf-spine": "1e-300s"}}, "failures.mtbf_uplink"),
])
def test_a_mix_without_a_horizon_stops_drawing_failures(failures, needle, tmp_path, capsys):
    """Without a horizon the mix runs until its jobs end, which they never do when a failure comes
    every 1e-300 s: the draws are counted and the mix refused past MAX_DRAWN_FAILURES (it hung)."""
    doc = {"cluster": BASE["cluster"], "failures": failures,
           "jobs": [{"name": "a", "model": "gpt2", "gpus": 4, "nodes": [0, 2], "steps": 10}]}
    _refused(doc, needle, tmp_path, capsys)


def test_a_job_that_would_write_too_many_checkpoints_is_refused(tmp_path, capsys):
    """Every checkpoint write is simulated: a 1-s interval over a 10-year job was 3e8 of them (it ran for hours)."""
    doc = {"cluster": BASE["cluster"], "failures": {"repair": "1h", "mtbf_node": "10000h"},
           "jobs": [{"name": "a", "model": "gpt2", "gpus": 4, "nodes": [0, 2], "duration": "3650d",
                     "checkpoint": {"interval": "1s"}}]}
    _refused(doc, "checkpoint.interval", tmp_path, capsys)


def test_the_base_mix_and_its_valid_neighbours_run(tmp_path, capsys):
    """The cases above fail for the field they change, not because the base document is wrong."""
    # Two events of one NIC at two times (the same event twice is refused: tests/test_fuzz_round14.py).
    docs = [BASE, _with(("failures", "events"), [{"at": "1s", "link": 0, "nic": 0}, {"at": "2s", "link": 0, "nic": 0}]),
            _with(("failures", "uplink_repair"), "2h"), _with(("failures", "mtbf_uplink"), {"leaf-spine": "100000h"})]
    for doc in docs:
        spec = tmp_path / "mix.yaml"
        spec.write_text(yaml.safe_dump(doc))
        args = ["mix", str(spec), "--json"]
        check_outcome(run_cli(args, capsys), args, "ok")


HOSTILE = st.one_of(st.sampled_from([*BAD_TIMES, *BAD_COUNTS, "leaf0.0", "leaf-spine", 0, 1, "1s"]),
                    st.integers(min_value=-(10**20), max_value=10**20), st.floats(), st.text(max_size=8))
EVENT_KEYS = st.sampled_from(["at", "node", "link", "nic", "uplink", "cables", "repair", "bogus"])


# A fuzzer (60 mixes run, 1.5-3 s): the full suite runs it, as it does tests/test_fuzz_cli.py's; the
# table-driven refusals above stay in the fast lane.
@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(event=st.dictionaries(EVENT_KEYS, HOSTILE, max_size=5), top=st.dictionaries(
    st.sampled_from(["uplink_repair", "mtbf_uplink", "mtbf_link", "seed"]), HOSTILE, max_size=2))
def test_random_failure_events_end_in_a_result_or_one_line(event, top, tmp_path, capsys):
    doc = _with(("failures",), {"repair": "1h", "events": [event], **top})
    spec = tmp_path / "mix.yaml"
    spec.write_text(yaml.safe_dump(doc))
    args = ["mix", str(spec), "--json"]
    check_outcome(run_cli(args, capsys), args, "either")


# goodput's checkpoint flags: a value the user gave is checked as given and blamed by its own name.
GOODPUT = ["goodput", "--model", "gpt2", "--gpus", "8", "--tokens", "1e9", "--runs", "5"]


@pytest.mark.parametrize("flag,value", [
    ("--checkpoint-interval", "0s"),       # used to become "never checkpoint" without a word
    ("--checkpoint-interval", "1e400h"),   # likewise
    ("--checkpoint-write", "1e400h"),      # used to be blamed on --restart (the restart adds the write)
    ("--checkpoint-write", "-5min"),
    ("--checkpoint-interval", "30 minutes"),
    ("--checkpoint-bandwidth", "1B/s"),    # a year-long write was blamed on --restart (which adds the read)
])
def test_goodput_refuses_a_bad_checkpoint_flag_naming_it(flag, value, capsys):
    args = [*GOODPUT, flag, value]
    check_outcome(run_cli(args, capsys), args, "error", (flag,))


def test_goodput_with_a_free_checkpoint_write_runs(capsys):
    """A zero write puts the optimal interval under a second: it used to fail blaming --checkpoint-interval,
    which the user never gave; the interval is floored at the policy's minimum instead."""
    args = [*GOODPUT, "--checkpoint-write", "0s", "--json"]
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    assert '"checkpoint_interval_s": 1.0' in outcome.out


def test_plan_through_an_absurdly_short_mtbf_ranks_without_a_traceback(capsys):
    """--mtbf-link 1e-300s made the optimal-interval search build an int64-overflowing range (a ValueError
    traceback); then the layouts ranked with goodput 0, naming a 'best' layout that never finishes;
    now no layout finishing is one line naming the flag."""
    # One tensor, pipeline and micro-batch size: every layout of the search meets the same interval search
    # (a fifth of the whole search's CPU, the same refusal).
    args = ["plan", "--model", "gpt2", "--gpus", "16", "--tokens", "1e9", "--global-batch", "64", "--top", "2",
            "--rank", "goodput", "--mtbf-link", "1e-300s", "--tp", "1", "--pp", "1", "--micro-batches", "1", "--json"]
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "error", ("--mtbf-link", "would finish training"))
