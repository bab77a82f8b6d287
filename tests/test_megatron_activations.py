"""What a rank keeps for backward when Megatron-Core runs a Llama-family model (issues 24 and 28: every
published Megatron run told whether it fits), checked against counts written out here by hand.

The hand counts follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", arXiv:2205.05198, Sec. 4.1: per layer ``34sbh + 5as²b`` 16-bit bytes, ``sbh·34/t`` with tensor and
sequence parallelism) tensor by tensor, with what Megatron-Core changes (NVIDIA/Megatron-LM@d98e8a64ddf3):
TransformerEngine attention takes the grouped key/value heads as they are
(``megatron/core/extensions/transformer_engine.py`` line 2092, ``num_gqa_groups``), the fused bias-SwiGLU
keeps only its input (``megatron/core/fusions/fused_bias_swiglu.py`` line 184), an MoE layer's router keeps
its 16-bit input (``megatron/core/transformer/moe/moe_utils.py`` line 1382) and the experts' outputs are
unpermuted without probabilities (applied in the activation), so nothing of them is kept.
"""

from __future__ import annotations

import pytest

from dpsim.memory import stage_activation_bytes
from dpsim.predict.config import PredictConfig
from dpsim.predict.layout import layout_of
from dpsim.strategies.layout import stage_assignment
from dpsim.strategies.tensor import ExpertSplit, layer_activation_bytes, tp_model
from dpsim.workload.architectures import LlamaConfig, build_llama
from dpsim.workload.layers import with_megatron_activations

S, H = 2048, 1024
HEADS, KV_HEADS, HEAD_DIM = 16, 4, 64  # grouped-query attention: 4 query heads per key/value head
Q, KV = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
INTER = 2816
T = 2  # tensor-parallel ranks, with sequence parallelism (everything split by t: Korthikanti Table 2)


def _model(**moe):
    cfg = LlamaConfig(hidden_size=H, num_hidden_layers=2, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                      head_dim=HEAD_DIM, intermediate_size=INTER, vocab_size=32000, max_position_embeddings=S, **moe)
    return with_megatron_activations(build_llama(cfg, name="gqa-swiglu", seq_len=S, flash_attention=True))


def _hand_attention() -> float:
    """One sample's attention sub-block, all ranks together: norm input and the QKV linear's input
    (``2sh`` each; Korthikanti's LayerNorm and QKV input), the query and the output at the query heads'
    width (``2·s·q`` each), the key and the value at the key/value heads' width (``2·s·kv`` each, not
    repeated), and the fused kernel's fp32 softmax statistics (``4·a·s``) in place of ``5as²``."""
    return 2 * S * H + 2 * S * H + 2 * S * Q + 2 * S * KV + 2 * S * KV + 2 * S * Q + 4 * HEADS * S


def _hand_swiglu(inter: int) -> float:
    """One sample's dense MLP sub-block: norm input and fc1's input (``2sh`` each), fc1's gated output
    (``2·s·2·inter``, the fused SwiGLU's only activation) and fc2's input (``2·s·inter``)."""
    return 2 * S * H + 2 * S * H + 2 * S * 2 * inter + 2 * S * inter


def _per_rank(model, ep: int = 1):
    return tp_model(model, T, sequence_parallel=True, experts=ExpertSplit(ep=ep))


def test_gqa_swiglu_block_keeps_korthikantis_tensors_with_grouped_heads_and_a_fused_swiglu():
    tpm = _per_rank(_model())
    blocks = [layer for layer in tpm.layers if layer.role == "block"]
    assert [layer.kind for layer in blocks] == ["attention", "mlp"] * 2
    for layer in blocks:
        got = layer_activation_bytes(layer, T, sequence_parallel=True, recompute="off")
        hand = _hand_attention() if layer.kind == "attention" else _hand_swiglu(INTER)
        assert got == pytest.approx(hand / T, rel=1e-12)
    # The eager count it replaces: key and value repeated to the query heads, an unfused SwiGLU (gate, up,
    # SiLU's output and their product) and an eager RMSNorm's normalised input: larger on both halves.
    eager = tp_model(build_llama(LlamaConfig(hidden_size=H, num_hidden_layers=2, num_attention_heads=HEADS,
                                             num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, intermediate_size=INTER,
                                             vocab_size=32000, max_position_embeddings=S),
                                 seq_len=S, flash_attention=True), T, sequence_parallel=True)
    for old, new in zip(eager.layers, tpm.layers):
        if new.role == "block":
            assert layer_activation_bytes(old, T, sequence_parallel=True, recompute="off") > \
                layer_activation_bytes(new, T, sequence_parallel=True, recompute="off")


def test_multi_head_model_with_a_4h_mlp_keeps_korthikantis_34sbh_less_the_dropout_masks():
    """With every head its own key/value head and a gated MLP of 8h/3 (the same bytes as a 4h GELU MLP: 2·4h
    saved either way), a layer keeps Korthikanti's ``34sbh`` less the two 1-byte dropout masks (the
    Llama-family configurations train without dropout), plus the softmax statistics, all over t with
    sequence parallelism (Table 2: ``34/t``)."""
    h = 1536  # 8h/3 = 4096, a whole width
    cfg = LlamaConfig(hidden_size=h, num_hidden_layers=1, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                      head_dim=h // HEADS, intermediate_size=8 * h // 3, vocab_size=32000, max_position_embeddings=S)
    tpm = _per_rank(with_megatron_activations(build_llama(cfg, seq_len=S, flash_attention=True)))
    per_layer = sum(layer_activation_bytes(layer, T, sequence_parallel=True, recompute="off")
                    for layer in tpm.layers if layer.role == "block")
    assert per_layer == pytest.approx(((34 - 2) * S * h + 4 * HEADS * S) / T, rel=1e-12)


def test_moe_layer_keeps_the_permuted_tokens_and_the_experts_gated_output_not_their_outputs():
    """An MoE layer of 16 experts (top-4, expert width 512) and one shared expert of 1024, ep 4, tp 2 with
    sequence parallelism: each rank routes its ``s / t`` tokens, and receives as many routed copies as it
    sends (balanced routing), so per rank the layer keeps the whole layer's count over t: the norm input and
    output (``2sh`` each; the router and the shared expert read the output), the router's fp32 scores
    (``4·s·experts``), per routed copy its permuted token (``2h``, the experts' first GEMM's input), that
    GEMM's gated output (``2·2·ffn``), the second GEMM's input (``2·ffn``) and its fp32 probability (4), and
    the shared expert as a dense fused-SwiGLU MLP (``2·3·s·shared``)."""
    experts, top_k, ffn, shared = 16, 4, 512, 1024
    model = _model(num_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=ffn, n_shared_experts=1,
                   shared_expert_intermediate_size=shared)
    tpm = _per_rank(model, ep=4)
    moe = [layer for layer in tpm.layers if layer.routed_bytes_per_sample > 0]
    assert len(moe) == 2
    hand = (2 * S * H + 2 * S * H + 4 * S * experts
            + S * top_k * (2 * H + 2 * 2 * ffn + 2 * ffn + 4)
            + 2 * 3 * S * shared)
    for layer in moe:
        assert layer_activation_bytes(layer, T, sequence_parallel=True, recompute="off") == \
            pytest.approx(hand / T, rel=1e-12)


def test_megatron_recompute_keeps_each_sub_blocks_norm_input():
    """``--recompute megatron`` (``--recompute-modules layernorm moe_act``): both norms are checkpointed
    without their outputs, each keeping its own input (the attention's: the block input; the MLP's: the
    residual after attention): ``2sh/t`` per sub-block on top of what the modules save
    (NVIDIA/Megatron-LM@d98e8a64ddf3 megatron/core/transformer/transformer_layer.py,
    ``_forward_pre_mlp_layernorm``). A dense MLP keeps fc1's gated output and fc2's input: ``moe_act``
    recomputes only the routed experts' activation."""
    model = _model()
    config = PredictConfig(model="llama-2-7b", gpus=2, tp=2, pp=1, dp=1, micro_batch=1, global_batch=1,
                           sequence_parallel=True, recompute="megatron")
    layout = layout_of(config)
    tpm = tp_model(model, T, sequence_parallel=True)
    (per_chunk, _, _), = stage_activation_bytes(tpm, stage_assignment(tpm, layout), layout)
    head = sum(layer_activation_bytes(layer, T, sequence_parallel=True, recompute="megatron")
               for layer in tpm.layers if layer.role != "block")
    # Per block: attention input, q, k, v, the attention output with its statistics; MLP input, fc1's
    # output (gate and up), fc2's input. The output projections' outputs feed residual adds: not kept.
    attention = 2 * S * H + 2 * S * Q + 2 * S * KV + 2 * S * KV + 2 * S * Q + 4 * HEADS * S
    mlp = 2 * S * H + 2 * S * 2 * INTER + 2 * S * INTER
    assert per_chunk[0] - head == pytest.approx(2 * (attention + mlp) / T, rel=1e-12)
