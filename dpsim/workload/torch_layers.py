"""Attention helpers shared by the reference torch modules: ``scaled_dot_product_attention``,
which HF transformers (its default ``attn_implementation="sdpa"``) and torchvision's
``nn.MultiheadAttention`` call, and which runs a fused kernel on GPUs."""

from __future__ import annotations

import math

import torch


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """``softmax(q kᵀ / sqrt(d)) v`` on (batch, heads, seq, head_dim) tensors, through SDPA."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """The same as plain matmuls and a softmax (HF's ``attn_implementation="eager"``), which
    keeps the ``seq x seq`` scores for backward."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = q.shape[-2]
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    b, s, _ = x.shape
    return x.view(b, s, heads, -1).transpose(1, 2)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    b, h, s, d = x.shape
    return x.transpose(1, 2).reshape(b, s, h * d)
