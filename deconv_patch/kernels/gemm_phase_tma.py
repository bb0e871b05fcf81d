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


# The untimed default (cudnn.benchmark off) of TF32 / 16-bit layers cuDNN can run, on Hopper, from
# this many output channels per group, with untimed_config's tile: against cuDNN's untimed choice
# it won on every such layer of the suite but one tie (H200, benchmarks/candidates.py;
# docs/performance/autotune.md).
MIN_UNTIMED_OUT = 16
# ... and up to this stride area (the measured layers' strides: 1, 1x2, 2; larger ones, FCN's x8
# up-sampling among them, stay with cuDNN or gemm_out_tile unless autotune times them).
MAX_UNTIMED_STRIDE_AREA = 4
# fp32's untimed defaults need enough work, or cuDNN's fp32 kernels win: on layers outside the
# suite (batch 1, 7 x 7 and 8 x 8 images) the TF32 default measured 0.71-0.96x cuDNN's untimed
# choice below this many multiply-add FLOPs a call (VAE's 7 x 7 > 14 x 14 at 0.41 GFLOP; from
# 0.52 GFLOP it won, 1.3-4.2x), the 3xTF32 default 0.46-0.86x below this many rows per phase
# GEMM (256 at most there; from 4,096 it won, 1.3-2.7x). 16-bit layers keep it at any size:
# cuDNN's 16-bit kernels lost on those layers too (H200, candidates.py --suite held-out;
# docs/performance/autotune.md).
MIN_UNTIMED_TF32_FLOPS = 5 * 10**8
MIN_UNTIMED_STRICT_ROWS = 512
# ... and on NCHW input, which the kernel reads through a channels_last copy, this many: DCGAN
# g3 at batch 8 (512 rows) measured 0.86x / 0.77x cuDNN's choice there (events / GPU time),
# 1.37x / 1.13x on channels_last input; from 1,024 rows (WGAN-GP g2, DCGAN g2 at batch 64) NCHW
# won 1.4-3.7x (H200, candidates.py --suite fresh / suite).
MIN_UNTIMED_STRICT_ROWS_NCHW = 1024
# TF32 on channels_last input with this many output channels per group (up to the 128x64 tile's
# width) on sums at least this deep: cuDNN's NHWC kernel is as fast. pix2pix u6 (256 > 64, k4 s2:
# 1,024 products per output) measured 0.97-0.99x there in four runs (H200), the one suite row
# below 1.0x, where autotune picks cuDNN too; shallower layers of that width won (1.1-1.7x).
NHWC_TF32_CUDNN_OUT = (33, 64)
NHWC_TF32_CUDNN_MIN_DEPTH = 1024


def untimed_config(fp32: bool, rows: int, phases: int, out_channels: int, sms: int) -> str:
    """The config to run without timing: the 128x64 tile up to 64 output channels per group (a
    128-wide n tile would be half padding), else the 128x128 tile unless the 128x64 tile's
    waves fill the GPU better (few rows: DCGAN's 4x4 > 8x8, pix2pix's 8x8 layers).
    `rows` per phase GEMM, `phases` GEMMs, `sms` multiprocessors. fp32 (TF32, 3xTF32) ran
    fastest on the cooperative 128x128 tile, 16-bit on the ping-pong one (H200, same
    measurements)."""
    narrow = VARIANTS[3]
    if out_channels <= 64 or rows <= 0:  # (an empty batch or output: no tiles to weigh)
        return narrow

    def fill(n_tile: int) -> float:
        tiles = phases * -(-rows // 128) * -(-out_channels // n_tile)
        return tiles / (-(-tiles // sms) * sms)

    if fill(64) > fill(128):
        return narrow
    return VARIANTS[1] if fp32 else VARIANTS[0]


FAMILY = KernelFamily(
    NAME, 7, "stride-phase GEMM on TMA + wgmma (sm_90a)",
    configs=CONFIGS, packed_weight=True, refusal=shallow_sum_refusal,
    per_activation=True)
