"""gemm_col2im: one GEMM over every tap into an fp32 buffer, then col2im with the epilogue (one
group, on Hopper). Its GEMM is gemm_kxs_sm90 on the weight viewed as a 1 x 1 kernel (TF32,
16-bit: 16-bit operands write the fp32 buffer through its fp32-output kernels), or
gemm_phase_tma's 3xTF32 for fp32 without TF32, so its configs are those families' tiles."""

from __future__ import annotations

from typing import Optional

import torch

from ..arguments import ConvTransposeArgs
from . import gemm_kxs_sm90, gemm_phase_tma
from .family import Config, KernelFamily
from .precision import fp32_strict, strict_refusal

NAME = "gemm_col2im"
# gemm_kxs_sm90 tiles (the cooperative 128x256 and the ping-pong 128x128): the config index is
# the GEMM's.
CONFIGS = tuple(Config(f"{NAME}:{t}", gemm_kxs_sm90.VARIANTS.index(f"{gemm_kxs_sm90.NAME}:{t}"),
                       True) for t in ("128x256s4", "128x128s6pp"))
# ... and in fp32 without TF32: gemm_phase_tma's 3xTF32 in these tiles, where the GEMM's sums
# (input channels) are at least MIN_3XTF32_DEPTH deep; col2im then adds each output's taps in
# fp32.
STRICT_CONFIGS = tuple(
    Config(f"{NAME}:3xtf32-{t}", gemm_phase_tma.VARIANTS.index(f"{gemm_phase_tma.NAME}:{t}"),
           True) for t in ("128x128s6pp", "128x64s8pp"))
VARIANTS = tuple(c.variant for c in CONFIGS)
STRICT_VARIANTS = tuple(c.variant for c in STRICT_CONFIGS)
# Its fp32 buffer holds every tap's product of every input pixel (KH*KW/(SH*SW) times the
# output's elements): above this autotune does not try it (SimpleBaseline d3: 400 MB).
MAX_BUFFER_BYTES = 256 * 2**20


# fp32 without TF32 on Hopper, where the planner's rules leave a phase layer to cuDNN (too few
# rows per stride phase for gemm_phase_tma, or too few output channels): the 3xTF32 form is the
# untimed default on channels_last input with at least this many output channels and input
# pixels (batch x height x width). Measured on the H200 (candidates.py, suite, held-out and fresh
# layers, against cuDNN's fp32 kernels): on channels_last input 1.6-3.0x by event time and
# 1.0-2.1x by GPU time (each graph replay re-packs its weight) on pix2pix u2, Keypoint R-CNN's
# head, ENet's 64 > 16, Linknet's dec4, CenterNet's 256 > 256 at batch 1; NCHW input lost on
# small layers by GPU time (0.41-0.84x), DCGAN's g2 at batch 1 (16 pixels) lost in NCHW and by GPU
# time, WGAN-GP's 64 > 3 output layer in both (docs/performance/col2im.md).
STRICT_DEFAULT_MIN_OUT_CHANNELS = 8
STRICT_DEFAULT_MIN_PIXELS = 64  # (call_rules.strict_col2im_default reads both)


def buffer_bytes(input: torch.Tensor, weight: torch.Tensor) -> int:
    """Bytes of the fp32 buffer for a call: [N*H*W, KH*KW*Cout]."""
    pixels = input.numel() // max(1, input.shape[-3])
    return 4 * pixels * weight.shape[1] * weight.shape[2] * weight.shape[3]


def _refusal(dtype: torch.dtype, weight: torch.Tensor, args: ConvTransposeArgs,
             variant: str) -> Optional[str]:
    # Its GEMM sums over the input channels only (col2im adds the taps in fp32). Configs are per
    # mode; the binding reads the config index in the mode's list.
    found = strict_refusal(dtype, args, weight.shape[0] // args.groups)
    if found is not None:
        return found
    strict = fp32_strict(dtype, args)
    if strict and variant in VARIANTS:
        return f"fp32 without TF32 in {variant} (its 3xTF32 configs: {', '.join(STRICT_VARIANTS)})"
    if not strict and variant in STRICT_VARIANTS:
        return (f"{dtype} with TF32 allowed or 16-bit in {variant} (it is the fp32-without-TF32 "
                "form)")
    return None


FAMILY = KernelFamily(
    NAME, 9, "one GEMM over every tap into an fp32 buffer, then col2im (sm_90a)",
    configs=CONFIGS + STRICT_CONFIGS, packed_weight=True, refusal=_refusal,
    # its GEMM runs in those families' units (without a fused activation: col2im applies it)
    runs=(gemm_kxs_sm90.FAMILY, gemm_phase_tma.FAMILY))
