"""Defects found by the twelfth fuzz round (fuzz12), on what changed in its session: the CLI's ``loading()``,
``@frozen_dataclass``, the ``--etp`` default, NVLS under a degraded NVLink domain, folded routes.

Each case says what it did before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


# --- the CLI called in a caller's own process (a notebook, a script) ----------------------------------------------
def test_main_in_a_callers_process_leaves_its_garbage_collectable_and_its_blas_alone():
    """Before: one ``dpsim.cli.main(["predict", ...])`` froze every object the process held (gc.freeze in
    loading()), the caller's too: a 10 MB cycle the caller dropped afterwards was never freed; and numpy, first
    imported there, ran the caller's BLAS on one thread for the rest of the session. A fresh process: the
    import happens in this call."""
    code = ("import contextlib, gc, io, json, os, sys, weakref\n"
            "class Big: pass\n"
            "a = Big(); a.me = a; a.data = bytearray(10**7); r = weakref.ref(a)\n"
            "from dpsim.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    status = main(['predict', '--model', 'gpt2', '--gpus', '8', '--link', 'infiniband', '--steps', '1'])\n"
            "del a\n"
            "gc.collect()\n"
            "print(json.dumps([status, r() is None, gc.get_freeze_count(), gc.isenabled(),\n"
            "                  os.environ.get('OPENBLAS_NUM_THREADS'), 'numpy' in sys.modules]))\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    status, freed, frozen, collecting, blas, numpy_loaded = json.loads(proc.stdout)
    assert status == 0 and numpy_loaded
    assert freed and frozen == 0 and collecting
    assert blas is None


# --- results in a notebook: pickled, copied, compared ---------------------------------------------------------------
def test_a_prediction_pickles_and_equals_its_copy():
    """Before: ``pickle.dumps(dpsim.predict(config))`` (and of a PlanResult or GoodputReport, which hold
    predictions) raised "Can't pickle local object 'build_collectives.<locals>.make'"; and two predictions of one
    config, or a prediction and its deepcopy, were unequal (the collective models compared by identity)."""
    import copy
    import pickle

    import dpsim

    config = dpsim.PredictConfig(gpus=16, link="infiniband", model="gpt2", micro_batch=1)
    p = dpsim.predict(config)
    q = pickle.loads(pickle.dumps(p))
    assert q == p == dpsim.predict(config) == copy.deepcopy(p)
    assert q.collectives.time("all_reduce", 1e8).time_s == p.collectives.time("all_reduce", 1e8).time_s


def test_the_api_functions_pickle_for_a_process_pool():
    """Before: ``multiprocessing.Pool().map(dpsim.predict, configs)`` raised "cannot pickle 'CallablePackage'
    object": ``dpsim.predict`` and ``dpsim.plan`` are their subpackages made callable."""
    import pickle

    import dpsim
    from dpsim.plan.planner import plan_layouts
    from dpsim.predict.run import predict

    assert pickle.loads(pickle.dumps(dpsim.predict)) is predict
    assert pickle.loads(pickle.dumps(dpsim.plan)) is plan_layouts


# --- a second degraded link class never speeds a collective up --------------------------------------------------
def test_a_degraded_nvlink_domain_on_top_of_degraded_gpu_links_is_never_faster():
    """Before: on 576 GPUs of gb200-nvl72, --degrade nvlink:50% --degrade nvlink-domain:10% predicted a shorter
    step (gpt2, 0.025372 s: the healthy one) than nvlink:50% alone (0.025377 s), and an all_reduce of 256 KiB
    0.26 % faster: the domain's links held back the flows between servers that share the GPU links, so the
    pipelined NVLS tree's stages inside a server ran at their healthy rate."""
    from dpsim.collectives.nccl import NcclCollectives
    from dpsim.network.degrade import parse_degradation
    from dpsim.predict.config import PredictConfig
    from dpsim.predict.run import _resolve_topology

    topology = _resolve_topology(PredictConfig(gpus=144, link="gb200-nvl72"), None)

    def seconds(*degrade: str) -> float:
        model = NcclCollectives(topology, degradations=tuple(parse_degradation(d) for d in degrade))
        return model.time("all_reduce", 256 * 1024).time_s

    gpu_links = seconds("nvlink:50%")
    assert seconds() < gpu_links <= seconds("nvlink:50%", "nvlink-domain:10%")


# --- an --etp that does not divide the stage's GPUs is named --------------------------------------------------------
def test_an_etp_that_does_not_divide_the_stage_is_named(capsys):
    """Before: "--ep: --ep 1 x --etp 3 = 3 does not divide ... = 16 ...; choose an --ep that divides it": the given
    --etp was the value at fault, and no --ep fixes it at --ep 1."""
    from fuzz_harness import check_outcome, run_cli

    args = ["predict", "--model", "mixtral-8x7b", "--gpus", "16", "--link", "infiniband", "--steps", "1",
            "--sequence-parallel", "--recompute", "full", "--tp", "2", "--etp", "3"]
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "error", ("--etp: 3 x --ep 1 = 3 does not divide --tp 2 x --cp 1 x 8 data-parallel",
                                           "choose an --etp among 1, 2, 4, 8, 16, or leave it out"))
    args[-1:] = ["3", "--ep", "2"]  # --ep 2 x --etp 3: etp is still the one that divides nothing
    check_outcome(run_cli(args, capsys), args, "error", ("--etp: 3 x --ep 2 = 6", "choose an --etp among 1, 2, 4, 8"))
    args = [*args[:-4], "--ep", "3"]  # an --ep alone at fault: as before
    check_outcome(run_cli(args, capsys), args, "error", ("--ep: --ep 3 x --etp 1 = 3 does not divide",))
