"""gemm_phase_tma: the stride-phase GEMM as a persistent TMA + wgmma kernel (sm_90a; any layer;
16-bit, TF32 and 3xTF32)."""

from __future__ import annotations

from .family import KernelFamily, configs
from .precision import shallow_sum_refusal

NAME = "gemm_phase_tma"
# In the kernel's order (the extension's gemm_phase_tma_config_names): tile m x n, ring stages,
# "pp" = ping-pong consumer warpgroups.
CONFIGS = configs(NAME, ("128x128s6pp", "128x128s6", "128x256s4", "128x64s8pp"), True)
VARIANTS = tuple(c.variant for c in CONFIGS)
# fp32 strict on Hopper: its 3xTF32 runs by default from this many output channels per group
# (its 64-wide tiles waste most of their MMAs below; measured, see planner._plan_layer).
MIN_STRICT_OUT = 32


FAMILY = KernelFamily(
    NAME, 7, "stride-phase GEMM on TMA + wgmma (sm_90a)",
    configs=CONFIGS, packed_weight=True, refusal=shallow_sum_refusal)
