"""Saved activations at the dtypes they are stored in: the residual stream under autocast (fp32)
and autocast's per-matmul 16-bit copies, against what autograd saves on a real HF Llama block and
against hand counts of per-rank memory."""

from __future__ import annotations

import pytest
import torch

from dpsim.hardware import get_gpu
from dpsim.memory import activation_bytes_per_sample, memory_breakdown, stage_activation_bytes
from dpsim.strategies.layout import Layout, stage_assignment
from dpsim.strategies.tensor import tp_model
from dpsim.workload.architectures import LlamaConfig, build_llama
from dpsim.workload.catalog import get_model
from dpsim.workload.precision import PRECISIONS, get_precision, input_scale, saved_element_bytes

H100 = get_gpu("h100")


def _saved_by_autograd(precision: str, h: int, heads: int, inter: int, s: int, b: int) -> float:
    """Bytes per sample one transformers ``LlamaDecoderLayer`` saves for backward (each storage once),
    leaving out parameters, autocast's cached 16-bit weight copies (2-D tensors shaped as a weight or
    its transpose) and per-row statistics (the norms' rsqrt, SDPA's logsumexp: a few values per token,
    which the catalog does not count)."""
    from transformers import LlamaConfig as HfConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = HfConfig(hidden_size=h, num_attention_heads=heads, num_key_value_heads=heads, intermediate_size=inter,
                   num_hidden_layers=1, vocab_size=64, max_position_embeddings=s, attn_implementation="sdpa")
    torch.manual_seed(0)
    pdt = torch.bfloat16 if precision == "bf16-params" else torch.float32
    layer, rope = LlamaDecoderLayer(cfg, 0).to(pdt), LlamaRotaryEmbedding(cfg)
    params = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    weight_shapes = {tuple(p.shape) for p in layer.parameters() if p.dim() == 2}
    weight_shapes |= {t[::-1] for t in weight_shapes}
    saved: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        small = t.numel() <= b * s * heads
        if ptr not in params and not small and not (t.dim() == 2 and tuple(t.shape) in weight_shapes):
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    x = torch.randn(b, s, h, dtype=pdt, requires_grad=True)
    pos = torch.arange(s).unsqueeze(0).expand(b, -1)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "amp-bf16"):
        cos, sin = rope(x, pos)
        tables = {cos.untyped_storage().data_ptr(), sin.untyped_storage().data_ptr()}
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            layer(x, attention_mask=None, position_ids=pos, position_embeddings=(cos, sin))
    return sum(n for ptr, n in saved.items() if ptr not in tables) / b


H, HEADS, INTER, S = 192, 4, 320, 128


def _catalog_block_bytes(precision: str) -> float:
    """The catalog's bytes for the same block at ``precision``: the model's count less its root layers'."""
    p = get_precision(precision)
    model = build_llama(LlamaConfig(hidden_size=H, intermediate_size=INTER, num_hidden_layers=1,
                                    num_attention_heads=HEADS, num_key_value_heads=HEADS, vocab_size=64,
                                    max_position_embeddings=S), flash_attention=True)
    root = sum(l.activation_bytes_per_sample for l in model.layers if l.unit is None)
    return (activation_bytes_per_sample(model, precision=p) - root) * p.activation_bytes / 2.0


def test_amp_block_keeps_what_autograd_saves_on_hf_llama():
    """Under autocast with fp32 parameters the residual stream is fp32: the RMSNorms save their fp32
    input and normalised input (4 + 4 bytes per s·h each), and q, k, v (and gate, up) each save their
    own bf16 copy of the norm's output. Hand count per sample, in s·h bytes: attention 4 + 4 + 3 x 2
    + q, k, v, output 4 x 2 = 22; MLP 4 + 4 + 2 x 2 = 12, plus 4 x 2 bytes per s·inter."""
    sh = S * H
    measured = _saved_by_autograd("amp-bf16", H, HEADS, INTER, S, 2)
    hand = 22 * sh + 12 * sh + 8 * S * INTER
    assert measured == hand
    assert _catalog_block_bytes("amp-bf16") == hand


def test_fp32_block_is_the_16_bit_count_doubled():
    measured = _saved_by_autograd("fp32", H, HEADS, INTER, S, 2)
    assert _catalog_block_bytes("fp32") == measured == 2 * _catalog_block_bytes("bf16-params")


def test_bf16_params_block_leaves_out_only_the_eager_norms_fp32_copies():
    """With bf16 parameters the stream is bf16 and the projections share one input; HF's eager
    LlamaRMSNorm saves an fp32 copy of its input in place of the bf16 one, 2 more bytes per element
    for each of the block's two norms: documented as not counted (fused norms and torch.compile keep
    the 16-bit input; layers.eager_rms_saved_elements)."""
    sh = S * H
    measured = _saved_by_autograd("bf16-params", H, HEADS, INTER, S, 2)
    assert measured - _catalog_block_bytes("bf16-params") == 2 * (2 * sh)


def test_saved_element_bytes_by_precision():
    table = {name: tuple(saved_element_bytes(c, p) for c in ("act", "stream", "f32", "recast"))
             for name, p in PRECISIONS.items()}
    assert table["amp-bf16"] == table["amp-fp16"] == (2, 4, 4, 2)
    assert table["bf16-params"] == table["bf16-fp32-grads"] == table["bf16-true"] == (2, 2, 4, 0)
    assert table["fp32"] == table["tf32"] == (4, 4, 4, 0)
    assert table["fp32-params-bf16-acts"] == (2, 2, 4, 0)  # MaxText: bf16 residual stream
    assert input_scale("stream", PRECISIONS["amp-bf16"]) == 2.0
    assert input_scale("act", PRECISIONS["amp-bf16"]) == 1.0
    assert input_scale("stream", PRECISIONS["fp32"]) == 1.0


def test_llama_3_70b_full_checkpointing_8k_amp_hand_count():
    """Llama-3-70B, 8,192 tokens, FSDP on 64 GPUs, every block checkpointed, micro-batch 1, flash
    attention, amp-bf16. By hand: the LM head keeps 6·s·h + 4·s·v (final norm and projection inputs,
    fp32 logits); each of the 80 blocks its fp32 input, 4·s·h; the block being recomputed its
    attention half 22·s·h (q, k and v after repeat_kv at s·h each) and its MLP 12·s·h + 8·s·inter."""
    s, h, inter, v, n = 8192, 8192, 28672, 128256, 80
    sh = s * h
    hand = (6 * sh + 4 * s * v) + n * 4 * sh + 22 * sh + 12 * sh + 8 * s * inter
    model = get_model("llama-3-70b", flash_attention=True)
    amp = memory_breakdown(model, H100, precision=get_precision("amp-bf16"), optimizer="adamw", micro_batch=1,
                           strategy="fsdp", n_gpus=64, gpus_per_node=8, activation_checkpointing=True)
    assert amp.activations_bytes == hand
    bf16 = memory_breakdown(model, H100, precision=get_precision("bf16-params"), optimizer="adamw", micro_batch=1,
                            strategy="fsdp", n_gpus=64, gpus_per_node=8, activation_checkpointing=True)
    # The sanity pass's ~10 GiB: 80 fp32 inputs (2 more bytes per s·h each) and the recomputed block's 14·s·h.
    assert amp.activations_bytes - bf16.activations_bytes == 80 * 2 * sh + 14 * sh
    assert (amp.activations_bytes - bf16.activations_bytes) / 2**30 == pytest.approx(10.875)


def test_layout_stage_keeps_fp32_block_inputs_under_autocast():
    """A tp 2 pp 2 layout with full recomputation: each stage keeps per micro-batch its blocks'
    inputs, s·h·4 bytes each under autocast (2 with bf16 parameters, unchanged from the plain
    count), unsplit by tensor parallelism without sequence parallelism."""
    cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=4, vocab_size=128, max_position_embeddings=64)
    tpm = tp_model(build_llama(cfg, flash_attention=True), 2)
    layout = Layout(tp=2, pp=2, micro_batch=1, micro_batches=4, recompute="full")
    assignment = stage_assignment(tpm, layout)
    bf16 = stage_activation_bytes(tpm, assignment, layout, get_precision("bf16-params"))
    plain = stage_activation_bytes(tpm, assignment, layout)
    amp = stage_activation_bytes(tpm, assignment, layout, get_precision("amp-bf16"))
    assert bf16 == plain
    for stage, (per_bf16, _, _), (per_amp, _, _) in zip(assignment, bf16, amp):
        blocks = len({tpm.layers[i].unit for i in stage[0] if tpm.layers[i].unit is not None})
        assert blocks == 2
        # Root layers (embedding, head) unchanged; each block input 2 more bytes per s·h element.
        assert per_amp[0] - per_bf16[0] == blocks * 2 * (64 * 256)
