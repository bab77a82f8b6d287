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
