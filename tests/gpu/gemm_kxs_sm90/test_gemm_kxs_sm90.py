"""GPU correctness of gemm_kxs_sm90 (persistent, warp-specialised TMA + wgmma GEMM for 16-bit and
TF32 kernel == stride layers; cuda/gemm_kxs_sm90/gemm_kxs_sm90.cu): every config forced on
NaN-poisoned random sweeps against a float64 reference with the bound of
tests/helpers.py (2x PyTorch's own error + 1 ulp of the output), the fused epilogue,
the benchmark's layers at full size (many tiles per CTA: the persistent loop and the barrier
ring's phases wrap many times), and the planner's use of it."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.epilogue import ACTIVATIONS
from deconv_patch.ops import run_variant
from tests.cases import Case, random_kxs_case
from tests.helpers import (check_epilogue, check_full_layer, check_tf32_rounds_to_nearest_away,
                           check_tiled_pack, check_variant)

pytestmark = pytest.mark.cuda
VARIANTS = (planner.GEMM_KXS_SM90, *planner.KXS_SM90_CONFIGS)


def _needs_sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("gemm_kxs_sm90 runs on compute capability 9.0 only")


def _case(seed: int) -> Case:
    """random_kxs_case in the kernel's domain: fp16/bf16, groups 1, no output_padding, Cin a
    multiple of 8 (other input layouts are re-laid to channels_last by the binding); one case in
    four is large (up to ~40 k GEMM rows, up to 1000 columns: more tiles than SMs)."""
    case = random_kxs_case(seed)
    rng = random.Random(seed)
    cin = 8 * rng.randint(1, 40)
    cout = case.out_channels // case.args.groups
    hw, batch = case.hw, case.batch
    if rng.random() < 0.25:
        hw = (rng.randint(8, 48), rng.randint(8, 48))
        batch = rng.randint(2, 16)
        cout = rng.choice((8, 64, 96, 128, 250, 256))
    args = ConvTransposeArgs(case.args.stride, (0, 0), (0, 0), (1, 1), 1)
    dtype = (torch.bfloat16, torch.float16, torch.float32)[seed % 3]
    if dtype == torch.float32 and rng.random() < 0.5:
        cin = 4 * rng.randint(1, 80)  # fp32's TMA rows need Cin % 4 == 0 only
    return dataclasses.replace(case, in_channels=cin, out_channels=cout, hw=hw, batch=batch,
                               args=args, dtype=dtype, tf32=dtype == torch.float32,
                               unbatched=case.unbatched and batch == 1)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seed", range(120))
def test_gemm_kxs_sm90_sweep(variant, seed):
    _needs_sm90()
    check_variant(variant, seed + 91_000, _case)


@pytest.mark.parametrize("seed", range(60))
def test_gemm_kxs_sm90_tiled_pack_is_the_per_element_pack(seed):
    _needs_sm90()
    check_tiled_pack(planner.GEMM_KXS_SM90, _case(seed), fp32_strict=False)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seed", range(3 * len(ACTIVATIONS)))
def test_gemm_kxs_sm90_epilogue_sweep(variant, seed):
    """Every config with every activation (seed % the number of activations picks it, see
    check_epilogue): each is its own instantiation of the store code."""
    _needs_sm90()
    check_epilogue(variant, _case(seed + 92_000), seed)


def _area_case(seed: int) -> Case:
    """A case in the kernel-area configs' domain (NCHW output, KW 2 or 4, KH*KW taps of 4 or 8,
    Cout % 32 == 0), with one in five outside it (KW 3, KH*KW 16, Cout % 32 != 0 or channels_last
    output), where those configs run as configs 0-2: both must be right."""
    rng = random.Random(seed)
    base = _case(seed)
    kernel = rng.choice(((2, 2), (2, 2), (2, 4), (4, 2), (1, 4), (2, 1)))
    cout = 32 * rng.choice((1, 2, 3, 4, 8))
    channels_last, non_contiguous = False, rng.random() < 0.2
    if rng.random() < 0.2:
        kernel, cout, channels_last = rng.choice((((3, 3), cout, False), ((4, 4), cout, False),
                                                  ((2, 2), cout - 8, False), ((2, 2), cout, True)))
    args = ConvTransposeArgs(kernel, (0, 0), (0, 0), (1, 1), 1)
    return dataclasses.replace(base, out_channels=cout, kernel=kernel, args=args,
                               channels_last=channels_last, non_contiguous=non_contiguous,
                               weight_channels_last=False)


@pytest.mark.parametrize("variant", planner.KXS_SM90_AREA_CONFIGS)
@pytest.mark.parametrize("seed", range(80))
def test_gemm_kxs_sm90_area_sweep(variant, seed):
    _needs_sm90()
    check_variant(variant, seed + 93_000, _area_case)


@pytest.mark.parametrize("variant", planner.KXS_SM90_AREA_CONFIGS)
@pytest.mark.parametrize("seed", range(2 * len(ACTIVATIONS)))
def test_gemm_kxs_sm90_area_epilogue_sweep(variant, seed):
    _needs_sm90()
    check_epilogue(variant, _area_case(seed + 94_000), seed)


@pytest.mark.parametrize("variant", VARIANTS + planner.KXS_SM90_AREA_CONFIGS)
@pytest.mark.parametrize("channels_last", [True, False])
def test_gemm_kxs_sm90_tf32_rounds_a_to_nearest_ties_away(variant, channels_last):
    """A is read into registers and rounded there (cvt.rna): bit-exact against the float64
    result of tf32_round'ed inputs (NCHW input is re-laid to channels_last, NCHW output staged)."""
    _needs_sm90()
    check_tf32_rounds_to_nearest_away(variant, ConvTransposeArgs.from_values(2), (2, 2),
                                      channels_last)


def test_gemm_kxs_sm90_configs_match_the_extension():
    from deconv_patch.kernels.extension import load_extension
    code = planner.kernels.BY_NAME[planner.GEMM_KXS_SM90].code
    assert len(load_extension().config_names(code)) == \
        len(planner.KXS_SM90_CONFIGS) + len(planner.KXS_SM90_AREA_CONFIGS)


@pytest.mark.parametrize("variant", VARIANTS + planner.KXS_SM90_AREA_CONFIGS)
@pytest.mark.parametrize("layer", [
    # (batch, cin, cout, hw, k): the benchmark's k == stride layers
    (100, 256, 256, 14, 2),   # Mask R-CNN mask head
    (8, 1024, 512, 28, 2),    # U-Net up1
    (8, 256, 256, 80, 2),     # YOLOv8-seg proto
    (8, 128, 64, 196, 2),     # U-Net up4
])
@pytest.mark.parametrize("channels_last", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gemm_kxs_sm90_runs_the_benchmark_layers(variant, layer, channels_last, dtype):
    _needs_sm90()
    n, cin, cout, hw, k = layer
    check_full_layer(variant, (n, cin, cout, (hw, hw), k, k, 0, 0, 1), channels_last, dtype,
                     seed=cin + hw)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("cout, k", [(4, 3), (12, 3), (20, 3), (28, 3), (44, 1), (100, 2)])
def test_gemm_kxs_sm90_fp32_vector_store_column_tails(variant, cout, k):
    """fp32 channels_last output: each quad regroups its values before the 16-byte stores
    (cuda/common/quad_regroup.cuh), so a 32-column group's two store halves are predicated apart.
    NC = k*k*Cout % 32 of 4, 12, 20, 28 leaves every split of the last group; odd sizes
    leave row tails."""
    _needs_sm90()
    check_full_layer(variant, (6, 40, cout, (13, 11), k, k, 0, 0, 1), True, torch.float32,
                     seed=cout + k)


def test_planner_lists_it_for_16_bit_and_tf32_k_equal_stride_layers_on_sm90():
    x = torch.randn(8, 128, 64, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(128, 64, 2, 2, device="cuda", dtype=torch.bfloat16)
    chosen = planner.plan(x, w, ConvTransposeArgs.from_values(2))
    on_sm90 = torch.cuda.get_device_capability() == (9, 0)
    # NCHW output: the kernel-area configs stand in for configs 0-2; channels_last: 0-2
    assert (set(planner.KXS_SM90_AREA_CONFIGS) <= set(chosen.candidates)) == on_sm90
    assert not set(planner.KXS_SM90_CONFIGS) & set(chosen.candidates)
    nhwc = planner.plan(x.contiguous(memory_format=torch.channels_last), w,
                        ConvTransposeArgs.from_values(2))
    assert (set(planner.KXS_SM90_CONFIGS) <= set(nhwc.candidates)) == on_sm90
    assert not set(planner.KXS_SM90_AREA_CONFIGS) & set(nhwc.candidates)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        tf32 = planner.plan(x.float(), w.float(), ConvTransposeArgs.from_values(2))
    assert (set(planner.KXS_SM90_AREA_CONFIGS) <= set(tf32.candidates)) == on_sm90
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        strict = planner.plan(x.float(), w.float(), ConvTransposeArgs.from_values(2))
        assert not set(planner.KXS_SM90_CONFIGS + planner.KXS_SM90_AREA_CONFIGS) & \
            set(strict.candidates)
        with pytest.raises(RuntimeError, match="does not support"):
            run_variant(planner.GEMM_KXS_SM90, x.float(), w.float(), None,
                        ConvTransposeArgs.from_values(2))
