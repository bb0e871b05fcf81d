"""gemm_phase: the output split into its stride phases, each a dense implicit GEMM over only the
taps that land on it, on tensor cores (mma.sync; fp16/bf16, TF32 for fp32 when allowed); the
weight pre-packed once per weight version."""

from __future__ import annotations

from .family import KernelFamily, configs
from .precision import shallow_sum_refusal

NAME = "gemm_phase"
# Tile configurations, in the kernel's order (launch_conv_transpose2d_gemm_phase's `config`).
# The bare name lets the kernel pick; autotune times them all.
TILES = ("128x128", "128x64", "64x64", "128x32", "128x128x64")
CONFIGS = configs(NAME, TILES, True)
VARIANTS = tuple(c.variant for c in CONFIGS)

FAMILY = KernelFamily(
    NAME, 5, "stride-phase implicit GEMM (mma.sync, sm_80+)",
    configs=CONFIGS, packed_weight=True, refusal=shallow_sum_refusal)
