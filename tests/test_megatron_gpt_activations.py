"""Megatron's count of what a GPT block (LayerNorm, multi-head attention, 4h GELU MLP) keeps for
backward, against the hand count of Korthikanti et al. 2022 (arXiv:2205.05198, Sec. 4.1), which was
derived from Megatron's own GPT block: per layer, b = 1, 16-bit activations,

- attention ``11sh + 5as²`` (QKV input 2sh; Q and K 4sh; softmax output 2as²; its dropout mask as²
  and output 2as²; V 2sh; the projection's input 2sh; the residual dropout's mask sh) plus the
  LayerNorm's input 2sh;
- MLP ``19sh`` (fc1 input 2sh, GELU input 8sh, fc2 input 8sh, dropout mask sh) plus its LayerNorm 2sh:
  ``34sh + 5as²`` in all.

With fused attention (TransformerEngine, Megatron-Core's rows) the ``5as²`` goes and the ``a·s``
fp32 softmax statistics (4 bytes each, FlashAttention-2 Algorithm 1's ``L``) come.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dpsim.errors import ConfigError
from dpsim.workload.architectures import GPT2Config, build_gpt2
from dpsim.workload.layers import (
    has_megatron_count,
    megatron_gpt_block_activation_bytes,
    with_activation_count,
)

ROOT = Path(__file__).resolve().parents[1]

# gpt-1.7b of Narayanan et al. 2021 Table 1 (tests/data/layout_reference.csv row N01), at a short
# sequence to keep the model small.
S, H, A, LAYERS = 512, 2304, 24, 4


def _gpt(activation: str = "gelu", *, flash: bool) -> object:
    cfg = GPT2Config(vocab_size=51200, n_positions=S, n_embd=H, n_layer=LAYERS, n_head=A,
                     activation_function=activation)
    return build_gpt2(cfg, name="gpt-test", flash_attention=flash)


def test_unfused_block_is_korthikantis_34sh_plus_5as2():
    attention, mlp = megatron_gpt_block_activation_bytes(S, H, A, flash_attention=False)
    assert attention == 11 * S * H + 5 * A * S * S + 2 * S * H
    assert mlp == 19 * S * H + 2 * S * H
    assert attention + mlp == S * H * (34 + 5 * A * S / H)


def test_fused_block_drops_the_scores_and_keeps_the_softmax_statistics():
    attention, mlp = megatron_gpt_block_activation_bytes(S, H, A, flash_attention=True)
    assert attention == 13 * S * H + 4 * A * S
    assert mlp == 21 * S * H


def test_without_dropout_the_masks_go():
    attention, mlp = megatron_gpt_block_activation_bytes(S, H, A, flash_attention=False, resid_dropout=False,
                                                         attn_dropout=False)
    # attention: no residual mask (sh), no attention-dropout mask or output (3as²): 2as² stay
    assert attention == 12 * S * H + 2 * A * S * S
    assert mlp == 20 * S * H


@pytest.mark.parametrize("flash", [False, True])
def test_gelu_gpt_carries_megatrons_count(flash):
    eager = _gpt(flash=flash)
    assert has_megatron_count(eager)
    megatron = with_activation_count(eager, "megatron")
    difference = sum(m.activation_bytes_per_sample for m in megatron.layers) - \
        sum(e.activation_bytes_per_sample for e in eager.layers)
    # the eager GPT count is Korthikanti's already: only the fused attention's statistics differ
    assert difference == pytest.approx(LAYERS * 4 * A * S if flash else 0.0, abs=1e-6)


def test_gelu_new_gpt_has_no_megatron_count():
    """HF GPT-2's tanh GELU (``gelu_new``) is not Megatron's fused bias-GELU: refused, not miscounted."""
    model = _gpt("gelu_new", flash=False)
    assert not has_megatron_count(model)
    with pytest.raises(ConfigError, match=r"^--activations: megatron counts .*; gpt-test has no layer it covers"):
        with_activation_count(model, "megatron")


def test_layout_rows_use_megatrons_count():
    sys.path.insert(0, str(ROOT / "validation"))
    import accuracy_layouts

    for row in accuracy_layouts.rows():
        if row["id"] not in ("N01", "H01"):
            continue
        model = accuracy_layouts.model_of(row)
        blocks = [layer for layer in model.layers if layer.megatron_activation_bytes_per_sample is not None]
        assert len(blocks) == 2 * int(row["layers"])
        assert all(b.activation_bytes_per_sample == b.megatron_activation_bytes_per_sample for b in blocks)
