"""GPU correctness of gemm_phase_tma (stride-phase implicit GEMM on Hopper: every tap's A tile
one 4-D TMA box of the channels_last input, persistent warp-specialised wgmma;
cuda/gemm_phase_tma/gemm_phase_tma.cu): every config forced on NaN-poisoned random sweeps of
any stride / padding / output_padding / dilation / grouping against a float64 reference with
the bound of tests/helpers.py (2x PyTorch's own error + 1 ulp of the output), fp32
without TF32 (3xTF32) on sums of at least planner.MIN_3XTF32_DEPTH products, the fused
epilogue, the benchmark's layers at full size (many tiles per CTA: the persistent loop and the
barrier ring wrap many times), and the planner's use of it."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.epilogue import ACTIVATIONS
from deconv_patch.ops import run_variant
from tests.cases import Case, random_phase_case
from tests.helpers import (check_epilogue, check_full_layer, check_tf32_rounds_to_nearest_away,
                           check_tiled_pack, check_variant)

pytestmark = pytest.mark.cuda
VARIANTS = (planner.GEMM_PHASE_TMA, *planner.PHASE_TMA_CONFIGS)


def _needs_sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("gemm_phase_tma runs on compute capability 9.0 only")


def _case(seed: int) -> Case:
    """random_phase_case in the kernel's domain: fp16 / bf16 / fp32 with TF32; input channels a
    multiple of 8 (16-bit) or 4 (fp32) for the TMA row stride; grouped only with whole 128-byte
    channel blocks per group (64 16-bit or 32 fp32 channels). Other input layouts are re-laid to
    channels_last by the binding. One case in four is large (more tiles than SMs)."""
    case = random_phase_case(seed)
    rng = random.Random(seed * 31 + 5)
    dtype = (torch.bfloat16, torch.float16, torch.float32)[seed % 3]
    per_row = 4 if dtype == torch.float32 else 8
    block = 32 if dtype == torch.float32 else 64
    groups = case.args.groups
    cout_g = case.out_channels // groups
    if groups > 1:
        cin_g = block * rng.randint(1, 2)
    else:
        cin_g = per_row * rng.randint(1, 40)
    hw, batch = case.hw, case.batch
    if rng.random() < 0.25:
        hw = (rng.randint(8, 40), rng.randint(8, 40))
        batch = rng.randint(2, 12)
        cout_g = rng.choice((8, 17, 64, 96, 128, 250, 256))
    return dataclasses.replace(case, in_channels=cin_g * groups, out_channels=cout_g * groups,
                               hw=hw, batch=batch, dtype=dtype, tf32=dtype == torch.float32,
                               unbatched=case.unbatched and batch == 1)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seed", range(120))
def test_gemm_phase_tma_sweep(variant, seed):
    _needs_sm90()
    check_variant(variant, seed + 95_000, _case)


def _strict_case(seed: int) -> Case:
    """_case in fp32 without TF32 (the kernel's 3xTF32 mode), with sums of at least
    planner.MIN_3XTF32_DEPTH products per output (the op refuses shallower ones)."""
    case = _case(seed * 3 + 2)  # fp32 seeds of _case
    rng = random.Random(seed * 17 + 1)
    groups = case.args.groups
    taps = max(1, case.kernel[0] * case.kernel[1] //
               (case.args.stride[0] * case.args.stride[1]))
    cin_g = max(case.in_channels // groups, -(-planner.MIN_3XTF32_DEPTH // taps))
    cin_g = -(-cin_g // 32) * 32 if groups > 1 else -(-cin_g // 4) * 4 + 4 * rng.randint(0, 8)
    return dataclasses.replace(case, in_channels=cin_g * groups, dtype=torch.float32, tf32=False)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seed", range(40))
def test_gemm_phase_tma_fp32_strict_sweep(variant, seed):
    _needs_sm90()
    check_variant(variant, seed + 97_000, _strict_case)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seed", range(3 * len(ACTIVATIONS)))
def test_gemm_phase_tma_epilogue_sweep(variant, seed):
    """Every config with every activation (seed % the number of activations picks it, see
    check_epilogue): each is its own instantiation of the store code."""
    _needs_sm90()
    check_epilogue(variant, _case(seed + 96_000), seed)


def test_gemm_phase_tma_configs_match_the_extension():
    from deconv_patch.kernels.extension import load_extension
    names = load_extension().config_names(planner.kernels.BY_NAME[planner.GEMM_PHASE_TMA].code)
    assert [f"{planner.GEMM_PHASE_TMA}:{n}" for n in names] == list(planner.PHASE_TMA_CONFIGS)


@pytest.mark.parametrize("seed", range(60))
def test_gemm_phase_tma_tiled_pack_is_the_per_element_pack(seed):
    _needs_sm90()
    check_tiled_pack(planner.GEMM_PHASE_TMA, _case(seed), fp32_strict=True)


# The benchmark's layers that are not kernel == stride (batch, cin, cout, hw, kernel, stride,
# padding, output_padding, dilation).
_LAYERS = [
    (64, 512, 256, (4, 4), 4, 2, 1, 0, 1),      # DCGAN g2
    (4, 1024, 512, (8, 8), 4, 2, 1, 0, 1),      # pix2pix u2
    (1, 256, 128, (64, 64), 3, 2, 1, 1, 1),     # CycleGAN up1
    (32, 2048, 256, (8, 6), 4, 2, 1, 0, 1),     # SimpleBaseline d1
    (32, 256, 256, (16, 12), 4, 2, 1, 0, 1),    # SimpleBaseline d2
    (100, 512, 17, (14, 14), 4, 2, 1, 0, 1),    # Keypoint R-CNN
    (16, 64, 64, (32, 32), 3, 1, 2, 0, 2),      # dilated
    (16, 64, 64, (32, 32), 3, 1, 1, 1, 2),      # output_padding >= stride
    (32, 128, 64, (32, 32), 4, 2, 1, 0, 1),     # VAE decoder
]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("layer", _LAYERS, ids=lambda l: f"{l[1]}>{l[2]}x{l[3][0]}k{l[4]}s{l[5]}")
@pytest.mark.parametrize("channels_last", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gemm_phase_tma_runs_the_benchmark_layers(variant, layer, channels_last, dtype):
    _needs_sm90()
    check_full_layer(variant, layer, channels_last, dtype, seed=layer[1] + layer[3][0] + layer[4])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("layer", _LAYERS, ids=lambda l: f"{l[1]}>{l[2]}x{l[3][0]}k{l[4]}s{l[5]}")
@pytest.mark.parametrize("channels_last", [True, False])
def test_gemm_phase_tma_runs_the_benchmark_layers_fp32_strict(variant, layer, channels_last):
    _needs_sm90()
    check_full_layer(variant, layer, channels_last, torch.float32, tf32=False,
                     seed=layer[1] + layer[3][0] + layer[4])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("cout", [4, 12, 20, 28, 44])
@pytest.mark.parametrize("tf32", [True, False])
def test_gemm_phase_tma_fp32_vector_store_channel_tails(variant, cout, tf32):
    """fp32 channels_last output: each quad regroups its values before the 16-byte stores
    (cuda/common/quad_regroup.cuh), so a 32-channel group's two store halves are predicated apart.
    Cout % 32 of 4..28 leaves every split of the last group; odd sizes leave row tails."""
    _needs_sm90()
    check_full_layer(variant, (6, 48, cout, (13, 11), 4, 2, 1, 0, 1), True, torch.float32,
                     tf32=tf32, seed=cout)


def test_gemm_phase_tma_refuses_what_it_does_not_compute():
    _needs_sm90()
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    x = torch.randn(2, 8, 8, 8, device="cuda")  # fp32 strict, 8 x 4 taps = 32 products a sum
    w = torch.randn(8, 32, 4, 4, device="cuda")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        with pytest.raises(RuntimeError, match="does not support"):
            run_variant(planner.GEMM_PHASE_TMA, x, w, None, args)
    grouped = ConvTransposeArgs.from_values(stride=2, padding=1, groups=2)
    xb = torch.randn(2, 48, 8, 8, device="cuda", dtype=torch.bfloat16)  # 24 per group
    wb = torch.randn(48, 16, 4, 4, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="does not support"):
        run_variant(planner.GEMM_PHASE_TMA, xb, wb, None, grouped)


def test_planner_lists_it_for_phase_layers_on_sm90():
    x = torch.randn(8, 128, 16, 16, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(128, 64, 4, 4, device="cuda", dtype=torch.bfloat16)
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    on_sm90 = torch.cuda.get_device_capability() == (9, 0)
    assert (set(planner.PHASE_TMA_CONFIGS) <= set(planner.plan(x, w, args).candidates)) == on_sm90
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        strict = planner.plan(x.float(), w.float(), args)  # 3xTF32: 512 products a sum
        shallow = planner.plan(x[:, :8].float(), w[:8].float(), args)  # 32 products
    assert (set(planner.PHASE_TMA_CONFIGS) <= set(strict.candidates)) == on_sm90
    assert not set(planner.PHASE_TMA_CONFIGS) & set(shallow.candidates)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("channels_last", [True, False])
def test_gemm_phase_tma_tf32_rounds_a_to_nearest_ties_away(variant, channels_last):
    """TF32: A is read into registers and rounded there (cvt.rna): bit-exact against the float64
    result of tf32_round'ed inputs, on DCGAN's k4 s2 p1 (four phases of four taps)."""
    _needs_sm90()
    check_tf32_rounds_to_nearest_away(variant, ConvTransposeArgs.from_values(2, 1), (4, 4),
                                      channels_last)
