"""``--loss-impl eager``: transformers' causal-LM loss (``logits.float()`` then ``F.cross_entropy``) holds
12 bytes per token and vocabulary entry at its backward, 8 more than the fp32 logits the head keeps
(``fused``, the default: today's count, unchanged)."""

from __future__ import annotations

import json

import pytest

from dpsim.cli import main
from dpsim.errors import ConfigError
from dpsim.memory import activation_parts_per_sample, eager_loss_transient_bytes_per_sample
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import load_model, memory_for_config

S, V = 4096, 128_256  # Llama-3-8B's sequence and vocabulary (meta-llama/Meta-Llama-3-8B config.json: 128256)
BASE = dict(model="llama-3-8b", gpus=8, link="aws-p5", strategy="fsdp", seq_len=S, micro_batch=2,
            precision="bf16-params")


def _mem(**kw):
    return memory_for_config(PredictConfig(**BASE, **kw))[0]


def test_hand_count_without_checkpointing():
    """No recompute working set: the whole transient is added. By hand, per sample at the loss's backward:
    log_softmax's saved fp32 output (4 B), nll_loss_backward's zero-filled fp32 gradient (4 B) and
    _log_softmax_backward_data's fp32 result (4 B) = 12 B per token and entry; the head already keeps the
    4 B fp32 logits, so eager adds 8 B x 4096 x 128256 = 4,202,692,608 B a sample, x 2 samples."""
    fused, eager = _mem(), _mem(loss_impl="eager")
    assert eager.activations_bytes - fused.activations_bytes == 2 * 4_202_692_608
    assert eager.total_bytes - fused.total_bytes == 2 * 4_202_692_608
    assert (eager.weights_bytes, eager.gradients_bytes, eager.optimizer_bytes, eager.comm_buffers_bytes) == \
        (fused.weights_bytes, fused.gradients_bytes, fused.optimizer_bytes, fused.comm_buffers_bytes)
    assert eager_loss_transient_bytes_per_sample(load_model(PredictConfig(**BASE))) == (12 - 4) * S * V


def test_with_full_checkpointing_the_recompute_and_the_loss_are_not_live_together():
    """Full checkpointing: the loss's backward runs before the last block's recompute, so the peak is the
    larger of the two on top of what is kept."""
    fused, eager = _mem(activation_checkpointing=True), _mem(activation_checkpointing=True, loss_impl="eager")
    model = load_model(PredictConfig(**BASE))
    _, working = activation_parts_per_sample(model, activation_checkpointing=True)
    per_sample = 8.0 * S * V
    assert working < per_sample  # one Llama-3-8B block at 4K tokens is less than 8 s V
    assert eager.activations_bytes - fused.activations_bytes == pytest.approx(2 * (per_sample - working), rel=1e-12)


def test_default_is_todays_count():
    assert PredictConfig().execution.loss_impl == "fused"
    assert _mem(loss_impl="fused") == _mem()
    # Named in --json's config only when set, as the other training-script options.
    assert "loss_impl" not in PredictConfig(**BASE).to_dict()
    assert PredictConfig(**BASE, loss_impl="eager").to_dict()["loss_impl"] == "eager"


def test_cli_equals_api(capsys):
    args = ["--model", "llama-3-8b", "--gpus", "8", "--link", "aws-p5", "--strategy", "fsdp", "--seq-len", str(S),
            "--micro-batch", "2", "--precision", "bf16-params", "--loss-impl", "eager", "--json"]
    assert main(["memory", *args]) == 0
    got = json.loads(capsys.readouterr().out)
    api = _mem(loss_impl="eager")
    assert got["activations_bytes"] == api.activations_bytes and got["total_bytes"] == api.total_bytes


@pytest.mark.parametrize("kw, match", [
    (dict(tp=2), r"^--loss-impl: eager is transformers' loss on whole logits, counted on the data-parallel path"),
    (dict(loss_impl="chunked"), r"^--loss-impl: 'chunked' is not known; choose one of fused, eager$"),
])
def test_refused_in_one_line(kw, match):
    with pytest.raises(ConfigError, match=match):
        PredictConfig(**{**BASE, "loss_impl": "eager", **kw})


def test_a_model_without_a_vocabulary_is_refused():
    with pytest.raises(ConfigError, match=r"^--loss-impl: eager is a language model's loss .* resnet50 has none"):
        memory_for_config(PredictConfig(model="resnet50", gpus=8, link="aws-p5", loss_impl="eager"))
