"""``--activations {eager,megatron,megatron-legacy}``: whose count of what each layer keeps for backward
predict, memory, sweep, goodput and plan charge, applied in one place (:func:`dpsim.workload.layers.with_activation_count`
through :func:`dpsim.predict.run.load_model`).

The hand count of the difference follows the two counts' own definitions, per block of a Llama decoder
(b = 1, 16-bit elements, fused attention): the eager one (``llama_block_activation_bytes``: HF's eager
modules, key and value repeated to the query heads) keeps ``2·(3sh + 2s(q + q))`` for attention and
``2·(3sh + 4s·inter)`` for the MLP; Megatron-Core's (``megatron_block_activation_bytes``; Korthikanti et
al. 2022, arXiv:2205.05198 Sec. 4.1, with NVIDIA/Megatron-LM@d98e8a64ddf3's grouped heads and fused
SwiGLU, as tests/test_megatron_activations.py writes it out) ``4sh + 4sq + 4s·kv + 4a·s`` and
``4sh + 6s·inter``. Eager less Megatron per block: ``4sh + 4s(q - kv) + 2s·inter - 4a·s``.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dpsim.cli import main
from dpsim.cli.app import app
from dpsim.errors import ConfigError
from dpsim.plan.planner import plan_layouts
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import load_model, memory_for_config, predict
from dpsim.workload.layers import ACTIVATION_COUNTS

# llama-3-8b (Meta's config.json, dpsim's catalog): grouped-query attention (8 key/value heads of 32)
# and a SwiGLU MLP; a 1024-token sequence keeps the test fast.
S, H, Q, KV, INTER, HEADS, LAYERS = 1024, 4096, 4096, 1024, 14336, 32, 32
BASE = dict(model="llama-3-8b", seq_len=S, gpus=8, link="aws-p5", micro_batch=1, precision="bf16-fp32-grads")
# Each count with a catalog model that has it: legacy Megatron-LM's count covers blocks whose key/value heads
# are the query heads (llama-2-7b), not llama-3-8b's grouped ones (refused there).
ALLOWED = "eager, megatron, megatron-legacy"
MODEL_OF = {"eager": "llama-3-8b", "megatron": "llama-3-8b", "megatron-legacy": "llama-2-7b"}


def _hand_difference_per_block() -> float:
    return 4 * S * H + 4 * S * (Q - KV) + 2 * S * INTER - 4 * HEADS * S


def test_choices_are_the_librarys_counts():
    import typing

    from dpsim.predict.config import Activations

    assert typing.get_args(Activations) == ACTIVATION_COUNTS


def test_default_is_eager_and_leaves_the_model_and_the_json_config_alone():
    config = PredictConfig(**BASE)
    assert config.execution.activations == "eager"
    assert "activations" not in config.to_dict()  # shown only when set: --json and sweep columns do not move
    assert PredictConfig(**BASE, activations="megatron").to_dict()["activations"] == "megatron"


@pytest.mark.parametrize("layout, share", [(dict(), 1.0), (dict(tp=2, sequence_parallel=True), 0.5)])
def test_megatron_keeps_less_than_eager_by_the_hand_counted_bytes(layout, share):
    """Data parallelism alone: every block on the GPU; tp 2 with sequence parallelism: every tensor of
    both counts split over the two ranks (Korthikanti Table 2)."""
    eager = memory_for_config(PredictConfig(**BASE, **layout))[0]
    megatron = memory_for_config(PredictConfig(**BASE, **layout, activations="megatron"))[0]
    assert megatron.activations_bytes < eager.activations_bytes
    assert eager.activations_bytes - megatron.activations_bytes == \
        pytest.approx(share * LAYERS * _hand_difference_per_block(), rel=1e-12)
    # Only the activations move: weights, gradients and optimizer state are the same.
    assert eager.total_bytes - megatron.total_bytes == \
        pytest.approx(eager.activations_bytes - megatron.activations_bytes, rel=1e-12)


def test_api_equals_cli():
    runner = CliRunner()
    for count in ACTIVATION_COUNTS:
        args = ["--model", MODEL_OF[count], "--seq-len", str(S), "--gpus", "8", "--link", "aws-p5", "--micro-batch",
                "1", "--precision", "bf16-fp32-grads", "--tp", "2", "--sequence-parallel"]
        out = runner.invoke(app, ["predict", *args, "--activations", count, "--json"])
        assert out.exit_code == 0, out.output
        got = json.loads(out.output)
        api = predict(PredictConfig(**{**BASE, "model": MODEL_OF[count]}, tp=2, sequence_parallel=True,
                                   activations=count))
        assert got["memory"]["total_bytes"] == api.memory.total_bytes
        assert got["step_time_s"] == pytest.approx(api.step_time_s, rel=1e-12)
        mem = runner.invoke(app, ["memory", *args, "--activations", count, "--json"])
        assert mem.exit_code == 0, mem.output
        assert json.loads(mem.output)["total_bytes"] == api.memory.total_bytes


def test_a_given_model_is_counted_as_the_config_says():
    """``predict(config, model=...)`` (the validation harness's published configurations) applies the
    config's count to the model it is given, as to the one it loads."""
    config = PredictConfig(**BASE, activations="megatron")
    given = predict(config, model=load_model(PredictConfig(**BASE)))
    assert given.memory.total_bytes == predict(config).memory.total_bytes


def test_plan_charges_the_same_count():
    """plan's closed-form memory of a layout is predict's memory of it, with the count asked for."""
    per_count = {}
    for count in ACTIVATION_COUNTS:
        base = PredictConfig(**{**BASE, "model": MODEL_OF[count]}, activations=count)
        result = plan_layouts(base, gpus=[8], global_batch=8, tps=[2], pps=[1], strategies=["ddp"],
                              micro_batches=[1], recomputes=["off"], sequence_parallel=True, verify=0)
        (estimate,) = [e for e in result.ranked if e.candidate.tp == 2]
        layout = estimate.candidate.config(base)
        assert layout.execution.activations == count
        assert estimate.memory_bytes == pytest.approx(memory_for_config(layout)[0].total_bytes, rel=1e-12)
        per_count[count] = estimate.memory_bytes
    assert per_count["eager"] - per_count["megatron"] == \
        pytest.approx(0.5 * LAYERS * _hand_difference_per_block(), rel=1e-12)


@pytest.mark.parametrize("command", ["predict", "memory", "goodput", "plan"])
def test_bad_value_is_one_line(command, capsys):
    with pytest.raises(ConfigError, match=r"^--activations: 'fused' is not known; choose one of " + ALLOWED + "$"):
        PredictConfig(**BASE, activations="fused")
    extra = ["--gpus", "8", "--global-batch", "8"] if command == "plan" else []
    rc = main([command, *extra, "--activations", "fused"])
    _, err = capsys.readouterr()
    assert rc == 2
    assert err.splitlines() == ["dpsim: error: --activations: 'fused' is not known; choose one of " + ALLOWED]


def test_megatron_on_a_model_without_its_count_is_refused():
    """GPT-2's blocks have no Megatron-Core count (its tanh GELU is not Megatron's; only Llama-family blocks
    and GPT blocks with a 4h GELU MLP have one): the flag
    would change nothing, so it is refused rather than ignored."""
    with pytest.raises(ConfigError, match=r"^--activations: megatron counts .*; gpt2 has no layer it covers"):
        predict(PredictConfig(model="gpt2", gpus=8, activations="megatron"))
