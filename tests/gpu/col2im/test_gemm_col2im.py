"""GPU correctness of gemm_col2im (one GEMM over every tap into an fp32 buffer, then col2im with
the fused epilogue; cuda/gemm_col2im/col2im.h): both configs forced on NaN-poisoned random sweeps in
TF32, bf16 and fp16 (any stride, padding, output_padding, dilation, kernel, layout, bias,
unbatched, batch 0), and both 3xTF32 configs in fp32 without TF32 (input channels >= the
3xTF32 depth), against a float64 reference with the bound of tests/helpers.py, every
activation, the benchmark's layers at full size, the calls it refuses, and the planner's use
of it."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.epilogue import ACTIVATIONS
from deconv_patch.ops import run_variant
from deconv_patch.reference import conv_transpose2d_float64
from tests.cases import Case, random_case
from tests.helpers import (allowed_error, check_epilogue, check_full_layer, check_variant,
                           max_error)

pytestmark = pytest.mark.cuda
VARIANTS = planner.COL2IM_CONFIGS
STRICT_VARIANTS = planner.COL2IM_3XTF32_CONFIGS


def _needs_sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("gemm_col2im's GEMM (gemm_kxs_sm90) runs on compute capability 9.0 only")


def _case(seed: int) -> Case:
    """random_case in the variant's domain: TF32, bf16 or fp16, one group, 16-byte rows of Cin
    (a multiple of 4 in fp32, 8 in 16-bit); one case in four larger (more GEMM tiles than SMs,
    many taps per output)."""
    case = random_case(seed, dtypes=(torch.float32, torch.bfloat16, torch.float16),
                       max_channels=40)
    rng = random.Random(seed)
    cin = (4 if case.dtype == torch.float32 else 8) * rng.randint(1, 12)
    cout = case.out_channels
    hw, batch = case.hw, case.batch
    if rng.random() < 0.25:
        hw = (rng.randint(8, 30), rng.randint(8, 30))
        batch = rng.randint(2, 12)
        cout = rng.choice((3, 17, 21, 64, 100))
    args = dataclasses.replace(case.args, groups=1)
    if any(s <= 0 for s in args.output_hw(hw, case.kernel)):
        hw = case.hw
    return dataclasses.replace(case, in_channels=cin, out_channels=cout, hw=hw, batch=batch,
                               args=args, tf32=True, unbatched=case.unbatched and batch == 1)


def _strict_case(seed: int) -> Case:
    """_case in fp32 without TF32, with input channels (the 3xTF32 GEMM's sum depth) at least
    planner.MIN_3XTF32_DEPTH."""
    case = _case(seed)
    rng = random.Random(seed + 7)
    cin = 4 * rng.randint(planner.MIN_3XTF32_DEPTH // 4, 40)
    return dataclasses.replace(case, dtype=torch.float32, tf32=False, in_channels=cin)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seed", range(100))
def test_gemm_col2im_sweep(variant, seed):
    _needs_sm90()
    check_variant(variant, seed + 99_000, _case)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seed", range(2 * len(ACTIVATIONS)))
def test_gemm_col2im_epilogue_sweep(variant, seed):
    _needs_sm90()
    check_epilogue(variant, _case(seed + 98_000), seed)


@pytest.mark.parametrize("variant", STRICT_VARIANTS)
@pytest.mark.parametrize("seed", range(100))
def test_gemm_col2im_3xtf32_sweep(variant, seed):
    _needs_sm90()
    check_variant(variant, seed + 97_000, _strict_case)


@pytest.mark.parametrize("variant", STRICT_VARIANTS)
@pytest.mark.parametrize("seed", range(len(ACTIVATIONS)))
def test_gemm_col2im_3xtf32_epilogue_sweep(variant, seed):
    _needs_sm90()
    check_epilogue(variant, _strict_case(seed + 96_000), seed)


# (batch, cin, cout, (h, w), kernel, stride, padding, output_padding, dilation): the suite's
# layers where one GEMM over every tap is predicted to win, and a few where it is not.
_LAYERS = [
    (100, 512, 17, (14, 14), 4, 2, 1, 0, 1),   # Keypoint R-CNN
    (4, 1024, 512, (8, 8), 4, 2, 1, 0, 1),     # pix2pix.u2
    (32, 2048, 256, (8, 6), 4, 2, 1, 0, 1),    # SimpleBaseline d1
    (16, 56, 1, (64, 64), 9, 3, 4, 2, 1),      # FSRCNN x3 (output_padding 2)
    (64, 64, 3, (32, 32), 4, 2, 1, 0, 1),      # DCGAN g5
    (16, 64, 64, (32, 32), 3, 1, 2, 0, 2),     # dilated
]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("layer", _LAYERS, ids=lambda l: f"{l[1]}>{l[2]}x{l[3][0]}k{l[4]}s{l[5]}")
@pytest.mark.parametrize("channels_last", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_gemm_col2im_runs_the_benchmark_layers(variant, layer, channels_last, dtype):
    _needs_sm90()
    check_full_layer(variant, layer, channels_last, dtype, tf32=True, seed=layer[1])


_STRICT_LAYERS = [layer for layer in _LAYERS if layer[1] >= planner.MIN_3XTF32_DEPTH]


@pytest.mark.parametrize("variant", STRICT_VARIANTS)
@pytest.mark.parametrize("layer", _STRICT_LAYERS,
                         ids=lambda l: f"{l[1]}>{l[2]}x{l[3][0]}k{l[4]}s{l[5]}")
@pytest.mark.parametrize("channels_last", [True, False])
def test_gemm_col2im_3xtf32_runs_the_benchmark_layers(variant, layer, channels_last):
    _needs_sm90()
    check_full_layer(variant, layer, channels_last, torch.float32, tf32=False, seed=layer[1])


@pytest.mark.parametrize("variant, dtype, tf32, groups, cin", [
    (VARIANTS[0], torch.bfloat16, True, 1, 12),      # 16-bit rows not 16-byte multiples (TMA)
    (VARIANTS[0], torch.float16, False, 1, 4),
    (VARIANTS[0], torch.float32, False, 1, 64),      # a TF32 config in fp32 without TF32
    (VARIANTS[0], torch.float32, True, 2, 8),        # groups
    (STRICT_VARIANTS[0], torch.float32, False, 1, 8),    # 3xTF32 on a sum of 8 products
    (STRICT_VARIANTS[0], torch.float32, False, 2, 128),  # groups
    (STRICT_VARIANTS[0], torch.float32, True, 1, 64),    # the 3xTF32 form with TF32 allowed
    (STRICT_VARIANTS[0], torch.bfloat16, True, 1, 64),   # ... and in 16-bit
])
def test_gemm_col2im_refuses_what_it_does_not_compute(variant, dtype, tf32, groups, cin):
    _needs_sm90()
    x = torch.randn(2, cin, 5, 5, device="cuda", dtype=dtype)
    w = torch.randn(cin, 6 // groups, 3, 3, device="cuda", dtype=dtype)
    args = ConvTransposeArgs.from_values(stride=2, groups=groups)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32), \
            pytest.raises(RuntimeError, match="does not support"):
        run_variant(variant, x, w, None, args)


def test_planner_lists_each_mode_its_configs_on_sm90():
    """TF32 / 16-bit: the gemm_kxs_sm90-tile configs; fp32 without TF32: the 3xTF32 ones, where
    the input channels reach planner.MIN_3XTF32_DEPTH (Keypoint R-CNN's 512, not 32)."""
    _needs_sm90()
    w = torch.randn(512, 17, 4, 4, device="cuda")
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    x = torch.randn(4, 512, 14, 14, device="cuda")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        candidates = set(planner.plan(x, w, args).candidates)
        assert set(VARIANTS) <= candidates and not set(STRICT_VARIANTS) & candidates
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        candidates = set(planner.plan(x, w, args).candidates)
        assert set(STRICT_VARIANTS) <= candidates and not set(VARIANTS) & candidates
        shallow = set(planner.plan(x[:, :32], w[:32], args).candidates)
        assert not (set(VARIANTS) | set(STRICT_VARIANTS)) & shallow
    for dtype in (torch.bfloat16, torch.float16):
        assert set(VARIANTS) <= set(planner.plan(x.to(dtype), w.to(dtype), args).candidates)


def test_planner_leaves_it_out_where_its_buffer_would_be_large():
    """SimpleBaseline d3 at batch 32: a 400 MB fp32 buffer (planner._MAX_COL2IM_BYTES)."""
    _needs_sm90()
    x = torch.randn(32, 256, 32, 24, device="cuda")
    w = torch.randn(256, 256, 4, 4, device="cuda")
    assert planner.col2im_buffer_bytes(x, w) == 4 * 32 * 32 * 24 * 256 * 16
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        plan = planner.plan(x, w, ConvTransposeArgs.from_values(stride=2, padding=1))
        assert not set(VARIANTS) & set(plan.candidates), plan
        assert planner.PHASE_TMA_CONFIGS[0] in plan.candidates, plan


@pytest.mark.parametrize("layer", [
    (4, 512, 17, (14, 14), (4, 4), ConvTransposeArgs.from_values(stride=2, padding=1)),
    (4, 512, 256, (8, 8), (3, 3),  # Linknet's dec4: 256 rows per stride phase
     ConvTransposeArgs.from_values(stride=2, padding=1, output_padding=1)),
], ids=["keypoint-head", "linknet-dec4"])
def test_the_op_runs_its_3xtf32_by_default_where_fp32_strict_had_cudnn(layer):
    """fp32 without TF32, cudnn.benchmark off, phase layers where no other kernel of ours is the
    untimed default (few output channels; too few rows per phase for gemm_phase_tma): on
    channels_last input the planner gives the call gemm_col2im's 3xTF32 (NCHW input keeps
    cuDNN), and through the op its output is within fp32's bound against float64 (2x PyTorch's
    error plus an ulp of the largest output)."""
    _needs_sm90()
    batch, cin, cout, hw, kernel, args = layer
    gen = torch.Generator().manual_seed(cout)
    x = torch.randn(batch, cin, *hw, generator=gen).cuda()
    w = (torch.randn(cin, cout, *kernel, generator=gen) / cin ** 0.5).cuda()
    b = torch.randn(cout, generator=gen).cuda()
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False, benchmark=False):
        assert planner.plan(x, w, args).variant == planner.ATEN
        x = x.contiguous(memory_format=torch.channels_last)
        chosen = planner.plan(x, w, args)
        assert chosen.variant == STRICT_VARIANTS[0], chosen
        got = torch.ops.deconv_patch.conv_transpose2d(
            x, w, b, list(args.stride), list(args.padding), list(args.output_padding), 1,
            list(args.dilation))
        expected = torch.nn.functional.conv_transpose2d(
            x, w, b, args.stride, args.padding, args.output_padding, 1, args.dilation)
    assert got.shape == expected.shape and got.stride() == expected.stride()
    ref = conv_transpose2d_float64(x, w, b, args)
    assert max_error(got, ref) <= allowed_error(max_error(expected, ref), ref, torch.float32)
