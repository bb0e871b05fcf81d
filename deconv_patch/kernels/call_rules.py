"""The rules a call's sizes and layout add to its layer's plan (planner.plan): gemm_phase_tma's
untimed tile and where it gives way to cuDNN, and the 32-bit offsets of gemm_phase and
gemm_out_tile."""

from __future__ import annotations

from typing import Optional

import torch

from ..arguments import ConvTransposeArgs
from ..layout import is_channels_last
from . import device_info, gemm_col2im, gemm_phase_tma
from .precision import fp32_strict, reduction_depth


def flops_of(input: torch.Tensor, weight: torch.Tensor) -> int:
    """Multiply-add FLOPs of a call: each input element times a group's output channels and
    the kernel's taps, two FLOPs each."""
    return 2 * input.numel() * weight.shape[1] * weight.shape[2] * weight.shape[3]


def phase_rows(input: torch.Tensor, weight: torch.Tensor, args: ConvTransposeArgs) -> int:
    """Rows of each stride-phase GEMM: the batch times the output pixels of one phase."""
    batch = input.shape[0] if input.dim() == 4 else 1
    out_h, out_w = args.output_hw(input.shape[-2:], weight.shape[-2:])
    return batch * -(-out_h // args.stride[0]) * -(-out_w // args.stride[1])


def fills_16_byte_rows(input: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the input's channels fill whole 16-byte rows, as the TMA loads of gemm_phase_tma
    (and of gemm_col2im's 3xTF32 GEMM, which is its) read them."""
    return weight.shape[0] % (16 // input.element_size()) == 0


def reads_in_place(input: torch.Tensor) -> bool:
    """Whether a family that reads 16-byte channel rows reads this input as it is: the binding
    gives it a channels_last copy of any input not already laid out so (a 1 x 1 image is both)."""
    batched = input if input.dim() == 4 else input.unsqueeze(0)
    return batched.is_contiguous(memory_format=torch.channels_last)


def strict_col2im_default(input: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether gemm_col2im's 3xTF32 form is the untimed default of a call the planner's layer
    rules left to cuDNN in fp32 without TF32: channels_last input with enough output channels
    and input pixels (gemm_col2im.STRICT_DEFAULT_*, which say where it measured faster), in
    16-byte rows."""
    pixels = input.numel() // max(1, input.shape[-3])
    return is_channels_last(input) and fills_16_byte_rows(input, weight) and \
        weight.shape[1] >= gemm_col2im.STRICT_DEFAULT_MIN_OUT_CHANNELS and \
        pixels >= gemm_col2im.STRICT_DEFAULT_MIN_PIXELS


def untimed_tma_problem(input: torch.Tensor, weight: torch.Tensor, args: ConvTransposeArgs
                         ) -> Optional[str]:
    """Why gemm_phase_tma is not this call's untimed default, or None: its TMA loads read the
    input's channels in 16-byte rows (the kernel refuses other channel counts); fp32 calls too
    small for it go to cuDNN, whose fp32 kernels win there
    (gemm_phase_tma.MIN_UNTIMED_TF32_FLOPS / MIN_UNTIMED_STRICT_ROWS, more rows for NCHW
    input, which it reads through a channels_last copy), and so do TF32 deep sums
    into 33-64 channels on channels_last input (gemm_phase_tma.NHWC_TF32_CUDNN_*)."""
    if not fills_16_byte_rows(input, weight):
        return f"{weight.shape[0]} input channels do not fill 16-byte rows (TMA)"
    if input.dtype != torch.float32:
        return None
    if fp32_strict(input.dtype, args):
        rows = phase_rows(input, weight, args)
        if reads_in_place(input):
            least, layout = gemm_phase_tma.MIN_UNTIMED_STRICT_ROWS, ""
        else:
            least, layout = gemm_phase_tma.MIN_UNTIMED_STRICT_ROWS_NCHW, ", NCHW input"
        return f"3xTF32 on {rows} rows per stride phase (< {least}{layout})" \
            if rows < least else None
    flops, least = flops_of(input, weight), gemm_phase_tma.MIN_UNTIMED_TF32_FLOPS
    if flops < least:
        return f"TF32 layer of {flops / 1e9:.2g} GFLOP (< {least / 1e9:g})"
    low, high = gemm_phase_tma.NHWC_TF32_CUDNN_OUT
    depth = reduction_depth(weight.shape[0] // args.groups, weight.shape[-2:], args)
    if is_channels_last(input) and low <= weight.shape[1] <= high and \
            depth >= gemm_phase_tma.NHWC_TF32_CUDNN_MIN_DEPTH:
        return (f"TF32 channels_last input, {weight.shape[1]} output channels per group on "
                f"{depth}-deep sums (cuDNN's NHWC kernel as fast)")
    return None


def untimed_tma_config(input: torch.Tensor, weight: torch.Tensor, args: ConvTransposeArgs
                        ) -> str:
    """gemm_phase_tma's untimed tile for this call (gemm_phase_tma.untimed_config)."""
    return gemm_phase_tma.untimed_config(
        input.dtype == torch.float32, phase_rows(input, weight, args),
        args.stride[0] * args.stride[1], weight.shape[1],
        device_info.multiprocessors(device_info.device_index(input.device)))


def phase_offsets_fit(input: torch.Tensor, weight: torch.Tensor, args: ConvTransposeArgs
                       ) -> bool:
    """Whether every element offset gemm_phase forms stays below 2^31 (it uses 32-bit math)."""
    batch = input.shape[0] if input.dim() == 4 else 1
    out_h, out_w = args.output_hw(input.shape[-2:], weight.shape[-2:])
    out_numel = batch * weight.shape[1] * args.groups * out_h * out_w
    in_extent = 1 + sum((n - 1) * abs(st) for n, st in zip(input.shape, input.stride()))
    limit = 2**31 - 2**20  # margin for tile overrun before masking
    return max(out_numel, in_extent, input.numel(), weight.numel() * 2) < limit
