"""Which recorded calls of a layer with a cuDNN kernel run our forward kernel in TF32 and 16-bit,
with ATen's backward (the gradients nn.ConvTranspose2d's backward computes, from the same
saved input and weight): planner.trains_on_kernel's rule for the dense layers no gradient
kernel of ours takes.

What such a call gains is the forward's GPU time. What it pays: the weight's re-pack after
every optimizer step (autocast's new cast every step in 16-bit) and the recorded node's host
work. Read off benchmarks/train.py's per-layer forward + backward with the optimizer's update
and its model steps (docs/performance/training.md#our-forward-with-atens-backward-tf32-and-16-bit):
in TF32 the large calls gained in both layouts, while the smaller, host-bound ones moved either
way, so they keep PyTorch's convolution; a stride-phase call (kernel != stride) needs more
multiply-adds than a kernel == stride one, its weight's re-pack and the host-bound steps around
it taking more of what it saves; in 16-bit only kernel == stride calls gained, the k4 s2 layers'
stride-phase forward saving too little there to repay the re-pack.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import torch

from ..arguments import ConvTransposeArgs
from .precision import tf32_allowed

# multiply-adds from which a TF32 call of a kernel == stride layer repays our forward's costs
MIN_TF32_MACS = 1 << 33
# the same for the other layers (stride-phase GEMMs): 1.5 x MIN_TF32_MACS
MIN_TF32_STRIDE_PHASE_MACS = 3 << 32
# multiply-adds from which a 16-bit kernel == stride call repays them
MIN_SIXTEEN_BIT_MACS = 1 << 32


def kernel_is_stride(kernel_size: Sequence[int], args: ConvTransposeArgs) -> bool:
    """A layer whose every output pixel takes one tap of one input pixel (gemm_kxs's GEMM)."""
    return (tuple(kernel_size) == tuple(args.stride) and not any(args.padding)
            and not any(args.output_padding) and tuple(args.dilation) == (1, 1))


def least_macs(dtype: torch.dtype, tf32: bool, kernel_is_stride: bool) -> Optional[int]:
    """The multiply-adds from which a call in `dtype` (fp32: `tf32`, whether the call may use
    TF32) of a layer (`kernel_is_stride`) runs our forward (MIN_TF32_MACS,
    MIN_TF32_STRIDE_PHASE_MACS, MIN_SIXTEEN_BIT_MACS), or None where no call does.
    planner.TrainingPrefilter asks it with the facts it keeps."""
    if dtype == torch.float32:
        if not tf32:
            return None
        return MIN_TF32_MACS if kernel_is_stride else MIN_TF32_STRIDE_PHASE_MACS
    if dtype in (torch.float16, torch.bfloat16) and kernel_is_stride:
        return MIN_SIXTEEN_BIT_MACS
    return None


def call_macs(input_shape: Sequence[int], weight_shape: Sequence[int]) -> int:
    """A call's multiply-adds: input elements x outputs per group x taps (weight_shape[1:]),
    as planner.TrainingPrefilter.may_train counts them."""
    return math.prod(input_shape) * math.prod(weight_shape[1:])


def repays(dtype: torch.dtype, args: ConvTransposeArgs, weight_shape: Sequence[int],
           call: Optional[Tuple[Sequence[int], bool]]) -> bool:
    """Whether a recorded call in `dtype` of a layer with a cuDNN kernel (no gradient kernel of
    ours) runs our planned forward. `call`: the input's shape and whether it is channels_last;
    None where no call is known (the answer for some call of the layer)."""
    least = least_macs(dtype, dtype == torch.float32 and tf32_allowed(args),
                       kernel_is_stride(weight_shape[2:], args))
    if least is None:
        return False
    return call is None or call_macs(call[0], weight_shape) >= least
