"""Calls that autograd records (a training step's forward).

A patched layer's recorded call runs PyTorch's own convolution, exactly nn.ConvTranspose2d's
call, unless `kernels_in_training` (optimize's argument, the module's attribute) gives it our
kernel: by default (None) where that measured faster (planner.trains_on_kernel: layers
planned on the grouped kernel, layers cuDNN has no kernel for, few output channels in 16-bit,
fp32 without TF32 on Hopper, and our forward with ATen's backward in TF32 and 16-bit where a
call repays the weight's re-pack: kernels/forward_in_training.py), with True in every layer.
It then runs its plan's forward kernel as a C++ autograd node (cuda/binding/recorded_call.cpp)
whose backward is planner.backward_plan's per gradient (ATen's convolution_backward, or the
direct, tiled or tensor-core backward kernels, kernels/direct_backward.py), so the step pays no
Python autograd node (tens of microseconds per layer, more than a small layer's forward).
Recorded calls that would need more than the convolution's backward, a layer's own fused
activation, run PyTorch's convolution (then the activation) either way, and so do routed
`F.conv_transpose2d` calls, whose op records a Python node; a variant forced by
planner.use_variant runs regardless (tests and benchmarks force them).
See docs/performance/training.md.
"""

from __future__ import annotations

from typing import Optional

import torch

from .kernels import planner


def records_grad(input: torch.Tensor, weight: torch.Tensor,
                 bias: Optional[torch.Tensor]) -> bool:
    """Whether autograd records this call (a training step's forward)."""
    return torch.is_grad_enabled() and (
        input.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))


def runs_on_pytorch(input: torch.Tensor, weight: torch.Tensor,
                    bias: Optional[torch.Tensor]) -> bool:
    """Whether a routed functional call runs PyTorch's convolution because autograd records it
    (and no variant is forced)."""
    return records_grad(input, weight, bias) and planner.forced_variant() is None
