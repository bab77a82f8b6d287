"""Built-in models, each built from its architecture config.

Every model is described by a small frozen config dataclass (the fields of the
reference implementation's config) and one builder per architecture family turns a
config into a :class:`~dpsim.workload.spec.ModelSpec`. Tests build tiny versions from
the same config classes, and ``tests/torch_reference_models.py`` builds the matching
real torch modules from them.

Parameters
    Listed exactly as the reference PyTorch implementation registers them, in
    ``model.named_parameters()`` order, with the torch names and shapes:
    HuggingFace ``GPT2LMHeadModel`` (``lm_head`` tied to ``transformer.wte``, so
    counted once), ``LlamaForCausalLM`` (untied ``lm_head``), ``BertModel`` (with the
    pooler), torchvision ``resnet50`` (BatchNorm weight/bias are parameters, running
    statistics are buffers and are not listed) and torchvision ``vit_b_16``/``vit_l_16``.
    ``ModelSpec.params`` gives exactly ``named_parameters()`` order: the layers'
    concatenation, or ``registration_order`` where the two differ (Llama, whose blocks
    register both RMSNorms after the MLP; BERT embeddings and the ViT stem, whose
    tensors are registered in another order than they are used).

Layers
    One :class:`LayerSpec` per compute unit, in forward execution order: the
    embedding, then per transformer block an attention layer and an MLP layer, then
    the head. Each layer owns the parameters its forward uses, so its backward is what
    produces their gradients: a norm belongs to the layer it runs in (pre-norm: the
    sub-block it feeds, e.g. Llama's ``input_layernorm`` to ``self_attn``; post-norm
    BERT: the sub-block whose output it normalises), a tied weight to the first layer
    that uses it (GPT-2's ``wte``, shared with ``lm_head``, to the embedding).

Gradient-ready order (``ModelSpec.grad_ready_params``)
    The order backward hands gradients to autograd, which DDP records in the first
    iteration and rebuilds its buckets from: layers in reverse and, inside a layer,
    its modules in reverse forward order, each module in autograd's own order
    (``Linear``/``addmm``: bias then weight; ``LayerNorm``/``BatchNorm``/``Conv2d``:
    weight then bias). It equals what real DDP records
    (``prev_iteration_grad_ready_order_indices``) for every family, checked in
    ``tests/test_buckets.py`` against modules that run in the reference
    implementations' forward order (e.g. BERT embeddings add word + token type, then
    position; a ResNet block runs its downsample branch after ``bn3``).

FLOPs (``forward_flops_per_sample``)
    2 FLOPs per multiply-add of every matmul and convolution (weights × activations),
    plus the attention score and context matmuls, ``QKᵀ`` and ``softmax(·)V``:
    ``2 · 2 · seq² · d_attn`` per layer, counted over the full ``seq × seq`` square
    even for causal models (the PaLM/Megatron MFU convention; a causal kernel that
    skips the masked half does about half of it). Element-wise work (norms, softmax,
    activations, residual adds, bias adds) and embedding lookups count 0. Hence, per
    sample of ``tokens`` tokens::

        forward ≈ 2 · (params − lookup-table params) · tokens + 4 · n_layer · tokens² · d_attn

    which is the familiar ``2 · params · tokens + attention term`` with the lookup
    tables (input embeddings, learned positions) left out, as Kaplan et al. 2020 do.
    Heads applied to one token only (BERT pooler, ViT classifier) are counted once.

Activations (``activation_bytes_per_sample``)
    What autograd keeps for backward at 2 bytes per element (bf16/fp16), one sample.
    Transformer blocks use Korthikanti et al. 2022, "Reducing Activation Recomputation
    in Large Transformer Models" (arXiv:2205.05198), Sec. 4.1, with b = 1 and no
    tensor/sequence parallelism: ``s·h·(34 + 5·a·s/h)`` bytes per layer, split as
    attention block ``11·s·h + 5·a·s²`` plus its LayerNorm ``2·s·h`` and MLP block
    ``19·s·h`` plus its LayerNorm ``2·s·h``. The formula is derived for a GPT block
    (4h MLP, dropout); it is used as is for Llama (SwiGLU, no dropout) as an estimate.
    With ``flash_attention=True`` the ``5·a·s²`` term (softmax output, dropout mask and
    output kept for backward) is dropped, as fused attention kernels recompute it.
    LM heads add ``4·s·h + 4·s·v`` (final norm and projection inputs, fp32 logits for
    the loss; same paper); embeddings with dropout add its 1-byte mask ``s·h``.
    A block layer also gives its input (``input_bytes_per_sample``, ``2·s·h`` for a
    transformer sub-block): with activation checkpointing only the input of each
    checkpointed block is kept (Korthikanti et al. 2022, Sec. 5, full recomputation).
    ResNet counts every convolution output twice (kept as BatchNorm input and as the
    following ReLU's output, which is also the next convolution's input), once for a
    downsample branch, plus the input image, the max-pool output and indices.

Units (``LayerSpec.unit``)
    Every layer of a transformer block (GPT-2 ``transformer.h.i``, Llama
    ``model.layers.i``, BERT ``encoder.layer.i``, ViT ``encoder_layer_i``) or of a ResNet
    bottleneck (``layer1.0``) carries the block's module path: the unit an FSDP
    transformer auto-wrap policy wraps and activation checkpointing checkpoints.
    Embeddings, final norms and heads belong to the root unit (``None``).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Callable

from dpsim.errors import WorkloadError
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_SEQ_LEN
from dpsim.workload.architectures import (
    BertConfig,
    GPT2Config,
    LlamaConfig,
    ModelConfig,
    ResNetConfig,
    ViTConfig,
    build_model,
)
from dpsim.workload.shapes import (is_config_json_ref, is_shape_ref, parse_shape, shape_config, shape_param_count,
                                    shape_ref_of_config_json)
from dpsim.workload.spec import ModelSpec

# --------------------------------------------------------------------------- catalog


@frozen_dataclass
class CatalogEntry:
    """A built-in model: its architecture config, published count and sources."""

    name: str
    config: ModelConfig
    published_param_count: int | None
    """``None`` for a model given by its shape (:mod:`dpsim.workload.shapes`)."""
    source: str

    def build(self, *, seq_len: int | None = None, dtype: str = "float32",
              flash_attention: bool = False, mtp_depth: int | None = None) -> ModelSpec:
        """The model at its default (or the given) sequence length; ``mtp_depth``: that many
        multi-token prediction modules instead of the entry's own (a Llama-built decoder only)."""
        config = self.config
        if mtp_depth is not None and mtp_depth != getattr(config, "mtp_depth", 0):
            if not isinstance(config, LlamaConfig):
                raise WorkloadError(f"--mtp-depth: {mtp_depth} adds multi-token prediction modules, built for a "
                                    f"Llama-style decoder (RMSNorm, rotary positions, gated MLP) only, and {self.name} "
                                    f"is not one; leave --mtp-depth out (or 0)")
            config = replace(config, mtp_depth=mtp_depth)
        return build_model(config, name=self.name, seq_len=seq_len, dtype=dtype,
                           flash_attention=flash_attention,
                           published_param_count=self.published_param_count, source=self.source)


_HF_COUNT = "model.num_parameters() of the HF transformers class built from that config"

_GPT2_ARCH = ("OpenAI GPT-2 (Radford et al. 2019), HuggingFace transformers GPT2LMHeadModel "
              "config '{repo}' (n_embd={d}, n_layer={l}); published count: {count:,} = HF Hub "
              "model page / " + _HF_COUNT)
_LLAMA_ARCH = ("{paper}; HuggingFace transformers LlamaForCausalLM config '{repo}' "
               "(hidden={d}, layers={l}, heads={h}, kv_heads={kv}, intermediate={i}, vocab={v}); "
               "published count: {count:,} = HF Hub safetensors parameter total of '{repo}' / "
               + _HF_COUNT)
_BERT_ARCH = ("Devlin et al. 2019 (BERT), HuggingFace transformers BertModel (with pooler) config "
              "'{repo}'; published count: {count:,} = " + _HF_COUNT + " (also KerasHub preset "
              "metadata)")
_TV_ARCH = ("torchvision.models.{fn} ({paper}); published count: num_params = {count:,} in the "
            "torchvision docs for {weights}")

_ENTRIES: list[CatalogEntry] = [
    CatalogEntry(
        name="resnet50", config=ResNetConfig(), published_param_count=25_557_032,
        source=_TV_ARCH.format(fn="resnet50", paper="He et al. 2016, v1.5 stride placement",
                               count=25_557_032, weights="ResNet50_Weights.IMAGENET1K_V1/V2")
        + "; torchvision lists 4.09 GFLOPS (multiply-adds) at 224 px"),
    CatalogEntry(
        name="bert-base", config=BertConfig(), published_param_count=109_482_240,
        source=_BERT_ARCH.format(repo="bert-base-uncased", count=109_482_240)),
    CatalogEntry(
        name="bert-large",
        config=BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                          intermediate_size=4096),
        published_param_count=335_141_888,
        source=_BERT_ARCH.format(repo="bert-large-uncased", count=335_141_888)),
    CatalogEntry(
        name="gpt2", config=GPT2Config(), published_param_count=124_439_808,
        source=_GPT2_ARCH.format(repo="gpt2", d=768, l=12, count=124_439_808)),
    CatalogEntry(
        name="gpt2-medium", config=GPT2Config(n_embd=1024, n_layer=24, n_head=16),
        published_param_count=354_823_168,
        source=_GPT2_ARCH.format(repo="gpt2-medium", d=1024, l=24, count=354_823_168)),
    CatalogEntry(
        name="gpt2-large", config=GPT2Config(n_embd=1280, n_layer=36, n_head=20),
        published_param_count=774_030_080,
        source=_GPT2_ARCH.format(repo="gpt2-large", d=1280, l=36, count=774_030_080)),
    CatalogEntry(
        name="gpt2-xl", config=GPT2Config(n_embd=1600, n_layer=48, n_head=25),
        published_param_count=1_557_611_200,
        source=_GPT2_ARCH.format(repo="gpt2-xl", d=1600, l=48, count=1_557_611_200)),
]


def _llama(name: str, repo: str, paper: str, count: int, **fields: int) -> CatalogEntry:
    cfg = LlamaConfig(**fields)
    return CatalogEntry(
        name=name, config=cfg, published_param_count=count,
        source=_LLAMA_ARCH.format(paper=paper, repo=repo, d=cfg.hidden_size, l=cfg.num_hidden_layers,
                                  h=cfg.num_attention_heads, kv=cfg.num_key_value_heads,
                                  i=cfg.intermediate_size, v=cfg.vocab_size, count=count))


_LLAMA2 = "Touvron et al. 2023, 'Llama 2: Open Foundation and Fine-Tuned Chat Models'"
_LLAMA3 = "Llama Team 2024, 'The Llama 3 Herd of Models'"
_ENTRIES += [
    _llama("llama-2-7b", "meta-llama/Llama-2-7b-hf", _LLAMA2, 6_738_415_616),
    _llama("llama-2-13b", "meta-llama/Llama-2-13b-hf", _LLAMA2, 13_015_864_320,
           hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
           num_attention_heads=40, num_key_value_heads=40),
    _llama("llama-2-70b", "meta-llama/Llama-2-70b-hf", _LLAMA2, 68_976_648_192,
           hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
           num_attention_heads=64, num_key_value_heads=8),
    _llama("llama-3-8b", "meta-llama/Meta-Llama-3-8B", _LLAMA3, 8_030_261_248,
           vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
           num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192),
    _llama("llama-3-70b", "meta-llama/Meta-Llama-3-70B", _LLAMA3, 70_553_706_496,
           vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
           num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=8192),
    # Released as Llama 3.1 405B (context 128K); catalogued at the 8192-token
    # pre-training sequence length like the other Llama 3 models.
    _llama("llama-3-405b", "meta-llama/Llama-3.1-405B", _LLAMA3, 405_853_388_800,
           vocab_size=128256, hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
           num_attention_heads=128, num_key_value_heads=8, max_position_embeddings=8192),
    CatalogEntry(
        name="vit-b-16", config=ViTConfig(), published_param_count=86_567_656,
        source=_TV_ARCH.format(fn="vit_b_16", paper="Dosovitskiy et al. 2021", count=86_567_656,
                               weights="ViT_B_16_Weights.IMAGENET1K_V1")
        + "; torchvision lists 17.56 GFLOPS (multiply-adds) at 224 px"),
    CatalogEntry(
        name="vit-l-16",
        config=ViTConfig(num_layers=24, num_heads=16, hidden_dim=1024, mlp_dim=4096),
        published_param_count=304_326_632,
        source=_TV_ARCH.format(fn="vit_l_16", paper="Dosovitskiy et al. 2021", count=304_326_632,
                               weights="ViT_L_16_Weights.IMAGENET1K_V1")
        + "; torchvision lists 61.55 GFLOPS (multiply-adds) at 224 px"),
]

_MOE_ARCH = ("{paper}; HuggingFace transformers config '{repo}' ({shape}); published counts: {total} total, "
             "{active} active parameters per token ({card}); dpsim's count is the closed form of the "
             "parameters listed here, which the tests hold within 2 % of the published figures")

MOE_PUBLISHED: dict[str, tuple[float, float, str]] = {
    "mixtral-8x7b": (46.7e9, 12.9e9, "Mistral AI, 'Mixtral of experts' blog post and Jiang et al. 2024, "
                                     "arXiv:2401.04088: 46.7B total, 12.9B active ('13B active' in the paper)"),
    "mixtral-8x22b": (141e9, 39e9, "Mistral AI, 'Cheaper, Better, Faster, Stronger' (Mixtral 8x22B announcement, "
                                   "April 2024): 141B parameters, 39B active"),
    "qwen3-30b-a3b": (30.5e9, 3.3e9, "Qwen/Qwen3-30B-A3B model card: 30.5B parameters in total, 3.3B activated"),
    "qwen3-235b-a22b": (235e9, 22e9, "Qwen/Qwen3-235B-A22B model card: 235B parameters in total, 22B activated"),
    "deepseek-v2": (236e9, 21e9, "DeepSeek-AI 2024, 'DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-"
                                 "Experts Language Model', arXiv:2405.04434, abstract: 236B total parameters, of "
                                 "which 21B are activated for each token"),
    "deepseek-v3": (671e9, 37e9, "DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report', arXiv:2412.19437, abstract: "
                                 "671B total parameters with 37B activated for each token (the 14B of the "
                                 "multi-token prediction module are not among them)"),
}
"""Published total and active parameter counts of the catalog's mixture-of-experts models, with
their sources (rounded as published, so the entries carry no exact ``published_param_count``)."""


def _moe(name: str, repo: str, paper: str, shape: str, **fields) -> CatalogEntry:
    total, active, card = MOE_PUBLISHED[name]
    return CatalogEntry(name=name, config=LlamaConfig(**fields), published_param_count=None,
                        source=_MOE_ARCH.format(paper=paper, repo=repo, shape=shape, total=f"{total / 1e9:g}B",
                                                active=f"{active / 1e9:g}B", card=card))


_ENTRIES += [
    # Mixtral: Mistral 7B's block with every MLP replaced by 8 experts of its width, top-2
    # (transformers MixtralConfig defaults for 8x7B; 8x22B from mistralai/Mixtral-8x22B-v0.1's
    # config.json, whose 32000-token vocabulary the Megatron-MoE-ModelZoo configs also train).
    _moe("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", "Jiang et al. 2024, arXiv:2401.04088",
         "hidden 4096, 32 layers, 32 heads, 8 KV heads, 8 experts of 14336, top-2, vocab 32000",
         vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096,
         num_experts=8, num_experts_per_tok=2, moe_intermediate_size=14336),
    _moe("mixtral-8x22b", "mistralai/Mixtral-8x22B-v0.1", "Mistral AI 2024",
         "hidden 6144, 56 layers, 48 heads, 8 KV heads, 8 experts of 16384, top-2, vocab 32000",
         vocab_size=32000, hidden_size=6144, intermediate_size=16384, num_hidden_layers=56,
         num_attention_heads=48, num_key_value_heads=8, max_position_embeddings=4096,
         num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16384),
    # Qwen3-MoE: head dim 128 (not hidden / heads), RMSNorm on each query and key head, every
    # layer MoE, no shared expert, untied embeddings (Qwen3 Technical Report, arXiv:2505.09388,
    # Table 2; config.json of each repository).
    _moe("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "Qwen Team 2025, arXiv:2505.09388",
         "hidden 2048, 48 layers, 32 heads, 4 KV heads, head dim 128, qk-norm, 128 experts of 768, top-8, "
         "vocab 151936", vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
         num_attention_heads=32, num_key_value_heads=4, head_dim=128, qk_norm=True, max_position_embeddings=4096,
         num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768),
    _moe("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", "Qwen Team 2025, arXiv:2505.09388",
         "hidden 4096, 94 layers, 64 heads, 4 KV heads, head dim 128, qk-norm, 128 experts of 1536, top-8, "
         "vocab 151936", vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=94,
         num_attention_heads=64, num_key_value_heads=4, head_dim=128, qk_norm=True, max_position_embeddings=4096,
         num_experts=128, num_experts_per_tok=8, moe_intermediate_size=1536),
    # DeepSeek-V2 (arXiv:2405.04434 Sec. 3.1.2: 60 layers, hidden 5120, 128 heads of 128, MLA d_c 512,
    # d'_c 1536, rope 64; all FFNs but the first MoE, 2 shared + 160 routed experts of 1536, top-6;
    # the dense FFN 12288 and vocab 102400 from deepseek-ai/DeepSeek-V2 config.json): softmax gate, no
    # score correction bias.
    _moe("deepseek-v2", "deepseek-ai/DeepSeek-V2", "DeepSeek-AI 2024, arXiv:2405.04434",
         "hidden 5120, 60 layers (1 dense), 128 heads, MLA q_lora 1536 kv_lora 512 nope 128 rope 64 v 128, "
         "160 routed + 2 shared experts of 1536, top-6, vocab 102400",
         vocab_size=102400, hidden_size=5120, intermediate_size=12288, num_hidden_layers=60,
         num_attention_heads=128, num_key_value_heads=128, max_position_embeddings=4096,
         num_experts=160, num_experts_per_tok=6, moe_intermediate_size=1536, n_shared_experts=2,
         first_k_dense_replace=1, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
         qk_rope_head_dim=64, v_head_dim=128),
    # DeepSeek-V3 (deepseek-ai/DeepSeek-V3 config.json): MLA attention, 3 dense layers of 18432,
    # then 58 MoE layers of 256 routed experts of 2048 (top-8) and one shared expert; and one
    # multi-token prediction module (config.json num_nextn_predict_layers 1), which its pretraining
    # ran: arXiv:2412.19437 Sec. 4.2, "we set the MTP depth D to 1" with loss weight 0.3 for the
    # first 10T tokens and 0.1 for the last 4.8T. Its 11.5B unique parameters (deepseek-ai/DeepSeek-V3
    # README_WEIGHTS.md) are not among the published 671B, which the tests compare without them.
    _moe("deepseek-v3", "deepseek-ai/DeepSeek-V3", "DeepSeek-AI 2024, arXiv:2412.19437",
         "hidden 7168, 61 layers (3 dense), 128 heads, MLA q_lora 1536 kv_lora 512 nope 128 rope 64 v 128, "
         "256 routed + 1 shared experts of 2048, top-8, vocab 129280",
         vocab_size=129280, hidden_size=7168, intermediate_size=18432, num_hidden_layers=61,
         num_attention_heads=128, num_key_value_heads=128, max_position_embeddings=4096,
         num_experts=256, num_experts_per_tok=8, moe_intermediate_size=2048, n_shared_experts=1,
         first_k_dense_replace=3, router_bias=True, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
         qk_rope_head_dim=64, v_head_dim=128, mtp_depth=1),
]

CATALOG_ENTRIES: dict[str, CatalogEntry] = {entry.name: entry for entry in _ENTRIES}
"""Built-in models by catalog key, with their configs."""

CATALOG: dict[str, Callable[[], ModelSpec]] = {name: entry.build for name, entry in CATALOG_ENTRIES.items()}
"""Catalog key → zero-argument builder of the model at its default sequence length."""


def list_models() -> list[str]:
    """Catalog keys, in catalog order."""
    return list(CATALOG_ENTRIES)


def get_entry(name: str) -> CatalogEntry:
    """The catalog entry (config, published count, source) for ``name``, case-insensitively, or
    the entry of a shape ``transformer:KEY=VALUE,...`` (:mod:`dpsim.workload.shapes`)."""
    if is_shape_ref(name):
        return _shape_entry(name.strip())
    if is_config_json_ref(name):
        return _shape_entry(shape_ref_of_config_json(name))
    try:
        return CATALOG_ENTRIES[name.strip().lower()]
    except (KeyError, AttributeError):
        folder = _config_json_in(name)
        if folder is not None:
            # A model repository's folder: the loader reads its config.json, which the user must name (a folder
            # called like a catalog key, gpt2/, would otherwise mean two models).
            raise WorkloadError(f"--model: {name!r} is a directory, not a catalog model; it holds a transformers "
                                f"config.json: give that file, --model {folder}") from None
        raise WorkloadError(
            f"--model: {name!r} is not a catalog model; choose one of {', '.join(list_models())}"
        ) from None


def _config_json_in(name: object) -> str | None:
    """The path of ``name``/config.json where ``name`` is a directory holding one; never raises."""
    if not isinstance(name, str) or not name.strip():
        return None
    try:
        candidate = os.path.join(name, "config.json")
        return candidate if os.path.isdir(name) and os.path.isfile(candidate) else None
    except (OSError, ValueError):
        return None


def find_entry(name: object) -> CatalogEntry | None:
    """:func:`get_entry` for a catalog key or shape, ``None`` for anything else (a torch module)."""
    if not isinstance(name, str):
        return None
    if is_shape_ref(name) or is_config_json_ref(name):
        return get_entry(name)
    return CATALOG_ENTRIES.get(name.strip().lower())


def _shape_entry(text: str) -> CatalogEntry:
    shape = parse_shape(text)
    return CatalogEntry(name=shape.name, config=shape_config(shape), published_param_count=None,
                        source=f"given by its shape ({shape_param_count(shape):,} parameters in closed form): {text}")


def get_model(name: str, *, seq_len: int | None = None, dtype: str = "float32",
              flash_attention: bool = False, mtp_depth: int | None = None) -> ModelSpec:
    """Build catalog model ``name``, optionally at another sequence length.

    ``seq_len`` changes FLOPs and activations; it must fit learned position tables
    (GPT-2 ``n_positions``, BERT ``max_position_embeddings``), must be ``1 + k²`` for
    ViT (it sets the image size) and is rejected for ResNet.
    """
    model = get_entry(name).build(seq_len=seq_len, dtype=dtype, flash_attention=flash_attention, mtp_depth=mtp_depth)
    tokens = model.tokens_per_sample or 0
    if seq_len is None and tokens > MAX_SEQ_LEN:
        # --seq-len is bounded, a shape's own sequence was not: transformer:...,seq=10000000 (or a
        # transformers config's max_position_embeddings) predicted a 24-day step at an MFU of 96 %.
        # --seq-len, for a shape and a config.json alike: the old advice, --input-shape for a configuration, is
        # refused for a config.json (it applies to torch modules, transformers:XConfig(...) among them).
        raise WorkloadError(f"--model {model.name}: its sequence of {tokens:,} tokens (seq=, or a configuration's "
                            f"context length) is over {MAX_SEQ_LEN:,}; give a shorter one: --seq-len, at most "
                            f"{MAX_SEQ_LEN:,} tokens")
    return model
