"""gemm_kxs_sm90: gemm_kxs as a persistent, warp-specialised TMA + wgmma GEMM (sm_90a, compute
capability 9.0; 16-bit or TF32, one group, no output_padding)."""

from __future__ import annotations

from typing import Optional

import torch

from ..arguments import ConvTransposeArgs
from .family import KernelFamily, configs
from .precision import fp32_strict

NAME = "gemm_kxs_sm90"
# Configs 0-2, in the kernel's order: tile m x n, pipeline stages, "pp" = ping-pong consumer
# warpgroups.
CONFIGS = configs(NAME, ("128x256s4", "128x128s6", "128x128s6pp"), True)
# Configs 3-5, the kernel-area twins of 0-2: tiles for NCHW output hold all KH*KW taps of their
# channels, so each channel's output rows are stored as one run (for channels_last output they
# are the same machine code as 0-2). They stand in for configs 0-2 wherever the output is NCHW:
# forced on the suite's NCHW k == stride rows (H100, docs/performance/kxs.md) each one tied or
# beat its base config, by up to 1.5x.
AREA_CONFIGS = configs(NAME, ("128x256s4area", "128x128s6area", "128x128s6pparea"), True,
                       first_index=3)
VARIANTS = tuple(c.variant for c in CONFIGS)
AREA_VARIANTS = tuple(c.variant for c in AREA_CONFIGS)
# The config the planner runs by default for 16-bit channels_last input (fastest forced on the
# suite's layers, H100).
WINNER = VARIANTS[2]
# ... and for TF32 channels_last input: since its fp32 stores fill whole sectors
# (cuda/common/quad_regroup.cuh) the cooperative 128x256 tile is the fastest on all 4 such rows
# (H100, forced: U-Net up1 76.7 / up4 179.3 / Mask R-CNN 54.2 / YOLOv8-seg 137.6 us against the
# ping-pong tile's 108.8 / 179.7 / 60.9 / 145.2; docs/performance/kxs.md).
TF32_WINNER = VARIANTS[0]
# ... and for dense 16-bit NCHW input (read in place as an MN-major operand) with NCHW output:
# 128x256s4area was the fastest config on all 8 such rows (bf16 and TF32;
# docs/performance/kxs.md), Mask R-CNN's mask head 1.87x -> 2.21x cuDNN.
NCHW_WINNER = AREA_VARIANTS[0]


def _refusal(dtype: torch.dtype, weight: torch.Tensor, args: ConvTransposeArgs,
             variant: str) -> Optional[str]:
    return "fp32 without TF32" if fp32_strict(dtype, args) else None


FAMILY = KernelFamily(
    NAME, 4, "k == stride GEMM on TMA + wgmma (sm_90a)", configs=CONFIGS + AREA_CONFIGS,
    packed_weight=True, refusal=_refusal, per_activation=True)
