"""Folding an eval-mode BatchNorm2d into the transposed convolution that feeds it.

    bn(conv(x)) = conv(x) * s + (beta - mean * s),   s = gamma / sqrt(var + eps)   (per channel)
                = conv_{w * s, (b - mean) * s + beta}(x)

so the BN disappears and the conv carries scaled weights and a (possibly new) bias. This is the
only fusion until the fused-epilogue kernel exists: activations are *not* fused.

ConvTranspose2d's weight is [C_in, C_out/groups, kh, kw]: output channel oc = g*C_out/groups + j
lives at weight[g*C_in/groups:(g+1)*C_in/groups, j], so the scale is applied along dim 1 of each
group's block, not dim 0 as for Conv2d. The arithmetic runs in float64 and is cast back once.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn


def bn_fold_problem(conv: nn.ConvTranspose2d, bn: nn.Module) -> Optional[str]:
    """Why `bn` cannot be folded into `conv` (None when it can).

    Folding uses the running statistics, so it is only exact when the BN normalises with them:
    eval mode and track_running_stats.
    """
    if not isinstance(bn, nn.BatchNorm2d):
        return f"{type(bn).__name__} is not BatchNorm2d"
    if bn.training:
        return "BatchNorm2d is in training mode (uses batch statistics)"
    if not bn.track_running_stats or bn.running_mean is None or bn.running_var is None:
        return "BatchNorm2d has no running statistics"
    if bn.num_features != conv.out_channels:
        return f"BatchNorm2d has {bn.num_features} channels, conv outputs {conv.out_channels}"
    if conv.weight.is_meta or bn.running_mean.is_meta:
        return "parameters are on the meta device"
    return None


def bn_scale_shift(bn: nn.BatchNorm2d) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-channel (scale, shift) in float64 so that bn(y) = y * scale + shift in eval mode."""
    assert bn.running_mean is not None and bn.running_var is not None
    mean = bn.running_mean.detach().double()
    var = bn.running_var.detach().double()
    inv_std = torch.rsqrt(var + bn.eps)
    gamma = bn.weight.detach().double() if bn.weight is not None else torch.ones_like(mean)
    beta = bn.bias.detach().double() if bn.bias is not None else torch.zeros_like(mean)
    scale = gamma * inv_std
    return scale, beta - mean * scale


def fold_scale_shift(
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    scale: torch.Tensor,
    shift: torch.Tensor,
    groups: int,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(weight', bias') of the conv_transpose2d whose output equals conv(x) * scale + shift.

    `scale`/`shift` are per output channel. Results have `weight`'s dtype and device.
    """
    cin, cout_g = weight.shape[0], weight.shape[1]
    w = weight.detach().double().reshape(groups, cin // groups, cout_g, *weight.shape[2:])
    s = scale.to(w.device).reshape(groups, 1, cout_g, *([1] * (weight.dim() - 2)))
    new_weight = (w * s).reshape(weight.shape)
    b = bias.detach().double() if bias is not None else torch.zeros(
        groups * cout_g, dtype=torch.float64, device=weight.device)
    new_bias = b * scale.to(b.device) + shift.to(b.device)
    return new_weight.to(weight.dtype), new_bias.to(weight.dtype)


def fold_bn_into_conv_transpose(
    conv: nn.ConvTranspose2d, bn: nn.BatchNorm2d
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(weight', bias') for `conv` followed by the eval-mode `bn`; raises if it cannot fold."""
    problem = bn_fold_problem(conv, bn)
    if problem is not None:
        raise ValueError(f"cannot fold BatchNorm2d into ConvTranspose2d: {problem}")
    scale, shift = bn_scale_shift(bn)
    return fold_scale_shift(conv.weight, conv.bias, scale, shift, conv.groups)
