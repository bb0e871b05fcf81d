"""Reference implementations the kernels are checked against.

* `conv_transpose2d_scatter`: the definition of a transposed convolution written as a scatter,
  one einsum per kernel tap, in float64. Independent of ATen's convolution code.
* `conv_transpose2d_float64`: ATen's conv_transpose2d on float64 copies of the arguments.
* `tf32_round`: values rounded to TF32 (what a TF32 tensor core sees of an fp32 operand).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from .arguments import ConvTransposeArgs


def conv_transpose2d_scatter(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    args: ConvTransposeArgs,
) -> torch.Tensor:
    """float64 transposed convolution straight from its definition.

    Input pixel (ih, iw) times tap (kh, kw) lands on output pixel
        oh = ih*stride_h - pad_h + kh*dil_h,   ow = iw*stride_w - pad_w + kw*dil_w.
    We scatter every tap into an un-cropped canvas (offset by the padding) and crop at the end;
    output_padding only extends the canvas (those rows/cols receive bias only).
    """
    unbatched = input.dim() == 3
    x = (input.unsqueeze(0) if unbatched else input).double()
    w = weight.double()
    n, cin, h, wd = x.shape
    g = args.groups
    cin_g, cout_g, kh_n, kw_n = w.shape[0] // g, w.shape[1], w.shape[2], w.shape[3]
    (sh, sw), (ph, pw), (dh, dw) = args.stride, args.padding, args.dilation
    oh, ow = args.output_hw((h, wd), (kh_n, kw_n))
    canvas_h = max((h - 1) * sh + (kh_n - 1) * dh + 1, oh + ph)
    canvas_w = max((wd - 1) * sw + (kw_n - 1) * dw + 1, ow + pw)
    canvas = x.new_zeros((n, g * cout_g, canvas_h, canvas_w))
    xg = x.reshape(n, g, cin_g, h, wd)
    wg = w.reshape(g, cin_g, cout_g, kh_n, kw_n)
    for kh in range(kh_n):
        for kw in range(kw_n):
            contrib = torch.einsum("ngchw,gcd->ngdhw", xg, wg[:, :, :, kh, kw])
            rows = slice(kh * dh, kh * dh + (h - 1) * sh + 1, sh)
            cols = slice(kw * dw, kw * dw + (wd - 1) * sw + 1, sw)
            canvas[:, :, rows, cols] += contrib.reshape(n, g * cout_g, h, wd)
    out = canvas[:, :, ph : ph + oh, pw : pw + ow]
    if bias is not None:
        out = out + bias.double().view(1, -1, 1, 1)
    return out.squeeze(0) if unbatched else out


def conv_transpose2d_float64(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    args: ConvTransposeArgs,
) -> torch.Tensor:
    """ATen's transposed convolution on float64 copies (on the arguments' device)."""
    return F.conv_transpose2d(
        input.double(),
        weight.double(),
        None if bias is None else bias.double(),
        args.stride,
        args.padding,
        args.output_padding,
        args.groups,
        args.dilation,
    )


def tf32_round(t: torch.Tensor) -> torch.Tensor:
    """`t` rounded to TF32 (10-bit mantissa), to nearest with ties away from zero (cvt.rna),
    returned in t's dtype (float32 or float64; float64 values are rounded to float32 first)."""
    bits = t.detach().float().contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32).reshape(t.shape).to(t.dtype)
