"""direct: the gather kernel: any hyperparameters, fp32/fp16/bf16, any layout. It loses to
cuDNN wherever cuDNN runs, so it is the default only where PyTorch cannot use cuDNN."""

from __future__ import annotations

from .family import KernelFamily

NAME = "direct"

FAMILY = KernelFamily(
    NAME, 0, "gather kernel for any hyperparameters",
    needs_units=())  # in the extension's core: the path every call can take
