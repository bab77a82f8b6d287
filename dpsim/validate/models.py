"""What ``dpsim validate --model`` accepts, and three small built-in models for CPU validation runs.

``--model`` takes exactly what ``predict`` and ``calibrate`` take: a catalog name, or a
builder reference ``path/file.py:fn`` / ``package.module:fn`` (optionally ``:input_fn``,
then ``:loss_fn``). ``mlp``, ``transformer`` and ``convnet`` are shorthands for the
built-in references below (:data:`BUILTINS`), which are ordinary builder references a
user could type too (``dpsim predict --model dpsim.validate.models:mlp:mlp_batch``).

The built-ins are the three shapes the accuracy bar asks for: an MLP (few large
matmuls), a small transformer (attention + MLP blocks) and a convnet. Each comes with an
example batch, a cross-entropy loss and SGD with momentum, the step ``validate`` trains.
torch is imported by the builders only.
"""

from __future__ import annotations

from dpsim.errors import ConfigError
from dpsim.workload.catalog import CATALOG_ENTRIES
from dpsim.workload.model_ref import is_torch_model_ref, parse_model_ref

BUILTINS = {
    "mlp": "dpsim.validate.models:mlp:mlp_batch:classify",
    "transformer": "dpsim.validate.models:transformer:transformer_batch:classify",
    "convnet": "dpsim.validate.models:convnet:convnet_batch:classify",
}
"""Shorthand -> builder reference (builder, example batch, loss)."""


def resolve(model: str) -> str:
    """The reference ``--model`` stands for (a built-in's full reference, else itself)."""
    return BUILTINS.get(model, model)


def predict_reference(model: str) -> str:
    """The reference as ``predict`` takes it: builder and example batch (the loss part dropped)."""
    ref = resolve(model)
    if not is_torch_model_ref(ref):
        return ref
    parts = ref.split(":")
    return ":".join(parts[:3])


def check_model(name: str) -> None:
    """Validate ``--model`` (one line naming what is allowed)."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"--model: {name!r} is not valid; give a catalog name, mlp, transformer, convnet, or "
                          "path/to/file.py:build / package.module:build")
    if name in BUILTINS or name in CATALOG_ENTRIES:
        return
    if is_torch_model_ref(name):
        parse_model_ref(name)
        return
    raise ConfigError(f"--model: {name!r} is not a catalog model, a built-in ({', '.join(BUILTINS)}) or a builder "
                      "(path/to/file.py:build, package.module:build)")


def mlp():
    """Six 1024-wide Linear+ReLU blocks and a 10-way classifier."""
    import torch.nn as nn

    blocks = [nn.Sequential(nn.Linear(1024, 1024), nn.ReLU()) for _ in range(6)]
    return nn.Sequential(*blocks, nn.Linear(1024, 10))


def mlp_batch():
    import torch

    return torch.randn(32, 1024, generator=torch.Generator().manual_seed(0))


def transformer():
    """Token embedding, four 256-wide encoder blocks, a pooled 2048-way head."""
    import torch.nn as nn

    d_model, vocab = 256, 2048

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

    blocks = [nn.TransformerEncoderLayer(d_model, 4, 4 * d_model, dropout=0.0, batch_first=True) for _ in range(4)]
    return nn.Sequential(Embed(), *blocks, Head())


def transformer_batch():
    import torch

    return torch.randint(0, 2048, (8, 64), generator=torch.Generator().manual_seed(0))


def convnet():
    """Conv-BN-ReLU blocks (two strided), global pool and a 10-way classifier on 32x32 images."""
    import torch.nn as nn

    layers = [nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())]
    c = 64
    for i in range(4):
        stride = 2 if i % 2 else 1
        out = c * 2 if stride == 2 else c
        layers.append(nn.Sequential(nn.Conv2d(c, out, 3, stride=stride, padding=1), nn.BatchNorm2d(out), nn.ReLU()))
        c = out
    layers.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10)))
    return nn.Sequential(*layers)


def convnet_batch():
    import torch

    return torch.randn(16, 3, 32, 32, generator=torch.Generator().manual_seed(0))


def classify(output):
    """Cross-entropy of the class scores against class 0 (the labels' values do not change the cost)."""
    import torch

    return torch.nn.functional.cross_entropy(output, torch.zeros(output.shape[0], dtype=torch.long))


def optimizer(parameters):
    """SGD with momentum: the built-ins' optimizer."""
    import torch

    return torch.optim.SGD(parameters, lr=1e-3, momentum=0.9)
