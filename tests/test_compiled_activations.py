"""``--compile``: what torch.compile's min-cut partitioner saves for a Llama block, traced on a real
transformers ``LlamaDecoderLayer`` and compared with the catalog's count and a hand count."""

from __future__ import annotations

import pytest
import torch

from dpsim.hardware import get_gpu
from dpsim.memory import memory_breakdown
from dpsim.workload.catalog import get_model
from dpsim.workload.precision import get_precision
from llama_block import catalog_block_bytes

H, HEADS, KV, INTER, S, B = 256, 8, 8, 704, 64, 2


def _partitioned_saved_bytes(precision: str) -> float:
    """Bytes per sample the compiled block's autograd function saves (each storage once), leaving
    out parameters, the shared RoPE tables and per-row statistics (as the catalog does)."""
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    pytest.importorskip("transformers")  # the `models` extra, not `test`: measured where installed
    from transformers import LlamaConfig as HfConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = HfConfig(hidden_size=H, num_attention_heads=HEADS, num_key_value_heads=KV, intermediate_size=INTER,
                   num_hidden_layers=1, vocab_size=64, max_position_embeddings=S, attn_implementation="sdpa")
    torch.manual_seed(0)
    pdt = torch.bfloat16 if precision == "bf16-params" else torch.float32
    layer = LlamaDecoderLayer(cfg, 0).to(pdt)
    x = torch.randn(B, S, H, dtype=pdt, requires_grad=True)
    pos = torch.arange(S).unsqueeze(0).expand(B, -1)
    with torch.no_grad():
        cos, sin = LlamaRotaryEmbedding(cfg)(x, pos)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, hidden):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "amp-bf16"):
                return self.layer(hidden, attention_mask=None, position_ids=pos, position_embeddings=(cos, sin))

    def backend(gm, example_inputs):  # Inductor's partitioner, without Inductor's code generation
        return aot_module_simplified(gm, example_inputs, fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g,
                                     partition_fn=min_cut_rematerialization_partition)

    compiled = torch.compile(Block(), backend=backend, fullgraph=True)
    compiled(x)
    skip = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    skip |= {cos.untyped_storage().data_ptr(), sin.untyped_storage().data_ptr()}
    weights = {tuple(p.shape) for p in layer.parameters() if p.dim() == 2}
    weights |= {t[::-1] for t in weights}
    saved: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        autocast_weight = t.dim() == 2 and tuple(t.shape) in weights and tuple(t.shape) != (B * S, H)
        if ptr not in skip and t.numel() > B * S * HEADS and not autocast_weight:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        compiled(x)
    return sum(saved.values()) / B


def _catalog_compiled_block_bytes(precision: str) -> float:
    return catalog_block_bytes(precision, hidden=H, heads=HEADS, kv_heads=KV, inter=INTER, seq=S, compile=True)


# Traces or runs real torch / a subprocess (1.5-5 s): the full suite runs it, the fast lane does not.
@pytest.mark.slow
@pytest.mark.parametrize("precision, stream_bytes", [("bf16-params", 2), ("amp-bf16", 4)])
def test_compiled_block_saves_what_the_partitioner_keeps(precision, stream_bytes):
    """Hand count per sample (no GQA here): the block input in the stream's dtype, then 2 bytes
    each for the q/k/v input, q, k, v, the attention output, the output projection's output, the
    gate/up input (s·h each) and gate, up and their product (s·inter each)."""
    sh = S * H
    hand = stream_bytes * sh + 2 * (7 * sh + 3 * S * INTER)
    assert _partitioned_saved_bytes(precision) == hand
    assert _catalog_compiled_block_bytes(precision) == hand


def test_compile_keeps_less_than_eager_on_a_catalog_job():
    """Llama-3-8B at 8,192 tokens, FSDP on 8 H100, micro-batch 1, no checkpointing: compiled, each of
    the 32 blocks keeps 4·s·h + 2·s·inter bytes fewer with bf16 parameters (the norms' inputs and
    products recomputed, one shared 16-bit norm output saved in each half; SiLU's output recomputed),
    and under autocast 12·s·h more than that (its fp32 norm tensors, and the q/k/v and gate/up
    copies that CSE merges; only the block input stays fp32)."""
    model = get_model("llama-3-8b", flash_attention=True)
    s, h, inter = 8192, 4096, 14336
    h100 = get_gpu("h100")
    for name, fewer in (("bf16-params", 4 * s * h + 2 * s * inter),
                        ("amp-bf16", 4 * s * h + 2 * s * inter + 12 * s * h)):
        kw = dict(optimizer="adamw", micro_batch=1, strategy="fsdp", n_gpus=8, gpus_per_node=8)
        eager = memory_breakdown(model, h100, precision=get_precision(name), **kw)
        compiled = memory_breakdown(model, h100, precision=get_precision(name, compile=True), **kw)
        assert eager.activations_bytes - compiled.activations_bytes == 32 * fewer


def test_selective_recomputation_under_compile_never_keeps_more_than_compile_alone():
    """Selective recomputation drops only the attention core's saved tensors (none with fused
    attention: flash keeps no scores, and q, k, v stay saved as the checkpoint's inputs), so under
    torch.compile it keeps what the partitioner keeps without it: Llama-3-8B FSDP on 8 H100 at
    8,192 tokens kept 80.1 GiB (eager mode's count) against compile alone's 57.1 (modernjobs). Nor
    does it drop a linear's 16-bit weight copy (FSDP1 under autocast, where each linear saves its
    own): it counted only the largest block's, as full checkpointing keeps."""
    from dpsim.strategies.checkpointing import CheckpointPolicy

    model = get_model("llama-3-8b", flash_attention=True)
    h100 = get_gpu("h100")
    for name, version in (("bf16-params", "2"), ("amp-bf16", "2"), ("amp-bf16", "1")):
        kw = dict(optimizer="adamw", micro_batch=1, strategy="fsdp", n_gpus=8, gpus_per_node=8, fsdp_version=version)
        precision = get_precision(name, compile=True)
        off = memory_breakdown(model, h100, precision=precision, **kw)
        selective = memory_breakdown(model, h100, precision=precision, checkpointing=CheckpointPolicy(mode="selective"), **kw)
        eager_sel = memory_breakdown(model, h100, precision=get_precision(name),
                                     checkpointing=CheckpointPolicy(mode="selective"), **kw)
        assert selective.activations_bytes == pytest.approx(off.activations_bytes)
        assert selective.activations_bytes < eager_sel.activations_bytes
        eager_off = memory_breakdown(model, h100, precision=get_precision(name), **kw)
        assert eager_sel.activations_bytes == pytest.approx(eager_off.activations_bytes)  # flash: no core to drop
