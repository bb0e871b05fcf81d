"""The memory format of conv_transpose2d's output, as PyTorch's CUDA path produces it.

Eager PyTorch on CUDA runs cuDNN, whose output is channels_last when the input or the weight
is (cudnn_conv_suggest_memory_format). It skips cuDNN, and returns a contiguous tensor from
slow_conv_transpose2d, when output_padding >= stride on an axis, when cuDNN is disabled, or
when one sample needs 64-bit indexing. An empty batch has its own rule (below). Our CUDA kernels and our fake kernel both follow this
rule, so eager, torch.compile and torch.export agree on strides.
"""

from __future__ import annotations

import torch
from torch._prims_common import suggest_memory_format

from .arguments import INT32_MAX, ConvTransposeArgs


def is_channels_last(t: torch.Tensor) -> bool:
    return t.dim() == 4 and suggest_memory_format(t) == torch.channels_last


def cuda_output_channels_last(
    input4d: torch.Tensor, weight: torch.Tensor, args: ConvTransposeArgs, out_numel_per_sample: int
) -> bool:
    """True when PyTorch's CUDA conv_transpose2d would return a channels_last output."""
    if input4d.shape[0] == 0:
        # ATen's empty-batch path, as observed on the H100 (torch 2.11): channels_last only when
        # the input is and the weight is not.
        return is_channels_last(input4d) and not is_channels_last(weight)
    if any(op >= s for op, s in zip(args.output_padding, args.stride)):
        return False
    if not torch.backends.cudnn.enabled:
        return False
    in_per_sample = input4d[0].numel() if input4d.shape[0] else 0
    if max(in_per_sample, out_numel_per_sample) > INT32_MAX:
        return False
    return is_channels_last(input4d) or is_channels_last(weight)
