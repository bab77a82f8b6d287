"""A small Vision Transformer, the documentation's ``--model mypackage.models:make_vit`` (docs/models.md).

Run from the folder that holds ``mypackage`` (dpsim imports ``package.module`` from the
current directory, as ``python -m`` does). ``--input-shape 32,3,224,224`` is the example
batch the module is traced with; the simulated batch is ``--micro-batch``.
"""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    """Pre-norm encoder block: multi-head self-attention and a 4x MLP."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    """16x16 patches, a class token, ``depth`` blocks, a linear classifier."""

    def __init__(self, image: int = 224, patch: int = 16, dim: int = 384, depth: int = 6, heads: int = 6,
                 classes: int = 1000):
        super().__init__()
        self.patchify = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patchify(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x[:, 0]))


def make_vit() -> nn.Module:
    """The model dpsim traces (a ViT-S/16-sized model, ~22 M parameters)."""
    return ViT()
