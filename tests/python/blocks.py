"""Small model blocks that tests in several directories share (tests/python is on sys.path:
pytest puts the directory of the rootdir conftest.py there)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvNeXtBlock(nn.Module):
    """timm's ConvNeXt block: a depthwise 7x7 convolution with a bias, a layer norm over the
    channels of its channels-last result, two linears around a gelu, a layer scale and the
    residual add."""

    def __init__(self, c: int):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.rand(c))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.norm(y)))).permute(0, 3, 1, 2)
        return x + y.mul(self.gamma.reshape(1, -1, 1, 1))
