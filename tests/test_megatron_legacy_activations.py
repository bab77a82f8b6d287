"""What a rank keeps for backward when legacy Megatron-LM (``megatron/model``, no TransformerEngine) runs a
Llama block with ``--use-flash-attn --swiglu --RMSNorm`` (issue 24: R202, Megatron-LLaMA's LLaMA-13B on 32
A100 80GB, ran and was told it did not fit), checked against a count written out here by hand, tensor by
tensor, from alibaba/Megatron-LLaMA@25306de84d30:

- ``megatron/model/fused_layer_norm.py``: apex's ``FusedRMSNormAffineFunction``, which saves its input, the
  weight and fp32 ``invvar`` per row (NVIDIA/apex@3c53cf81fef0 ``apex/normalization/fused_layer_norm.py``);
- ``megatron/core/tensor_parallel/layers.py`` lines 220-239: a linear keeps its sequence-parallel input shard
  (``save_for_backward`` before the all-gather);
- ``megatron/model/transformer.py``: rotary keeps only its cos/sin tables (``rotary_pos_embedding.py``), q, k
  and v are copied ``s b -> b s`` (line 657) and kept by flash-attn 1.x with its output and fp32 log-sum-exp;
  the output is copied back ``b s -> s b`` (line 664) and the projection keeps that copy; the eager SwiGLU
  (lines 113-117) keeps fc1's whole output, SiLU's output and the product; dropout is 0 in the launch script
  (``examples/LLaMA/LLaMA_13_slurm.sh``), which keeps no mask.

Korthikanti et al. 2022 (arXiv:2205.05198, Sec. 4.1) count ``34sbh`` per layer for a GPT block; the same
accounting with flash attention and no dropout gives this block ``18sbh + 8·s·b·ffn`` (plus the statistics).
"""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.strategies.tensor import layer_activation_bytes, tp_model
from dpsim.workload.architectures import LlamaConfig, build_llama
from dpsim.workload.layers import with_activation_count

# LLaMA-13B as Megatron-LLaMA's launch script gives it (examples/LLaMA/LLaMA_13_slurm.sh at 25306de84d30).
S, H, HEADS, FFN, VOCAB = 2048, 5120, 40, 13824, 32000
T = 2  # --tensor-model-parallel-size 2 --sequence-parallel: every saved tensor split by t


def _llama(layers: int = 2, kv_heads: int = HEADS):
    cfg = LlamaConfig(hidden_size=H, num_hidden_layers=layers, num_attention_heads=HEADS,
                      num_key_value_heads=kv_heads, head_dim=H // HEADS, intermediate_size=FFN, vocab_size=VOCAB,
                      max_position_embeddings=S)
    return build_llama(cfg, name="llama-13b-shape", seq_len=S, flash_attention=True)


def _hand_block_per_rank(micro_batch: int) -> float:
    """Bytes one micro-batch's block keeps on one rank, every tensor listed with its shape (b s or s b, 16-bit
    unless said): every hidden-sized tensor is the rank's sequence shard (s/t rows) or its heads (h/t wide)."""
    b, e = micro_batch, 2
    tensors = [
        b * S * H / T,          # input RMSNorm: its input (apex saves input_)
        b * S * H / T,          # QKV linear: its input, the norm's output (sequence-parallel shard)
        b * S * H / T,          # q, rotated and copied s b -> b s, kept by flash-attn
        b * S * H / T,          # k, the same
        b * S * H / T,          # v, copied s b -> b s
        b * S * H / T,          # flash-attn's output
        b * S * H / T,          # its copy b s -> s b, the row-parallel dense's input
        b * S * H / T,          # post-attention RMSNorm: its input
        b * S * H / T,          # dense_h_to_4h: its input
        b * S * 2 * FFN / T,    # dense_h_to_4h's output, both halves (silu's input and the product's operand)
        b * S * FFN / T,        # silu's output (the product's other operand)
        b * S * FFN / T,        # the product: dense_4h_to_h's input
    ]
    lse = 4 * b * (HEADS // T) * S  # flash-attn's fp32 log-sum-exp, one per row and local head
    return e * sum(tensors) + lse


def test_legacy_block_keeps_what_megatron_llamas_code_saves():
    tpm = tp_model(with_activation_count(_llama(), "megatron-legacy"), T, sequence_parallel=True)
    blocks = [layer for layer in tpm.layers if layer.role == "block"]
    assert [layer.kind for layer in blocks] == ["attention", "mlp"] * 2
    per_block = sum(layer_activation_bytes(layer, T, sequence_parallel=True, recompute="off")
                    for layer in blocks) / 2
    mb = 4  # the launch script's --micro-batch-size (what the count assumes: b >= 2)
    assert per_block * mb == pytest.approx(_hand_block_per_rank(mb), rel=1e-12)
    # Korthikanti's form: 18sbh/t + 8·s·b·ffn/t, plus the statistics.
    assert per_block * mb == pytest.approx((18 * S * mb * H + 8 * S * mb * FFN + 4 * mb * HEADS * S) / T, rel=1e-12)


def test_legacy_count_is_the_eager_one_less_one_normalised_copy_per_block():
    """The eager (Hugging Face) count keeps an eager RMSNorm's normalised input besides its input, in each
    half; legacy Megatron keeps instead, in the attention half, a second copy of attention's output. Net:
    ``2sh`` bytes a block less (the statistics aside), over t with sequence parallelism."""
    eager = tp_model(_llama(), T, sequence_parallel=True)
    legacy = tp_model(with_activation_count(_llama(), "megatron-legacy"), T, sequence_parallel=True)

    def per_block(tpm):
        return sum(layer_activation_bytes(layer, T, sequence_parallel=True, recompute="off")
                   for layer in tpm.layers if layer.role == "block") / 2

    assert per_block(eager) - per_block(legacy) == pytest.approx((2 * S * H - 4 * HEADS * S) / T, rel=1e-12)
    # The embedding and the head keep the same under either count (only blocks carry a legacy count).
    for old, new in zip(eager.layers, legacy.layers):
        if new.role != "block":
            assert layer_activation_bytes(old, T, sequence_parallel=True, recompute="off") == \
                layer_activation_bytes(new, T, sequence_parallel=True, recompute="off")


def test_legacy_count_is_refused_for_grouped_key_value_heads():
    # The fork's ParallelAttention has one fused query_key_value of 3h (no grouped heads): not read, refused.
    with pytest.raises(ConfigError, match="megatron-legacy"):
        with_activation_count(_llama(kv_heads=8), "megatron-legacy")
