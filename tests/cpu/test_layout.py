"""layout.empty_batch_output against ATen itself: a batch-0 conv_transpose2d takes ATen's
`Empty` backend on every device, so the CPU build's strides are the ones to match."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.layout import empty_batch_output


def _case(seed: int):
    rng = random.Random(seed)
    groups = rng.choice([1, 1, 2])
    cin = groups * rng.choice([1, 2, 3, 4, 8])  # (PyTorch refuses a weight without rows)
    cout_g = rng.choice([1, 2, 4, 8])
    k = (rng.choice([1, 2, 3]), rng.choice([1, 2, 3]))
    s = (rng.choice([1, 2]), rng.choice([1, 2]))
    if rng.random() < 0.4:  # output shape == input shape is where ATen keeps the strides
        k, s, cout_g = (1, 1), (1, 1), max(1, cin // groups)
    h, w = rng.choice([1, 3, 5]), rng.choice([1, 4, 6])
    x = torch.randn(0, cin, h, w)
    if rng.random() < 0.5:
        x = x.contiguous(memory_format=torch.channels_last)
    weight = torch.randn(cin, cout_g, *k)
    if rng.random() < 0.5:
        weight = weight.contiguous(memory_format=torch.channels_last)
    return x, weight, ConvTransposeArgs.from_values(stride=s, groups=groups)


@pytest.mark.parametrize("seed", range(120))
def test_empty_batch_output_matches_aten(seed):
    x, weight, args = _case(seed)
    expected = F.conv_transpose2d(x, weight, None, args.stride, groups=args.groups)
    got = empty_batch_output(x, weight, expected.shape)
    assert got.shape == expected.shape and got.stride() == expected.stride(), (
        x.shape, x.stride(), weight.stride(), expected.stride(), got.stride())
    with FakeTensorMode() as mode:  # the fake kernel runs it on fake tensors
        fake = empty_batch_output(mode.from_tensor(x), mode.from_tensor(weight), expected.shape)
    assert fake.shape == expected.shape and fake.stride() == expected.stride()
