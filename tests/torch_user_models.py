"""Small user models for ``--model tests/torch_user_models.py:fn`` / ``torch_user_models:fn``.

Each builder returns an ``nn.Module``; ``example_input()`` (or ``<name>_input``) its input.
They exercise what :mod:`dpsim.workload.from_torch` must get right: registration order
that differs from use order, tied weights, blocks in a ``ModuleList``, and the refusals.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_user_ops import fused_matmul as _fused_matmul  # defined once however this file is imported


class Block(nn.Module):
    """Pre-norm MLP block with odd sizes (FSDP padding matters)."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.ln(x))))


class TiedLM(nn.Module):
    """Embedding, blocks, final norm, head tied to the embedding (registered out of use order)."""

    def __init__(self, vocab: int = 101, d: int = 33, hidden: int = 67, layers: int = 3):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, hidden) for _ in range(layers))  # registered before wte
        self.wte = nn.Embedding(vocab, d)
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


class ShardingNet(nn.Module):
    """The model the real ZeroRedundancyOptimizer / FSDP checks run (sizes indivisible by 2 and 3)."""

    def __init__(self, d_in: int = 7, d: int = 33, hidden: int = 101, layers: int = 3, d_out: int = 5):
        super().__init__()
        self.emb = nn.Linear(d_in, d)
        self.blocks = nn.ModuleList(Block(d, hidden) for _ in range(layers))
        self.head = nn.Linear(d, d_out)

    def forward(self, x):
        x = self.emb(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def tied_lm() -> nn.Module:
    return TiedLM()


def example_input():
    return torch.zeros(2, 16, dtype=torch.long)


def sharding_net() -> nn.Module:
    return ShardingNet()


def sharding_net_input():
    return torch.randn(4, 7)


# ------------------------------------------------------------------- refusals


def not_a_module():
    return 42


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x):
        if x.sum() > 0:  # needs real values
            return self.l(x)
        return self.l(-x)


def data_dependent() -> nn.Module:
    return DataDependent()


class Unused(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(4, 4)
        self.spare = nn.Linear(4, 4)

    def forward(self, x):
        return self.used(x)


def unused() -> nn.Module:
    return Unused()


def frozen() -> nn.Module:
    m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    m[0].weight.requires_grad_(False)
    return m


def sparse() -> nn.Module:
    return nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Linear(4, 4))


def lstm() -> nn.Module:
    class L(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(4, 8, batch_first=True)

        def forward(self, x):
            return self.rnn(x)[0]

    return L()


def raises() -> nn.Module:
    raise ValueError("no weights for you")


class CustomKernel(nn.Module):
    """A matmul in a custom operator: its FLOPs are unknown to the counter."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.empty(4, 8))

    def forward(self, x):
        return _fused_matmul(x, self.w)


def custom_kernel() -> nn.Module:
    return CustomKernel()
