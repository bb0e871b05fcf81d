"""gemm_out_tile: an output-tiled stride-phase GEMM for few output channels per group (FCN's x8
up-sampling, DCGAN's 64 > 3, FSRCNN's 56 > 1): a block owns a contiguous output tile across
all column phases, so its stores are whole rows, not every stride-th element. 16-bit, TF32 and
3xTF32, any layout, compute capability >= 8.0."""

from __future__ import annotations

from typing import Optional, Tuple

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
# Output channels per group up to which gemm_out_tile is the untimed default of 16-bit layers in
# place of cuDNN (or gemm_phase where cuDNN cannot run), where its shared memory holds the layer
# (plan() asks the extension). Measured on the H100 (docs/performance/out-tile.md), 16-bit, its
# heuristic config: fcn8s.up8 (21 ch) 2.6-2.7x NCHW / 2.2x NHWC, DCGAN's 64 > 3 2.0-2.4x / 2.3-
# 2.7x, FSRCNN's 56 > 1 2.8x / 3.7x cuDNN. The grouped kernel's and gemm_kxs's measured defaults
# stay (see planner._plan_layer).
DEFAULT_MAX_CHANNELS = 32
_DEFAULT_DTYPES = (torch.float16, torch.bfloat16)
# fp32 (TF32, or 3xTF32 without it): the default from this many output channels per group (up to
# the maximum above) on layers whose stride area is at least FP32_DEFAULT_MIN_STRIDE_AREA (FCN's
# x8 up-sampling kind, where cuDNN writes a phase-major temporary). Measured on the H200
# (docs/performance/out-tile.md): fcn8s.up8 (21 ch, k16 s8) 2.9x NCHW / 3.4x NHWC cuDNN in TF32,
# 2.7-3.1x in 3xTF32 against cuDNN's fp32 kernel (3.1-3.5x on the H100). Below 8 channels TF32
# wastes most of an n8 tile and cuDNN's kernels are strong (DCGAN's 64 > 3, stride 2: 1.0-1.2x
# NCHW; FSRCNN's 56 > 1: 0.5-0.7x; 3xTF32 loses on both); dense stride-2 layers with 8-32
# channels are unmeasured: autotune candidates only.
FP32_DEFAULT_MIN_CHANNELS = 8
FP32_DEFAULT_MIN_STRIDE_AREA = 16


def is_untimed_default(dtype: torch.dtype, channels: Optional[Tuple[int, int]],
                       args: ConvTransposeArgs) -> bool:
    """Whether gemm_out_tile is a layer's untimed default (where its shared memory holds the
    layer, and in fp32 without TF32 where its 3xTF32 runs the sums): <= DEFAULT_MAX_CHANNELS
    output channels per group in 16-bit; in fp32 from FP32_DEFAULT_MIN_CHANNELS of them, on
    strides of area >= FP32_DEFAULT_MIN_STRIDE_AREA."""
    if channels is None or channels[1] > DEFAULT_MAX_CHANNELS:
        return False
    if dtype in _DEFAULT_DTYPES:
        return True
    return dtype == torch.float32 and channels[1] >= FP32_DEFAULT_MIN_CHANNELS and \
        args.stride[0] * args.stride[1] >= FP32_DEFAULT_MIN_STRIDE_AREA


def problem(dtype: torch.dtype, args: ConvTransposeArgs, out_per_group: int,
            depth: Optional[int] = None) -> Optional[str]:
    """Why gemm_out_tile cannot run a layer's dtype / output channels, or None when it can
    (fp32 strict: 3xTF32 where each output sums at least MIN_3XTF32_DEPTH products)."""
    found = tensor_core_problem(dtype, args, depth)
    if found is not None:
        return found
    if out_per_group > MAX_CHANNELS:
        return (f"{out_per_group} output channels per group (at most {MAX_CHANNELS}: "
                "its n tile holds all of a group's)")
    return None


def _refusal(dtype: torch.dtype, weight: torch.Tensor, args: ConvTransposeArgs,
             variant: str) -> Optional[str]:
    # The planner's wording (the binding would refuse wide layers too, less specifically).
    return problem(dtype, args, weight.shape[1], depth_of(weight, args))


FAMILY = KernelFamily(
    NAME, 8, "output-tiled stride-phase GEMM for <= 32 output channels per group",
    configs=CONFIGS, packed_weight=True, refusal=_refusal)
