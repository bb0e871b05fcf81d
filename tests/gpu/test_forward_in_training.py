"""Recorded calls of dense layers with a cuDNN kernel in TF32 and 16-bit
(kernels/forward_in_training.py): by default our planned forward, recorded as a node whose
backward is ATen's convolution_backward, where the call repays the weight's re-pack (large TF32
calls, large 16-bit kernel == stride calls), PyTorch's convolution elsewhere. Three steps with
optimizer updates (the weight re-packed) on fresh inputs: the output and all three gradients
against float64 beside nn.ConvTranspose2d's, and the gradients equal to nn.ConvTranspose2d's
bit for bit (the same backward on the same tensors, cuDNN deterministic)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import deconv_patch
from deconv_patch.kernels import planner
from tests.gpu.test_direct_backward import recorded_step, step_inputs
from tests.helpers import assert_step_within_bar, tf32_settings_restored

pytestmark = pytest.mark.cuda

NCHW, NHWC = torch.contiguous_format, torch.channels_last


@pytest.mark.parametrize("dtype,layout,cin,cout,k,s,p,x_shape,ours", [
    (torch.float32, NCHW, 512, 256, 4, 2, 1, (8, 512, 48, 16), True),     # 3 x 2^32 multiply-adds
    (torch.float32, NCHW, 512, 256, 4, 2, 1, (8, 512, 32, 16), False),    # 2^33, stride phases
    (torch.float32, NCHW, 64, 32, 4, 2, 1, (8, 64, 16, 16), False),       # 2^26
    (torch.float32, NCHW, 1024, 1024, 4, 1, 0, (768, 1024, 1, 1), True),  # 1 x 1, 3 x 2^32
    (torch.float32, NHWC, 512, 256, 2, 2, 0, (8, 512, 64, 32), True),     # 2^33
    (torch.float32, NHWC, 512, 256, 2, 2, 0, (8, 512, 32, 32), False),    # 2^32
    (torch.bfloat16, NCHW, 512, 256, 2, 2, 0, (8, 512, 32, 32), True),    # 2^32, k == stride
    (torch.bfloat16, NHWC, 512, 256, 2, 2, 0, (2, 512, 32, 32), False),   # 2^30
    (torch.bfloat16, NHWC, 512, 256, 4, 2, 1, (8, 512, 32, 32), False),   # k4 s2 in 16-bit
], ids=["tf32-nchw", "tf32-nchw-phase-2^33", "tf32-nchw-small", "tf32-nchw-1x1", "tf32-nhwc",
        "tf32-nhwc-small",
        "bf16-kxs", "bf16-kxs-small", "bf16-k4s2"])
def test_recorded_calls_run_our_forward_where_the_call_repays_it(dtype, layout, cin, cout, k, s,
                                                                 p, x_shape, ours):
    torch.manual_seed(7)
    ref = nn.ConvTranspose2d(cin, cout, k, s, p, device="cuda", dtype=dtype)
    fast = deconv_patch.optimize(nn.Sequential(copy.deepcopy(ref)))[0]
    assert fast.kernels_in_training is None
    opt = torch.optim.SGD(fast.parameters(), lr=0.1)
    out_hw = [(n - 1) * s - 2 * p + k for n in x_shape[2:]]
    with tf32_settings_restored(), torch.backends.cudnn.flags(
            enabled=True, benchmark=False, deterministic=True, allow_tf32=True):
        torch.backends.cuda.matmul.allow_tf32 = False  # (PyTorch's defaults)
        for _ in range(3):
            x, dy = step_inputs(fast, ref, x_shape, (x_shape[0], cout, *out_hw), dtype, layout)
            if ours and not fast.plan_for(x).uses_kernel:
                pytest.skip(f"the forward's plan here is {fast.plan_for(x).variant}")
            _, got, want, exact = recorded_step(
                fast, ref, x, dy, lambda x, w, b: F.conv_transpose2d(x, w, b, s, p))
            assert ("ConvTransposeFunction" in got[0].grad_fn.name()) == ours, got[0].grad_fn
            assert (fast.training_backend != planner.ATEN) == ours, fast.training_backend
            assert_step_within_bar(got, want, exact, dtype)
            for g, w in zip(got[1:], want[1:]):  # ATen's backward either way
                assert torch.equal(g, w)
            if not ours:
                assert torch.equal(got[0], want[0])
            for param, g in zip(fast.parameters(), got[2:]):
                param.grad = g
            opt.step()


def test_an_fp32_layer_under_bf16_autocast_follows_sixteen_bits_rule():
    """An fp32 model trained under CUDA autocast: its calls run in bf16, where a large
    kernel == stride call runs our forward and a k4 s2 one PyTorch's, whatever TF32 allows."""
    torch.manual_seed(8)
    kxs = deconv_patch.FastConvTranspose2d.from_module(nn.ConvTranspose2d(512, 256, 2, 2).cuda())
    k4s2 = deconv_patch.FastConvTranspose2d.from_module(
        nn.ConvTranspose2d(512, 256, 4, 2, 1).cuda())
    x = torch.randn(8, 512, 32, 32, device="cuda", requires_grad=True)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=True), \
            torch.autocast("cuda", dtype=torch.bfloat16):
        for layer, ours in ((kxs, True), (k4s2, False)):
            if ours and not layer.plan_for(x).uses_kernel:
                pytest.skip(f"the forward's plan here is {layer.plan_for(x).variant}")
            for _ in range(2):  # the planned call, then the armed C++ path
                y = layer(x)
                assert y.dtype == torch.bfloat16
                assert ("ConvTransposeFunction" in y.grad_fn.name()) == ours, y.grad_fn
                with torch.no_grad():
                    want = F.conv_transpose2d(x.bfloat16(), layer.weight.bfloat16(),
                                              layer.bias.bfloat16(), layer.stride,
                                              layer.padding)
                torch.testing.assert_close(y.float(), want.float(), rtol=2e-2, atol=2e-2)
