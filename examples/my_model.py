"""A small GPT-style language model, the documentation's ``--model examples/my_model.py:build`` (docs/models.md).

``build()`` returns the ``nn.Module``; dpsim builds it under ``torch.device("meta")`` (no
weights are allocated) and traces one forward and backward on an example input, given by
``--input-shape BATCH,SEQ:int64`` or by :func:`example_input` below. The batch of that
example only normalises what the trace measures to one sample; the batch that is
simulated is ``--micro-batch``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    """Pre-norm decoder block: causal self-attention (SDPA) and a 4x MLP."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.n_heads, d // self.n_heads).unbind(2)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    """Token and position embeddings, ``n_layers`` blocks, a final norm and an untied LM head."""

    def __init__(self, vocab: int = 32_000, d_model: int = 512, n_heads: int = 8, n_layers: int = 6,
                 max_seq: int = 2048):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(max_seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build() -> nn.Module:
    """The model dpsim traces (53 M parameters)."""
    return TinyGPT()


def example_input() -> torch.Tensor:
    """Used when ``--input-shape`` is left out: 8 sequences of 1,024 tokens."""
    return torch.zeros(8, 1024, dtype=torch.long)
