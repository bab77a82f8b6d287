"""The fast lane's worker count (tests/conftest.py): two processes for ``-m "not slow"`` on a
machine with two cores, one process for the whole suite and wherever the user said otherwise."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from conftest import fast_lane_workers


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
