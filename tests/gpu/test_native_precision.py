"""Calls PyTorch computes in its native kernels rather than cuDNN (no cuDNN kernel for
output_padding >= stride, cuDNN disabled, a dilated layer in deterministic mode), at PyTorch's
default TF32 settings: those kernels make their GEMMs in cuBLAS, which runs fp32 unless
torch.backends.cuda.matmul allows TF32, so a patched layer's output and gradients must stay
within the bar of PyTorch's fp32 error there (TF32 allowed for convolutions does not apply),
in eval and in training, on fresh inputs; with TF32 allowed in cuBLAS the same calls run TF32."""

from __future__ import annotations

import copy
from typing import Callable, ContextManager, Dict, Tuple

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import deconv_patch
from deconv_patch.kernels import precision
from deconv_patch.reference import tf32_round
from tests.helpers import allowed_error, assert_step_within_bar, max_error, tf32_settings_restored

pytestmark = pytest.mark.cuda

# name: ((batch, in, out, (h, w)), nn.ConvTranspose2d's hyperparameters, the cuDNN flags)
LAYERS: Dict[str, Tuple[Tuple[int, int, int, Tuple[int, int]], dict,
                        Callable[[], ContextManager]]] = {
    "output_padding >= stride": (
        (8, 64, 64, (16, 16)), dict(kernel_size=3, stride=1, padding=1, output_padding=1,
                                    dilation=2),
        lambda: torch.backends.cudnn.flags(enabled=True, allow_tf32=True)),
    "cudnn disabled": (
        (8, 128, 64, (16, 16)), dict(kernel_size=4, stride=2, padding=1),
        lambda: torch.backends.cudnn.flags(enabled=False, allow_tf32=True)),
    "deterministic, dilated": (
        (4, 64, 32, (12, 12)), dict(kernel_size=3, stride=2, padding=2, output_padding=1,
                                    dilation=2),
        lambda: torch.backends.cudnn.flags(enabled=True, deterministic=True, allow_tf32=True)),
}


def _layer(name: str, seed: int) -> Tuple[nn.ConvTranspose2d, Tuple[int, int, int, Tuple[int, int]]]:
    shape, hyper, _ = LAYERS[name]
    gen = torch.Generator().manual_seed(seed)
    original = nn.ConvTranspose2d(shape[1], shape[2], **hyper)
    with torch.no_grad():
        for p in original.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) / 8)
    return original.cuda(), shape


def _exact(original: nn.ConvTranspose2d) -> Callable[..., torch.Tensor]:
    def conv(x, w, b):
        return F.conv_transpose2d(x, w, b, original.stride, original.padding,
                                  original.output_padding, original.groups, original.dilation)
    return conv


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_native_calls_keep_fp32s_precision_at_pytorchs_defaults(name, channels_last):
    original, (n, cin, _, hw) = _layer(name, seed=len(name))
    fast = deconv_patch.FastConvTranspose2d.from_module(copy.deepcopy(original))
    layout = torch.channels_last if channels_last else torch.contiguous_format
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(n, cin, *hw, device="cuda", generator=gen).contiguous(memory_format=layout)
    args = fast._args(fast.output_padding)
    exact = _exact(original)
    with tf32_settings_restored(), LAYERS[name][2]():
        torch.backends.cuda.matmul.allow_tf32 = False  # (PyTorch's default)
        assert not precision.tf32_allowed(args)
        plan = fast.plan_for(x)
        # (in deterministic mode the dilated layer's fp32 rule may keep PyTorch's convolution)
        assert plan.uses_kernel or name == "deterministic, dilated", plan
        with torch.no_grad():
            expected = original(x)
            outs = [fast(x), fast(x)]  # (the second through the armed C++ path)
        ref = exact(x.double(), original.weight.double(), original.bias.double())
        bar = allowed_error(max_error(expected, ref), ref, torch.float32)
        for out in outs:
            assert out.shape == expected.shape and out.stride() == expected.stride()
            assert max_error(out, ref) <= bar, (plan, max_error(out, ref), bar)

        # A training call on fresh data (its forward and backward as the default plans them)
        fresh = torch.randn_like(x).requires_grad_()
        dy = torch.randn_like(expected)
        y = fast(fresh)
        got = (y, *torch.autograd.grad(y, [fresh, fast.weight, fast.bias], dy))
        want_y = original(fresh)
        want = (want_y, *torch.autograd.grad(want_y, [fresh, original.weight, original.bias],
                                             dy))
        x64, w64, b64 = (t.detach().double().requires_grad_()
                         for t in (fresh, original.weight, original.bias))
        y64 = exact(x64, w64, b64)
        exact_step = (y64, *torch.autograd.grad(y64, [x64, w64, b64], dy.double()))
        assert_step_within_bar(got, want, exact_step, torch.float32)

        # cuBLAS allowed TF32: the same call is a TF32 one, as PyTorch's is
        torch.backends.cuda.matmul.allow_tf32 = True
        assert precision.tf32_allowed(args)
        with torch.no_grad():
            tf32_out, tf32_expected = fast(x), original(x)
        operands = exact(tf32_round(x).double(), tf32_round(original.weight).double(),
                         original.bias.double())
        tf32_bar = allowed_error(max(max_error(tf32_expected, ref), max_error(operands, ref)),
                                 ref, torch.float32)
        assert max_error(tf32_out, ref) <= tf32_bar

