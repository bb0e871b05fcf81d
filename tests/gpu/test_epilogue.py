"""The fused epilogue on the GPU: every kernel variant with every activation, scale and shift,
against a float64 reference; the fused op and FastConvTranspose2d's direct-to-extension path;
packed weights following in-place weight updates."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from deconv_patch import FastConvTranspose2d
from deconv_patch.kernels import packed_weights, planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.epilogue import ACTIVATIONS, Epilogue, apply_epilogue
from deconv_patch.ops import run_variant
from deconv_patch.reference import conv_transpose2d_float64
from tests.cases import random_case, random_kxs_case, random_phase_case
from tests.helpers import FUSED, allowed_error, check_epilogue, max_error

pytestmark = pytest.mark.cuda
NAMES = list(ACTIVATIONS)
CASES = {planner.DIRECT: random_case, planner.GEMM_KXS: random_kxs_case,
         planner.GEMM_PHASE: random_phase_case}


@pytest.mark.parametrize("variant", list(CASES))
@pytest.mark.parametrize("seed", range(90))
def test_epilogue_sweep(variant, seed):
    case = CASES[variant](seed + 31_000)
    if variant == planner.GEMM_PHASE or (variant == planner.GEMM_KXS and case.dtype == torch.float32):
        case = dataclasses.replace(case, tf32=True) if case.dtype == torch.float32 else case
    if variant == planner.DIRECT and case.dtype == torch.float32:
        case = dataclasses.replace(case, tf32=False)
    check_epilogue(variant, case, seed, via_op=True)


@pytest.mark.parametrize("variant", planner.PHASE_CONFIGS)
@pytest.mark.parametrize("seed", range(2 * len(NAMES)))
def test_gemm_phase_config_epilogue_sweep(variant, seed):
    """Every gemm_phase tile config x every activation (the seed picks it), twice: each config
    instantiates its staging store once per activation (cuda/common/epilogue.cuh:
    dispatch_activation)."""
    case = random_phase_case(seed + 31_500)
    if case.dtype == torch.float32:
        case = dataclasses.replace(case, tf32=True)
    check_epilogue(variant, case, seed)


def test_identity_epilogue_is_bit_identical_to_the_plain_kernel():
    case = random_phase_case(7)
    x, w, b = case.make("cuda", 7)
    for variant in (planner.DIRECT, planner.GEMM_PHASE):
        plain = run_variant(variant, x, w, b, case.args)
        same = run_variant(variant, x, w, b, case.args, epilogue=Epilogue())
        assert torch.equal(plain, same)


def _layer(dtype=torch.bfloat16, activation="none"):
    torch.manual_seed(0)
    ref = nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1).cuda().to(dtype)
    return ref, FastConvTranspose2d.from_module(ref, activation)


def test_module_fast_path_equals_the_op_and_follows_weight_updates():
    ref, fast = _layer(activation="silu")
    x = torch.randn(4, 64, 16, 16, device="cuda", dtype=torch.bfloat16)
    with planner.use_variant(planner.GEMM_PHASE):
        with torch.no_grad():
            direct_call = fast(x)  # goes straight to the extension
        via_op = FUSED(x, fast.weight, fast.bias, 2, 1, 0, 1, 1, None, None, "silu")
        assert torch.equal(direct_call, via_op)
        packs = packed_weights.cache().packs
        with torch.no_grad():
            fast.weight.mul_(-0.5)  # an in-place update bumps the version: re-packed on next use
            updated = fast(x)
        assert packed_weights.cache().packs == packs + 1
        expected = F.silu(F.conv_transpose2d(x.double(), ref.weight.double(), ref.bias.double(),
                                             2, 1))
        assert (updated.double() - expected).abs().max().item() < 0.05 * expected.abs().max().item()
        with torch.no_grad():
            fast(x)
        assert packed_weights.cache().packs == packs + 1  # unchanged weight: no re-pack


def test_module_with_grad_goes_through_the_op_and_trains():
    ref, fast = _layer(torch.float32, activation="leaky_relu")
    x = torch.randn(2, 64, 8, 8, device="cuda", requires_grad=True)
    with planner.use_variant(planner.GEMM_PHASE), torch.backends.cudnn.flags(
            enabled=True, allow_tf32=True):
        out = fast(x)
        grad = torch.randn_like(out)
        got = torch.autograd.grad(out, (x, fast.weight, fast.bias), grad)
        expected = torch.autograd.grad(F.leaky_relu(ref(x), 0.01), (x, ref.weight, ref.bias), grad)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=2e-3, atol=2e-3)


def test_module_with_activation_compiles_fullgraph():
    ref, fast = _layer(torch.float16, activation="relu")
    x = torch.randn(2, 64, 8, 8, device="cuda", dtype=torch.float16)
    compiled = torch.compile(fast, fullgraph=True)
    with torch.no_grad():
        got = compiled(x)
        expected = F.relu(ref(x))
    torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("activation", NAMES)
def test_fused_op_cuda_all_activations_against_float64(activation):
    torch.manual_seed(1)
    x = torch.randn(3, 48, 9, 11, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(48, 40, 3, 3, device="cuda", dtype=torch.bfloat16) / 20
    b = torch.randn(40, device="cuda", dtype=torch.bfloat16)
    scale, shift = torch.rand(40, device="cuda") + 0.5, torch.randn(40, device="cuda")
    args = ConvTransposeArgs.from_values(2, 1, 1)
    got = FUSED(x, w, b, 2, 1, 1, 1, 1, scale, shift, activation, 0.1)
    ref = apply_epilogue(conv_transpose2d_float64(x, w, b, args), scale.double(), shift.double(),
                         activation, 0.1)
    unfused = apply_epilogue(F.conv_transpose2d(x, w, b, 2, 1, 1), scale, shift, activation, 0.1)
    assert max_error(got, ref) <= allowed_error(max_error(unfused, ref), ref, torch.bfloat16)
