"""Models of the calibrate -> predict validation, written as a user writes them for dpsim.

Each model is referenced the same way by every tool of the loop (``validation/run_calibrate_matrix.py``):
``dpsim calibrate --model validation/models.py:mlp:mlp_batch:classify``, ``dpsim predict
--model validation/models.py:mlp:mlp_batch`` and the plain DDP training script
``validation/ddp_train.py``, which imports this file and nothing of dpsim. The builders
return ``nn.Module``s; ``*_batch()`` give an example batch (its first dimension becomes
the micro-batch); the losses are what training computes; ``optimizer()`` is the optimizer
both the calibration and the training script use.

Three shapes: an MLP (few large matmuls, 25 MB of gradients), a small language model
(token embedding, pre-norm transformer blocks, a 4096-way LM head with next-token
cross-entropy) and a convnet (conv-BN-ReLU blocks, global pool, classifier).
"""

import torch
from torch import nn

VOCAB = 4096
SEQ = 64


def mlp() -> nn.Module:
    """Six 1024-wide Linear+ReLU blocks and a 10-way classifier (6.3 M parameters)."""
    blocks = [nn.Sequential(nn.Linear(1024, 1024), nn.ReLU()) for _ in range(6)]
    return nn.Sequential(*blocks, nn.Linear(1024, 10))


def mlp_batch() -> torch.Tensor:
    return torch.randn(32, 1024)


class _Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    """Token and position embeddings, ``layers`` pre-norm blocks, a final norm and an LM head."""

    def __init__(self, d: int = 256, layers: int = 4, heads: int = 4):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Parameter(torch.zeros(SEQ, d))
        self.blocks = nn.ModuleList(_Block(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def lm() -> nn.Module:
    """A 4-block, 256-wide language model with a 4096-token vocabulary (5.3 M parameters)."""
    return TinyLM()


def lm_batch() -> torch.Tensor:
    return torch.randint(0, VOCAB, (8, SEQ), generator=torch.Generator().manual_seed(0))


def next_token(logits, tokens):
    """Next-token cross-entropy over the vocabulary (the LM's training loss)."""
    return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


def convnet() -> nn.Module:
    """Conv-BN-ReLU blocks (two strided), global pool and a 10-way classifier on 32x32 images."""
    layers = [nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())]
    c = 64
    for i in range(4):
        stride = 2 if i % 2 else 1
        out = c * 2 if stride == 2 else c
        layers.append(nn.Sequential(nn.Conv2d(c, out, 3, stride=stride, padding=1), nn.BatchNorm2d(out), nn.ReLU()))
        c = out
    layers.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10)))
    return nn.Sequential(*layers)


def convnet_batch() -> torch.Tensor:
    return torch.randn(16, 3, 32, 32)


def classify(output):
    """Cross-entropy of 10-way class scores (the labels' values do not change the cost)."""
    return nn.functional.cross_entropy(output, torch.zeros(output.shape[0], dtype=torch.long))


def optimizer(parameters):
    """SGD with momentum, as both the calibration and the training script run it."""
    return torch.optim.SGD(parameters, lr=1e-3, momentum=0.9)
