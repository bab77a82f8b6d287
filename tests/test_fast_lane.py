"""The fast lane's worker count (tests/conftest.py): two processes for ``-m "not slow"`` on a
machine with two cores, one process for the whole suite and wherever the user said otherwise; its
tests sent a whole file at a time, the long files first."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import FIRST_FILES, fast_lane_dist, fast_lane_workers, first_files_first


def config(*, markexpr="not slow", numprocesses=None, xdist=True, worker=False, pdb=False, collect=False):
    option = SimpleNamespace(markexpr=markexpr, numprocesses=numprocesses, usepdb=pdb, collectonly=collect)
    made = SimpleNamespace(option=option,
                           pluginmanager=SimpleNamespace(hasplugin=lambda name: xdist and name == "xdist"))
    if worker:
        made.workerinput = {}
    return made


@pytest.mark.parametrize("cores, workers", [(1, None), (2, 2), (3, 3), (16, 4)])
def test_the_fast_lane_uses_the_cores_up_to_four(cores, workers):
    assert fast_lane_workers(config(), cores) == workers


@pytest.mark.parametrize("changes", [
    dict(markexpr=""),            # the whole suite (CI): real timings must not share the cores
    dict(markexpr="slow"),
    dict(numprocesses=0),         # the user's -n 0 wins
    dict(numprocesses=3),
    dict(xdist=False),            # installed without the [test] extra's pytest-xdist
    dict(worker=True),            # inside a worker: never spawn again
    dict(pdb=True),
    dict(collect=True),
])
def test_everything_else_is_left_as_given(changes):
    assert fast_lane_workers(config(**changes), 2) is None


def dist_config(dist="no"):
    return SimpleNamespace(option=SimpleNamespace(dist=dist))


def test_the_fast_lane_sends_whole_files_unless_told_otherwise():
    assert fast_lane_dist(dist_config()) == "loadfile"     # xdist's default ("no" until -n sets "load")
    assert fast_lane_dist(dist_config("load")) is None     # the user's --dist wins
    assert fast_lane_dist(dist_config("worksteal")) is None


def test_the_long_files_go_first_and_every_file_stays_whole():
    names = ["test_a.py", "test_golden.py", "test_a.py", "test_b.py", "test_install.py", "test_golden.py", "test_b.py"]
    items = [SimpleNamespace(path=Path("tests") / name, k=k) for k, name in enumerate(names)]
    got = first_files_first(items)
    assert [i.path.name for i in got] == ["test_golden.py", "test_golden.py", "test_install.py",
                                         "test_a.py", "test_a.py", "test_b.py", "test_b.py"]
    assert [i.k for i in got if i.path.name == "test_a.py"] == [0, 2]  # each file's own order kept


def test_every_first_file_exists():
    here = Path(__file__).parent
    assert len(set(FIRST_FILES)) == len(FIRST_FILES)
    assert all((here / name).is_file() for name in FIRST_FILES)


def test_a_flat_config_read_fails_in_the_tests():
    """conftest's warning filter (moved there from pyproject so that dpsim's modules are cached) is in force."""
    from dpsim.predict.config import FlatSettingWarning, PredictConfig
    with pytest.raises(FlatSettingWarning, match="config.parallelism.tp"):
        PredictConfig(gpus=8, link="infiniband").tp
