"""Input-validation gaps the twenty-first fuzz round saw after its first fixes (fuzz21b): --attention-kernel and
--no-flash-attention on a model with no attention (and --no-flash-attention on a traced module), a VariabilitySpec
noise_source that is no text, nccl-tests logs of two GPU models in two link classes, and a transformer shape's
dropout that underflows to 0.

Each case says what it did before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dpsim.errors import DpsimError
from dpsim.variability.spec import VariabilitySpec
from tests.fuzz_harness import refused

REPO = Path(__file__).resolve().parent.parent
_LOGS = REPO / "calibration" / "reference" / "nccl-tests"

_MLP = """import torch.nn as nn


def build():
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))


def example_input():
    import torch
    return torch.zeros(8, 64)
"""


# --- 1. attention flags on a model with no attention ----------------------------------------------------------------
@pytest.mark.parametrize("flag", [("--attention-kernel", "flash3"), ("--no-flash-attention",)])
def test_attention_flags_on_a_model_without_attention_are_refused(flag, capsys):
    """Before: ``predict --model resnet50 --attention-kernel flash3`` (or ``--no-flash-attention``) predicted the
    same step as without the flag, status 0: both change attention ops alone, and a CNN has none."""
    refused(["predict", "--model", "resnet50", "--gpus", "8", "--steps", "1", *flag], capsys,
            flag[0], "resnet50", "none of them attention")


def test_no_flash_attention_on_a_torch_mlp_is_refused(tmp_path, capsys):
    """Before: an MLP torch module took ``--no-flash-attention`` and dropped it (status 0)."""
    pytest.importorskip("torch")
    path = tmp_path / "mlp.py"
    path.write_text(_MLP)
    refused(["predict", "--model", f"{path}:build", "--input-shape", "8,64", "--gpus", "8", "--steps", "1",
             "--no-flash-attention"], capsys, "--no-flash-attention", "mlp.py:build", "none of them attention")


def test_no_flash_attention_on_a_traced_module_with_attention_is_refused(capsys):
    """Before: ``--model examples/my_model.py:build --no-flash-attention`` predicted the same step as without the flag
    (status 0): a traced module runs its own attention, and the flag reaches only the models dpsim builds."""
    pytest.importorskip("torch")
    refused(["predict", "--model", str(REPO / "examples" / "my_model.py") + ":build", "--gpus", "8", "--steps", "1",
             "--no-flash-attention"], capsys, "--no-flash-attention", "traced torch module", "my_model.py:build")


# --- 2. a VariabilitySpec noise_source that is no text ---------------------------------------------------------------
@pytest.mark.parametrize("source", [5, "", b"profile", ["a"]])
def test_noise_source_that_is_no_text_is_refused(source):
    """Before: ``VariabilitySpec(noise_source=5)`` was taken and the report printed the noise as "from 5"."""
    with pytest.raises(DpsimError, match=r"noise_source: .* is not valid; expected None .* text"):
        VariabilitySpec(noise_cv=0.05, noise_source=source)
    assert VariabilitySpec(noise_cv=0.05, noise_source="calibration profile 'a' step_time_cv").noise_source


# --- 3. nccl-tests logs of two GPU models in two link classes --------------------------------------------------------
def test_logs_of_two_gpu_models_in_two_link_classes_are_refused(tmp_path, capsys):
    """Before: an 8 x A100 node's (intra_node) and a 2 x p5 H100 pair's (inter_node) all_reduce logs made one profile
    (status 0): the GPUs were compared per op and link class alone. Two A100 systems (the shipped aws-p4de-2node
    profile's logs) still make one."""
    a100 = _LOGS / "8x-a100-sxm-node-nvlink3-via-nvswitch.all_reduce_perf.log"
    h100 = _LOGS / "aws-p5-48xlarge-x2-16x-h100-80gb.all_reduce_perf.log"
    out = tmp_path / "p.json"
    refused(["calibrate", "--from-nccl-tests", str(a100), str(h100), "--out", str(out), "--quiet"], capsys,
            "--from-nccl-tests", "H100", "A100", a100.name, h100.name, "one system")
    assert not out.exists()
    from dpsim.calibrate.build import profile_from_nccl_tests
    p4de = _LOGS / "aws-p4de-24xlarge-x2-16x-a100-80gb.all_reduce_perf.log"
    assert set(profile_from_nccl_tests([a100, p4de]).link_classes) == {"intra_node", "inter_node"}


# --- 4. a transformer shape's dropout that underflows ---------------------------------------------------------------
_SHAPE = "transformer:hidden=768,layers=2,heads=12,vocab=50257,seq=1024,act=gelu,norm=layernorm,pos=learned,dropout="


@pytest.mark.parametrize("dropout, words", [
    ("1e-400", ("underflows to 0",)), ("-1e-400", ("underflows to 0",)),
    ("nan", ("expected a probability",)), ("1", ("expected a probability",)), ("-0.1", ("expected a probability",)),
    ("abc", ("expected a probability",)),
])
def test_a_shape_dropout_out_of_range_or_underflowing_is_refused(dropout, words, capsys):
    """Before: ``dropout=1e-400`` was read as 0 (blocks with no dropout kernels, status 0); NaN, 1, -0.1 and text were
    refused already and still are."""
    refused(["memory", "--model", _SHAPE + dropout, "--gpus", "8"], capsys, f"dropout={dropout}", *words)
