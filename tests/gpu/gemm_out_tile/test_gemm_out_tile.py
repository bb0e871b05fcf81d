"""GPU correctness of gemm_out_tile (output-tiled stride-phase GEMM for <= 32 output channels per
group: a block owns a contiguous output tile across every column phase, runs each phase's small
GEMM on tensor cores and stores whole rows; cuda/gemm_out_tile/gemm_out_tile.cu): the
kernel's heuristic and every config forced (16-bit, TF32, and fp32 strict as 3xTF32 on sums of
at least planner.MIN_3XTF32_DEPTH products) on NaN-poisoned random sweeps of any stride /
padding / output_padding / dilation / grouping / input layout against a float64 reference with
the bound of tests/helpers.py (2x PyTorch's own error + 1 ulp of the output), the fused
epilogue, the benchmark's few-output-channel layers at full size, its refusals, packed-weight
refreshes and the planner's use of it."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.epilogue import ACTIVATIONS
from deconv_patch.ops import run_variant
from tests.cases import FEW_CHANNEL_LAYERS, Case, random_out_tile_case
from tests.helpers import (allowed_error, check_epilogue, check_full_layer,
                           check_repacks_after_an_in_place_weight_update, check_variant,
                           max_error)

pytestmark = pytest.mark.cuda
VARIANTS = (planner.GEMM_OUT_TILE, *planner.OUT_TILE_CONFIGS)


@pytest.mark.parametrize("seed", range(300))
def test_gemm_out_tile_sweep(seed):
    check_variant(planner.GEMM_OUT_TILE, seed + 110_000, random_out_tile_case)


@pytest.mark.parametrize("variant", planner.OUT_TILE_CONFIGS)
@pytest.mark.parametrize("seed", range(60))
def test_gemm_out_tile_config_sweep(variant, seed):
    """Each config forced (a forced config shrinks its tile until it fits shared memory, so
    every config runs every supported call)."""
    check_variant(variant, seed + 111_000, random_out_tile_case)


def _strict_case(seed: int) -> Case:
    """random_out_tile_case in fp32 without TF32 (3xTF32), drawn until each output sums at least
    planner.MIN_3XTF32_DEPTH products (the op refuses shallower sums)."""
    for attempt in range(1000):
        case = random_out_tile_case(seed * 1000 + attempt)
        if case.batch and planner.reduction_depth(case.in_channels // case.args.groups,
                                                  case.kernel, case.args) >= \
                planner.MIN_3XTF32_DEPTH:
            return dataclasses.replace(case, dtype=torch.float32, tf32=False)
    raise AssertionError("no deep enough case drawn")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seed", range(25))
def test_gemm_out_tile_3xtf32_sweep(variant, seed):
    """fp32 without TF32: the heuristic and every config, within PyTorch's own fp32 error bound
    (check_variant with TF32 off)."""
    check_variant(variant, seed + 113_000, _strict_case)


def _channel_block_case(seed: int) -> Case:
    """random_out_tile_case with so many input channels that one row phase's weights exceed
    the kernel's one-block budget (160 KB; 16-bit: 16 bytes per channel, tap and n tile), so it
    runs its K loop over channel blocks; column stride <= 8 (a warp keeps one item across the
    blocks, so a tile has at most 8 column phases) and small images keep the float64 reference
    quick. Every mode, fp32 strict on its deep sums included."""
    import math
    rng = random.Random(seed)
    for attempt in range(1000):
        case = random_out_tile_case(seed * 1000 + attempt)
        if case.args.stride[1] > 8:
            continue
        hw = (min(case.hw[0], rng.randint(1, 12)), min(case.hw[1], rng.randint(1, 12)))
        if any(s <= 0 for s in case.args.output_hw(hw, case.kernel)):
            hw = case.hw
        (kh, kw), (sh, _), (dh, _) = case.kernel, case.args.stride, case.args.dilation
        taps = -(-kh // (sh // math.gcd(sh, dh))) * kw
        nt = -(-(case.out_channels // case.args.groups) // 8)
        cin_g = -(-12_000 // (taps * nt) // 8) * 8 + 8 * (seed % 3)
        strict = case.dtype == torch.float32 and rng.random() < 0.3
        return dataclasses.replace(case, in_channels=cin_g * case.args.groups, hw=hw,
                                   batch=max(case.batch, 1), unbatched=False,
                                   tf32=not strict if case.dtype == torch.float32 else case.tf32)
    raise AssertionError("no case drawn")


@pytest.mark.parametrize("variant", (planner.GEMM_OUT_TILE, planner.OUT_TILE_CONFIGS[0],
                                     planner.OUT_TILE_CONFIGS[3], planner.OUT_TILE_CONFIGS[5]))
@pytest.mark.parametrize("seed", range(30))
def test_gemm_out_tile_channel_block_sweep(variant, seed):
    """Weights too large for shared memory at once: the K loop over channel blocks (a forced
    config shrinks to one item per warp)."""
    check_variant(variant, seed + 114_000, _channel_block_case)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seed", range(2 * len(ACTIVATIONS)))
def test_gemm_out_tile_epilogue_sweep(variant, seed):
    """Every config x every activation (the seed picks it, see check_epilogue), twice: each
    config instantiates its staged store once per activation."""
    check_epilogue(variant, random_out_tile_case(seed + 112_000), seed)


def test_gemm_out_tile_configs_match_the_extension():
    from deconv_patch.kernels.extension import load_extension
    names = load_extension().config_names(planner.kernels.BY_NAME[planner.GEMM_OUT_TILE].code)
    assert [f"{planner.GEMM_OUT_TILE}:{n}" for n in names] == list(planner.OUT_TILE_CONFIGS)


# What the kernel is for (Keypoint R-CNN's 196 KB of weights run the K loop over channel blocks).
_LAYERS = FEW_CHANNEL_LAYERS


@pytest.mark.parametrize("variant", (planner.GEMM_OUT_TILE, planner.OUT_TILE_CONFIGS[0],
                                     planner.OUT_TILE_CONFIGS[3]))
@pytest.mark.parametrize("layer", list(_LAYERS))
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("mode", ["bf16", "fp16", "tf32", "fp32"])
def test_gemm_out_tile_runs_the_benchmark_layers(variant, layer, channels_last, mode):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32,
             "fp32": torch.float32}[mode]
    check_full_layer(variant, _LAYERS[layer], channels_last, dtype, tf32=mode != "fp32",
                     seed=11)


def test_gemm_out_tile_refuses_what_it_does_not_compute():
    """fp32 without TF32 on sums shallower than planner.MIN_3XTF32_DEPTH (3xTF32 would miss the
    bound there; here 8 channels x 4 taps) and > 32 output channels per group: refused, never
    computed wrongly."""
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    x = torch.randn(2, 8, 8, 8, device="cuda")
    w = torch.randn(8, 3, 4, 4, device="cuda")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        for variant in VARIANTS:
            with pytest.raises(RuntimeError, match="does not support fp32 without TF32"):
                run_variant(variant, x, w, None, args)
    wide = torch.randn(8, 33, 4, 4, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="does not support"):
        run_variant(planner.GEMM_OUT_TILE, x.bfloat16(), wide, None, args)


def test_gemm_out_tile_repacks_after_an_in_place_weight_update():
    x = torch.randn(2, 24, 9, 7, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(24, 3, 4, 4, device="cuda", dtype=torch.bfloat16)
    check_repacks_after_an_in_place_weight_update(
        planner.GEMM_OUT_TILE, x, w, ConvTransposeArgs.from_values(stride=2, padding=1))


def test_planner_lists_it_for_few_output_channel_layers():
    """An autotune candidate for 16-bit and TF32 layers with <= 32 output channels per group,
    the untimed 16-bit default where all its weights fit shared memory at once (Keypoint R-CNN's
    512 > 17 needs channel blocks: the plan it replaced); for fp32 strict a candidate on deep
    sums only, never the default."""
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    x = torch.randn(8, 64, 16, 16, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 3, 4, 4, device="cuda", dtype=torch.bfloat16)
    chosen = planner.plan(x, w, args)
    assert set(planner.OUT_TILE_CONFIGS) <= set(chosen.candidates), chosen
    assert chosen.variant == planner.GEMM_OUT_TILE, chosen
    keypoint = planner.plan(torch.randn(4, 512, 14, 14, device="cuda", dtype=torch.bfloat16),
                            torch.randn(512, 17, 4, 4, device="cuda", dtype=torch.bfloat16), args)
    assert keypoint.variant != planner.GEMM_OUT_TILE, keypoint
    assert set(planner.OUT_TILE_CONFIGS) <= set(keypoint.candidates)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        assert set(planner.OUT_TILE_CONFIGS) <= set(planner.plan(x.float(), w.float(),
                                                                 args).candidates)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        strict = planner.plan(x.float(), w.float(), args)  # 64 x 4 taps = 256 products a sum
        shallow = planner.plan(x[:, :8].float(), w[:8].float(), args)  # 32 products
    assert set(planner.OUT_TILE_CONFIGS) <= set(strict.candidates), strict
    assert strict.variant != planner.GEMM_OUT_TILE, strict
    assert not set(planner.OUT_TILE_CONFIGS) & set(shallow.candidates), shallow
    wide = torch.randn(64, 64, 4, 4, device="cuda", dtype=torch.bfloat16)
    assert not set(planner.OUT_TILE_CONFIGS) & set(planner.plan(x, wide, args).candidates)


@pytest.mark.parametrize("layer", [
    (4, 21, 21, (64, 64), 16, 8, 4, 0, 1),   # fcn8s.up8
    (64, 64, 3, (32, 32), 4, 2, 1, 0, 1),    # dcgan.g5
    (16, 56, 1, (64, 64), 9, 3, 4, 2, 1),    # fsrcnn.x3
])
@pytest.mark.parametrize("channels_last", [False, True])
def test_the_op_runs_it_by_default_on_16bit_few_channel_layers(layer, channels_last):
    """Unforced, through torch.ops.deconv_patch.conv_transpose2d: the planner's untimed 16-bit
    default for these layers is gemm_out_tile, and the op's output matches float64 within the
    sweeps' bound."""
    from deconv_patch.reference import conv_transpose2d_float64
    n, cin, cout, hw, k, s, p, op, d = layer
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(n, cin, *hw, generator=gen).cuda().to(torch.bfloat16)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w = (torch.randn(cin, cout, k, k, generator=gen) / cin ** 0.5).cuda().to(torch.bfloat16)
    b = torch.randn(cout, generator=gen).cuda().to(torch.bfloat16)
    args = ConvTransposeArgs.from_values(stride=s, padding=p, output_padding=op, dilation=d)
    assert planner.plan(x, w, args).variant == planner.GEMM_OUT_TILE
    got = torch.ops.deconv_patch.conv_transpose2d(x, w, b, [s, s], [p, p], [op, op], 1, [d, d])
    expected = torch.nn.functional.conv_transpose2d(x, w, b, s, p, op, 1, d)
    assert got.shape == expected.shape and got.stride() == expected.stride()
    ref = conv_transpose2d_float64(x, w, b, args)
    assert max_error(got, ref) <= allowed_error(max_error(expected, ref), ref, torch.bfloat16)


@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "strict"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_the_op_runs_it_by_default_on_fcn_upsampling_in_fp32(channels_last, tf32):
    """fp32, FCN's x8 up-sampling (21 channels, k16 s8): the planner's untimed fp32 default is
    gemm_out_tile (gemm_out_tile.FP32_DEFAULT_MIN_CHANNELS / _MIN_STRIDE_AREA; 3xTF32 without
    TF32); through the op, the output is within the bound of TF32 operands, or of fp32's
    without TF32. DCGAN's stride-2 64 > 3 keeps cuDNN (fewer channels)."""
    from deconv_patch.reference import conv_transpose2d_float64, tf32_round
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(2, 21, 32, 32, generator=gen).cuda()
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w = (torch.randn(21, 21, 16, 16, generator=gen) / 21 ** 0.5).cuda()
    args = ConvTransposeArgs.from_values(stride=8, padding=4)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
        assert planner.plan(x, w, args).variant == planner.GEMM_OUT_TILE
        dcgan = planner.plan(torch.randn(2, 64, 8, 8, device="cuda"),
                             torch.randn(64, 3, 4, 4, device="cuda"),
                             ConvTransposeArgs.from_values(stride=2, padding=1))
        assert dcgan.variant != planner.GEMM_OUT_TILE, dcgan
        got = torch.ops.deconv_patch.conv_transpose2d(x, w, None, [8, 8], [4, 4], [0, 0], 1,
                                                      [1, 1])
        expected = torch.nn.functional.conv_transpose2d(x, w, None, 8, 4)
    assert got.shape == expected.shape and got.stride() == expected.stride()
    ref = conv_transpose2d_float64(x, w, None, args)
    torch_err = max_error(expected, ref)
    if tf32:
        torch_err = max(torch_err, max_error(
            conv_transpose2d_float64(tf32_round(x), tf32_round(w), None, args), ref))
    assert max_error(got, ref) <= allowed_error(torch_err, ref, torch.float32)
