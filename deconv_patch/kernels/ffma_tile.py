"""ffma_tile: plain fp32 FFMA for few output channels per group with kernel == taps x stride
(k4 s2, k9 s3), dilation 1: each thread computes every stride phase of a few input-aligned
positions, so each loaded input feeds kernel-area multiply-adds; exact in every mode, any
layout."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

from ..arguments import ConvTransposeArgs
from .family import KernelFamily, configs

NAME = "ffma_tile"
# In the kernel's order (the extension's ffma_tile_config_names), "s<stride>q<rows>x<cols>o<ch>":
# each thread computes every stride phase of rows x cols input-aligned positions for that many
# output channels.
CONFIGS = configs(NAME, ("s2q2x2o3", "s2q2x2o4", "s2q1x2o4", "s2q1x2o6", "s2q1x2o9",
                         "s2q1x1o3", "s2q1x1o4", "s3q2x2o1", "s3q1x2o1", "s3q1x1o1"), False)
VARIANTS = tuple(c.variant for c in CONFIGS)
# Its domain as an autotune candidate: output channels per group. Measured forced on the H100
# (docs/performance/ffma-kernels.md, GPU time against cuDNN): 1 (FSRCNN) channel 1.4-1.5x in
# fp32 / TF32 and 4.3-4.7x in 16-bit, 3 (DCGAN's output layer) 1.6-2.3x, 17 (Keypoint R-CNN)
# 0.2-0.6x (its multiply-adds grow with the channels, cuDNN's GEMM does not); 4-8 unmeasured.
MAX_CHANNELS = 8
# Its kernels: stride -> taps per axis (built for kernel == taps x stride: k4 s2, k9 s3).
TAPS = {2: 2, 3: 3}


def fits_shape(kernel_hw: Sequence[int], stride: Sequence[int],
               dilation: Sequence[int]) -> bool:
    """Dilation 1, one stride s on both axes and kernel == taps x s on both: the kernel, stride
    and dilation a config runs."""
    return (tuple(dilation) == (1, 1) and stride[0] == stride[1]
            and kernel_hw[0] == kernel_hw[1] == TAPS.get(stride[0], 0) * stride[0])


def configs_for(kernel_hw: Sequence[int], args: ConvTransposeArgs,
                channels: Optional[Tuple[int, int]]) -> Tuple[str, ...]:
    """The configs that can run a layer, else (): known channels with <= 8 output channels per
    group and a shape the kernels run (fits_shape; a config's "s<stride>" family)."""
    if channels is None or channels[1] > MAX_CHANNELS or \
            not fits_shape(kernel_hw, args.stride, args.dilation):
        return ()
    return tuple(v for v in VARIANTS if v.startswith(f"{NAME}:s{args.stride[0]}q"))


def untimed_config(kernel_hw: Sequence[int], args: ConvTransposeArgs,
                   channels: Optional[Tuple[int, int]]) -> Optional[str]:
    """The config to run without timing (fp32, TF32 or strict, on Hopper, where the planner
    makes it the default): one input position per thread ("q1x1") for the fewest output
    channels that hold the layer's; None where no config runs the layer. Against cuDNN's
    untimed choice it measured 1.7x / 2.3x (DCGAN's 64 > 3, NCHW / channels_last) and 1.3x /
    1.4-1.5x (FSRCNN's 56 > 1; H200, benchmarks/candidates.py)."""
    for variant in configs_for(kernel_hw, args, channels):
        positions, outputs = variant.split("q", 1)[1].split("o")
        if positions == "1x1" and channels is not None and int(outputs) >= channels[1]:
            return variant
    return None


FAMILY = KernelFamily(
    NAME, 2, "fp32 FFMA over input-aligned tiles for few output channels",
    configs=CONFIGS)
