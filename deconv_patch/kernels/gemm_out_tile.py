"""gemm_out_tile: an output-tiled stride-phase GEMM for few output channels per group (FCN's x8
up-sampling, DCGAN's 64 > 3, FSRCNN's 56 > 1): a block owns a contiguous output tile across
all column phases, so its stores are whole rows, not every stride-th element. 16-bit, TF32 and
3xTF32, any layout, compute capability >= 8.0."""

from __future__ import annotations

from typing import Optional

import torch

from ..arguments import ConvTransposeArgs
from .family import KernelFamily, configs
from .precision import depth_of, tensor_core_problem

NAME = "gemm_out_tile"
# In the kernel's order (the extension's gemm_out_tile_config_names): phase rows x phase columns
# a block computes per phase; "all": every row phase per block (stride_h x as many contiguous
# output rows), else one row phase.
CONFIGS = configs(NAME, ("4x32", "2x64", "8x16", "8x32all", "4x64all", "2x64all", "4x32all"),
                  True)
VARIANTS = tuple(c.variant for c in CONFIGS)
# Its domain: output channels per group (its n tile holds every channel of a group).
MAX_CHANNELS = 32


def problem(dtype: torch.dtype, out_per_group: int,
            depth: Optional[int] = None) -> Optional[str]:
    """Why gemm_out_tile cannot run a layer's dtype / output channels, or None when it can
    (fp32 strict: 3xTF32 where each output sums at least MIN_3XTF32_DEPTH products)."""
    found = tensor_core_problem(dtype, depth)
    if found is not None:
        return found
    if out_per_group > MAX_CHANNELS:
        return (f"{out_per_group} output channels per group (at most {MAX_CHANNELS}: "
                "its n tile holds all of a group's)")
    return None


def _refusal(dtype: torch.dtype, weight: torch.Tensor, args: ConvTransposeArgs,
             variant: str) -> Optional[str]:
    # The planner's wording (the binding would refuse wide layers too, less specifically).
    return problem(dtype, weight.shape[1], depth_of(weight, args))


FAMILY = KernelFamily(
    NAME, 8, "output-tiled stride-phase GEMM for <= 32 output channels per group",
    configs=CONFIGS, packed_weight=True, refusal=_refusal)
