"""Torch re-implementations of the catalog's reference models (tests and ``dpsim calibrate``).

Each builder takes the same config object :mod:`dpsim.workload.catalog` uses and
returns a working ``torch.nn.Module`` whose ``named_parameters()`` (names, shapes,
order) mirror the reference implementation:

- :func:`tiny_gpt2_torch` — HuggingFace ``GPT2LMHeadModel`` (``lm_head`` tied to ``wte``)
- :func:`tiny_llama_torch` — HuggingFace ``LlamaForCausalLM``
- :func:`tiny_bert_torch` — HuggingFace ``BertModel`` (with pooler)
- :func:`tiny_resnet_torch` — torchvision ``ResNet`` with ``Bottleneck`` blocks
- :func:`tiny_vit_torch` — torchvision ``VisionTransformer``

transformers and torchvision are not dependencies: modules are written here from the
published architectures, registering submodules and parameters in the same order
and running them in the same forward order (which sets the gradient-ready order DDP
records).
They run forward and backward (for DDP bucket tests), use explicit matmuls for
attention so FLOP counters see them, and can be built on ``torch.device("meta")`` at
full size. ``example_input(model_cfg, batch)`` gives a matching input batch.

``dpsim calibrate --model NAME`` times these modules layer by layer; tests import them
as ``torch_reference_models``. Importing this module imports torch: ``predict`` never does.
"""

from __future__ import annotations

import torch
from torch import nn

from dpsim.workload.architectures import (
    BertConfig,
    GPT2Config,
    LlamaConfig,
    ResNetConfig,
    ViTConfig,
)
from dpsim.workload.torch_layers import _attention, _merge_heads, _split_heads
from dpsim.workload.torch_vision_models import tiny_resnet_torch, tiny_vit_torch

# --------------------------------------------------------------------------- GPT-2


class Conv1D(nn.Module):
    """HuggingFace ``Conv1D(nf, nx)``: a linear layer with weight stored as ``(nx, nf)``."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], self.nf)


class GPT2Attention(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = Conv1D(3 * cfg.n_embd, cfg.n_embd)
        self.c_proj = Conv1D(cfg.n_embd, cfg.n_embd)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.c_attn(x).split(x.shape[-1], dim=2)
        out = _attention(*(_split_heads(t, self.n_head) for t in (q, k, v)), causal=True)
        return self.resid_dropout(self.c_proj(_merge_heads(out)))


class GPT2MLP(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.c_fc = Conv1D(cfg.inner, cfg.n_embd)
        self.c_proj = Conv1D(cfg.n_embd, cfg.inner)
        self.act = nn.GELU(approximate="tanh")
        self.dropout = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.attn = GPT2Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.mlp = GPT2MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        # GPT-2's own init, std 0.02 (transformers' GPT2PreTrainedModel._init_weights, initializer_range):
        # torch's N(0, 1) default, through the tied head, gave logits tens of nats apart, whose softmax
        # and gradients fell to denormals, and a CPU step on an AVX-512 host ran 20x slower (1.8 s
        # against 0.09 s with denormals flushed), so timing this module measured that, not the model.
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)
        self.drop = nn.Dropout(0.0)
        self.h = nn.ModuleList(GPT2Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=1e-5)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.drop(self.wte(input_ids) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.config = cfg
        self.transformer = GPT2Model(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied: listed once

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.transformer(input_ids))


def tiny_gpt2_torch(cfg: GPT2Config) -> GPT2LMHeadModel:
    """``GPT2LMHeadModel`` for ``cfg`` (any size; use a meta device for big ones)."""
    return GPT2LMHeadModel(cfg)


# --------------------------------------------------------------------------- Llama


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # a buffer, not a parameter

    def forward(self, seq_len: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        t = torch.arange(seq_len, device=device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq.to(device))
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_size
        self.q_proj = nn.Linear(cfg.hidden_size, self.heads * hd, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(self.heads * hd, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q = _split_heads(self.q_proj(x), self.heads)
        k = _split_heads(self.k_proj(x), self.kv_heads)
        v = _split_heads(self.v_proj(x), self.kv_heads)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        if rep > 1:  # HF's repeat_kv returns the tensors as they are when there is nothing to repeat
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return self.o_proj(_merge_heads(_attention(q, k, v, causal=True)))


class LlamaMLP(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        # HF registration order: self_attn, mlp, input_layernorm, post_attention_layernorm.
        self.self_attn = LlamaAttention(cfg)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(cfg.hidden_size)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = LlamaRMSNorm(cfg.hidden_size)
        self.rotary_emb = LlamaRotaryEmbedding(cfg.head_size)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb(input_ids.shape[1], input_ids.device)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.model(input_ids))


def tiny_llama_torch(cfg: LlamaConfig) -> LlamaForCausalLM:
    """``LlamaForCausalLM`` for ``cfg``."""
    return LlamaForCausalLM(cfg)


# --------------------------------------------------------------------------- BERT


class BertEmbeddings(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(0.0)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # HF order (word + token type, then + position): it sets the gradient-ready order.
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(torch.zeros_like(input_ids))
        x = x + self.position_embeddings(pos)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.heads = cfg.num_attention_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (_split_heads(f(x), self.heads) for f in (self.query, self.key, self.value))
        return _merge_heads(_attention(q, k, v, causal=False))


class BertSelfOutput(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(0.0)

    def forward(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(h)) + x)


class BertAttention(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(cfg)
        self.output = BertSelfOutput(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x), x)


class BertIntermediate(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.intermediate_act_fn = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(x))


class BertOutput(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(0.0)

    def forward(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(h)) + x)


class BertLayer(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(cfg)
        self.intermediate = BertIntermediate(cfg)
        self.output = BertOutput(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.attention(x)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x)
        return x


class BertPooler(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x[:, 0]))


class BertModel(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.encoder = BertEncoder(cfg)
        self.pooler = BertPooler(cfg) if cfg.add_pooling_layer else None

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.encoder(self.embeddings(input_ids))
        return self.pooler(x) if self.pooler is not None else x


def tiny_bert_torch(cfg: BertConfig) -> BertModel:
    """``BertModel`` (with pooler) for ``cfg``; forward returns the pooled output."""
    return BertModel(cfg)


# --------------------------------------------------------------------------- helpers

TORCH_BUILDERS = {
    GPT2Config: tiny_gpt2_torch,
    LlamaConfig: tiny_llama_torch,
    BertConfig: tiny_bert_torch,
    ResNetConfig: tiny_resnet_torch,
    ViTConfig: tiny_vit_torch,
}
"""Torch builder for each catalog config class."""


def torch_model_for(cfg: object) -> nn.Module:
    """The torch reference module for any catalog config."""
    return TORCH_BUILDERS[type(cfg)](cfg)


def example_input(cfg: object, batch: int = 1, seq_len: int | None = None) -> torch.Tensor:
    """A random input batch for the model built from ``cfg``."""
    if isinstance(cfg, (ResNetConfig, ViTConfig)):
        channels = cfg.in_channels if isinstance(cfg, ResNetConfig) else 3
        return torch.randn(batch, channels, cfg.image_size, cfg.image_size)
    vocab = cfg.vocab_size
    default = {GPT2Config: "n_positions", LlamaConfig: "max_position_embeddings",
               BertConfig: "max_position_embeddings"}[type(cfg)]
    s = seq_len if seq_len is not None else getattr(cfg, default)
    return torch.randint(0, vocab, (batch, s))
