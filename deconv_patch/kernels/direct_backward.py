"""The backward kernels (cuda/direct_backward, in the core): a transposed convolution's input
and weight gradients on CUDA cores. The direct kernels compute one input-gradient element per
thread, or 16 weight columns per thread over a range of pixels; the tiled kernels compute each
gradient as a GEMM per group with 4 x 8 (input) or 4 x 4 (weight) outputs per thread. Weight
gradients are summed in a fixed order, so they are deterministic.

They run a recorded call's backward (`kernels_in_training`) where the rules below say so, per
gradient, from what was measured against PyTorch's (docs/kernels.md#direct_backward):
* depthwise layers, where cuDNN's gradients run furthest from their floor: the direct kernels;
* layers cuDNN has no kernel for (output_padding >= stride), where ATen runs its native
  im2col kernels, with few enough multiply-adds per pixel: the tiled weight gradient, and in
  fp32 with fp32 GEMMs the tiled input gradient.
Elsewhere cuDNN's tensor cores, or the tensor-core GEMMs of ATen's native kernels on the larger
layers, were faster than either kernel on CUDA cores, and ATen's backward runs.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

from ..arguments import ConvTransposeArgs

NAME = "direct_backward"
TILED_NAME = "tiled_backward"
# Multiply-adds per input pixel (Cin x Cout/groups x KH x KW) above which the direct kernels are
# not used: the largest measured depthwise layer had 1,024.
MAX_MACS_PER_PIXEL = 8192
# Multiply-adds per input pixel of a group (Cin/g x Cout/g x KH x KW) up to which the tiled
# kernels beat ATen's native ones on the layers without a cuDNN kernel (benchmarks/layers.py's
# no-cudnn set): the weight gradient in every mode (36,864 won 1.05-2.4x; 73,728 lost in
# bf16), the input gradient in fp32 against fp32 GEMMs (73,728 won; 589,824 lost).
MAX_TILED_WEIGHT_MACS = 36864
MAX_TILED_INPUT_MACS = 73728


def _macs_per_pixel(weight_shape: Sequence[int], args: ConvTransposeArgs) -> int:
    cin, out_per_group, kh, kw = weight_shape
    return cin // args.groups * out_per_group * kh * kw


def _depthwise(weight_shape: Sequence[int], args: ConvTransposeArgs) -> bool:
    cin, out_per_group, kh, kw = weight_shape
    return (args.groups == cin and out_per_group == 1
            and cin * out_per_group * kh * kw <= MAX_MACS_PER_PIXEL)


def weight_grad_kernel(weight_shape: Sequence[int], args: ConvTransposeArgs
                       ) -> Optional[Tuple[str, str]]:
    """The kernel (NAME or TILED_NAME) computing this layer's weight gradient and why, or None
    where ATen's does."""
    if _depthwise(weight_shape, args):
        return NAME, "depthwise: the direct weight gradient measured faster than cuDNN's"
    if args.without_cudnn and _macs_per_pixel(weight_shape, args) <= MAX_TILED_WEIGHT_MACS:
        return TILED_NAME, ("output_padding >= stride (no cuDNN kernel): the tiled weight "
                            "gradient measured faster than ATen's native one")
    return None


def grad_input_kernel(weight_shape: Sequence[int], args: ConvTransposeArgs, dtype: torch.dtype,
                      channels_last: bool) -> Optional[Tuple[str, str]]:
    """The kernel computing this layer's input gradient and why, or None where ATen's does.
    `channels_last`: the call's input and output are channels_last (a warp of the direct kernel
    then reads 32 neighbouring channels of grad_output per tap; in NCHW cuDNN's measured
    faster)."""
    if channels_last and _depthwise(weight_shape, args):
        return NAME, ("depthwise, channels_last: the direct input gradient measured faster than "
                      "cuDNN's")
    if args.without_cudnn and dtype == torch.float32 and not torch._C._get_cublas_allow_tf32() \
            and _macs_per_pixel(weight_shape, args) <= MAX_TILED_INPUT_MACS:
        # (where ATen's native GEMMs run on tensor cores, 16-bit or TF32, they measured faster)
        return TILED_NAME, ("output_padding >= stride (no cuDNN kernel), fp32: the tiled input "
                            "gradient measured faster than ATen's native one")
    return None
