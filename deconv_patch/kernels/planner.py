"""Chooses which implementation runs a conv_transpose2d call: the order of preference among
the kernel families (deconv_patch/kernels/: one entry per family, its configs and its own
limits; docs/kernels.md says what each computes and where it wins) and the reason for each
choice.

fp32 without TF32 runs 3xTF32 on gemm_kxs, gemm_out_tile and, on Hopper, gemm_phase_tma (x =
hi + lo, three TF32 products per multiply): fp32-accurate where each output sums at least
MIN_3XTF32_DEPTH products, so shallower sums stay on cuDNN. gemm_phase has the same mode (forced
only: its error reached 1.11x the bound).

Policy: a variant of ours runs where it is faster than PyTorch; elsewhere PyTorch runs and the
plan says why. Measured on the H100 (docs/performance/layer-suite.md), the direct kernel
loses to cuDNN on every layer of the benchmark suite, so it runs by default only where PyTorch
cannot use cuDNN (output_padding >= stride, cuDNN disabled) and falls back to its slow native
kernel.
`use_variant("direct")` forces a variant for the calls inside it (tests, benchmarks).

Every plan carries a human-readable reason, so a fallback is never silent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Tuple

import torch

from .. import kernels
from ..arguments import ConvTransposeArgs, fits_int32
from . import (call_rules, direct, direct_backward, ffma_tile, forward_in_training, gemm_col2im,
               gemm_kxs, gemm_kxs_sm90, gemm_out_tile, gemm_phase, gemm_phase_sm90, gemm_phase_tma,
               grouped, precision)
from .device_info import device_capability, device_index, is_sm90
# (use_variant and out_tile_fit_assumed are the planner's API too: planner.use_variant(...))
from .plan_context import (assumed_out_tile_fit, forced_variant,  # noqa: F401
                           forced_variant_var, out_tile_fit_assumed, use_variant)
from .precision import (conv_tf32, fp32_strict, matmul_tf32, reduction_depth,  # noqa: F401
                        tensor_core_problem, tf32_allowed)
from ..layout import cuda_output_channels_last, is_channels_last

KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# The families' names and configs, from their registry entries (deconv_patch/kernels/).
GEMM_KXS = gemm_kxs.NAME
GEMM_PHASE = gemm_phase.NAME
GEMM_PHASE_SM90 = gemm_phase_sm90.NAME
GEMM_KXS_SM90 = gemm_kxs_sm90.NAME
GEMM_PHASE_TMA = gemm_phase_tma.NAME
GEMM_OUT_TILE = gemm_out_tile.NAME
GEMM_COL2IM = gemm_col2im.NAME
GROUPED = grouped.NAME
FFMA_TILE = ffma_tile.NAME
DIRECT = direct.NAME
ATEN = kernels.ATEN
DIRECT_BACKWARD = direct_backward.NAME  # the backward kernels (not forward variants)
TILED_BACKWARD = direct_backward.TILED_NAME
MMA_BACKWARD = direct_backward.MMA_NAME
PHASE_TMA_BACKWARD = direct_backward.PHASE_TMA_NAME
PHASE_TILES = gemm_phase.TILES
PHASE_CONFIGS = gemm_phase.VARIANTS
KXS_TAP_MAJOR = gemm_kxs.TAP_MAJOR
SM90_CONFIGS = gemm_phase_sm90.VARIANTS
KXS_SM90_CONFIGS = gemm_kxs_sm90.VARIANTS
KXS_SM90_AREA_CONFIGS = gemm_kxs_sm90.AREA_VARIANTS
KXS_SM90_WINNER = gemm_kxs_sm90.WINNER
KXS_SM90_TF32_WINNER = gemm_kxs_sm90.TF32_WINNER
KXS_SM90_NCHW_WINNER = gemm_kxs_sm90.NCHW_WINNER
PHASE_TMA_CONFIGS = gemm_phase_tma.VARIANTS
OUT_TILE_CONFIGS = gemm_out_tile.VARIANTS
COL2IM_CONFIGS = gemm_col2im.VARIANTS
COL2IM_3XTF32_CONFIGS = gemm_col2im.STRICT_VARIANTS
FFMA_TILE_CONFIGS = ffma_tile.VARIANTS
NAMED_VARIANTS = kernels.NAMED_VARIANTS
MIN_3XTF32_DEPTH = precision.MIN_3XTF32_DEPTH
_GEMM_TILE = 128
_MIN_PHASE_CHANNELS = 16  # per group, in and out: below this tensor-core tiles are mostly padding
_MIN_GEMM_OUTPUT_BYTES = 4 * 2**20
_MAX_COL2IM_BYTES = gemm_col2im.MAX_BUFFER_BYTES
_MAX_GROUPED_CHANNELS = grouped.MAX_DEFAULT_CHANNELS
# Above this stride area (FCN's x8 up-sampling: 64 phases) the grouped kernel is not the default.
_MAX_GROUPED_STRIDE_AREA = 16
_MAX_GROUPED_CANDIDATE = grouped.MAX_CANDIDATE_CHANNELS
_MIN_STRICT_TMA_OUT = gemm_phase_tma.MIN_STRICT_OUT
_MIN_UNTIMED_TMA_OUT = gemm_phase_tma.MIN_UNTIMED_OUT
_MAX_UNTIMED_TMA_STRIDE_AREA = gemm_phase_tma.MAX_UNTIMED_STRIDE_AREA
# gemm_phase_tma's untimed default as _plan_layer names it; plan() then picks the tile for the
# input's size (gemm_phase_tma.untimed_config).
PHASE_TMA_UNTIMED = gemm_phase_tma.VARIANTS[3]
_MAX_OUT_TILE_CHANNELS = gemm_out_tile.MAX_CHANNELS
@dataclass(frozen=True)
class Plan:
    """The implementation chosen for one call and why."""

    variant: str
    reason: str
    fallback: bool = False  # True when PyTorch runs because our kernels cannot (not by choice)
    candidates: Tuple[str, ...] = ()  # variants autotune may time for this call (incl. variant)

    @property
    def uses_kernel(self) -> bool:
        return self.variant != ATEN


is_variant = kernels.is_variant
split_variant = kernels.split_variant
reads_packed_weight = kernels.reads_packed_weight


def backend_flags() -> Tuple[bool, ...]:
    """The backend settings a plan depends on, for the plan caches' keys (the module's and the
    op's; cuda/binding's C++ key and armed path hold the same): cuDNN enabled, the convolution
    and cuBLAS TF32 settings (precision.tf32_allowed picks one per call), deterministic mode
    (which of them a dilated layer follows) and cudnn.benchmark. Read through torch._C's
    getters, ~10x cheaper than torch.backends' properties: the module asks on every call."""
    return (torch._C._get_cudnn_enabled(), conv_tf32(), matmul_tf32(),
            torch._C._get_deterministic_algorithms(), torch._C._get_cudnn_deterministic(),
            torch._C._get_cudnn_benchmark())


def device_support(device: torch.device, dtype: torch.dtype) -> Optional[str]:
    """Why our kernels cannot run for this device/dtype, or None when they can."""
    if device.type != "cuda":
        return f"{device.type} tensors run on PyTorch (deconv_patch kernels are CUDA-only)"
    if dtype not in KERNEL_DTYPES:
        return f"{dtype} runs on PyTorch (kernels cover float32, float16, bfloat16)"
    if device_capability(device) < (8, 0):
        return "GPU older than compute capability 8.0 runs on PyTorch"
    return None


def plan_layer(device: torch.device, dtype: torch.dtype, kernel_hw: Sequence[int],
               args: ConvTransposeArgs, channels: Optional[Tuple[int, int]] = None,
               out_tile_default: bool = True) -> Plan:
    """The variant for a layer's hyperparameters on a device/dtype (input-size independent).

    `channels` = (in, out) channels per group; when given, the stride-phase GEMMs are ruled
    out below 16 input channels (a k step of their tensor-core tiles would be mostly padding)
    and are no default below 16 output channels (only an autotune candidate there), grouped
    layers with few channels per group get the grouped kernel, layers with <= 32 output channels
    per group list gemm_out_tile's configs, and fp32 without TF32 may use 3xTF32."""
    chosen = _plan_layer(device, dtype, kernel_hw, args, channels, out_tile_default)
    phase_listed = PHASE_CONFIGS[0] in chosen.candidates or \
        PHASE_TMA_CONFIGS[0] in chosen.candidates
    if channels is None or min(channels) >= _MIN_PHASE_CHANNELS or not phase_listed or \
            forced_variant() is not None:
        return chosen
    why = f"{channels[0]} in / {channels[1]} out channels per group: too few for tensor-core tiles"
    # Few output channels pad the n tile only (3 of 32 columns for DCGAN's 64 > 3 output layer),
    # while cuDNN runs such layers 20-80x above the roofline floor (docs/performance/roofline.md):
    # autotune times the phase GEMMs there, but they are never the untimed default.
    # gemm_out_tile stays: few output channels are what it is for.
    return _without_phase(chosen, why, keep_candidates=channels[0] >= _MIN_PHASE_CHANNELS)


def _without_phase(chosen: Plan, why: str, keep_candidates: bool = False,
                   out_tile: bool = False) -> Plan:
    """`chosen` with the stride-phase GEMMs (gemm_phase, gemm_phase_sm90, gemm_phase_tma, and
    with out_tile gemm_out_tile) ruled out: gone from the candidates (unless keep_candidates)
    and, if one was the choice, replaced by direct where that is a candidate (PyTorch cannot use
    cuDNN) else PyTorch. gemm_out_tile is kept unless out_tile: its tiles hold few channels."""
    phase = PHASE_CONFIGS + SM90_CONFIGS + PHASE_TMA_CONFIGS + (OUT_TILE_CONFIGS if out_tile
                                                                  else ())
    kernels = (GEMM_PHASE, GEMM_PHASE_TMA) + ((GEMM_OUT_TILE,) if out_tile else ())
    rest = chosen.candidates if keep_candidates else \
        tuple(v for v in chosen.candidates if v not in phase)
    if split_variant(chosen.variant)[0] not in kernels:
        return Plan(chosen.variant, chosen.reason, candidates=rest)
    fallback = DIRECT if DIRECT in rest else ATEN
    return Plan(fallback, f"{why}; {fallback}", candidates=rest)


def _plan_layer(device: torch.device, dtype: torch.dtype, kernel_hw: Sequence[int],
                args: ConvTransposeArgs, channels: Optional[Tuple[int, int]],
                out_tile_default: bool = True) -> Plan:
    reason = device_support(device, dtype)
    if reason is not None:
        return Plan(ATEN, reason, fallback=True)
    forced = forced_variant()
    if forced is not None:
        return Plan(forced, "forced by deconv_patch.use_variant")
    depth = None if channels is None else reduction_depth(channels[0], kernel_hw, args)
    # gemm_out_tile replaces cuDNN / gemm_phase as the untimed default (plan() may turn it off)
    out_tile_first = out_tile_default and gemm_out_tile.is_untimed_default(dtype, channels, args)
    # gemm_out_tile (<= 32 output channels per group; 16-bit, TF32, 3xTF32 on deep sums): an
    # autotune candidate wherever it runs; the untimed default by gemm_out_tile.is_untimed_default.
    out_tile = out_tile_configs(device, dtype, args, channels, depth)
    ffma = ffma_tile_configs(kernel_hw, args, channels)
    if _grouped_kernel_layer(args.groups, channels):
        # Measured on the H100 (docs/performance/ffma-kernels.md): 1.4-10x cuDNN on the
        # suite's depthwise and grouped layers; FFMA, so fp32 without TF32 stays exact. The
        # exception: FCN's x8 up-sampling (k16 s8, 64 phases), 0.4-1.3x, so cuDNN there unless
        # autotune disagrees.
        why = f"{channels[0]} in / {channels[1]} out channels per group"
        if args.stride[0] * args.stride[1] > _MAX_GROUPED_STRIDE_AREA:
            return Plan(
                ATEN, f"{why}, stride area > 16: cuDNN unless autotune times the grouped kernel "
                "faster", candidates=(GROUPED, *out_tile, *ffma, ATEN))
        # (the grouped kernel's measured wins stay the default; gemm_out_tile is timed there)
        return Plan(GROUPED, f"{why}: register-tiled grouped kernel",
                    candidates=(GROUPED, *out_tile, *ffma, ATEN))
    # The grouped kernel (plain fp32 FFMA, so exact in every mode) also covers dense layers with
    # few channels (DCGAN's 64 > 3 output layer, FSRCNN's 56 > 1): an autotune candidate there,
    # beside ffma_tile (also FFMA) where its stride and kernel fit.
    grouped = ((GROUPED,) if channels is not None and
               max(channels) <= _MAX_GROUPED_CANDIDATE else ()) + ffma
    # The TMA + wgmma kernels (Hopper; 16-bit, or fp32 with TF32 allowed). gemm_phase_tma also
    # runs fp32 without TF32 as 3xTF32 on sums of >= MIN_3XTF32_DEPTH products (its error:
    # benchmarks/strict_error_scan.py, docs/performance/fp32-strict.md): an autotune candidate.
    strict = fp32_strict(dtype, args)
    hopper = is_sm90(device) and not strict
    tma = PHASE_TMA_CONFIGS if is_sm90(device) and depth is not None and \
        tensor_core_problem(dtype, args, depth) is None else ()
    if gemm_kxs_problem(dtype, kernel_hw, args, depth) is None:
        how = "3xTF32 " if strict else ""
        wgmma = KXS_SM90_CONFIGS if hopper and args.groups == 1 and \
            not any(args.output_padding) else tma
        # (gemm_kxs stays the default even where gemm_out_tile would be: plan() picks among its
        # measured per-layout configs; gemm_out_tile is timed beside them.)
        return Plan(GEMM_KXS, f"kernel == stride: {how}tensor-core GEMM with scatter epilogue",
                    candidates=(GEMM_KXS, KXS_TAP_MAJOR, *wgmma, *out_tile, *grouped, ATEN))
    # gemm_phase keeps fp32 without TF32 off 3xTF32 (depth None): on deep sums its error still
    # reached 1.11x the tests' bound in benchmarks/strict_error_scan.py (gemm_kxs: 0.58x).
    tensor_cores = tensor_core_problem(dtype, args) is None
    # gemm_col2im (TF32 or 16-bit on Hopper, one group): an autotune candidate. Measured with
    # PyTorch's ops (benchmarks/fold_probe.py, H100) its GEMM alone runs Keypoint R-CNN's
    # 17-channel head in 51 us (TF32) / 15 us (bf16) against the phase GEMMs' 170 / 70-93 and
    # cuDNN's 262 / 107, pix2pix.u2 in 23 us against 49 (TF32).
    col2im = COL2IM_CONFIGS if hopper and args.groups == 1 else ()
    # ... and its 3xTF32 form for fp32 without TF32, where the GEMM's sums (the input channels)
    # are deep enough: Keypoint R-CNN's head, where every other kernel of ours lost to cuDNN
    # (docs/performance/col2im.md).
    if is_sm90(device) and strict and args.groups == 1 and channels is not None \
            and tensor_core_problem(dtype, args, channels[0]) is None:
        col2im = COL2IM_3XTF32_CONFIGS
    phase = (*PHASE_CONFIGS, *(SM90_CONFIGS if is_sm90(device) and dtype != torch.float32
                               else ()), *tma, *col2im)
    no_cudnn = ("cuDNN cannot run output_padding >= stride" if args.without_cudnn
                else "cuDNN is disabled" if not torch.backends.cudnn.enabled else None)
    if no_cudnn is not None:
        # PyTorch falls back to its slow native kernel here: 8-11x slower than gemm_phase and
        # ~2x slower than direct on the H100 (docs/performance/phase-gemms.md).
        if tensor_cores:
            return _out_tile_default(Plan(
                GEMM_PHASE, f"{no_cudnn}; stride-phase implicit GEMM",
                candidates=(*phase, *out_tile, DIRECT, *grouped, ATEN)), channels, out_tile_first)
        candidates = (DIRECT, *tma, *col2im, *out_tile, *grouped, ATEN)
        if tma and channels is not None and min(channels) >= _MIN_PHASE_CHANNELS and \
                channels[1] >= _MIN_STRICT_TMA_OUT:
            # fp32 strict on Hopper: its 3xTF32 measured 12-13x PyTorch's native kernel on the
            # suite's output_padding >= stride layer, direct 1.1-1.9x (H200, candidates.py).
            return Plan(PHASE_TMA_UNTIMED, f"{no_cudnn}; stride-phase TMA + wgmma GEMM in "
                        "3xTF32", candidates=candidates)
        return Plan(DIRECT, f"{no_cudnn}; direct kernel", candidates=candidates)
    if tensor_cores:
        candidates = (*phase, *out_tile, *grouped, ATEN)
        if tma and channels is not None and channels[1] >= _MIN_UNTIMED_TMA_OUT and \
                args.stride[0] * args.stride[1] <= _MAX_UNTIMED_TMA_STRIDE_AREA:
            # Hopper: against cuDNN's untimed choice (cudnn.benchmark off) gemm_phase_tma won on
            # the suite's such layers (docs/performance/autotune.md); plan() sizes its tile.
            return _out_tile_default(Plan(
                PHASE_TMA_UNTIMED, "stride-phase TMA + wgmma GEMM", candidates=candidates),
                channels, out_tile_first)
        ffma_default = _untimed_ffma(device, dtype, kernel_hw, args, channels, out_tile_first)
        if ffma_default is not None:
            return Plan(ffma_default, _FFMA_REASON, candidates=candidates)
        # Elsewhere (measured on the H100, docs/performance/phase-gemms.md): gemm_phase ranges
        # 0.4-1.5x of cuDNN's sm90 wgmma kernels across the suite with no size rule separating
        # wins from losses, so it runs where autotune (torch.backends.cudnn.benchmark) timed it
        # faster.
        return _out_tile_default(Plan(
            ATEN, "cuDNN unless autotune times gemm_phase faster (cudnn.benchmark)",
            candidates=candidates), channels, out_tile_first)
    if tma and channels is not None and min(channels) >= _MIN_PHASE_CHANNELS and \
            channels[1] >= _MIN_STRICT_TMA_OUT:
        # Measured on the H100 (docs/performance/phase-gemms.md, GPU time, each config forced):
        # 1.1-4.1x cuDNN's FFMA on the suite's fp32-strict phase layers with >= 32 output
        # channels per group (3 TF32 MMAs a product still outrun fp32 FFMA 2.7x); Keypoint
        # R-CNN's 17 (padded to 64) lose, 0.5-0.8x.
        return Plan(GEMM_PHASE_TMA, "fp32 without TF32 on Hopper: stride-phase TMA + wgmma "
                    "GEMM in 3xTF32", candidates=(*tma, *col2im, *out_tile, *grouped, ATEN))
    ffma_default = _untimed_ffma(device, dtype, kernel_hw, args, channels, out_tile_first)
    if ffma_default is not None:
        return Plan(ffma_default, _FFMA_REASON, candidates=(*tma, *col2im, *out_tile, *grouped,
                                                            ATEN))
    # (gemm_out_tile's 3xTF32, for <= 32 output channels per group: the untimed default where
    # gemm_out_tile.is_untimed_default says, FCN's x8 kind, 2.8-3.5x cuDNN's FFMA; it loses on
    # DCGAN's 64 > 3 and FSRCNN's 56 > 1, docs/performance/out-tile.md. Elsewhere plan() may
    # give the call gemm_col2im's 3xTF32.)
    if tma or out_tile:
        return _out_tile_default(Plan(
            ATEN, "fp32 without TF32: cuDNN unless autotune times a 3xTF32 kernel faster "
            "(cudnn.benchmark)", candidates=(*tma, *col2im, *out_tile, *grouped, ATEN)),
            channels, out_tile_first)
    return Plan(ATEN, f"fp32 without TF32: cuDNN (3xTF32 only on k == stride layers, on "
                f"Hopper, and for <= {_MAX_OUT_TILE_CHANNELS} output channels per group, whose "
                f"outputs sum >= {MIN_3XTF32_DEPTH} products)",
                candidates=(*grouped, ATEN) if grouped else ())


ffma_tile_configs = ffma_tile.configs_for
_FFMA_REASON = "few output channels per group: FFMA tile kernel"


def _untimed_ffma(device: torch.device, dtype: torch.dtype, kernel_hw: Sequence[int],
                  args: ConvTransposeArgs, channels: Optional[Tuple[int, int]],
                  out_tile_first: bool) -> Optional[str]:
    """ffma_tile's untimed default: fp32 (TF32 or strict: its FFMA is exact either way) on
    Hopper, <= 8 output channels per group, where gemm_out_tile is not the default. Against
    cuDNN's untimed choice it measured 1.3-2.3x on DCGAN's 64 > 3 and FSRCNN's 56 > 1 in both
    (H200, benchmarks/candidates.py; ffma_tile.untimed_config)."""
    if dtype != torch.float32 or out_tile_first or not is_sm90(device):
        return None
    return ffma_tile.untimed_config(kernel_hw, args, channels)


def out_tile_configs(device: torch.device, dtype: torch.dtype, args: ConvTransposeArgs,
                     channels: Optional[Tuple[int, int]],
                     depth: Optional[int] = None) -> Tuple[str, ...]:
    """gemm_out_tile's configs where it can run a layer, else (): known channels with <= 32
    output channels per group (its n tile holds a group's every output channel), compute
    capability >= 8.0 (mma.sync), and 16-bit, TF32, or fp32 strict (3xTF32) on sums of at
    least MIN_3XTF32_DEPTH products (`depth`, unknown = not)."""
    if channels is None or out_tile_problem(dtype, args, channels[1], depth) is not None or \
            device_capability(device) < (8, 0):
        return ()
    return OUT_TILE_CONFIGS


out_tile_problem = gemm_out_tile.problem


def _out_tile_default(chosen: Plan, channels: Optional[Tuple[int, int]], first: bool) -> Plan:
    """`chosen` with gemm_out_tile (config -1: the kernel's heuristic) as the untimed default
    where `first` (gemm_out_tile.is_untimed_default, unless plan() turned it off) and it is a
    candidate."""
    if not first or channels is None or OUT_TILE_CONFIGS[0] not in chosen.candidates:
        return chosen
    return Plan(GEMM_OUT_TILE, f"{channels[1]} out channels per group: output-tiled stride-phase "
                "GEMM (whole-row stores)", candidates=chosen.candidates)


gemm_kxs_problem = gemm_kxs.problem


def may_use_kernel(device: torch.device, dtype: torch.dtype, kernel_hw: Sequence[int],
                   args: ConvTransposeArgs, channels: Optional[Tuple[int, int]] = None) -> bool:
    """Whether any kernel of ours could run this layer: plan_layer's rules without the
    context-variable and per-GPU lookups, so torch.compile can trace it (graph-time decision).
    `channels` = (in, out) channels per group, when known."""
    if device.type != "cuda" or dtype not in KERNEL_DTYPES:
        return False
    depth = None if channels is None else reduction_depth(channels[0], kernel_hw, args)
    return (gemm_kxs_problem(dtype, kernel_hw, args, depth) is None
            or _grouped_kernel_layer(args.groups, channels)
            or gemm_out_tile.is_untimed_default(dtype, channels, args)
            or any(op >= s for op, s in zip(args.output_padding, args.stride))
            or not torch.backends.cudnn.enabled)


# The explicit cache of gemm_out_tile's shared-memory fit per (device, dtype, weight shape,
# hyperparameters): asked of the extension once per layer geometry.
_OUT_TILE_FITS: Dict[Tuple[object, ...], bool] = {}


def _out_tile_fits(weight: torch.Tensor, args: ConvTransposeArgs) -> bool:
    """Whether gemm_out_tile's smallest tile's shared memory holds this layer's weights at once
    on the weight's device, as TF32 or 16-bit operands. In fp32 without TF32 its 3xTF32 packed
    weight is twice as large and the kernel loops over channel blocks where that does not fit,
    which still measured 2.9-3.1x cuDNN's fp32 kernel on FCN's x8 layer (H200, candidates.py):
    the fit of the TF32 form decides there too."""
    index = device_index(weight.device)
    tf32 = weight.dtype == torch.float32  # (so the key's dtype decides it)
    key = (index, weight.dtype, tuple(weight.shape), args)
    fits = assumed_out_tile_fit()
    if fits is None:
        fits = _OUT_TILE_FITS.get(key)
    if fits is None:
        from .extension import load_family_any  # the binding: the layer below the planner
        try:
            # Sizes and the dtype's name, not the tensor: planning reads no tensor data. (Every
            # unit of the family answers alike.)
            units = gemm_out_tile.FAMILY.units_for("none", weight.dtype)
            fits = bool(load_family_any(gemm_out_tile.NAME, units).weight_fits(
                gemm_out_tile.FAMILY.code, index, str(weight.dtype).replace("torch.", ""),
                list(weight.shape), list(args.stride), list(args.padding), list(args.dilation),
                args.groups, tf32))
        except (RuntimeError, AttributeError):  # an extension that cannot answer: not a default
            fits = False
        _OUT_TILE_FITS[key] = fits
    return fits


@dataclass(frozen=True)
class BackwardPlan:
    """Who computes a recorded call's input and weight gradients (the bias's is ATen's)."""

    grad_input: Plan
    weight_grad: Plan


def backward_plan(device: torch.device, dtype: torch.dtype, weight_shape: Sequence[int],
                  args: ConvTransposeArgs, channels_last: bool) -> BackwardPlan:
    """The backward of a call recorded on a kernel of ours (`kernels_in_training`): the direct,
    tiled or mma backward kernels (DIRECT_BACKWARD, TILED_BACKWARD, MMA_BACKWARD) or ATen's, per
    gradient, and why. `channels_last`: the call's input and output are channels_last."""
    why = device_support(device, dtype)
    if why is not None:
        aten = Plan(ATEN, why, fallback=True)
        return BackwardPlan(aten, aten)

    def chosen(kernel: Optional[Tuple[str, str]], gradient: str) -> Plan:
        if kernel is not None:
            return Plan(*kernel)
        return Plan(ATEN, f"ATen's {gradient}: the backward kernels measured slower here")

    return BackwardPlan(
        chosen(direct_backward.grad_input_kernel(weight_shape, args, dtype, channels_last,
                                                 hopper=is_sm90(device)),
               "input gradient"),
        chosen(direct_backward.weight_grad_kernel(weight_shape, args, dtype), "weight gradient"))


def trains_on_kernel(variant: str, dtype: torch.dtype, args: ConvTransposeArgs,
                     weight_shape: Sequence[int], hopper: bool = False,
                     call: Optional[Tuple[Sequence[int], bool]] = None) -> bool:
    """Whether a call autograd records runs the planned `variant` when the module leaves it to us
    (kernels_in_training=None), from what measured faster in training, forward and planned
    backward together (docs/performance/training.md):
    * the grouped kernel (depthwise 2.0-2.2x, 16 channels per group 1.2x). It computes in fp32
      FMA, so TF32 does not touch the gradients, and reads the weight as it is, so an optimizer
      step costs it no repack;
    * any kernel of ours on a layer cuDNN has no kernel for (output_padding >= stride), where
      PyTorch's forward and backward are its native im2col kernels: in 16-bit, and in fp32
      where their cuBLAS GEMMs are fp32 (fp32_strict: TF32 off in cuBLAS, PyTorch's default),
      our kernels then at fp32's precision too;
    * on a layer without groups with a few output channels and many input channels
      (direct_backward.few_output_channels), in 16-bit: any kernel of ours, both gradients on
      the tensor-core backward kernels;
    * on Hopper (`hopper`) in fp32 without TF32, a layer whose input gradient gemm_phase_tma's
      kernel takes (direct_backward.strict_input_gradient_on_phase_tma: one group, 3xTF32):
      any kernel of ours (DCGAN's step 1.70x), where the call (`call`: the input's shape and
      whether it is channels_last; None: not known) repays that gradient's host work
      (direct_backward.strict_input_gradient_repays_host);
    * other layers in TF32 and 16-bit: our forward with ATen's backward, where the call repays
      the weight's re-pack and the recorded node's host work (forward_in_training.repays).
    The few-output layers in fp32 with TF32 allowed (an FFMA forward with the 3xTF32 weight
    gradient) stay PyTorch's: the steps of models with such a layer measured slower."""
    if variant == GROUPED:
        return True
    if variant == ATEN:
        return False
    if args.without_cudnn:
        return dtype != torch.float32 or fp32_strict(dtype, args)
    if hopper and direct_backward.strict_input_gradient_on_phase_tma(weight_shape, args, dtype):
        return call is None or direct_backward.strict_input_gradient_repays_host(
            weight_shape, *call)
    if direct_backward.few_output_channels(weight_shape, args):
        return dtype in direct_backward.SIXTEEN_BIT
    return forward_in_training.repays(dtype, args, weight_shape, call)


@dataclass(frozen=True)
class TrainingPrefilter:
    """What a layer's hyperparameters say about which of its recorded calls may train on a
    kernel of ours (trains_on_kernel for some call of it), worked out once per layer: every
    recorded call asks (may_train), before any planning, so that the others go to PyTorch's
    convolution at the cost of nn.ConvTranspose2d's call. Per kind of call, the least
    multiply-adds a call needs (0: any call; None: none)."""

    args: ConvTransposeArgs
    sixteen_bit: Optional[int]  # fp16 / bf16 calls (fp32 ones under CUDA autocast among them)
    tf32: Optional[int]  # fp32 calls where PyTorch's computation may use TF32 (tf32_allowed)
    strict: Optional[int]  # fp32 calls without TF32, on devices strict_on_hopper does not cover
    strict_on_hopper: bool  # gemm_phase_tma's input gradient: such a call may, on Hopper
    macs_per_element: int  # a call's multiply-adds per input element (outputs per group x taps)
    # fp32 calls outside autocast whatever the TF32 setting and the device (derived): below
    # it may_train answers without reading either
    fp32_floor: Optional[int] = field(init=False)

    def __post_init__(self) -> None:
        sized = [least for least in (self.tf32, self.strict) if least is not None]
        object.__setattr__(self, "fp32_floor",
                           0 if self.strict_on_hopper else min(sized) if sized else None)

    @staticmethod
    def for_layer(in_channels: int, out_channels: int, kernel_size: Sequence[int],
                  args: ConvTransposeArgs) -> "TrainingPrefilter":
        groups, stride = args.groups, args.stride
        macs = math.prod((out_channels // groups, *kernel_size))
        if _trains_on_grouped_kernel(in_channels, out_channels, groups, stride):
            return TrainingPrefilter(args, 0, 0, 0, False, macs)  # (whatever the dtype)
        # ATen's native GEMMs (no cuDNN kernel) follow cuBLAS's TF32 setting: fp32 without
        # TF32 there, any call; with TF32, none, as for the few-output layers (trains_on_kernel)
        no_cudnn = args.without_cudnn
        few = direct_backward.few_output_layer(in_channels, out_channels, groups)
        kernel_is_stride = forward_in_training.kernel_is_stride(kernel_size, args)
        return TrainingPrefilter(
            args,
            0 if no_cudnn or few else forward_in_training.least_macs(
                torch.bfloat16, False, kernel_is_stride),
            None if no_cudnn or few else forward_in_training.least_macs(
                torch.float32, True, kernel_is_stride),
            0 if no_cudnn else None,
            not no_cudnn and direct_backward.strict_phase_tma_layer(out_channels, kernel_size,
                                                                     groups, stride),
            macs)

    def least_macs(self, dtype: torch.dtype,
                   device: Optional[torch.device] = None) -> Optional[int]:
        """None where no call of the input's `dtype` (on `device`; None: some device) may train
        on ours, else the multiply-adds a call needs (0: any call). (Under CUDA autocast a
        float32 input's call runs in autocast's dtype.)"""
        if dtype == torch.float32 and _any_autocast() and torch.is_autocast_enabled("cuda"):
            dtype = torch.get_autocast_dtype("cuda")
        if dtype == torch.float32:
            if tf32_allowed(self.args):  # (one read of the backend flags)
                return self.tf32
            if self.strict_on_hopper and (device is None or hopper_device(device)):
                return 0
            return self.strict
        return self.sixteen_bit if dtype in direct_backward.SIXTEEN_BIT else None

    def may_train(self, input: torch.Tensor) -> bool:
        """Whether this recorded call may train on a kernel of ours (least_macs, with the device
        and the TF32 setting read only where they decide)."""
        dtype = input.dtype
        if dtype == torch.float32 and _any_autocast() and torch.is_autocast_enabled("cuda"):
            dtype = torch.get_autocast_dtype("cuda")
        if dtype == torch.float32:
            floor = self.fp32_floor
            if floor is None:
                return False
            macs = input.numel() * self.macs_per_element
            if macs < floor:  # (the TF32 setting is read only where it decides)
                return False
            if tf32_allowed(self.args):
                least = self.tf32
            elif self.strict_on_hopper and hopper_device(input.device):
                return True
            else:
                least = self.strict
            return least is not None and macs >= least
        least = self.sixteen_bit if dtype in direct_backward.SIXTEEN_BIT else None
        return least is not None and (
            least == 0 or input.numel() * self.macs_per_element >= least)


# Any autocast at all (one C call; torch.is_autocast_enabled("cuda") parses its device string),
# where torch has the getter.
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def hopper_device(device: torch.device) -> bool:
    """A CUDA device of compute capability 9.0, where gemm_phase_tma's kernels run (False off
    CUDA)."""
    return device.type == "cuda" and is_sm90(device)


def trains_in_compiled_graphs(device: torch.device, dtype: torch.dtype, args: ConvTransposeArgs,
                              in_channels: int, out_channels: int) -> bool:
    """Whether a training graph (torch.compile of a step whose calls autograd records) calls our
    op for a layer rather than PyTorch's convolution (graph-time decision, traceable): where
    every recorded eager call trains on the grouped kernel, whatever the call's size, and
    without autotune (which may time another candidate in). The grouped kernel reads the weight
    as it is, so an optimizer step costs the op no re-pack. Other layers' recorded calls train on
    ours by size, or on a packed weight the op would re-pack through Python after every
    optimizer step; their graphs keep PyTorch's convolution, as do those of kernels cuDNN's
    settings or the dtype keep off (docs/performance/training.md#compiled-training-steps)."""
    return device.type == "cuda" and dtype in KERNEL_DTYPES and \
        not torch.backends.cudnn.benchmark and \
        _trains_on_grouped_kernel(in_channels, out_channels, args.groups, args.stride)


def _trains_on_grouped_kernel(in_channels: int, out_channels: int, groups: int,
                              stride: Sequence[int]) -> bool:
    """A layer the grouped kernel trains by default, whatever the dtype."""
    return _grouped_kernel_layer(groups, (in_channels // groups, out_channels // groups)) and \
        stride[0] * stride[1] <= _MAX_GROUPED_STRIDE_AREA


def _grouped_kernel_layer(groups: int, channels: Optional[Tuple[int, int]]) -> bool:
    """A depthwise or grouped layer of the grouped kernel's home ground (`channels`: in and out
    per group, when known)."""
    return channels is not None and groups > 1 and max(channels) <= _MAX_GROUPED_CHANNELS


def plan(input: torch.Tensor, weight: torch.Tensor, args: ConvTransposeArgs) -> Plan:
    """The variant for this call. Inputs are already validated (see arguments.find_problem).
    Planned for the arguments the kernels run with (ConvTransposeArgs.kernel_view)."""
    view = args.kernel_view(input.shape[-2:], weight.shape[-2:])
    latent = view is not args  # a 1 x 1 input run as k == stride
    args = view
    if input.device.type == "cuda" and not fits_int32(input, weight, args):
        return Plan(ATEN, "a size or hyperparameter exceeds 32 bits; runs on PyTorch", True)
    if input.dtype == torch.float32 and conv_tf32() != matmul_tf32() and \
            precision.cudnn_keeps_dilated_channels_last(args, input, weight):
        # Our kernels would follow cuBLAS's TF32 setting here (tf32_allowed answers this case
        # for every layout), PyTorch's call the convolution one: not the same precision.
        return Plan(ATEN, "deterministic mode, dilated, channels_last: cuDNN runs this call at "
                    "the convolution TF32 setting, which differs from cuBLAS's")
    channels = (weight.shape[0] // args.groups, weight.shape[1])
    chosen = plan_layer(input.device, input.dtype, weight.shape[-2:], args, channels)
    if chosen.variant == GEMM_OUT_TILE and forced_variant() is None and \
            not _out_tile_fits(weight, args):
        # Its smallest tile's shared memory cannot hold the layer's weights at once (e.g. 512 >
        # 17 channels): the plan it replaced. (The kernel then loops over channel blocks, which
        # measured slower than gemm_phase_tma there: an autotune candidate only.)
        chosen = plan_layer(input.device, input.dtype, weight.shape[-2:], args, channels,
                            out_tile_default=False)
        chosen = Plan(chosen.variant, f"{chosen.reason} (gemm_out_tile: its shared memory "
                      "cannot hold this layer)", chosen.fallback, chosen.candidates)
    if chosen.variant == GEMM_KXS and forced_variant() is None:
        x = input if input.dim() == 4 else input.unsqueeze(0)
        out_hw = args.output_hw(x.shape[-2:], weight.shape[-2:])
        nhwc_out = cuda_output_channels_last(
            x, weight, args, weight.shape[1] * args.groups * out_hw[0] * out_hw[1])
        sm90 = KXS_SM90_WINNER in chosen.candidates
        chosen = kxs_sm90_for_output(chosen, nhwc_out)
        if sm90 and is_channels_last(x) and \
                x.shape[1] % (4 if x.dtype == torch.float32 else 8) == 0 and x.shape[0] > 0:
            # Measured on the H100 (docs/performance/kxs.md forced): 2.1-4.4x cuDNN on the suite's
            # channels_last 16-bit k == stride layers (tap-major mma.sync: 1.6-2.8x), at every
            # size and K; its weight is packed, so any weight layout.
            winner = KXS_SM90_TF32_WINNER if x.dtype == torch.float32 else KXS_SM90_WINNER
            return Plan(winner, chosen.reason + "; Hopper TMA + wgmma kernel for "
                        "channels_last input", candidates=chosen.candidates)
        if sm90 and x.dtype == torch.float32 and x.is_contiguous() and x.shape[1] % 4 == 0 and \
                x.shape[0] > 0:
            # TF32 NCHW input on Hopper: against cuDNN's untimed choice 2.1-3.1x on the suite's
            # NCHW k == stride layers (U-Net up1/up4, Mask R-CNN, YOLOv8-seg; gemm_kxs 1.0-3.0x)
            # and 28x on DCGAN's 1 x 1 layer (gemm_kxs 22x; H200, benchmarks/candidates.py).
            winner = KXS_SM90_TF32_WINNER if nhwc_out else KXS_SM90_NCHW_WINNER
            return Plan(winner, chosen.reason + "; Hopper TMA + wgmma kernel",
                        candidates=chosen.candidates)
        if sm90 and x.dtype != torch.float32 and \
                x.is_contiguous() and x.shape[1] % 8 == 0 and \
                (x.shape[2] * x.shape[3]) % 8 == 0 and x.shape[0] > 0:
            # Measured on the H100 (docs/performance/kxs.md forced, bf16 NCHW): 2.3-5.1x cuDNN on
            # U-Net up1/up4 and YOLOv8-seg's proto (mma.sync gemm_kxs: 1.3-3.5x). H*W % 8: the
            # MN-major TMA view's channel stride must be a multiple of 16 bytes.
            winner = KXS_SM90_WINNER if nhwc_out else KXS_SM90_NCHW_WINNER
            return Plan(winner, chosen.reason + "; Hopper TMA + wgmma kernel reading NCHW "
                        "input in place", candidates=chosen.candidates)
        if nhwc_out:
            # channels_last output: tap-major columns store 16 bytes of channels at a time
            # (H100: U-Net up4 bf16 NHWC 1.9x -> 2.8x cuDNN, Mask R-CNN 1.2x -> 1.6x).
            chosen = Plan(KXS_TAP_MAJOR, chosen.reason + "; tap-major for channels_last output",
                          candidates=chosen.candidates)
        kh, kw = weight.shape[-2:]
        rows = input.numel() // max(1, input.shape[-3])
        cols = weight.shape[1] * kh * kw
        tiles = -(-rows // _GEMM_TILE) * -(-cols // _GEMM_TILE)
        if not weight.is_contiguous() or tiles >= 2**31:
            return Plan(ATEN, "gemm_kxs needs a contiguous weight and < 2^31 tiles; cuDNN")
        k = input.shape[-3] // args.groups
        out_bytes = rows * cols * args.groups * input.element_size()
        if is_channels_last(input) and k > 512 and not fp32_strict(input.dtype, args):
            # Measured on H100: cuDNN's NHWC kernel ties or beats gemm_kxs at large K on
            # channels_last input (U-Net up1, K=1024: 1.00x); autotune re-checks.
            return Plan(ATEN, "cuDNN's NHWC kernel is as fast at this K (heuristic)",
                        candidates=chosen.candidates)
        if out_bytes < _MIN_GEMM_OUTPUT_BYTES and not latent:
            # Below a few MiB both sides are bound by per-call host work, not the GPU;
            # autotune (cudnn.benchmark) measures it exactly. Not for a 1 x 1 input, where
            # cuDNN runs the stride-1 view (H100, DCGAN's 100 > 512 at batch 64, 1 MB of bf16
            # output: cuDNN 36 us of GPU time, gemm_kxs 8.6 us since its weight kept 16-byte
            # loads (19 before); TF32 35 / 11, fp32 strict 73 / 17).
            return Plan(ATEN, "layer too small for the kernel to matter (host-bound)",
                        candidates=chosen.candidates)
        if fp32_strict(input.dtype, args) and PHASE_TMA_UNTIMED in chosen.candidates and \
                call_rules.untimed_tma_problem(input, weight, args) is None:
            # fp32 strict on Hopper: gemm_phase_tma's 3xTF32 measured 1.0-2.1x gemm_kxs's on
            # the suite's k == stride layers (U-Net, Mask R-CNN, YOLOv8-seg, DCGAN's 1 x 1; H200,
            # benchmarks/candidates.py); sized below like its other untimed calls.
            chosen = Plan(PHASE_TMA_UNTIMED, chosen.reason + "; on Hopper the TMA + wgmma GEMM",
                          candidates=chosen.candidates)
    problem = call_rules.untimed_tma_problem(input, weight, args) \
        if split_variant(chosen.variant)[0] == GEMM_PHASE_TMA and \
        forced_variant() is None else None
    if problem is not None:
        # Where cuDNN cannot run, the direct kernel, as before the TMA default.
        fallback = DIRECT if DIRECT in chosen.candidates else ATEN
        chosen = Plan(fallback, f"{problem}: {fallback}", candidates=chosen.candidates)
    if chosen.variant == PHASE_TMA_UNTIMED and forced_variant() is None:
        chosen = Plan(call_rules.untimed_tma_config(input, weight, args), chosen.reason,
                      chosen.fallback, chosen.candidates)
    if (PHASE_CONFIGS[0] in chosen.candidates or OUT_TILE_CONFIGS[0] in chosen.candidates) and \
            forced_variant() is None:
        if not call_rules.phase_offsets_fit(input, weight, args):  # direct indexes with 64 bits
            return _without_phase(chosen, "a tensor reaches 2^31 elements (gemm_phase and "
                                  "gemm_out_tile index with 32 bits)", out_tile=True)
    col2im = COL2IM_CONFIGS + COL2IM_3XTF32_CONFIGS
    if any(v in col2im for v in chosen.candidates) and forced_variant() is None and \
            col2im_buffer_bytes(input, weight) > _MAX_COL2IM_BYTES:
        chosen = Plan(chosen.variant, chosen.reason, chosen.fallback,
                      tuple(v for v in chosen.candidates if v not in col2im))
    if chosen.variant == ATEN and COL2IM_3XTF32_CONFIGS[0] in chosen.candidates and \
            forced_variant() is None and call_rules.strict_col2im_default(input, weight):
        # fp32 without TF32 on Hopper where no other kernel of ours is the default (phase
        # layers with few rows per stride phase or few output channels): gemm_col2im's 3xTF32,
        # where it measured faster than cuDNN's fp32 kernels (gemm_col2im.STRICT_DEFAULT_*).
        chosen = Plan(COL2IM_3XTF32_CONFIGS[0], "fp32 without TF32, channels_last: one 3xTF32 "
                      "GEMM over every tap, then col2im", candidates=chosen.candidates)
    return chosen


col2im_buffer_bytes = gemm_col2im.buffer_bytes


def kxs_sm90_for_output(chosen: Plan, nhwc_out: bool) -> Plan:
    """`chosen` with gemm_kxs_sm90's configs 0-2 swapped for their kernel-area twins (3-5) when
    the output is NCHW (`nhwc_out` False): there the twins store whole runs of each channel's
    output rows and were never slower (H100); for channels_last output they are the same
    machine code as 0-2, so timing both would only double autotune's work."""
    if nhwc_out:
        return chosen
    twin = dict(zip(KXS_SM90_CONFIGS, KXS_SM90_AREA_CONFIGS))
    return Plan(twin.get(chosen.variant, chosen.variant), chosen.reason, chosen.fallback,
                tuple(twin.get(v, v) for v in chosen.candidates))


def describe(device: torch.device, dtype: torch.dtype, kernel_hw: Sequence[int],
             args: ConvTransposeArgs, channels: Optional[Tuple[int, int]] = None) -> str:
    """One word for reprs and summaries: the variant a layer runs with."""
    return plan_layer(device, dtype, kernel_hw, args, channels).variant
