"""gemm_phase_sm90: gemm_phase on Hopper's warpgroup MMA (wgmma; sm_90a builds on compute
capability 9.0 only), 16-bit."""

from __future__ import annotations

from typing import Optional

import torch

from ..arguments import ConvTransposeArgs
from .family import KernelFamily, configs

NAME = "gemm_phase_sm90"
# In the kernel's order: block tile m x n, pipeline stages.
CONFIGS = configs(NAME, ("128x128s3", "128x128s4", "128x64s4"), True)
VARIANTS = tuple(c.variant for c in CONFIGS)


def _refusal(dtype: torch.dtype, weight: torch.Tensor, args: ConvTransposeArgs,
             variant: str) -> Optional[str]:
    """Its weight packing's own limits (cuda/gemm_phase_sm90, weight_side_ok): 16-bit, and
    input channels per group in whole 8-channel k steps (FCN's 21 are not)."""
    if dtype not in (torch.float16, torch.bfloat16):
        return f"{dtype} (16-bit only)"
    per_group = weight.shape[0] // args.groups
    if per_group < 8 or per_group % 8:
        return f"{per_group} input channels per group (a multiple of 8)"
    return None


FAMILY = KernelFamily(
    NAME, 6, "stride-phase GEMM on wgmma (sm_90a)",
    configs=CONFIGS, packed_weight=True, refusal=_refusal)
