"""Defects the twenty-fourth fuzz round took up (fuzz24, a demanding new user): ``dpsim --version`` refused as an
unknown option; ``--single-gpu-samples-per-s`` of a subnormal rate refused as "a inf s step"; the Python API's
misspelt or missing arguments (``dpsim.goodput(config, duratoin_s=...)``, ``dpsim.VariabilitySpec(nose_cv=...)``)
raising Python's bare ``TypeError`` that a caller catching ``DpsimError`` saw as a traceback.

Each case says what it did before.
"""

from __future__ import annotations

import pickle
from importlib import metadata

import pytest

import dpsim
from dpsim.errors import ConfigTypeError, DpsimError
from tests.fuzz_harness import refused, run_cli


# --- 1. dpsim --version -----------------------------------------------------------------------------------------------
def test_dpsim_version_prints_the_installed_version(capsys):
    """Before: ``dpsim --version`` (and ``python -m dpsim --version``) was "No such option: --version", exit status
    2: the first thing a user types to report a problem. Now it prints the installed distribution's version, 0."""
    outcome = run_cli(["--version"], capsys)
    assert outcome.status == 0, outcome.err
    assert outcome.out.strip() == f"dpsim {metadata.version('dpsim')}"
    assert outcome.err == ""


# --- 2. a subnormal single-GPU rate -----------------------------------------------------------------------------------
def test_a_subnormal_single_gpu_rate_names_no_inf(capsys):
    """Before: ``--single-gpu-samples-per-s 1e-320`` overflowed micro-batch / rate and the refusal read "is a inf s
    step". Now it says the step is over the limit; an ordinary too-slow rate still prints its step."""
    line = refused(["predict", "--gpus", "8", "--link", "nvlink", "--single-gpu-samples-per-s", "1e-320"], capsys,
                   "--single-gpu-samples-per-s", "a step over 86400 s", "expected a step from")
    assert "inf" not in line, line
    refused(["predict", "--gpus", "8", "--link", "nvlink", "--single-gpu-samples-per-s", "1e-9"], capsys,
            "is a 4e+09 s step")
