"""Stand-in for ``torchvision.models``: a ResNet with basic blocks and a small ViT, built by
functions with torchvision's signatures (``weights=None``, keyword arguments)."""

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    def __init__(self, layers, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = 64
        for i, (n, c) in enumerate(zip(layers, (64, 128, 256, 512)), start=1):
            blocks = [BasicBlock(cin if b == 0 else c, c, 2 if (b == 0 and i > 1) else 1) for b in range(n)]
            setattr(self, f"layer{i}", nn.Sequential(*blocks))
            cin = c
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        for i in range(1, 5):
            x = getattr(self, f"layer{i}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(*, weights=None, progress=True, num_classes=1000):
    assert weights is None, "the stand-in has no weights"
    return ResNet([2, 2, 2, 2], num_classes=num_classes)


class VisionTransformer(nn.Module):
    def __init__(self, image_size, patch_size, num_layers, hidden_dim, num_classes=1000):
        super().__init__()
        self.image_size = image_size
        self.conv_proj = nn.Conv2d(3, hidden_dim, patch_size, patch_size)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(hidden_dim, 4, 4 * hidden_dim, 0.0, batch_first=True)
                                    for _ in range(num_layers))
        self.head = nn.Linear(hidden_dim, num_classes)

    def forward(self, x):
        assert x.shape[-1] == self.image_size, "wrong image size"
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        for layer in self.layers:
            x = layer(x)
        return self.head(x.mean(1))


def vit_tiny(*, weights=None, progress=True, image_size=224, num_classes=1000):
    assert weights is None, "the stand-in has no weights"
    return VisionTransformer(image_size, 16, 2, 64, num_classes)
