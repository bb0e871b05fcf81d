"""Autotune on the GPU: the timed choice is one of the planner's candidates, recorded once under
the call's key (a fused layer's under its epilogue's), and its output is within twice PyTorch's
error against float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import deconv_patch
from deconv_patch.kernels import autotune, planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.kernels.autotune import AutotuneCache
from deconv_patch.epilogue import Epilogue

pytestmark = pytest.mark.cuda


def test_fused_layers_are_autotuned_with_their_epilogue(tmp_path, monkeypatch):
    """A FastConvTranspose2d with a fused activation autotunes under a key of its own (the
    epilogue's), picks one of the planner's candidates, and its output matches PyTorch's
    convolution + activation."""
    monkeypatch.setattr(autotune, "_CACHE", AutotuneCache(tmp_path / "a.json"))
    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d(64, 3, 4, 2, 1).cuda().half().eval()
    fast = deconv_patch.FastConvTranspose2d.from_module(conv)
    fast.activation = "tanh"
    x = torch.randn(8, 64, 32, 32, device="cuda", dtype=torch.float16)
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, benchmark=True,
                                                     allow_tf32=True):
        out = torch.empty(1)
        for _ in range(3):  # the first call autotunes, the next ones re-plan and run it
            out = fast(x)
        keys = [k for k in autotune.cache().choices if "epilogue=tanh" in k]
        assert keys == [autotune.call_key(x, fast.weight, True, args, Epilogue(
            activation="tanh"))]
        assert autotune.cache().choices[keys[0]] in planner.plan(x, fast.weight, args).candidates
    ref = torch.tanh(F.conv_transpose2d(x.double(), conv.weight.double(), conv.bias.double(),
                                        2, 1))
    torch_err = (torch.tanh(conv(x)).double() - ref).abs().max()
    assert (out.double() - ref).abs().max() <= 2 * torch_err + 1e-3


def test_autotune_times_candidates_once_and_result_is_correct(tmp_path, monkeypatch):
    monkeypatch.setattr(autotune, "_CACHE", AutotuneCache(tmp_path / "a.json"))
    x = torch.randn(4, 64, 20, 20, device="cuda", dtype=torch.float16)
    w = torch.randn(64, 32, 2, 2, device="cuda", dtype=torch.float16)
    args = ConvTransposeArgs.from_values(stride=2)
    with torch.backends.cudnn.flags(enabled=True, benchmark=True, allow_tf32=True):
        out = torch.ops.deconv_patch.conv_transpose2d(x, w, None, 2)
        key = autotune.call_key(x, w, False, args)
        plan = planner.plan(x, w, args)
        assert autotune.cache().choices[key] in plan.candidates
        again = torch.ops.deconv_patch.conv_transpose2d(x, w, None, 2)
    ref = F.conv_transpose2d(x.double(), w.double(), None, 2)
    assert (out.double() - ref).abs().max() <= 2 * (F.conv_transpose2d(x, w, None, 2).double()
                                                    - ref).abs().max() + 1e-2
    assert torch.equal(out, again)
    assert len(autotune.cache().choices) == 1
