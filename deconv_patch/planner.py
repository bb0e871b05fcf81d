"""Chooses which implementation runs a conv_transpose2d call.

Variants today:
  * ``direct`` - our CUDA gather kernel (any hyperparameters, fp32/fp16/bf16, any layout);
  * ``aten``   - PyTorch's own implementation, used, and reported, whenever ours does not apply.

Every plan carries a human-readable reason, so a fallback is never silent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .arguments import ConvTransposeArgs, fits_int32

KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
DIRECT = "direct"
ATEN = "aten"


@dataclass(frozen=True)
class Plan:
    """The implementation chosen for one call and why."""

    variant: str
    reason: str

    @property
    def uses_kernel(self) -> bool:
        return self.variant != ATEN


def device_support(device: torch.device, dtype: torch.dtype) -> Optional[str]:
    """Why our kernels cannot run for this device/dtype, or None when they can."""
    if device.type != "cuda":
        return f"{device.type} tensors run on PyTorch (deconv_patch kernels are CUDA-only)"
    if dtype not in KERNEL_DTYPES:
        return f"{dtype} runs on PyTorch (kernels cover float32, float16, bfloat16)"
    index = device.index if device.index is not None else torch.cuda.current_device()
    if torch.cuda.get_device_capability(index) < (8, 0):
        return "GPU older than compute capability 8.0 runs on PyTorch"
    return None


def plan(input: torch.Tensor, weight: torch.Tensor, args: ConvTransposeArgs) -> Plan:
    """The variant for this call. Inputs are already validated (see arguments.find_problem)."""
    reason = device_support(input.device, input.dtype)
    if reason is not None:
        return Plan(ATEN, reason)
    if not fits_int32(input, weight, args):
        return Plan(ATEN, "a size or hyperparameter exceeds 32 bits; runs on PyTorch")
    return Plan(DIRECT, "direct gather kernel")


def describe(device: torch.device, dtype: torch.dtype) -> str:
    """One word for reprs: which backend a module on this device/dtype runs."""
    reason = device_support(device, dtype)
    return "aten" if reason is not None else DIRECT
