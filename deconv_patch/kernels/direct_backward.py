"""The direct backward kernels (cuda/direct_backward, in the core): a transposed convolution's
input and weight gradients on CUDA cores, one element per thread (input gradient) or 16 weight
columns per thread over a range of pixels, summed in a fixed order (weight gradient).

They run a recorded call's backward (`kernels_in_training`) where the rules below say so, per
gradient, from what was measured against cuDNN (docs/kernels.md#direct_backward): only
depthwise layers, where cuDNN's gradients run furthest from their floor. Elsewhere, including
the few-channel layers cuDNN also leaves far from their floor (DCGAN's RGB output, FSRCNN,
small groups, output_padding >= stride), one multiply-add per load on CUDA cores lost to
cuDNN's tensor cores by 4-32x, and ATen's backward runs.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..arguments import ConvTransposeArgs

NAME = "direct_backward"
# The tiled gradients (grad_input_tiled.cu, weight_grad_tiled.cu): GEMMs per group on CUDA
# cores, for layers with more than a few channels per group. No rule gives them a layer yet:
# they have not been timed.
TILED_NAME = "tiled_backward"
# Multiply-adds per input pixel (Cin x Cout/groups x KH x KW) above which the kernels are not
# used: the largest measured depthwise layer had 1,024.
MAX_MACS_PER_PIXEL = 8192


def _depthwise(weight_shape: Sequence[int], args: ConvTransposeArgs) -> bool:
    cin, out_per_group, kh, kw = weight_shape
    return (args.groups == cin and out_per_group == 1
            and cin * out_per_group * kh * kw <= MAX_MACS_PER_PIXEL)


def weight_grad_reason(weight_shape: Sequence[int], args: ConvTransposeArgs) -> Optional[str]:
    """Why the direct kernel computes this layer's weight gradient, or None where ATen's does."""
    if _depthwise(weight_shape, args):
        return "depthwise: the direct weight gradient measured faster than cuDNN's"
    return None


def grad_input_reason(weight_shape: Sequence[int], args: ConvTransposeArgs,
                      channels_last: bool) -> Optional[str]:
    """Why the direct kernel computes this layer's input gradient, or None where ATen's does.
    `channels_last`: the call's input and output are channels_last (a warp then reads 32
    neighbouring channels of grad_output per tap; in NCHW cuDNN's measured faster)."""
    if channels_last and _depthwise(weight_shape, args):
        return "depthwise, channels_last: the direct input gradient measured faster than cuDNN's"
    return None
