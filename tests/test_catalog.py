"""Catalog models: exact parameter lists, counts, FLOPs, activations and seq_len handling."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from torch_reference_models import example_input, torch_model_for

from dpsim.errors import WorkloadError
from dpsim.workload.architectures import (
    BertConfig,
    GPT2Config,
    LlamaConfig,
    ResNetConfig,
    ViTConfig,
    build_gpt2,
    build_llama,
    build_model,
    korthikanti_block_activation_bytes,
)
from dpsim.workload.catalog import CATALOG, MOE_PUBLISHED, get_entry, get_model, list_models
from dpsim.workload.spec import ModelSpec

# Exact counts: torchvision docs ``num_params`` for resnet50 / vit_b_16 / vit_l_16;
# HuggingFace transformers ``num_parameters()`` (= HF Hub safetensors totals) for the rest.
PUBLISHED = {
    "resnet50": 25_557_032,
    "bert-base": 109_482_240,
    "bert-large": 335_141_888,
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "llama-3-405b": 405_853_388_800,
    "vit-b-16": 86_567_656,
    "vit-l-16": 304_326_632,
}

TINY = {
    "gpt2": GPT2Config(vocab_size=97, n_positions=16, n_embd=32, n_layer=2, n_head=4),
    "llama": LlamaConfig(vocab_size=101, hidden_size=32, intermediate_size=88, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16),
    "bert": BertConfig(vocab_size=91, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=64, max_position_embeddings=16),
    "vit": ViTConfig(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64,
                     num_classes=10),
    "resnet": ResNetConfig(layers=(2, 1, 1, 1), planes=(4, 8, 16, 32), stem_channels=8, num_classes=10,
                           image_size=64),
}

# Lookup tables (no matmul): left out of the 2·params·tokens rule.
LOOKUP_SUFFIXES = ("wpe.weight", "embed_tokens.weight", "word_embeddings.weight",
                   "position_embeddings.weight", "token_type_embeddings.weight", "class_token",
                   "pos_embedding")


def _named_shapes(module: torch.nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    return [(name, tuple(p.shape)) for name, p in module.named_parameters()]


def _spec_shapes(spec: ModelSpec) -> list[tuple[str, tuple[int, ...]]]:
    return [(p.name, p.shape) for p in spec.params]


def _dims(cfg: object) -> tuple[int, int]:
    """(layers, d_model) of a transformer config."""
    if isinstance(cfg, GPT2Config):
        return cfg.n_layer, cfg.n_embd
    if isinstance(cfg, (LlamaConfig, BertConfig)):
        return cfg.num_hidden_layers, cfg.hidden_size
    return cfg.num_layers, cfg.hidden_dim


# --------------------------------------------------------------------------- counts


def test_catalog_has_required_models():
    assert set(PUBLISHED) <= set(list_models())
    assert set(CATALOG) == set(list_models())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_param_count_equals_published_exactly(name):
    model = get_model(name)
    assert model.published_param_count == PUBLISHED[name]
    assert model.param_count == PUBLISHED[name]
    assert model.source  # cites where the count comes from


@pytest.mark.parametrize("name", list_models())
def test_param_names_unique_and_default_dtype(name):
    model = CATALOG[name]()
    names = [p.name for p in model.params]
    assert len(names) == len(set(names))
    assert {p.dtype for p in model.params} == {"float32"}
    assert model.name == name


def test_dtype_argument_sets_param_dtype():
    model = get_model("gpt2", dtype="bfloat16")
    assert {p.dtype for p in model.params} == {"bfloat16"}
    assert sum(p.size_bytes for p in model.params) == 2 * PUBLISHED["gpt2"]
    with pytest.raises(WorkloadError, match="dtype"):
        get_model("gpt2", dtype="float12")


# ------------------------------------------------------- parameter lists vs torch


@pytest.mark.parametrize("family", sorted(TINY))
def test_tiny_params_match_torch_reference(family):
    cfg = TINY[family]
    assert _spec_shapes(build_model(cfg)) == _named_shapes(torch_model_for(cfg))


@pytest.mark.slow
# The mixture-of-experts entries have no torch reference module here: tests/test_moe.py holds
# their counts to the published ones.
@pytest.mark.parametrize("name", [n for n in list_models() if n not in MOE_PUBLISHED])
def test_full_size_params_match_torch_reference_on_meta(name):
    entry = get_entry(name)
    with torch.device("meta"):
        module = torch_model_for(entry.config)
    assert _spec_shapes(entry.build()) == _named_shapes(module)


def test_gpt2_lm_head_is_tied_and_llama_is_not():
    gpt2 = get_model("gpt2")
    assert not any(p.name.startswith("lm_head") for p in gpt2.params)
    assert gpt2.layers[-1].name == "lm_head" and gpt2.layers[-1].forward_flops_per_sample > 0
    llama = get_model("llama-2-7b")
    assert llama.params[-1].name == "lm_head.weight"
    assert llama.params[-1].shape == (32000, 4096)


def test_layers_are_embedding_blocks_head():
    model = get_model("gpt2")
    names = [layer.name for layer in model.layers]
    assert names[0] == "transformer.wte"
    assert names[1:3] == ["transformer.h.0.attn", "transformer.h.0.mlp"]
    assert names[-1] == "lm_head"
    assert len(names) == 1 + 2 * 12 + 1
    resnet = get_model("resnet50")
    assert [layer.name for layer in resnet.layers][:2] == ["conv1", "layer1.0"]
    assert len(resnet.layers) == 1 + 16 + 1
    assert not any("running" in p.name for p in resnet.params)  # BN buffers are not parameters


# --------------------------------------------------------------------------- FLOPs


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(TINY))
def test_tiny_forward_flops_equal_torch_flop_counter(family):
    cfg = TINY[family]
    # On the meta device SDPA runs its math path, whose two batched matmuls the counter sees
    # (the CPU flash kernel is not in its registry).
    with torch.device("meta"):
        module = torch_model_for(cfg)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module(example_input(cfg, batch=1).to("meta"))
    assert build_model(cfg).forward_flops_per_sample == pytest.approx(counter.get_total_flops(), rel=1e-9)


@pytest.mark.parametrize("name", [n for n in list_models() if n != "resnet50"])
def test_flops_are_two_per_param_per_token_plus_attention(name):
    """forward ≈ 2·(params − lookup tables)·tokens + 4·n_layer·seq²·d (docstring rule)."""
    entry = get_entry(name)
    model = entry.build()
    s = model.tokens_per_sample
    layers, d = _dims(entry.config)
    cfg = entry.config
    if isinstance(cfg, LlamaConfig):  # the attention width: heads x head size (MLA: mean of qk and v heads)
        head = ((cfg.qk_nope_head_dim + cfg.qk_rope_head_dim + cfg.v_head_dim) // 2 if cfg.q_lora_rank
                else cfg.head_size)
        d = cfg.num_attention_heads * head
    lookup = sum(p.numel for p in model.params if p.name.endswith(LOOKUP_SUFFIXES))
    depth = getattr(cfg, "mtp_depth", 0)  # each MTP module: one more block, the shared head once more
    attention = 4 * (layers + depth) * s * s * d
    # A mixture of experts counts the parameters one token uses (its active ones).
    expected = 2 * (model.active_param_count - lookup) * s + attention
    if depth:
        expected += depth * 2 * s * cfg.hidden_size * cfg.vocab_size
    assert model.forward_flops_per_sample == pytest.approx(expected, rel=0.01)
    if name.startswith(("gpt2", "llama")):  # decoder LMs: even with every parameter counted
        assert model.forward_flops_per_sample == pytest.approx(2 * model.param_count * s + attention, rel=0.06)


@pytest.mark.parametrize(("name", "torchvision_gmacs"), [
    ("resnet50", 4.09), ("vit-b-16", 17.56), ("vit-l-16", 61.55),
])
def test_vision_flops_match_torchvision_docs(name, torchvision_gmacs):
    # torchvision's "GFLOPS" column counts multiply-adds; dpsim counts 2 per multiply-add.
    assert get_model(name).forward_flops_per_sample == pytest.approx(2 * torchvision_gmacs * 1e9, rel=0.003)


def test_llama_attention_flops_convention():
    model = get_model("llama-2-7b")
    attn = model.layers[1]
    s, d = 4096, 4096
    assert attn.forward_flops_per_sample == 2 * s * d * 4 * d + 2 * 2 * s * s * d


# --------------------------------------------------------------------------- activations


def test_transformer_block_activations_follow_korthikanti():
    """Korthikanti et al.'s 34sh + 5as² per block, plus what HF's eager ``gelu_new`` keeps beyond
    a fused GELU's input (three more tensors of the MLP width, 2 bytes each: 24sh)."""
    s, h, a, n_layer = 1024, 768, 12, 12
    model = get_model("gpt2")
    blocks = sum(layer.activation_bytes_per_sample for layer in model.layers[1:-1])
    assert blocks == pytest.approx(n_layer * s * h * (34 + 24 + 5 * a * s / h))
    flash = get_model("gpt2", flash_attention=True)
    flash_blocks = sum(layer.activation_bytes_per_sample for layer in flash.layers[1:-1])
    assert flash_blocks == pytest.approx(n_layer * s * h * (34 + 24))
    gelu = build_model(GPT2Config(activation_function="gelu"))
    assert sum(layer.activation_bytes_per_sample for layer in gelu.layers[1:-1]) == pytest.approx(
        n_layer * s * h * (34 + 5 * a * s / h))
    attn, mlp = korthikanti_block_activation_bytes(s, h, a)
    assert attn + mlp == pytest.approx(s * h * (34 + 5 * a * s / h))


def test_llama_activations_are_what_autograd_saves_per_block():
    """Llama's block is not Korthikanti's GPT block (RMSNorm keeps two tensors, SwiGLU four of
    the MLP width, no dropout masks): 2 bytes x (3sh + 2s·2q + as²) + 2 x (3sh + 4s·inter),
    k and v at the query width because repeat_kv copies them out before attention."""
    model = get_model("llama-3-8b")
    s, h, a, inter = 8192, 4096, 32, 14336
    per_block = model.layers[1].activation_bytes_per_sample + model.layers[2].activation_bytes_per_sample
    assert per_block == pytest.approx(2 * (3 * s * h + 4 * s * h + a * s * s) + 2 * (3 * s * h + 4 * s * inter))
    flash = get_model("llama-3-8b", flash_attention=True)
    assert flash.layers[1].activation_bytes_per_sample == pytest.approx(2 * (3 * s * h + 4 * s * h))


def test_resnet50_activations_are_plausible():
    act = get_model("resnet50").activation_bytes_per_sample
    assert 20e6 < act < 120e6  # tens of MB per 224 px image in bf16
    assert all(layer.activation_bytes_per_sample > 0 for layer in get_model("resnet50").layers)


def test_activations_grow_with_seq_len():
    short, long = get_model("llama-2-7b", seq_len=1024), get_model("llama-2-7b")
    assert long.activation_bytes_per_sample > 4 * short.activation_bytes_per_sample


# --------------------------------------------------------------------------- lookup


def test_unknown_model_raises_with_allowed_names():
    with pytest.raises(WorkloadError) as err:
        get_model("gpt5")
    message = str(err.value)
    assert message.startswith("--model: 'gpt5' is not a catalog model; choose one of")
    for name in list_models():
        assert name in message


def test_lookup_is_case_insensitive():
    assert get_model("GPT2-Medium").param_count == PUBLISHED["gpt2-medium"]


# --------------------------------------------------------------------------- seq_len


def test_default_tokens_per_sample():
    assert get_model("gpt2").tokens_per_sample == 1024
    assert get_model("llama-2-7b").tokens_per_sample == 4096
    assert get_model("llama-3-8b").tokens_per_sample == 8192
    assert get_model("bert-base").tokens_per_sample == 512
    assert get_model("vit-b-16").tokens_per_sample == 197
    assert get_model("resnet50").tokens_per_sample is None


def test_seq_len_override_changes_flops_not_params():
    short = get_model("gpt2", seq_len=512)
    full = get_model("gpt2")
    assert short.tokens_per_sample == 512
    assert short.param_count == full.param_count == PUBLISHED["gpt2"]
    assert short.forward_flops_per_sample < full.forward_flops_per_sample / 2 * 1.01
    longer = get_model("llama-2-7b", seq_len=16384)  # RoPE: no learned table, no limit
    assert longer.tokens_per_sample == 16384
    assert longer.param_count == PUBLISHED["llama-2-7b"]


@pytest.mark.parametrize(("name", "seq_len", "field", "maximum"), [
    ("gpt2", 1025, "n_positions", "1024"),
    ("gpt2-xl", 4096, "n_positions", "1024"),
    ("bert-base", 513, "max_position_embeddings", "512"),
])
def test_seq_len_above_learned_positions_is_rejected(name, seq_len, field, maximum):
    with pytest.raises(WorkloadError, match="--seq-len") as err:
        get_model(name, seq_len=seq_len)
    assert field in str(err.value) and maximum in str(err.value)


@pytest.mark.parametrize("bad", [0, -8, 3.5, True, "512"])
def test_seq_len_must_be_positive_int(bad):
    with pytest.raises(WorkloadError, match="--seq-len"):
        get_model("llama-2-7b", seq_len=bad)


def test_seq_len_rejected_for_resnet():
    with pytest.raises(WorkloadError, match="--seq-len"):
        get_model("resnet50", seq_len=128)


def test_vit_seq_len_sets_image_size_and_positions():
    model = get_model("vit-b-16", seq_len=577)  # 384 px / 16 = 24² patches + class token
    pos = next(p for p in model.params if p.name == "encoder.pos_embedding")
    assert pos.shape == (1, 577, 768)
    assert model.tokens_per_sample == 577
    assert model.published_param_count is None  # a different architecture now
    assert get_model("vit-b-16", seq_len=197).published_param_count == PUBLISHED["vit-b-16"]
    with pytest.raises(WorkloadError, match="1 \\+ k"):
        get_model("vit-b-16", seq_len=200)


def test_builders_make_tiny_models_from_configs():
    tiny = build_gpt2(TINY["gpt2"], seq_len=8)
    assert tiny.tokens_per_sample == 8
    assert build_llama(TINY["llama"]).param_count == sum(
        p.numel() for p in torch_model_for(TINY["llama"]).parameters())


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(TINY))
def test_tiny_torch_models_train_one_step(family):
    cfg = TINY[family]
    module = torch_model_for(cfg)
    module(example_input(cfg, batch=2)).float().pow(2).mean().backward()
    assert all(p.grad is not None for p in module.parameters())


def test_gpt_block_activations_are_what_autograd_saves_on_a_real_bf16_block():
    """Measured, not counted: an MPT-style block (llm-foundry's MPTBlock as the MosaicML rows run
    it: low-precision LayerNorm, fused Wqkv, SDPA's fused attention, exact GELU, no dropout) in bf16
    on CPU, every tensor autograd saves for backward caught with ``saved_tensors_hooks``, each
    storage once, parameters excluded. The catalog's flash GELU block must keep the same bytes
    (q, k, v views of one Wqkv output count once; the attention output is the projection's input)."""
    from torch.nn import functional as F

    h, heads, s, b, dt = 256, 4, 128, 2, torch.bfloat16

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm_1, self.norm_2 = torch.nn.LayerNorm(h, bias=False), torch.nn.LayerNorm(h, bias=False)
            self.wqkv, self.out_proj = torch.nn.Linear(h, 3 * h, bias=False), torch.nn.Linear(h, h, bias=False)
            self.up, self.down = torch.nn.Linear(h, 4 * h, bias=False), torch.nn.Linear(4 * h, h, bias=False)

        def forward(self, x):
            q, k, v = (t.view(b, s, heads, -1).transpose(1, 2) for t in self.wqkv(self.norm_1(x)).split(h, -1))
            x = x + self.out_proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
                                  .reshape(b, s, h))
            return x + self.down(F.gelu(self.up(self.norm_2(x))))

    block = Block().to(dt)
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(torch.randn(b, s, h, dtype=dt, requires_grad=True))
    measured = sum(saved.values()) / b
    cfg = GPT2Config(n_embd=h, n_head=heads, n_layer=1, n_positions=s, vocab_size=64, activation_function="gelu",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    catalog = sum(layer.activation_bytes_per_sample for layer in build_model(cfg, flash_attention=True).layers
                  if layer.unit is not None)
    # The softmax logsumexp and the norms' statistics (a few values per token) are not counted.
    assert catalog == pytest.approx(measured, rel=0.01)
    assert catalog == 32 * s * h
