"""Saved activations at the dtypes they are stored in: the residual stream under autocast (fp32)
and autocast's per-matmul 16-bit copies, against what autograd saves on a real HF Llama block and
against hand counts of per-rank memory."""

from __future__ import annotations

import pytest
import torch

from dpsim.hardware import get_gpu
from dpsim.memory import (
    autocast_weight_bytes,
    autocast_weight_numel,
    memory_breakdown,
    stage_activation_bytes,
)
from dpsim.strategies.checkpointing import FULL_CHECKPOINTING, policy_of
from dpsim.strategies.layout import Layout, stage_assignment
from dpsim.strategies.tensor import tp_model
from dpsim.workload.architectures import LlamaConfig, build_llama
from dpsim.workload.catalog import get_model
from dpsim.workload.precision import PRECISIONS, get_precision, input_scale, saved_element_bytes
from llama_block import catalog_block_bytes

H100 = get_gpu("h100")


def _saved_by_autograd(precision: str, h: int, heads: int, inter: int, s: int, b: int) -> float:
    """Bytes per sample one transformers ``LlamaDecoderLayer`` saves for backward (each storage once),
    leaving out parameters, autocast's cached 16-bit weight copies (2-D tensors shaped as a weight or
    its transpose) and per-row statistics (the norms' rsqrt, SDPA's logsumexp: a few values per token,
    which the catalog does not count)."""
    pytest.importorskip("transformers")  # the `models` extra, not `test`: measured where installed
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
    copies: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        small = t.numel() <= b * s * heads
        if ptr not in params and t.dim() == 2 and tuple(t.shape) in weight_shapes:
            copies[ptr] = t.untyped_storage().nbytes()
        elif ptr not in params and not small:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    x = torch.randn(b, s, h, dtype=pdt, requires_grad=True)
    pos = torch.arange(s).unsqueeze(0).expand(b, -1)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "amp-bf16"):
        cos, sin = rope(x, pos)
        tables = {cos.untyped_storage().data_ptr(), sin.untyped_storage().data_ptr()}
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            layer(x, attention_mask=None, position_ids=pos, position_embeddings=(cos, sin))
    WEIGHT_COPIES[precision] = sum(copies.values())
    return sum(n for ptr, n in saved.items() if ptr not in tables) / b


WEIGHT_COPIES: dict[str, int] = {}
"""Bytes of the weight-shaped tensors the last measurement of each precision saw saved (autocast's copies)."""


H, HEADS, INTER, S = 192, 4, 320, 128


def _catalog_block_bytes(precision: str) -> float:
    return catalog_block_bytes(precision, hidden=H, heads=HEADS, kv_heads=HEADS, inter=INTER, seq=S)


# Traces or runs real torch / a subprocess (1.5-5 s): the full suite runs it, the fast lane does not.
@pytest.mark.slow
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
    # Each linear also saves the bf16 copy of its weight that autocast made (2 bytes per element of
    # the block's seven projections); in bf16 or fp32 the weights are the parameters themselves.
    model = build_llama(LlamaConfig(hidden_size=H, intermediate_size=INTER, num_hidden_layers=1,
                                    num_attention_heads=HEADS, num_key_value_heads=HEADS, vocab_size=64,
                                    max_position_embeddings=S), flash_attention=True)
    block = [l for l in model.layers if l.unit is not None]
    amp = get_precision("amp-bf16")
    assert WEIGHT_COPIES["amp-bf16"] == 2 * (4 * H * H + 3 * H * INTER) == 2 * sum(
        autocast_weight_numel(l, amp) for l in block)


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
    # Autocast's bf16 weight copies: FSDP1's parameters are views (never cached), so the LM head's and
    # the recomputed block's saved copies: q, o 8192^2, k, v 1024 x 8192, gate, up, down 8192 x 28672.
    block = 2 * h * h + 2 * 1024 * h + 3 * h * inter
    copies = 2 * (v * h + block)
    assert amp.activations_bytes == hand + copies
    bf16 = memory_breakdown(model, H100, precision=get_precision("bf16-params"), optimizer="adamw", micro_batch=1,
                            strategy="fsdp", n_gpus=64, gpus_per_node=8, activation_checkpointing=True)
    # The sanity pass's ~10 GiB: 80 fp32 inputs (2 more bytes per s·h each) and the recomputed block's 14·s·h.
    assert amp.activations_bytes - copies - bf16.activations_bytes == 80 * 2 * sh + 14 * sh
    assert (amp.activations_bytes - copies - bf16.activations_bytes) / 2**30 == pytest.approx(10.875)


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


def test_autocast_weight_copies_cached_or_saved():
    """Llama-2-7B under amp-bf16: with leaf parameters (DDP, DeepSpeed, FSDP2) autocast's cache holds a
    bf16 copy of every linear weight until forward ends, checkpointed or not: 2 bytes x 6,607,077,376
    (6,738,415,616 parameters less the 32000 x 4096 embedding and 65 norms of 4096). FSDP1's views
    are not cached: with every block checkpointed, the LM head's copy and one block's (4 x 4096^2 +
    3 x 4096 x 11008) while it is recomputed; without checkpointing, all. bf16 parameters: none."""
    model = get_model("llama-2-7b", flash_attention=True)
    amp = get_precision("amp-bf16")
    linears = 6_738_415_616 - 32000 * 4096 - 65 * 4096
    none = policy_of(False, None)
    assert autocast_weight_bytes(model, amp, none, "block", cached=True) == 2 * linears
    assert autocast_weight_bytes(model, amp, FULL_CHECKPOINTING, "block", cached=True) == 2 * linears
    assert autocast_weight_bytes(model, amp, none, "block", cached=False) == 2 * linears
    assert autocast_weight_bytes(model, amp, FULL_CHECKPOINTING, "block", cached=False) == \
        2 * (32000 * 4096 + 4 * 4096 * 4096 + 3 * 4096 * 11008)
    assert autocast_weight_bytes(model, get_precision("bf16-params"), none, "block", cached=True) == 0
    assert autocast_weight_bytes(model, get_precision("fp32-params-bf16-acts"), none, "block", cached=True) == 0
    ddp = memory_breakdown(model, H100, precision=amp, optimizer="adamw", micro_batch=1)
    ddp_bf16 = memory_breakdown(model, H100, precision=get_precision("bf16-params"), optimizer="adamw", micro_batch=1)
    s, h = 4096, 4096
    # 32 blocks' autocast extras (14·s·h) and the weight copies.
    assert ddp.activations_bytes - ddp_bf16.activations_bytes == 32 * 14 * s * h + 2 * linears
