"""Shared fixtures: small topologies built from the presets."""

from __future__ import annotations

import dataclasses
import gc
import sys

# Bytecode caches are written here whatever PYTHONDONTWRITEBYTECODE says (these machines set it):
# without them every run re-compiles dpsim's modules and pytest re-rewrites every test module (the
# fast lane's collection took 12.9 s of CPU against 4.8 s with the caches on a loaded 2-core box),
# and each subprocess a test starts re-compiled the dpsim it imports (~0.25 s each). They are the caches a
# run without that variable writes (``__pycache__``, git-ignored; pytest's rewritten test modules
# beside them); reading them is allowed under it, so subprocesses and later runs use them. Set
# before dpsim's first import below, and before pytest imports a test module.
sys.dont_write_bytecode = False

import pytest  # noqa: E402

from dpsim.topology.load import load_preset  # noqa: E402
from dpsim.topology.spec import TopologySpec  # noqa: E402


def variant(name: str, **changes) -> TopologySpec:
    """A preset with fields of ``node``/``fabric``/top level replaced (``node__x=...``)."""
    spec = load_preset(name)
    node = {k[6:]: v for k, v in changes.items() if k.startswith("node__")}
    fabric = {k[8:]: v for k, v in changes.items() if k.startswith("fabric__")}
    top = {k: v for k, v in changes.items() if "__" not in k}
    if node:
        spec = dataclasses.replace(spec, node=dataclasses.replace(spec.node, **node))
    if fabric:
        spec = dataclasses.replace(spec, fabric=dataclasses.replace(spec.fabric, **fabric))
    return dataclasses.replace(spec, **top)


# The cyclic collector cost the fast lane an eighth of its CPU time or more and freed little:
# each walks every live object (the collected tests, numpy, torch once a test imports it, dpsim's
# memo caches), and the default first-generation threshold (700 allocations) starts one every few
# tests. Fewer, larger young passes and freezing what collection built (kept for the whole session
# anyway) cut the collector's time by about three quarters (9 heavy test files, 2 cores: 5.0 -> 1.3 s
# CPU, full passes 31 -> 7) and change no result: nothing in dpsim depends on when garbage is freed
# (dpsim/engine/pipeline.py and dpsim/mix/simulate.py already pause the collector for the same reason).
# The collector still took 9 s of the fast lane's 186 s (2 workers, gc.callbacks); a first generation of
# 50,000 (was 10,000) leaves more of each test's short-lived objects to be freed by their count before a
# pass scans them: 8 files in one process, 1.33 -> 0.91 s in the collector (208 -> 70 young passes, full
# passes 3 -> 2; 100,000 gave no more), live objects at the end +4 %.
gc.set_threshold(50_000, 10, 10)


# The fast lane (``-m "not slow"``, as the README names it) runs on two worker processes where
# pytest-xdist is installed (the [test] extra) and the machine has two cores: its ~5,000 tests are
# mostly 10-50 ms each, so one process leaves a core idle for the whole lane (issue 25 asks it to
# finish within two minutes on these 2-core machines). Whole-suite runs (CI's ``pytest -q``) stay in
# one process: they time real training runs and collectives, which two workers would disturb. An
# explicit ``-n`` (``-n 0`` for one process) always wins.
FAST_LANE_MARKEXPR = "not slow"


def fast_lane_workers(config, cores: int) -> int | None:
    """Workers to give this run (None: leave it as given)."""
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return None
    if config.option.numprocesses is not None or config.option.markexpr != FAST_LANE_MARKEXPR:
        return None
    if config.option.usepdb or config.option.collectonly:
        return None
    return min(cores, 4) if cores >= 2 else None


# Whole test files go to one worker each (``--dist loadfile``) rather than single tests (``load``):
# a file's module fixtures and the first-use costs its tests share (a built model, a loaded profile,
# lazily imported libraries) are then paid by one worker, not by both. On a third of the lane's
# files (49, 1,740 tests, 2 workers on the loaded 2-core box): 94.0 s of CPU with ``load``, 90.0 s
# with ``loadfile``, 95.7 s with ``worksteal``; the workers ended 0.8, 3.7 and 2.1 s apart. An
# explicit ``--dist`` wins.
FAST_LANE_DIST = "loadfile"

# A file is sent whole, so the two workers end together only if the last files sent are short.
# xdist's own order (``--loadscope-reorder``: most tests first) sends the golden file (11 tests,
# ~14 s of CPU) and other short lists of long tests last; the fast lane sends these first instead,
# the rest in collection order (its last files take well under a second). Measured CPU seconds a
# file, one process (``--durations`` and per-test CPU, this stop).
FIRST_FILES = (
    "test_plan_caches.py",            # ~16 (two whole plan searches, each ranked lazily and eagerly; 2.9 before them)
    "test_golden.py",                 # 14.1
    "test_symmetric.py",              # 8.8
    "test_cli.py",                    # 7.0
    "test_maxmin_jit.py",             # 6.4 (numba's compiled solvers loaded on first use)
    "test_sanity_properties.py",      # 5.4
    "test_plots.py",                  # 5.4
    "test_collectives.py",            # 5.3
    "test_model_error.py",            # 4.8
    "test_accuracy_large_models.py",  # 4.3
    "test_layout.py",                 # 4.1
    "test_plan_verify.py",            # 3.8
    "test_variability.py",            # 3.6
    "test_calibrate_profile.py",      # 3.0
    "test_install.py",                # 2.7
)


def fast_lane_dist(config) -> str | None:
    """How to share this run's tests among its workers (None: leave it as given)."""
    return FAST_LANE_DIST if config.option.dist == "no" else None


def first_files_first(items: list) -> list:
    """``items`` with the tests of :data:`FIRST_FILES` first (in that order), the rest as they were."""
    rank = {name: k for k, name in enumerate(FIRST_FILES)}
    return sorted(items, key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    # The workers parse the command line anew (no --dist there): the controller tells them.
    if node.config.option.dist == FAST_LANE_DIST and not node.config.option.loadscopereorder:
        node.workerinput["dpsim_first_files"] = True


def pytest_collection_modifyitems(config, items):
    # Every worker sorts alike (xdist checks that their lists agree); one process keeps its order.
    if getattr(config, "workerinput", {}).get("dpsim_first_files"):
        items[:] = first_files_first(items)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = fast_lane_workers(config, cores)
    if workers is not None:
        config.option.numprocesses = workers
        dist = fast_lane_dist(config)
        if dist is not None:
            config.option.dist = dist
            config.option.loadscopereorder = False  # FIRST_FILES gives the order


def pytest_configure(config):
    # dpsim reads a PredictConfig setting through its part (config.parallelism.tp); a flat read is kept only
    # for users' scripts and fails here. Added here rather than as pyproject's filterwarnings: pytest imports
    # an ini filter's category while it parses its options, before this file sets sys.dont_write_bytecode
    # above, so dpsim.predict.config and the 63 modules it imports (topology, workload, strategies) were never
    # cached under PYTHONDONTWRITEBYTECODE: every run's controller and workers, and every dpsim process a
    # test starts, compiled them again (importing dpsim.predict.config: 0.48 -> 0.27 s of CPU with them cached).
    config.addinivalue_line("filterwarnings", "error::dpsim.predict.config.FlatSettingWarning")


def pytest_collection_finish(session):
    gc.collect()
    gc.freeze()


# After the last test the process still walked its whole heap twice: pytest's unraisable-exception
# plugin collects every generation once more at the end of the session (for finalizers of garbage
# never collected), and the interpreter collects again as it exits. By then the heap holds every
# test's memoized models and plans: on 8 of the lane's files in one process this cost 2.7 s of CPU
# after the session (0.26 s frozen as below; the lane's two workers each pay it). The young
# generations, where the last tests' cyclic garbage is, are still collected first; an unraisable
# exception raised during a test is reported with that test as before.
@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    gc.collect(1)
    gc.freeze()


@pytest.fixture
def make_variant():
    return variant


@pytest.fixture(scope="module")
def process_group(tmp_path_factory):
    """A gloo process group of world size 1 for real DDP and collectives in this process,
    destroyed after the module (torch imported here: only torch tests ask for it)."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():  # pragma: no cover
        pytest.skip("torch.distributed is not available")
    with pytest.MonkeyPatch.context() as mp:
        # This switch makes torch put the small bucket last; dpsim models the default.
        mp.delenv("DDP_SET_LAST_BUCKET_CAP", raising=False)
        created = False
        if not dist.is_initialized():
            init_file = tmp_path_factory.mktemp("pg") / "init"
            dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=0, world_size=1)
            created = True
        try:
            yield
        finally:
            if created:
                dist.destroy_process_group()
