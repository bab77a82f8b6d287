"""The file formats users hand dpsim, mutated at random: a topology YAML, a sweep YAML, a calibration profile.

Hypothesis (derandomized: the same examples every run) starts from a real document (a
shipped topology preset, a sweep file, a shipped profile) and changes one to three
things in it: a value replaced by a hostile one (``nan``, ``1e308``, ``-0.0``, 2**63, a
5,000-character string, a list where a number belongs...), a key removed, an unknown key
added, a number scaled by up to 10^300. The document is written to a file and given to
the command that reads it, in-process under a time limit. It must be refused with one
line naming the file (exit 2) or accepted, and then every number printed must be finite
and humanly sized (``fuzz_harness.check_outcome``). Never a traceback, never a hang.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpsim.profile.io import load_profile, shipped_profiles_dir
from fuzz_harness import check_outcome, run_cli

# Fuzzers (hundreds of hostile inputs): the fast lane (-m "not slow") leaves them to the full suite.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PRESET = yaml.safe_load((ROOT / "topologies" / "examples" / "fat-tree-3tier.yaml").read_text())
NVL = yaml.safe_load((ROOT / "topologies" / "examples" / "nvl72-ib.yaml").read_text())
SWEEP = {"grid": {"gpus": [8, 16], "link": ["nvlink", "infiniband"], "model": ["gpt2"], "micro_batch": [1, 2]},
         "tokens": "1T", "gpu_hour_usd": {"h100": 2.5}}
PROFILE = json.loads((shipped_profiles_dir() / "a100-nvswitch-8gpu.json").read_text())

FUZZ = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

HOSTILE = st.one_of(
    st.sampled_from([0, -1, -0.0, 1e308, -1e308, 1e-308, 2**63, 10**30, math.nan, math.inf, -math.inf, True, None,
                     "", "x" * 5000, "1e999", [], {}, [1, 2], {"a": 1}, "nan", "  ", "\x00"]),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)


def _leaves(doc, path=()):
    """Every (path, value) of a nested dict/list, containers included."""
    yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, (*path, i))


def _set(doc, path, value):
    if not path:
        return value
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


@st.composite
def mutated(draw, base):
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        places = list(_leaves(doc))
        path, value = draw(st.sampled_from(places))
        action = draw(st.sampled_from(["replace", "replace", "scale", "delete", "add"]))
        if action == "scale" and isinstance(value, (int, float)) and not isinstance(value, bool):
            factor = 10.0 ** draw(st.integers(-300, 300))
            doc = _set(doc, path, value * factor if math.isfinite(value * factor) else value)
        elif action == "delete" and path:
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            del parent[path[-1]]
        elif action == "add" and isinstance(value, dict):
            value[draw(st.sampled_from(["bogus", "gpus", "nodes", "name", "tiers", 3]))] = draw(HOSTILE)
        else:
            doc = _set(doc, path, draw(HOSTILE))
    return doc


def _write_yaml(tmp: Path, doc, name: str = "doc.yaml") -> Path:
    path = tmp / name
    try:
        path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    except yaml.YAMLError:
        path.write_text(repr(doc))  # not YAML at all: must be refused as such
    return path


@FUZZ
@given(doc=st.one_of(mutated(PRESET), mutated(NVL)))
def test_mutated_topology_yaml(doc, tmp_path_factory, capsys):
    path = _write_yaml(tmp_path_factory.mktemp("topo"), doc)
    args = ["predict", "--topology", str(path), "--model", "gpt2", "--steps", "1", "--json"]
    outcome = run_cli(args, capsys, limit_s=20)
    check_outcome(outcome, args, "either")
    if outcome.status == 2 and "--gpus" not in outcome.err:
        assert str(path) in outcome.err, outcome.err


@FUZZ
@given(doc=mutated(SWEEP))
def test_mutated_sweep_yaml(doc, tmp_path_factory, capsys):
    path = _write_yaml(tmp_path_factory.mktemp("sweep"), doc)
    args = ["sweep", "--config", str(path), "--json", "--no-progress"]
    outcome = run_cli(args, capsys, limit_s=20)
    check_outcome(outcome, args, "either")
    if outcome.status == 2:
        assert str(path) in outcome.err or "sweep" in outcome.err, outcome.err


@FUZZ
@given(doc=mutated(PROFILE))
def test_mutated_calibration_profile(doc, tmp_path_factory, capsys):
    path = tmp_path_factory.mktemp("profile") / "p.json"
    path.write_text(json.dumps(doc))  # NaN and Infinity are written as such: the loader must refuse them
    args = ["collective", "--gpus", "8", "--calibration", str(path), "-b", "1K", "-e", "1M", "-f", "32", "--json"]
    outcome = run_cli(args, capsys, limit_s=20)
    check_outcome(outcome, args, "either")
    if outcome.status == 2:
        assert str(path) in outcome.err or "--calibration" in outcome.err, outcome.err


def _bounded_leaves():
    from dpsim.topology.load import _BOUNDS

    for name, base in (("fat-tree-3tier", PRESET), ("nvl72-ib", NVL)):
        for path, value in _leaves(base):
            if path and path[-1] in _BOUNDS and isinstance(value, (int, float)):
                for end in _BOUNDS[path[-1]]:
                    yield pytest.param(base, path, end, id=f"{name}:{'.'.join(map(str, path))}={end:g}")


@pytest.mark.parametrize("base, path, value", list(_bounded_leaves()))
def test_every_topology_number_at_the_ends_of_its_range(base, path, value, tmp_path, capsys):
    # The extremes the loader accepts must still give finite, humanly formatted results.
    doc = _set(copy.deepcopy(base), path, value)
    args = ["predict", "--topology", str(_write_yaml(tmp_path, doc)), "--model", "gpt2", "--steps", "1"]
    check_outcome(run_cli(args, capsys, limit_s=20), args, "either")


def _profile_numbers():
    for path, value in _leaves(PROFILE):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value:
            for factor in (1e300, 1e-300):
                yield pytest.param(path, value * factor, id=f"{'.'.join(map(str, path))}x{factor:g}")


@pytest.mark.parametrize("path, value", list(_profile_numbers()))
def test_every_profile_number_scaled_to_an_extreme(path, value, tmp_path, capsys):
    # Each number of a shipped profile x 1e300 and x 1e-300: refused, or still finite and sane
    # (a fitted latency of 1e295 s once came out as a 296-digit time).
    doc = _set(copy.deepcopy(PROFILE), path, value)
    target = tmp_path / "p.json"
    target.write_text(json.dumps(doc))
    args = ["collective", "--gpus", "8", "--calibration", str(target), "-b", "1K", "-e", "1G", "-f", "32", "--json"]
    check_outcome(run_cli(args, capsys), args, "either")


def test_the_unmutated_documents_are_accepted(tmp_path, capsys):
    # The fuzzing starts from documents that work, so that its mutations are what gets refused.
    for args in (["predict", "--topology", str(_write_yaml(tmp_path, PRESET, "t.yaml")), "--model", "gpt2", "--steps", "1"],
                 ["sweep", "--config", str(_write_yaml(tmp_path, SWEEP, "s.yaml")), "--json"]):
        check_outcome(run_cli(args, capsys), args, "ok")
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps(PROFILE))
    assert load_profile(str(profile)).name
