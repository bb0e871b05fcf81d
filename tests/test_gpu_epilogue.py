"""The fused epilogue on the GPU: every kernel variant with every activation, scale and shift,
against a float64 reference; the fused op and FastConvTranspose2d's direct-to-extension path;
packed weights following in-place weight updates."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from deconv_patch import FastConvTranspose2d, packed_weights, planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.epilogue import ACTIVATIONS, Epilogue, apply_epilogue
from deconv_patch.ops import run_variant
from deconv_patch.reference import conv_transpose2d_float64
from tests.cases import call_args, random_case, random_kxs_case, random_phase_case
from tests.test_gpu_kernels import allowed_error, max_error, tf32_round

pytestmark = pytest.mark.cuda
FUSED = torch.ops.deconv_patch.conv_transpose2d_fused
NAMES = list(ACTIVATIONS)
CASES = {planner.DIRECT: random_case, planner.GEMM_KXS: random_kxs_case,
         planner.GEMM_PHASE: random_phase_case}


def _epilogue(seed: int, channels: int, device: str) -> Epilogue:
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    scale = (torch.rand(channels, generator=gen) + 0.5).to(device) if rng.random() < 0.7 else None
    shift = torch.randn(channels, generator=gen).to(device) if rng.random() < 0.7 else None
    return Epilogue(scale, shift, NAMES[seed % len(NAMES)], rng.choice((0.01, 0.2, 0.5)))


def check_epilogue(variant: str, case, seed: int, via_op: bool = False) -> None:
    """`variant` forced with a random epilogue (seeded) on NaN-poisoned output, against the
    float64 reference of conv -> epilogue; with via_op, the fused op (which plans its own
    variant) must be as accurate and return PyTorch's shape and strides."""
    x, w, b = case.make("cuda", seed)
    epi = _epilogue(seed, case.out_channels, "cuda")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=case.tf32):
        unfused = epi.apply(F.conv_transpose2d(*call_args(case, x, w, b)))
        poisoned = torch.full_like(unfused, float("nan"))
        got = run_variant(variant, x, w, b, case.args, out=poisoned, epilogue=epi)
        fused = FUSED(*call_args(case, x, w, b), epi.scale, epi.shift, epi.activation,
                      epi.negative_slope) if via_op else None
    torch.cuda.synchronize()
    assert got.data_ptr() == poisoned.data_ptr() and not torch.isnan(got).any(), str(case)
    wide = Epilogue(*(None if t is None else t.double() for t in (epi.scale, epi.shift)),
                    epi.activation, epi.negative_slope)
    ref = wide.apply(conv_transpose2d_float64(x, w, b, case.args))
    err, torch_err = max_error(got, ref), max_error(unfused, ref)
    if case.dtype == torch.float32 and case.tf32 and x.numel():
        ref_tf32 = wide.apply(conv_transpose2d_float64(tf32_round(x), tf32_round(w), b, case.args))
        torch_err = max(torch_err, max_error(ref_tf32, ref))
    assert err <= allowed_error(torch_err, ref, case.dtype), (
        f"{case} {epi.activation}: error {err:.3e} vs PyTorch {torch_err:.3e}")
    if fused is not None:
        # The conv's layout: strides equal on every dim of size > 1. A size-1 dim's stride
        # addresses nothing, and PyTorch's own elementwise ops disagree on it (for a 1-channel
        # channels_last tensor, mul keeps stride 1 on C, relu gives H*W).
        assert fused.shape == unfused.shape and all(
            a == b for a, b, n in zip(fused.stride(), unfused.stride(), fused.shape) if n > 1)
        assert max_error(fused, ref) <= allowed_error(torch_err, ref, case.dtype), str(case)


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
    instantiates its staging store once per activation (epilogue.cuh: dispatch_activation)."""
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
