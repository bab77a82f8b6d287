"""Defects the twenty-second fuzz round found (fuzz22): a bare 0 refused as a duration without its unit though
--replace's help says "0 = at once", ...

Each case says what it did before.
"""

from __future__ import annotations

import pytest

import dpsim
from dpsim.errors import DpsimError
from tests.fuzz_harness import refused
from tests.fuzz_harness import run_json as _json

_GOODPUT = ["goodput", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--runs", "2", "--duration", "1d",
            "--json"]


# --- 1. a bare 0 as a duration --------------------------------------------------------------------------------------
def test_a_bare_zero_is_a_duration_in_any_unit(capsys):
    """Before: ``goodput --replace 0`` was refused "'0' has no unit; give one: s, min, h or d (e.g. 0h for hours, 0s
    for seconds)" though the flag's help says "(0 = at once)": zero is zero in every unit, and only other bare numbers
    are ambiguous (``--mtbf-gpu 80000``). ``--restart 0`` and ``--checkpoint-write 0`` likewise; ``--duration 0`` and
    ``--mtbf-node 0`` now reach their own rule (> 0)."""
    assert _json(_GOODPUT + ["--replace", "0"], capsys) == _json(_GOODPUT + ["--replace", "0s"], capsys)
    assert _json(_GOODPUT + ["--restart", "0"], capsys) == _json(_GOODPUT + ["--restart", "0min"], capsys)
    refused(_GOODPUT[:-3] + ["--duration", "0"], capsys, "--duration", "> 0")
    refused(_GOODPUT[:-1] + ["--mtbf-node", "0"], capsys, "--mtbf-node", "> 0")
    # Any other bare number still needs its unit.
    refused(_GOODPUT[:-1] + ["--restart", "5"], capsys, "--restart", "'5' has no unit")


# --- 2. a PredictConfig part of the wrong type, an unknown setting ----------------------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    ({"parallelism": {"tp": 2}}, ("parallelism", "{'tp': 2}", "expected a ParallelismConfig", "PredictConfig(tp=2)")),
    ({"execution": "amp-bf16"}, ("execution", "'amp-bf16'", "expected an ExecutionConfig", "precision=...")),
    ({"cluster": 5}, ("cluster", "5", "expected a ClusterConfig", "gpus=...")),
    ({"micro_bach": 2}, ("'micro_bach'", "did you mean micro_batch")),
])
def test_a_part_of_the_wrong_type_or_an_unknown_setting_is_a_dpsim_error(kwargs, words):
    """Before: ``PredictConfig(parallelism={"tp": 2})`` raised a bare TypeError "parallelism must be a
    ParallelismConfig, not dict" (``execution="x"``: "must be a ExecutionConfig"), and ``micro_bach=2`` "unexpected
    setting 'micro_bach'", naming nothing to give instead: no DpsimError, so a caller catching dpsim's errors got a
    traceback. Now a DpsimError (still a TypeError, as Python's own call errors) naming the field, value and what is
    allowed."""
    with pytest.raises(DpsimError) as err:
        dpsim.PredictConfig(model="gpt2", gpus=8, **kwargs)
    assert isinstance(err.value, TypeError)
    for word in words:
        assert word in str(err.value)
