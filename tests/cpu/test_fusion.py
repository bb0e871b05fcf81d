"""BatchNorm folding math (deconv_patch/fusion.py): folded conv == conv followed by BN."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from deconv_patch.fusion import (
    bn_fold_problem, bn_scale_shift, fold_bn_into_conv_transpose, fold_scale_shift,
)


def _random_bn(channels: int, *, affine: bool = True, eps: float = 1e-5,
               dtype: torch.dtype = torch.float32) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(channels, eps=eps, affine=affine).to(dtype).eval()
    with torch.no_grad():
        bn.running_mean.normal_(0.0, 0.5)
        bn.running_var.uniform_(0.1, 3.0)
        if affine:
            bn.weight.normal_(1.0, 0.5)
            bn.bias.normal_(0.0, 0.5)
    return bn


CASES = [
    # cin, cout, k, stride, padding, output_padding, groups, dilation, bias
    (6, 4, 3, 2, 1, 1, 1, 1, True),
    (6, 4, 4, 2, 1, 0, 1, 1, False),
    (6, 9, 3, 1, 0, 0, 3, 2, True),
    (8, 8, 2, 2, 0, 0, 8, 1, False),  # depthwise
    (4, 6, (3, 5), (2, 1), (1, 2), (1, 0), 2, (1, 2), True),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("affine", [True, False])
def test_folded_matches_conv_then_bn_in_float64(case, affine):
    cin, cout, k, s, p, op, g, d, bias = case
    conv = nn.ConvTranspose2d(cin, cout, k, s, p, op, g, bias, d).double().eval()
    bn = _random_bn(cout, affine=affine, eps=1e-3, dtype=torch.float64)
    x = torch.randn(2, cin, 5, 7, dtype=torch.float64)
    expected = bn(conv(x))
    weight, new_bias = fold_bn_into_conv_transpose(conv, bn)
    got = F.conv_transpose2d(x, weight, new_bias, conv.stride, conv.padding,
                             conv.output_padding, conv.groups, conv.dilation)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASES)
def test_folded_float32_on_aten_path_close_to_float64_truth(case):
    """In float32 (the ATen fallback path on CPU), folding errs no more than BN itself does."""
    cin, cout, k, s, p, op, g, d, bias = case
    conv = nn.ConvTranspose2d(cin, cout, k, s, p, op, g, bias, d).eval()
    bn = _random_bn(cout)
    x = torch.randn(3, cin, 6, 5)
    with torch.no_grad():
        unfused = bn(conv(x))
        truth = _random_bn_double(bn)(F.conv_transpose2d(
            x.double(), conv.weight.double(), None if conv.bias is None else conv.bias.double(),
            conv.stride, conv.padding, conv.output_padding, conv.groups, conv.dilation))
        weight, new_bias = fold_bn_into_conv_transpose(conv, bn)
        fused = F.conv_transpose2d(x, weight, new_bias, conv.stride, conv.padding,
                                   conv.output_padding, conv.groups, conv.dilation)
    assert weight.dtype == torch.float32 and new_bias.dtype == torch.float32
    err_unfused = (unfused.double() - truth).abs().max().item()
    err_fused = (fused.double() - truth).abs().max().item()
    ulp = torch.finfo(torch.float32).eps * truth.abs().max().item()
    assert err_fused <= 2 * err_unfused + ulp, (err_fused, err_unfused)


def _random_bn_double(bn: nn.BatchNorm2d) -> nn.BatchNorm2d:
    import copy

    return copy.deepcopy(bn).double()


def test_scale_lands_on_the_output_channel_of_each_group():
    """weight[Cin, Cout/g, kh, kw]: output channel g*Cout/g + j is weight[g-block, j]."""
    groups, cin, cout = 2, 4, 6
    weight = torch.randn(cin, cout // groups, 1, 1, dtype=torch.float64)
    scale = torch.arange(1.0, cout + 1, dtype=torch.float64)
    new_w, new_b = fold_scale_shift(weight, None, scale, torch.zeros(cout, dtype=torch.float64),
                                    groups)
    for oc in range(cout):
        g, j = divmod(oc, cout // groups)
        rows = slice(g * cin // groups, (g + 1) * cin // groups)
        torch.testing.assert_close(new_w[rows, j], weight[rows, j] * scale[oc], rtol=0, atol=0)
    assert torch.equal(new_b, torch.zeros(cout, dtype=torch.float64))


def test_scale_shift_matches_bn_eval():
    bn = _random_bn(5, eps=0.1)
    y = torch.randn(2, 5, 3, 3, dtype=torch.float64)
    scale, shift = bn_scale_shift(bn)
    expected = _random_bn_double(bn)(y)
    torch.testing.assert_close(y * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1), expected,
                               rtol=1e-12, atol=1e-12)


def test_fold_keeps_dtype_and_leaves_inputs_untouched():
    conv = nn.ConvTranspose2d(3, 4, 3).to(torch.bfloat16)
    bn = _random_bn(4).to(torch.bfloat16)
    before = conv.weight.detach().clone(), conv.bias.detach().clone()
    weight, bias = fold_bn_into_conv_transpose(conv, bn)
    assert weight.dtype == bias.dtype == torch.bfloat16
    assert torch.equal(conv.weight, before[0]) and torch.equal(conv.bias, before[1])
    assert not torch.equal(weight, before[0])


def test_problems_block_folding():
    conv = nn.ConvTranspose2d(3, 4, 3)
    assert bn_fold_problem(conv, _random_bn(4)) is None
    training = _random_bn(4).train()
    assert "training" in bn_fold_problem(conv, training)
    no_stats = nn.BatchNorm2d(4, track_running_stats=False).eval()
    assert "running statistics" in bn_fold_problem(conv, no_stats)
    assert "channels" in bn_fold_problem(conv, _random_bn(5))
    assert "not BatchNorm2d" in bn_fold_problem(conv, nn.InstanceNorm2d(4))
    with pytest.raises(ValueError, match="cannot fold"):
        fold_bn_into_conv_transpose(conv, training)
