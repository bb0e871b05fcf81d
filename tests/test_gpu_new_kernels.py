"""GPU correctness of the session-4 kernel paths (gemm_kxs tap-major, 3xTF32 fp32-strict, the
grouped kernel, gemm_phase_sm90): each forced on NaN-poisoned random sweeps against a float64
reference, with the bound of tests/test_gpu_kernels.py (2x PyTorch's own error + 1 ulp of the
output), plus the planner's rules for them."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from deconv_patch import packed_weights, planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.epilogue import ACTIVATIONS
from deconv_patch.ops import run_variant
from deconv_patch.reference import conv_transpose2d_float64, tf32_round
from tests.cases import Case, random_case, random_kxs_case, random_phase_case
from tests.test_gpu_epilogue import check_epilogue
from tests.test_gpu_kernels import allowed_error, check_variant, max_error

pytestmark = pytest.mark.cuda


def _fp32_strict(make_case):
    """make_case with every case in fp32, TF32 not allowed (the 3xTF32 mode's domain)."""
    def make(seed: int) -> Case:
        return dataclasses.replace(make_case(seed), dtype=torch.float32, tf32=False)
    return make


def _channels_last_out(make_case):
    """make_case with channels_last input (so PyTorch's output, and ours, is channels_last)."""
    def make(seed: int) -> Case:
        return dataclasses.replace(make_case(seed), channels_last=True, non_contiguous=False,
                                   unbatched=False)
    return make


# ---- gemm_kxs with tap-major columns (packed weight, 16-byte channels_last stores) ----------

@pytest.mark.parametrize("seed", range(300))
def test_gemm_kxs_tap_major_sweep(seed):
    check_variant(planner.KXS_TAP_MAJOR, seed + 70_000, random_kxs_case)


@pytest.mark.parametrize("seed", range(200))
def test_gemm_kxs_tap_major_channels_last_sweep(seed):
    """Mostly the 16-byte store path (channels_last output, Cout/g a multiple of 8 or 4)."""
    check_variant(planner.KXS_TAP_MAJOR, seed + 71_000, _channels_last_out(random_kxs_case))


@pytest.mark.parametrize("seed", range(60))
def test_gemm_kxs_tap_major_epilogue_sweep(seed):
    """Fused epilogues on the tap-major store paths (fp32 staging when an activation is on)."""
    case = _channels_last_out(random_kxs_case)(seed + 72_000)
    if case.dtype == torch.float32:
        case = dataclasses.replace(case, tf32=True)
    check_epilogue(planner.KXS_TAP_MAJOR, case, seed)


def check_repacks_after_an_in_place_weight_update(variant: str, x: torch.Tensor,
                                                  w: torch.Tensor, args: ConvTransposeArgs):
    """A variant reading a packed weight packs again after w changes in place (version counter)
    and computes with the new values: w * -2 gives exactly -2x the output."""
    first = run_variant(variant, x, w, None, args)
    packs = packed_weights.cache().packs
    with torch.no_grad():
        w.mul_(-2.0)
    second = run_variant(variant, x, w, None, args)
    assert packed_weights.cache().packs == packs + 1
    torch.testing.assert_close(second, first * -2.0, rtol=0, atol=0)  # exact: power-of-2 scale


def test_gemm_kxs_tap_major_repacks_after_an_in_place_weight_update():
    x = torch.randn(2, 32, 9, 7, device="cuda", dtype=torch.bfloat16
                    ).contiguous(memory_format=torch.channels_last)
    w = torch.randn(32, 16, 2, 2, device="cuda", dtype=torch.bfloat16)
    check_repacks_after_an_in_place_weight_update(planner.KXS_TAP_MAJOR, x, w,
                                                  ConvTransposeArgs.from_values(stride=2))


# ---- fp32 without TF32: 3xTF32 on gemm_kxs and gemm_phase -----------------------------------

def _check_strict(variant: str, seed: int, make_case) -> None:
    """check_variant in fp32 without TF32; sums shallower than planner.MIN_3XTF32_DEPTH are
    refused by the kernel call (3xTF32 would miss the bound there) and skip."""
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        try:
            check_variant(variant, seed, _fp32_strict(make_case))
        except RuntimeError as exc:
            if "does not support fp32 without TF32" not in str(exc):
                raise
            case = _fp32_strict(make_case)(seed)
            depth = planner.reduction_depth(case.in_channels // case.args.groups, case.kernel,
                                            case.args)
            assert depth < planner.MIN_3XTF32_DEPTH, f"{case}: refused at depth {depth}"
            pytest.skip(f"{case}: {depth}-deep sums stay off 3xTF32")


@pytest.mark.parametrize("seed", range(200))
def test_gemm_kxs_3xtf32_sweep(seed):
    _check_strict(planner.GEMM_KXS, seed + 73_000, random_kxs_case)


@pytest.mark.parametrize("seed", range(100))
def test_gemm_kxs_tap_major_3xtf32_sweep(seed):
    _check_strict(planner.KXS_TAP_MAJOR, seed + 74_000, random_kxs_case)


@pytest.mark.parametrize("seed", range(200))
def test_gemm_phase_3xtf32_sweep(seed):
    _check_strict(planner.GEMM_PHASE, seed + 75_000, random_phase_case)


@pytest.mark.parametrize("variant,stride,kernel", [(planner.GEMM_KXS, 2, 2),
                                                   (planner.GEMM_PHASE, 2, 4)])
def test_3xtf32_is_much_more_accurate_than_tf32(variant, stride, kernel):
    """The split must really be there: on a deep reduction (K = 1024 channels x taps), 3xTF32's
    error is a small fraction of the error TF32 operands alone would give."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 1024, 12, 10, generator=gen).cuda()
    w = (torch.randn(1024, 64, kernel, kernel, generator=gen) / 32).cuda()
    args = ConvTransposeArgs.from_values(stride=stride, padding=(kernel - stride) // 2)
    ref = conv_transpose2d_float64(x, w, None, args)
    tf32_err = max_error(conv_transpose2d_float64(tf32_round(x), tf32_round(w), None, args), ref)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        got = run_variant(variant, x, w, None, args)
        cudnn = F.conv_transpose2d(x, w, None, stride, (kernel - stride) // 2)
    err, cudnn_err = max_error(got, ref), max_error(cudnn, ref)
    assert err < 0.05 * tf32_err, f"3xTF32 error {err:.3e} vs TF32 operands {tf32_err:.3e}"
    assert err <= 8 * cudnn_err + 1e-7 * ref.abs().max().item(), (
        f"3xTF32 error {err:.3e} vs cuDNN fp32 {cudnn_err:.3e}")


def test_planner_rules_for_the_new_kernels():
    """3xTF32 for deep fp32-strict k == stride sums, cuDNN for shallow ones; deep fp32-strict
    phase layers: gemm_phase_tma's 3xTF32 on Hopper, cuDNN elsewhere (gemm_phase's 3xTF32 is
    forced-only); the grouped kernel for few channels per group; wgmma configs among the
    16-bit autotune candidates."""
    kxs = ConvTransposeArgs.from_values(stride=2)
    x = torch.randn(8, 128, 160, 128, device="cuda")
    w = torch.randn(128, 64, 2, 2, device="cuda")
    phase = ConvTransposeArgs.from_values(stride=2, padding=1)
    w4 = torch.randn(128, 64, 4, 4, device="cuda")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        assert planner.plan(x, w, kxs).variant == planner.GEMM_KXS
        cl = planner.plan(x.contiguous(memory_format=torch.channels_last), w, kxs)
        assert cl.variant == planner.KXS_TAP_MAJOR
        assert planner.plan(x[:, :4], w[:4], kxs).variant == planner.ATEN
        strict_phase = planner.plan(x[:2, :, :32, :32], w4, phase)  # (see MIN_3XTF32_DEPTH)
        on_sm90 = torch.cuda.get_device_capability() == (9, 0)
        assert strict_phase.variant == (planner.GEMM_PHASE_TMA if on_sm90 else planner.ATEN)
        assert planner.PHASE_CONFIGS[0] not in strict_phase.candidates
    dw = planner.plan(torch.randn(4, 64, 32, 32, device="cuda", dtype=torch.bfloat16),
                      torch.randn(64, 1, 4, 4, device="cuda", dtype=torch.bfloat16),
                      ConvTransposeArgs.from_values(stride=2, padding=1, groups=64))
    assert dw.variant == planner.GROUPED and planner.ATEN in dw.candidates
    bf = planner.plan(x[:2, :, :32, :32].bfloat16(), w4.bfloat16(), phase)
    assert (set(planner.SM90_CONFIGS) <= set(bf.candidates)) == (
        torch.cuda.get_device_capability() == (9, 0))


# ---- gemm_phase_sm90: wgmma (Hopper, sm_90a builds) -----------------------------------------

def _sm90_case(seed: int) -> Case:
    """random_phase_case in fp16/bf16 with Cin/groups a multiple of 8 (the kernel's domain; the
    binding re-lays other input layouts to channels_last)."""
    case = random_phase_case(seed)
    groups = case.args.groups
    cin_g = case.in_channels // groups
    if cin_g % 8:
        cin_g = 8 * (1 + cin_g // 8)
    dtype = (torch.bfloat16, torch.float16)[seed % 2]
    return dataclasses.replace(case, in_channels=cin_g * groups, dtype=dtype, tf32=False)


def _needs_sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("gemm_phase_sm90 runs on compute capability 9.0 only")


@pytest.mark.parametrize("variant", (planner.GEMM_PHASE_SM90, *planner.SM90_CONFIGS))
@pytest.mark.parametrize("seed", range(150))
def test_gemm_phase_sm90_sweep(variant, seed):
    _needs_sm90()
    check_variant(variant, seed + 76_000, _sm90_case)


@pytest.mark.parametrize("variant", (planner.GEMM_PHASE_SM90, *planner.SM90_CONFIGS))
@pytest.mark.parametrize("seed", range(2 * len(ACTIVATIONS)))
def test_gemm_phase_sm90_epilogue_sweep(variant, seed):
    """Every config x every activation (the seed picks it), twice: each config instantiates its
    store once per activation (epilogue.cuh: dispatch_activation)."""
    _needs_sm90()
    check_epilogue(variant, _sm90_case(seed + 77_000), seed)


def test_gemm_phase_sm90_configs_match_the_extension():
    from deconv_patch.extension import load_extension
    assert load_extension().gemm_phase_sm90_num_configs() == len(planner.SM90_CONFIGS)


# ---- grouped: register-tiled direct kernel for few channels per group ------------------------

def _grouped_case(seed: int) -> Case:
    """random_case (depthwise, grouped and small dense layers, every hyperparameter) with the
    channels per group kept small enough for the kernel's staged tile."""
    case = random_case(seed + 78_000)
    g = case.args.groups
    cin_g, cout_g = case.in_channels // g, case.out_channels // g
    kh, kw = case.kernel
    while cin_g > 1 and cin_g * min(cout_g, 16) * kh * kw > 1024:
        cin_g //= 2
    return dataclasses.replace(case, in_channels=cin_g * g, out_channels=cout_g * g)


@pytest.mark.parametrize("seed", range(600))
def test_grouped_kernel_sweep(seed):
    try:
        check_variant(planner.GROUPED, seed, _grouped_case)
    except RuntimeError as exc:
        if "does not support" in str(exc):
            pytest.skip(f"{_grouped_case(seed)}: outside the kernel's domain")
        raise


@pytest.mark.parametrize("layer", [
    # (batch, channels, hw, kernel, stride, padding, output_padding, groups): benchmark layers
    (16, 64, 64, 4, 2, 1, 0, 64),    # depthwise.up 64 k4s2 g64
    (16, 128, 32, 3, 2, 1, 1, 8),    # grouped 128 g8 k3s2op1 (16 channels per group)
    (4, 21, 64, 16, 8, 4, 0, 21),    # FCN-style bilinear up-sampling, depthwise k16 s8
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_kernel_runs_the_benchmark_layers(layer, dtype):
    n, c, hw, k, s, p, op, g = layer
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(n, c, hw, hw, generator=gen).cuda().to(dtype)
    w = torch.randn(c, c // g, k, k, generator=gen).cuda().to(dtype)
    args = ConvTransposeArgs.from_values(s, p, op, g)
    ref = conv_transpose2d_float64(x, w, None, args)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        expected = F.conv_transpose2d(x, w, None, s, p, op, g)
        got = run_variant(planner.GROUPED, x, w, None, args,
                          out=torch.full_like(expected, float("nan")))
    assert max_error(got, ref) <= allowed_error(max_error(expected, ref), ref, dtype)
