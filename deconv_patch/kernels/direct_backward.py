"""The direct backward kernels (cuda/direct_backward, in the core): a transposed convolution's
input and weight gradients on CUDA cores, one element per thread (input gradient) or 16 weight
columns per thread over a range of pixels, summed in a fixed order (weight gradient).

They run a recorded call's backward (`kernels_in_training`) where `runs_here` says so: layers
of at most MAX_MACS_PER_PIXEL multiply-adds per input pixel with few channels per group on one
side (depthwise, one- to three-channel outputs), where
cuDNN's gradients measured 15-200x their roofline floor while its forward kernels' tensor-core
tiles are mostly padding, and layers PyTorch cannot give to cuDNN at all (output_padding >=
stride, or cuDNN disabled), whose native kernels are slower still
(docs/performance/training.md). Elsewhere ATen's backward runs.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..arguments import ConvTransposeArgs

NAME = "direct_backward"
# Channels per group on the smaller side at or below which the direct kernels run.
MAX_CHANNELS = 4
# Multiply-adds per input pixel (Cin x Cout/groups x KH x KW) above which CUDA cores lose to
# any tensor-core or GEMM path, few channels or not.
MAX_MACS_PER_PIXEL = 8192


def runs_here(weight_shape: Sequence[int], args: ConvTransposeArgs) -> Optional[str]:
    """Why the direct kernels compute this layer's gradients, or None where ATen's do."""
    cin, out_per_group, kh, kw = weight_shape
    if cin * out_per_group * kh * kw > MAX_MACS_PER_PIXEL:
        return None
    if any(op >= s for op, s in zip(args.output_padding, args.stride)):
        return "output_padding >= stride: PyTorch has no cuDNN kernel for it"
    if not torch.backends.cudnn.enabled:
        return "cuDNN is disabled: PyTorch's native kernels are slower"
    per_group = min(cin // args.groups, out_per_group)
    if per_group <= MAX_CHANNELS:
        return (f"{per_group} channel(s) per group on one side: cuDNN's tensor-core tiles "
                "would be mostly padding")
    return None
