"""Tiny models for ``dpsim calibrate --model module:function`` tests (imported by the ranks)."""

import torch
from torch import nn


def tiny_mlp() -> nn.Module:
    """Three linear layers; its input is given with --input-shape 64."""
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


class _Blocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 32)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32)) for _ in range(3))
        self.head = nn.Linear(32, 100)

    def forward(self, x):
        h = self.embed(x)
        for b in self.blocks:
            h = h + b(h)
        return self.head(h)



def tiny_blocks() -> nn.Module:
    """Embedding, three residual blocks in a ModuleList, a head (input: :func:`tiny_tokens`)."""
    return _Blocks()


def tiny_tokens() -> torch.Tensor:
    """Example batch of :func:`tiny_blocks`: 2 sequences of 16 token ids."""
    return torch.randint(0, 100, (2, 16))


def next_token(logits, tokens):
    """The next-token loss of :func:`tiny_blocks`."""
    return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 100), tokens[:, 1:].reshape(-1))


def optimizer(parameters):
    """The module's own optimizer: calibrate times it instead of --optimizer."""
    return torch.optim.SGD(parameters, lr=1e-2, momentum=0.9)


def not_a_module():
    return 42
