"""Calls that autograd records (a training step's forward): PyTorch runs them.

A deconv_patch call's backward is ATen's convolution_backward, the same as nn.ConvTranspose2d's.
In a training step a forward kernel of ours then pays off only where its forward saving outweighs
what it adds to the step: the dispatcher's round trip and a Python autograd node (tens of
microseconds per layer, more than a small layer's whole forward) and, for kernels that read a
packed weight, a re-pack after every optimizer step; and timing each call's step with autotune
did not predict the step inside a model (docs/performance/training.md). So until backward kernels
of ours exist, a recorded call runs PyTorch's own convolution, exactly nn.ConvTranspose2d's call;
a variant forced by planner.use_variant runs regardless (tests and benchmarks force them).
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
    """Whether this call runs PyTorch's convolution because autograd records it (and no variant
    is forced)."""
    return records_grad(input, weight, bias) and planner.forced_variant() is None
