"""The memory format of conv_transpose2d's output, as PyTorch's CUDA path produces it.

Eager PyTorch on CUDA runs cuDNN, whose output is channels_last when the input or the weight
is (cudnn_conv_suggest_memory_format). It skips cuDNN, and returns a contiguous tensor from
slow_conv_transpose2d, when output_padding >= stride on an axis, when cuDNN is disabled, or
when one sample needs 64-bit indexing. An empty batch takes ATen's `Empty` backend instead
(empty_batch_output). Our CUDA kernels and our fake kernel both follow these rules, so eager,
torch.compile and torch.export agree on strides.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import torch
from torch._prims_common import make_contiguous_strides_for, suggest_memory_format

from .arguments import INT32_MAX, ConvTransposeArgs


def is_channels_last(t: torch.Tensor) -> bool:
    return t.dim() == 4 and suggest_memory_format(t) == torch.channels_last


def cuda_output_channels_last(
    input4d: torch.Tensor, weight: torch.Tensor, args: ConvTransposeArgs, out_numel_per_sample: int
) -> bool:
    """True when PyTorch's CUDA conv_transpose2d would return a channels_last output."""
    if input4d.shape[0] == 0:  # (the planner sends these to PyTorch; forced kernels only)
        return is_channels_last(input4d)
    if any(op >= s for op, s in zip(args.output_padding, args.stride)):
        return False
    if not torch.backends.cudnn.enabled:
        return False
    in_per_sample = input4d[0].numel() if input4d.shape[0] else 0
    if max(in_per_sample, out_numel_per_sample) > INT32_MAX:
        return False
    return is_channels_last(input4d) or is_channels_last(weight)


def empty_batch_output(input4d: torch.Tensor, weight: torch.Tensor,
                       out_shape: Sequence[int]) -> torch.Tensor:
    """The (empty) result of a batch-0 call, strided as ATen's `Empty` convolution backend
    strides it on every device. That backend computes input * weight[0] (a TensorIterator
    result, laid out like the input: _elementwise_strides) and views it as the output shape; a
    view of an empty tensor keeps the strides only when the shape is unchanged, else it gets
    contiguous strides. (An input without channels multiplies flattened tensors: contiguous.)
    Computed from sizes and strides alone, since fake tensors lay elementwise results out by
    rules of their own."""
    out_shape = tuple(out_shape)
    if input4d.shape[1] != 0 and tuple(input4d.shape) == out_shape:
        strides = _elementwise_strides(tuple(input4d.shape), tuple(input4d.stride()))
        return input4d.new_empty_strided(out_shape, strides)
    return input4d.new_empty(out_shape)


def _elementwise_strides(shape: Tuple[int, ...], stride: Tuple[int, ...]) -> Tuple[int, ...]:
    """The strides TensorIterator gives the output of a unary elementwise op on a tensor of this
    shape and stride (reorder_dimensions + compatible_stride): dimensions sorted innermost
    first by the input's strides (an insertion sort; equal strides put the smaller size
    inside), then packed densely in that order, sizes multiplied as they are (so zeros too).
    An order that is simply the reverse of the dimensions gives contiguous strides."""
    ndim = len(shape)
    perm = list(range(ndim - 1, -1, -1))  # innermost first

    def should_swap(d0: int, d1: int) -> int:
        if stride[d0] == 0 or stride[d1] == 0:
            return 0
        if stride[d0] != stride[d1]:
            return 1 if stride[d0] > stride[d1] else -1
        return 1 if shape[d0] > shape[d1] else 0

    for i in range(1, ndim):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            cmp = should_swap(perm[d0], perm[d1])
            if cmp > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif cmp < 0:
                break
    if perm == list(range(ndim - 1, -1, -1)):
        return tuple(make_contiguous_strides_for(shape))
    out = [0] * ndim
    running = 1
    for d in perm:
        out[d] = running
        running *= shape[d]
    return tuple(out)
