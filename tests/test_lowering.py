"""One lowering: a model costs the same whether it is named from the catalog, given as a torch
module, or as a transformers configuration (issue 24).

A traced module is lowered to the catalog's op kinds (:mod:`dpsim.workload.lowering`), so the
roofline costs both alike. Evidence here:

* the same architecture through the catalog and as the torch reference module (GPT-2 and
  Llama shapes, MHA and GQA) has the same forward FLOPs, the same activation bytes and the
  same one-GPU step within 1 %, and the same FSDP step with activation checkpointing;
* their FLOPs are the standard count: 2 per parameter per token forward (6N with backward)
  plus ``4·s²·d`` of attention per layer;
* fused attention (SDPA) keeps q, k, v, the output and its softmax statistics, not the
  ``seq x seq`` scores; attention written as matmul + softmax keeps them;
* MFU of a traced model falls as the model shrinks (memory-bound work and kernel launches
  weigh more), the sign published runs show.
"""

from __future__ import annotations

import pytest

from dpsim.hardware import get_gpu
from dpsim.workload.architectures import GPT2Config, LlamaConfig, build_model
from dpsim.workload.compute import compute_profile
from dpsim.workload.precision import get_precision
from dpsim.workload.spec import AttentionOp, MatmulOp, MemoryOp

torch = pytest.importorskip("torch")

from dpsim.workload import torch_models as refs  # noqa: E402  (imports torch)
from dpsim.workload.from_torch import workload_from_module  # noqa: E402
from dpsim.workload.torch_layers import _merge_heads, _split_heads, eager_attention  # noqa: E402

H100 = get_gpu("h100")
AMP = get_precision("amp-bf16")

# Same shapes as the catalog entries, fewer layers (the cost per block is what is compared).
GPT2_SMALL = GPT2Config(n_layer=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu")
"""GPT-2 small's shapes as the torch reference module runs them: no dropout, one-kernel tanh GELU."""
LLAMA_7B = LlamaConfig(num_hidden_layers=2)
"""Llama-2-7B's block (MHA)."""
LLAMA_GQA = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=2, num_attention_heads=32,
                        num_key_value_heads=8, vocab_size=128256)
"""Llama-3-8B's block (GQA, 8 key/value heads)."""


def _traced(cfg, seq, batch=1, module=None):
    with torch.device("meta"):
        module = module or refs.torch_model_for(cfg)
    return workload_from_module(module, refs.example_input(cfg, batch=batch, seq_len=seq), name="traced")


def _step(model, micro_batch=1, precision=AMP):
    return compute_profile(model, H100, micro_batch=micro_batch, precision=precision, optimizer="adamw")


@pytest.mark.parametrize(("cfg", "seq"), [(GPT2_SMALL, 1024), (LLAMA_7B, 4096), (LLAMA_GQA, 2048)],
                         ids=["gpt2", "llama-2-7b", "llama-gqa"])
def test_catalog_and_torch_module_cost_the_same(cfg, seq):
    catalog = build_model(cfg, seq_len=seq, flash_attention=True)
    traced = _traced(cfg, seq, batch=2)
    assert traced.param_count == catalog.param_count
    assert traced.forward_flops_per_sample == catalog.forward_flops_per_sample
    assert traced.activation_bytes_per_sample == pytest.approx(catalog.activation_bytes_per_sample, rel=0.01)
    for precision, micro_batch in ((AMP, 1), (AMP, 4), (get_precision("bf16-params"), 2)):
        a, b = _step(catalog, micro_batch, precision), _step(traced, micro_batch, precision)
        assert b.step_s == pytest.approx(a.step_s, rel=0.01)
        assert b.forward_s == pytest.approx(a.forward_s, rel=0.01)
        assert b.backward_s == pytest.approx(a.backward_s, rel=0.01)
    # Every traced layer that works is costed by its ops, none by FLOPs alone.
    assert "flops-only" not in b.breakdown_s
    assert all(layer.ops for layer in traced.layers if layer.forward_flops_per_sample)


def test_ops_are_per_sample_whatever_the_traced_batch():
    """Ops are stored per sample: tracing with 1 or 4 samples costs a micro-batch alike (only
    tensors shared by the batch, position rows and RoPE tables, are divided among its samples)."""
    one, four = _traced(LLAMA_7B, 1024, batch=1), _traced(LLAMA_7B, 1024, batch=4)
    assert _step(four, 4).step_s == pytest.approx(_step(one, 4).step_s, rel=1e-3)
    assert four.activation_bytes_per_sample == pytest.approx(one.activation_bytes_per_sample, rel=1e-3)


def test_fsdp_checkpointed_step_is_the_same_through_both_paths():
    """Issue 24's case (FSDP with activation checkpointing on 16 H100s), on Llama-2-7B's block."""
    from dpsim.predict import PredictConfig, predict

    config = PredictConfig(gpus=16, link="infiniband", model="llama-2-7b", micro_batch=1, strategy="fsdp",
                           activation_checkpointing=True)
    catalog = build_model(LLAMA_7B, seq_len=4096, flash_attention=True)
    a = predict(config, model=catalog)
    b = predict(config, model=_traced(LLAMA_7B, 4096))
    assert b.step_time_s == pytest.approx(a.step_time_s, rel=0.01)


@pytest.mark.parametrize(("cfg", "seq"), [(GPT2_SMALL, 1024), (LLAMA_7B, 4096), (LLAMA_GQA, 2048)],
                         ids=["gpt2", "llama-2-7b", "llama-gqa"])
def test_forward_flops_are_two_per_parameter_per_token_plus_attention(cfg, seq):
    """2N per token forward (N without the embedding table, a lookup; GPT-2's tied head counts
    it once as the LM head's matmul) plus 4·s·d per token and layer of attention (the full
    square, :attr:`AttentionOp.flops_per_sample`); backward twice that (6N in all)."""
    traced = _traced(cfg, seq)
    if isinstance(cfg, GPT2Config):
        layers, d, lookup = cfg.n_layer, cfg.n_embd, cfg.n_positions * cfg.n_embd  # wte is also the head
    else:
        layers, d, lookup = cfg.num_hidden_layers, cfg.num_attention_heads * cfg.head_size, \
            cfg.vocab_size * cfg.hidden_size
    norms_and_biases = sum(p.numel for p in traced.params if len(p.shape) == 1)
    dense = traced.param_count - lookup - norms_and_biases
    assert traced.forward_flops_per_sample == pytest.approx(2 * dense * seq + 4 * layers * seq * seq * d, rel=1e-9)
    profile = _step(traced)
    assert profile.flops_per_step == pytest.approx(3 * traced.forward_flops_per_sample)
    attention = [op for layer in traced.layers for op in layer.ops if isinstance(op, AttentionOp)]
    assert len(attention) == layers and all(op.fused and op.causal for op in attention)
    assert sum(op.flops_per_sample for op in attention) == 4 * layers * seq * seq * d


class _EagerGPT2Attention(torch.nn.Module):
    """GPT-2's attention as HF's ``attn_implementation="eager"`` writes it (matmul + softmax)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        a = self.inner
        q, k, v = a.c_attn(x).split(x.shape[-1], dim=2)
        out = eager_attention(*(_split_heads(t, a.n_head) for t in (q, k, v)), causal=True)
        return a.c_proj(_merge_heads(out))


def test_fused_attention_keeps_no_scores_and_eager_attention_does():
    s, heads = 1024, GPT2_SMALL.n_head
    fused = _traced(GPT2_SMALL, s)
    with torch.device("meta"):
        module = refs.torch_model_for(GPT2_SMALL)
        for block in module.transformer.h:
            block.attn = _EagerGPT2Attention(block.attn)
    eager = _traced(GPT2_SMALL, s, module=module)
    assert eager.forward_flops_per_sample == fused.forward_flops_per_sample
    extra = eager.activation_bytes_per_sample - fused.activation_bytes_per_sample
    # Each layer keeps at least the softmax output (2 bytes per score) eagerly.
    assert extra >= GPT2_SMALL.n_layer * 2 * heads * s * s
    eager_catalog = build_model(GPT2_SMALL, seq_len=s, flash_attention=False)
    assert eager.activation_bytes_per_sample == pytest.approx(eager_catalog.activation_bytes_per_sample, rel=0.01)
    # The fused trace keeps q, k, v and the output: within 1 % of the catalog's flash formula.
    catalog = build_model(GPT2_SMALL, seq_len=s, flash_attention=True)
    assert fused.activation_bytes_per_sample == pytest.approx(catalog.activation_bytes_per_sample, rel=0.01)
    assert fused.activation_bytes_per_sample < build_model(GPT2_SMALL, seq_len=s).activation_bytes_per_sample
    # Eager attention is lowered as it runs: batched matmuls over the heads, passes over the scores.
    ops = [op for layer in eager.layers for op in layer.ops]
    assert not any(isinstance(op, AttentionOp) for op in ops)
    assert sum(1 for op in ops if isinstance(op, MatmulOp) and op.batch == heads and op.m == s) == 2 * GPT2_SMALL.n_layer
    scores = [op for op in ops if isinstance(op, MemoryOp) and op.elements == heads * s * s]
    assert scores and _step(eager).step_s > _step(fused).step_s


def test_traced_mfu_falls_as_the_model_shrinks():
    """Published MFU falls with model size at one sequence length; so does the traced path's
    (it was one MFU for every size while traced modules were costed as FLOPs alone)."""
    shapes = [(512, 8, 1376, 4), (1024, 16, 2816, 4), (2048, 16, 5504, 4), (4096, 32, 11008, 2)]
    mfus = []
    for d, heads, inter, layers in shapes:
        cfg = LlamaConfig(hidden_size=d, num_attention_heads=heads, num_key_value_heads=heads,
                          intermediate_size=inter, num_hidden_layers=layers)
        profile = _step(_traced(cfg, 2048), micro_batch=4)
        mfus.append(profile.flops_per_step / (profile.step_s * H100.peak_rate("bfloat16")))
    assert mfus == sorted(mfus) and mfus[0] < 0.8 * mfus[-1]


def test_transformers_config_costs_as_the_catalog():
    """The third path: ``transformers:LlamaConfig(...)`` with Llama-2-7B's block (skipped where
    transformers is not installed; it is not a test dependency). transformers 5 fills its
    key/value cache in training too (``use_cache`` defaults to true): one more copy of k and v
    per layer, which the trace sees and the catalog does not describe, inside the 1 %."""
    pytest.importorskip("transformers")
    from dpsim.workload.from_torch import load_torch_workload

    ref = ("transformers:LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=2, "
           "num_attention_heads=32, num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096)")
    traced = load_torch_workload(ref, input_shape="1,4096:int64")
    catalog = build_model(LLAMA_7B, seq_len=4096, flash_attention=True)
    assert traced.param_count == catalog.param_count
    assert traced.forward_flops_per_sample == pytest.approx(catalog.forward_flops_per_sample, rel=1e-9)
    assert traced.activation_bytes_per_sample == pytest.approx(catalog.activation_bytes_per_sample, rel=0.01)
    assert _step(traced).step_s == pytest.approx(_step(catalog).step_s, rel=0.01)
