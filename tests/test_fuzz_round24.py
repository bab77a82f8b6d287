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
