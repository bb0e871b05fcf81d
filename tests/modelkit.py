"""Small building blocks shared by the optimize tests."""

from __future__ import annotations

import torch
from torch import nn


def random_bn(channels: int) -> nn.BatchNorm2d:
    """A BatchNorm2d with non-trivial running statistics and affine parameters (train mode)."""
    bn = nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.running_mean.normal_(0.0, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.normal_(1.0, 0.3)
        bn.bias.normal_()
    return bn
