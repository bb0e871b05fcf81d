"""The backward kernels (cuda/direct_backward, in the core): a transposed convolution's input
and weight gradients. On CUDA cores, the direct kernels compute one input-gradient element per
thread, or 16 weight columns per thread over a range of pixels, and the tiled kernels each
gradient as a GEMM per group with 4 x 8 (input) or 4 x 4 (weight) outputs per thread; on tensor
cores, the mma kernels each gradient as an implicit GEMM per group (16-bit operands, or fp32 as
3xTF32). Weight gradients are summed in a fixed order, so they are deterministic.

They run a recorded call's backward (`kernels_in_training`) where the rules below say so, per
gradient, from what was measured against PyTorch's (docs/kernels.md#direct_backward):
* depthwise layers, where cuDNN's gradients run furthest from their floor: the direct kernels;
* on Hopper in fp32 without TF32, layers without groups: the input gradient on gemm_phase_tma's
  kernel (the strided correlation, 3xTF32), faster than cuDNN's fp32 one on every suite layer;
* layers cuDNN has no kernel for (output_padding >= stride), where ATen runs its native
  im2col kernels: on Hopper without groups the input gradient on gemm_phase_tma's kernel (the
  strided correlation; 16-bit, fp32 as 3xTF32, TF32 where ATen's GEMMs are TF32 too); else,
  with few enough multiply-adds per pixel, in 16-bit the mma kernels; in fp32 the tiled weight
  gradient, and with fp32 GEMMs the tiled input gradient;
* layers without groups with a few output channels and many input channels (DCGAN's RGB
  output, FSRCNN's last layer), where cuDNN's gradients run far from their floor: in 16-bit the
  mma kernels for both gradients; in fp32 with TF32 allowed (PyTorch's default; recorded calls
  run ours there with kernels_in_training=True) the mma weight gradient, as 3xTF32: about
  fp32's accuracy, as cuDNN's weight gradient has with TF32 allowed (the fp32 input gradient
  measured slower than cuDNN's there). fp32 without TF32 keeps ATen's: 3xTF32 sums of few
  products can miss fp32's bar.
Elsewhere cuDNN's tensor cores, or the tensor-core GEMMs of ATen's native kernels on the larger
layers, were faster, and ATen's backward runs.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import torch

from ..arguments import ConvTransposeArgs
from .precision import MIN_3XTF32_DEPTH, fp32_strict, runs_native_kernels

NAME = "direct_backward"
TILED_NAME = "tiled_backward"
MMA_NAME = "mma_backward"
# The input gradient as a strided correlation on gemm_phase_tma's kernel (Hopper; the binding's
# phase_tma_grad_input): one group, grad_output channels in 16-byte rows, strides up to 8.
PHASE_TMA_NAME = "phase_tma_backward"
MAX_PHASE_TMA_STRIDE = 8
# fp32 without TF32 in NCHW, a recorded call trains on ours by default only from this many
# multiply-adds or this sum depth on (strict_input_gradient_repays_host; training.md).
MIN_STRICT_NCHW_MACS = 1 << 30
MIN_STRICT_NCHW_DEPTH = 4096
# Multiply-adds per input pixel (Cin x Cout/groups x KH x KW) above which the direct kernels are
# not used: the largest measured depthwise layer had 1,024.
MAX_MACS_PER_PIXEL = 8192
# Multiply-adds per input pixel of a group (Cin/g x Cout/g x KH x KW) up to which the tiled
# kernels beat ATen's native ones on the layers without a cuDNN kernel (benchmarks/layers.py's
# no-cudnn set): the weight gradient in every mode (36,864 won 1.05-2.4x; 73,728 lost in
# bf16), the input gradient in fp32 against fp32 GEMMs (73,728 won; 589,824 lost).
MAX_TILED_WEIGHT_MACS = 36864
MAX_TILED_INPUT_MACS = 73728
# The same for the mma kernels in 16-bit, both gradients (36,864 won or tied; 73,728 lost the
# input gradient).
MAX_MMA_MACS = 36864
# Layers with a cuDNN kernel whose gradients the mma kernels take in 16-bit: without groups
# (every such layer measured was dense), at most this many output channels (the input gradient
# is a convolution over them, few for cuDNN's tiles) and at least this many input channels (the
# kernels' 64-channel tiles).
MAX_MMA_OUT_CHANNELS = 4
MIN_MMA_IN_CHANNELS = 32
SIXTEEN_BIT = (torch.float16, torch.bfloat16)


def _macs_per_pixel(weight_shape: Sequence[int], args: ConvTransposeArgs) -> int:
    cin, out_per_group, kh, kw = weight_shape
    return cin // args.groups * out_per_group * kh * kw


def _depthwise(weight_shape: Sequence[int], args: ConvTransposeArgs) -> bool:
    cin, out_per_group, kh, kw = weight_shape
    return (args.groups == cin and out_per_group == 1
            and cin * out_per_group * kh * kw <= MAX_MACS_PER_PIXEL)


def few_output_layer(in_channels: int, out_channels: int, groups: int) -> bool:
    """The channels and groups of a layer whose two gradients the mma kernels take where it has
    a cuDNN kernel (few_output_channels; training's prefilter asks this alone)."""
    return (groups == 1 and out_channels <= MAX_MMA_OUT_CHANNELS
            and in_channels >= MIN_MMA_IN_CHANNELS)


def few_output_channels(weight_shape: Sequence[int], args: ConvTransposeArgs) -> bool:
    """A layer with a cuDNN kernel whose gradients the mma kernels take (both in 16-bit; the
    weight's in fp32 with TF32 allowed: few_output_weight_dtype)."""
    cin, out_per_group, _, _ = weight_shape
    return not args.without_cudnn and \
        few_output_layer(cin, out_per_group * args.groups, args.groups)


def few_output_weight_dtype(dtype: torch.dtype, args: ConvTransposeArgs) -> bool:
    """The dtypes in which the mma kernels take a few-output layer's weight gradient: 16-bit,
    and fp32 with TF32 allowed (3xTF32); its input gradient, 16-bit only."""
    return dtype in SIXTEEN_BIT or (dtype == torch.float32 and not fp32_strict(dtype, args))


def _mma_without_cudnn(weight_shape: Sequence[int], args: ConvTransposeArgs,
                       dtype: torch.dtype) -> bool:
    return (dtype in SIXTEEN_BIT and args.without_cudnn
            and _macs_per_pixel(weight_shape, args) <= MAX_MMA_MACS)


def weight_grad_kernel(weight_shape: Sequence[int], args: ConvTransposeArgs,
                       dtype: torch.dtype) -> Optional[Tuple[str, str]]:
    """The kernel (NAME, TILED_NAME or MMA_NAME) computing this layer's weight gradient and why,
    or None where ATen's does."""
    if _depthwise(weight_shape, args):
        return NAME, "depthwise: the direct weight gradient measured faster than cuDNN's"
    if _mma_without_cudnn(weight_shape, args, dtype):
        return MMA_NAME, ("output_padding >= stride (no cuDNN kernel), 16-bit: the tensor-core "
                          "weight gradient measured faster than ATen's native one")
    if args.without_cudnn and dtype not in SIXTEEN_BIT \
            and _macs_per_pixel(weight_shape, args) <= MAX_TILED_WEIGHT_MACS:
        return TILED_NAME, ("output_padding >= stride (no cuDNN kernel): the tiled weight "
                            "gradient measured faster than ATen's native one")
    if few_output_weight_dtype(dtype, args) and few_output_channels(weight_shape, args):
        return MMA_NAME, ("few output channels: the tensor-core weight gradient measured faster "
                          "than cuDNN's")
    return None


def strict_phase_tma_layer(out_channels: int, kernel_size: Sequence[int], groups: int,
                           stride: Sequence[int]) -> bool:
    """The hyperparameters of a layer whose input gradient gemm_phase_tma's kernel takes in fp32
    without TF32 (on Hopper): one group, strides up to MAX_PHASE_TMA_STRIDE, grad_output's fp32
    channels in whole 16-byte rows (its TMA loads) and sums of at least MIN_3XTF32_DEPTH
    products (grad_output channels x taps: 3xTF32's bar)."""
    return (groups == 1 and max(stride) <= MAX_PHASE_TMA_STRIDE and out_channels % 4 == 0
            and out_channels * kernel_size[0] * kernel_size[1] >= MIN_3XTF32_DEPTH)


def strict_input_gradient_repays_host(weight_shape: Sequence[int], input_shape: Sequence[int],
                                      channels_last: bool) -> bool:
    """fp32 without TF32: whether a call's input gradient on gemm_phase_tma's kernel repays its
    host work where cuDNN's would run. In channels_last ours took less host time than cuDNN's;
    in NCHW more (grad_output's copy to channels_last, the weight's pack, the GEMM), so there
    the call needs MIN_STRICT_NCHW_MACS multiply-adds or sums of MIN_STRICT_NCHW_DEPTH products
    (grad_output channels x taps), where cuDNN's fp32 input gradient measured 2-7x slower."""
    if channels_last:
        return True
    cin, cout, kh, kw = weight_shape
    pixels = math.prod(input_shape[-2:]) * (input_shape[0] if len(input_shape) == 4 else 1)
    return (pixels * cin * cout * kh * kw >= MIN_STRICT_NCHW_MACS
            or cout * kh * kw >= MIN_STRICT_NCHW_DEPTH)


def strict_input_gradient_on_phase_tma(weight_shape: Sequence[int], args: ConvTransposeArgs,
                                       dtype: torch.dtype) -> bool:
    """fp32 without TF32 (on Hopper): whether gemm_phase_tma's kernel takes this layer's input
    gradient, with or without a cuDNN kernel (what a recorded call trains on by default)."""
    _, out_channels, kh, kw = weight_shape
    return fp32_strict(dtype, args) and strict_phase_tma_layer(out_channels, (kh, kw),
                                                               args.groups, args.stride)


def _phase_tma_input_gradient(weight_shape: Sequence[int], args: ConvTransposeArgs,
                              dtype: torch.dtype) -> Optional[str]:
    """Why gemm_phase_tma's kernel takes this layer's input gradient (on Hopper), or None. It
    needs one group, grad_output's channels in whole 16-byte rows (its TMA loads) and strides up
    to MAX_PHASE_TMA_STRIDE; then
    * in fp32 without TF32 on sums of at least MIN_3XTF32_DEPTH products (grad_output channels x
      taps: 3xTF32's bar), any layer: its 3xTF32 beat cuDNN's fp32 input gradient on every
      layer of the suite, and ATen's native one;
    * on a layer without a cuDNN kernel, also in 16-bit, and in TF32 where ATen's native GEMMs
      run TF32 as well (with fp32 GEMMs its input gradient is fp32's).
    With cuDNN in 16-bit and TF32 it won and lost by layer: cuDNN keeps those."""
    _, out_channels, kh, kw = weight_shape
    if args.groups != 1 or max(args.stride) > MAX_PHASE_TMA_STRIDE:
        return None
    if out_channels % (16 // dtype.itemsize) != 0:
        return None
    if fp32_strict(dtype, args) and strict_phase_tma_layer(out_channels, (kh, kw), args.groups,
                                                           args.stride):
        return ("fp32 without TF32, one group: the input gradient as a strided correlation on "
                "gemm_phase_tma's kernel (3xTF32) measured faster than "
                + ("ATen's native one" if runs_native_kernels(args) else "cuDNN's"))
    if not args.without_cudnn:
        return None
    if dtype in SIXTEEN_BIT or (dtype == torch.float32 and not fp32_strict(dtype, args)):
        return ("output_padding >= stride (no cuDNN kernel), one group: the input gradient as a "
                "strided correlation on gemm_phase_tma's kernel measured faster than ATen's "
                "native one and the mma kernel")
    return None


def grad_input_kernel(weight_shape: Sequence[int], args: ConvTransposeArgs, dtype: torch.dtype,
                      channels_last: bool, hopper: bool = False) -> Optional[Tuple[str, str]]:
    """The kernel computing this layer's input gradient and why, or None where ATen's does.
    `channels_last`: the call's input and output are channels_last (a warp of the direct kernel
    then reads 32 neighbouring channels of grad_output per tap; in NCHW cuDNN's measured
    faster). `hopper`: the device runs gemm_phase_tma's kernel."""
    if hopper:
        why = _phase_tma_input_gradient(weight_shape, args, dtype)
        if why is not None:
            return PHASE_TMA_NAME, why
    if channels_last and _depthwise(weight_shape, args):
        return NAME, ("depthwise, channels_last: the direct input gradient measured faster than "
                      "cuDNN's")
    if _mma_without_cudnn(weight_shape, args, dtype):
        return MMA_NAME, ("output_padding >= stride (no cuDNN kernel), 16-bit: the tensor-core "
                          "input gradient measured faster than ATen's native one")
    if dtype in SIXTEEN_BIT and few_output_channels(weight_shape, args):
        return MMA_NAME, ("few output channels, 16-bit: the tensor-core input gradient measured "
                          "faster than cuDNN's")
    if args.without_cudnn and fp32_strict(dtype, args) \
            and _macs_per_pixel(weight_shape, args) <= MAX_TILED_INPUT_MACS:
        # (where ATen's native GEMMs run on tensor cores, 16-bit or TF32, they measured faster)
        return TILED_NAME, ("output_padding >= stride (no cuDNN kernel), fp32: the tiled input "
                            "gradient measured faster than ATen's native one")
    return None
