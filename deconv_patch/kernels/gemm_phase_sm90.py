"""gemm_phase_sm90: gemm_phase on Hopper's warpgroup MMA (wgmma; sm_90a builds on compute
capability 9.0 only), 16-bit."""

from __future__ import annotations

from .family import KernelFamily, configs

NAME = "gemm_phase_sm90"
# In the kernel's order: block tile m x n, pipeline stages.
CONFIGS = configs(NAME, ("128x128s3", "128x128s4", "128x64s4"), True)
VARIANTS = tuple(c.variant for c in CONFIGS)

FAMILY = KernelFamily(
    NAME, 6, "stride-phase GEMM on wgmma (sm_90a)",
    configs=CONFIGS, packed_weight=True)
