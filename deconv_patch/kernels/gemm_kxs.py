"""gemm_kxs: kernel == stride, padding 0, dilation 1 (U-Net, Mask R-CNN, YOLO-seg up-convs), one
tensor-core GEMM per group (mma.sync) whose epilogue scatters into the output; fp16/bf16, TF32,
and 3xTF32 for fp32 without TF32 on deep enough sums."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..arguments import ConvTransposeArgs
from .family import Config, KernelFamily
from .precision import shallow_sum_refusal, tensor_core_problem

NAME = "gemm_kxs"
# Config 1 orders the GEMM's columns (tap, channel) and reads the weight packed that way, so
# channels_last output is stored 16 bytes at a time; the bare name (config -1 / 0) orders them
# (channel, tap) and reads the weight as it is.
TAP_MAJOR = f"{NAME}:tap_major"


def problem(dtype: torch.dtype, kernel_hw: Sequence[int], args: ConvTransposeArgs,
            depth: Optional[int] = None) -> Optional[str]:
    """Why the k == stride GEMM kernel does not apply to a layer, or None when it does."""
    if tuple(kernel_hw) != tuple(args.stride):
        return "kernel != stride"
    if any(args.padding) or args.dilation != (1, 1):
        return "padding or dilation"
    if kernel_hw[0] * kernel_hw[1] > 256 or args.groups > 65535:
        return "kernel area > 256 or groups > 65535"
    return tensor_core_problem(dtype, args, depth)


FAMILY = KernelFamily(
    NAME, 3, "k == stride tensor-core GEMM with a scatter epilogue (mma.sync, sm_80+)",
    configs=(Config(TAP_MAJOR, 1, True),), refusal=shallow_sum_refusal)
