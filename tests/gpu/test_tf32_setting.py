"""With TF32 turned off for convolutions through the per-operator API
(torch.backends.cudnn.conv.fp32_precision = "ieee", RNN's left as it is, so the legacy
allow_tf32 getter raises), a patched layer and a patched model run, and their fp32 results are
held to full fp32's bar against float64 (2x PyTorch's error + 1 ulp): a kernel reading the
wrong setting would round its operands to TF32, about 1000x that error."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from deconv_patch import FastConvTranspose2d, optimize
from tests.helpers import HAS_FP32_PRECISION_API, bound_check, tf32_settings_restored

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not HAS_FP32_PRECISION_API,
                                 reason="torch without the per-operator fp32_precision API")]


@pytest.fixture(autouse=True)
def conv_in_ieee():
    benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    with tf32_settings_restored():
        torch.backends.cudnn.conv.fp32_precision = "ieee"
        yield
    torch.backends.cudnn.benchmark = benchmark


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("shape", [(64, 64, 4, 2, 1), (128, 64, 2, 2, 0), (32, 3, 4, 2, 1)],
                         ids=["k4s2", "k2s2", "few-out"])
def test_a_patched_layer_computes_full_fp32(shape, channels_last):
    cin, cout, k, s, p = shape
    torch.manual_seed(0)
    conv = nn.ConvTranspose2d(cin, cout, k, s, p).cuda()
    fast = FastConvTranspose2d.from_module(copy.deepcopy(conv))
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(8, cin, 24, 24, device="cuda").contiguous(memory_format=fmt)
    with torch.no_grad():
        for _ in range(2):  # (the first call plans, the second runs the armed fast path)
            out = fast(x)
        theirs = conv(x)
        ref = F.conv_transpose2d(x.double(), conv.weight.double(), conv.bias.double(), s, p)
    bound_check(ref, theirs, out, torch.float32, f"{shape} {fmt}")


def test_a_patched_model_with_a_fused_chain_computes_full_fp32():
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(64)
    with torch.no_grad():
        bn.running_mean.normal_(0, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    original = nn.Sequential(nn.ConvTranspose2d(64, 64, 4, 2, 1), bn, nn.ReLU(),
                             nn.ConvTranspose2d(64, 32, 2, 2)).cuda().eval()
    patched = optimize(copy.deepcopy(original), torch.randn(2, 64, 16, 16, device="cuda"))
    x = torch.randn(4, 64, 16, 16, device="cuda")
    with torch.no_grad():
        out = patched(x)
        theirs = original(x)
        ref = copy.deepcopy(original).double()(x.double())
    bound_check(ref, theirs, out, torch.float32, "model")
