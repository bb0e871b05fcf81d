"""GPU correctness of the grouped kernel (register-tiled direct kernel for few channels per group:
depthwise, grouped and small dense layers): forced on a NaN-poisoned random sweep of every
hyperparameter against a float64 reference with the bound of tests/helpers.py (2x PyTorch's
own error + 1 ulp of the output; calls outside its domain are refused and skip), and on the
benchmark's grouped layers at full size."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.ops import run_variant
from deconv_patch.reference import conv_transpose2d_float64
from tests.cases import Case, random_case
from tests.helpers import allowed_error, check_variant, max_error

pytestmark = pytest.mark.cuda


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_kernel_keeps_the_largest_shared_memory_opt_in(dtype):
    """Plans of one kernel instance (16 output channels a thread) that opt in to different
    amounts of shared memory above 48 KiB, run larger, smaller, larger in one process: the
    third launch needs the limit the first one raised, which setting the second one's smaller
    amount would have lowered ("launch failed: invalid argument")."""
    # (in, out, kernel): 32 > 16 k3 s2 plans 62,400 bytes, k4 s2 58,304 (fp32 and 16-bit alike:
    # the kernel stages fp32)
    layers = [(32, 16, 3), (32, 16, 4), (32, 16, 3), (32, 16, 4)]
    gen = torch.Generator().manual_seed(7)
    args = ConvTransposeArgs.from_values(2, 1, 0, 1)
    for cin, cout, k in layers:
        x = torch.randn(2, cin, 16, 16, generator=gen).cuda().to(dtype)
        w = torch.randn(cin, cout, k, k, generator=gen).cuda().to(dtype)
        ref = conv_transpose2d_float64(x, w, None, args)
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            expected = F.conv_transpose2d(x, w, None, 2, 1)
            got = run_variant(planner.GROUPED, x, w, None, args,
                              out=torch.full_like(expected, float("nan")))
        assert max_error(got, ref) <= allowed_error(max_error(expected, ref), ref, dtype), \
            (cin, cout, k)
