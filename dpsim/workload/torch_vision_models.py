"""Reference torch modules of the vision families (ResNet, ViT), registered as torchvision registers them.

Used to check the catalog's parameter names and shapes one by one, and by the calibration
harness to time a catalog model on real hardware.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from dpsim.workload.architectures import ResNetConfig, ViTConfig
from dpsim.workload.torch_layers import _attention, _merge_heads, _split_heads

# --------------------------------------------------------------------------- ResNet


class Bottleneck(nn.Module):
    def __init__(self, inplanes: int, planes: int, expansion: int, stride: int,
                 downsample: nn.Module | None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # torchvision order: the downsample branch runs after bn3 (this sets the
        # gradient-ready order: its gradients are ready before bn3's).
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, cfg: ResNetConfig) -> None:
        super().__init__()
        self.config = cfg
        c = cfg.stem_channels
        self.conv1 = nn.Conv2d(cfg.in_channels, c, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        inplanes = c
        for stage, (blocks, planes) in enumerate(zip(cfg.layers, cfg.planes), start=1):
            mods = []
            for b in range(blocks):
                stride = 2 if (stage > 1 and b == 0) else 1
                out_c = planes * cfg.expansion
                down = None
                if stride != 1 or inplanes != out_c:
                    down = nn.Sequential(nn.Conv2d(inplanes, out_c, 1, stride=stride, bias=False),
                                         nn.BatchNorm2d(out_c))
                mods.append(Bottleneck(inplanes, planes, cfg.expansion, stride, down))
                inplanes = out_c
            setattr(self, f"layer{stage}", nn.Sequential(*mods))
        self.num_stages = len(cfg.layers)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inplanes, cfg.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for stage in range(1, self.num_stages + 1):
            x = getattr(self, f"layer{stage}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def tiny_resnet_torch(cfg: ResNetConfig) -> ResNet:
    """torchvision-style ``ResNet`` (Bottleneck) for ``cfg``."""
    return ResNet(cfg)


# --------------------------------------------------------------------------- ViT


class EncoderBlock(nn.Module):
    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.ln_1 = nn.LayerNorm(cfg.hidden_dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(cfg.hidden_dim, cfg.num_heads, batch_first=True)
        self.dropout = nn.Dropout(0.0)
        self.ln_2 = nn.LayerNorm(cfg.hidden_dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_dim, cfg.mlp_dim), nn.GELU(), nn.Dropout(0.0),
                                 nn.Linear(cfg.mlp_dim, cfg.hidden_dim), nn.Dropout(0.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Same parameters as nn.MultiheadAttention's forward, written out so FLOP
        # counters see the attention matmuls.
        h = self.ln_1(x)
        attn = self.self_attention
        q, k, v = F.linear(h, attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1)
        out = _attention(*(_split_heads(t, self.num_heads) for t in (q, k, v)), causal=False)
        x = x + self.dropout(attn.out_proj(_merge_heads(out)))
        return x + self.mlp(self.ln_2(x))


class Encoder(nn.Module):
    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, cfg.seq_length, cfg.hidden_dim).normal_(std=0.02))
        self.dropout = nn.Dropout(0.0)
        self.layers = nn.Sequential(OrderedDict(
            (f"encoder_layer_{i}", EncoderBlock(cfg)) for i in range(cfg.num_layers)))
        self.ln = nn.LayerNorm(cfg.hidden_dim, eps=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(self.layers(self.dropout(x + self.pos_embedding)))


class VisionTransformer(nn.Module):
    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.config = cfg
        self.conv_proj = nn.Conv2d(3, cfg.hidden_dim, cfg.patch_size, stride=cfg.patch_size)
        self.class_token = nn.Parameter(torch.zeros(1, 1, cfg.hidden_dim))
        self.encoder = Encoder(cfg)
        self.heads = nn.Sequential(OrderedDict(head=nn.Linear(cfg.hidden_dim, cfg.num_classes)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        return self.heads(self.encoder(x)[:, 0])


def tiny_vit_torch(cfg: ViTConfig) -> VisionTransformer:
    """torchvision-style ``VisionTransformer`` for ``cfg``."""
    return VisionTransformer(cfg)
