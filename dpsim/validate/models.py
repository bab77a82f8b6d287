"""Small torch models for validation runs on CPUs (torch imported by the caller).

Three shapes the accuracy bar asks for: an MLP (few large matmuls), a small
transformer (attention + MLP blocks) and a convnet. Each is a ``nn.Sequential`` of
top-level blocks, so "a layer" for dpsim is one child module, timed with hooks.
"""

from __future__ import annotations

from typing import Callable

from dpsim.errors import ConfigError
from dpsim.workload.model_ref import import_builder, parse_input_shape, parse_model_ref


def mlp(width: int = 1024, depth: int = 6):
    """``depth`` Linear+ReLU blocks of ``width``; input (batch, width)."""
    import torch.nn as nn

    blocks = [nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth)]
    return nn.Sequential(*blocks, nn.Linear(width, 10)), (width,)


def transformer(d_model: int = 256, layers: int = 4, heads: int = 4, seq: int = 64, vocab: int = 2048):
    """Token embedding, ``layers`` encoder blocks, LM head; input (batch, seq) token ids."""
    import torch.nn as nn

    class Embed(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d_model)

        def forward(self, x):
            return self.tok(x)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(d_model)
            self.out = nn.Linear(d_model, vocab)

        def forward(self, x):
            return self.out(self.norm(x)).mean(dim=1)

    blocks = [nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True)
              for _ in range(layers)]
    return nn.Sequential(Embed(), *blocks, Head()), ("tokens", seq, vocab)


def convnet(channels: int = 64, blocks: int = 4, image: int = 32):
    """A plain conv stack (conv-BN-ReLU blocks, two strided), global pool and a classifier."""
    import torch.nn as nn

    layers = [nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU())]
    c = channels
    for i in range(blocks):
        stride = 2 if i % 2 else 1
        out = c * 2 if stride == 2 else c
        layers.append(nn.Sequential(nn.Conv2d(c, out, 3, stride=stride, padding=1), nn.BatchNorm2d(out), nn.ReLU()))
        c = out
    layers.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10)))
    return nn.Sequential(*layers), (3, image, image)


BUILDERS: dict[str, Callable] = {"mlp": mlp, "transformer": transformer, "convnet": convnet}


def check_model(name: str) -> None:
    """Validate ``--model``: a built-in validation model or a ``file.py:fn`` / ``pkg.mod:fn`` builder."""
    if ":" in name:

        parse_model_ref(name)
    elif name not in BUILDERS:
        raise ConfigError(f"--model: {name!r} is not a validation model; choose one of "
                          f"{', '.join(BUILDERS)}, or give path/to/file.py:build / package.module:build")


def build(name: str, **kwargs):
    """Build a validation model; returns ``(module, input_hint)``.

    A user's builder (``file.py:fn`` or ``pkg.mod:fn``) must return an ``nn.Module``
    whose top-level children run one after another (e.g. an ``nn.Sequential``): each
    child is one layer for dpsim. Its input is ``("user", ref, input_shape)``.
    """
    check_model(name)
    if ":" in name:

        ref = parse_model_ref(name)
        module = getattr(import_builder(ref), ref.function, None)
        if module is None or not callable(module):
            raise ConfigError(f"--model: {name!r}: no function {ref.function!r} in {ref.target!r}")
        model = module()
        children = list(model.children())
        if not children:
            raise ConfigError(f"--model: {name!r} has no child modules to time as layers")
        return model, ("user", name, kwargs.get("input_shape"))
    return BUILDERS[name](**kwargs)


def make_batch(hint, micro_batch: int, seed: int = 0):
    """A synthetic batch and integer targets for a model's input hint."""
    import torch

    g = torch.Generator().manual_seed(seed)
    if hint and hint[0] == "user":

        _, ref, input_shape = hint
        if not input_shape:
            raise ConfigError(f"--input-shape: needed for {ref!r} (batch first, e.g. 32,1024)")
        shape, dtype = parse_input_shape(input_shape)
        shape = (micro_batch, *shape[1:])
        if dtype == "bool":
            x = torch.randint(0, 2, shape, generator=g) > 0
        elif "int" in dtype:
            x = torch.randint(0, 2, shape, generator=g, dtype=getattr(torch, dtype))
        else:
            x = torch.randn(shape, generator=g, dtype=getattr(torch, dtype))
        return x, None
    if hint and hint[0] == "tokens":
        _, seq, vocab = hint
        x = torch.randint(0, vocab, (micro_batch, seq), generator=g)
    else:
        x = torch.randn((micro_batch, *hint), generator=g)
    y = torch.randint(0, 10, (micro_batch,), generator=g)
    return x, y
