"""Calls autograd records (deconv_patch/grad_calls.py): PyTorch's own convolution runs them,
autotune on or off; a forced variant runs regardless; training graphs under torch.compile keep
aten convolutions. Every check compares outputs and gradients with nn.ConvTranspose2d's on fresh
random data."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import deconv_patch
from deconv_patch import modules, ops
from deconv_patch.kernels import autotune, planner
from deconv_patch.kernels.autotune import AutotuneCache

pytestmark = pytest.mark.cuda


def _pair(dtype=torch.bfloat16):
    """A layer whose untimed plan is a kernel of ours (k == stride, channels_last input), as
    nn.ConvTranspose2d and as patched, sharing nothing."""
    torch.manual_seed(0)
    ref = nn.ConvTranspose2d(64, 64, 2, 2, device="cuda", dtype=dtype).train()
    fast = deconv_patch.FastConvTranspose2d.from_module(copy.deepcopy(ref))
    x = torch.randn(4, 64, 32, 32, device="cuda", dtype=dtype).contiguous(
        memory_format=torch.channels_last)
    return ref, fast, x


def _step(module: nn.Module, x: torch.Tensor, grad: torch.Tensor):
    xg = x.detach().clone().requires_grad_()
    y = module(xg)
    grads = torch.autograd.grad(y, [xg, module.weight, module.bias], grad)
    return y.detach(), grads


def _poison_kernels(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a kernel of ours ran a recorded call")
    monkeypatch.setattr(modules, "conv_transpose2d", refuse)
    monkeypatch.setattr(modules, "conv_transpose2d_fused", refuse)
    monkeypatch.setattr(modules, "kernel_call", refuse)


# (not named `benchmark`: pytest-benchmark's fixture has that name)
@pytest.mark.parametrize("cudnn_benchmark", [False, True])
def test_recorded_calls_run_pytorch(cudnn_benchmark, tmp_path, monkeypatch):
    monkeypatch.setattr(autotune, "_CACHE", AutotuneCache(tmp_path / "a.json"))
    ref, fast, x = _pair()
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        assert fast.plan_for(x).uses_kernel  # what an inference call of this layer runs
    with torch.backends.cudnn.flags(enabled=True, benchmark=cudnn_benchmark,
                                    deterministic=True):
        _poison_kernels(monkeypatch)
        grad = torch.randn(4, 64, 64, 64, device="cuda", dtype=x.dtype)
        for _ in range(2):  # the second call reads the cached step answer
            got_y, got = _step(fast, x, grad)
            want_y, want = _step(ref, x, grad)
            assert torch.equal(got_y, want_y) and got_y.stride() == want_y.stride()
            for g, w in zip(got, want):
                assert torch.equal(g, w)


def test_routed_functional_calls_run_pytorch_when_recorded(monkeypatch):
    class Up(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(64, 32, 2, 2, device="cuda") * 0.1)

        def forward(self, x):
            return F.conv_transpose2d(x, self.weight, None, 2)

    torch.manual_seed(1)
    model = Up()
    x = torch.randn(2, 64, 16, 16, device="cuda")
    patched = deconv_patch.optimize(copy.deepcopy(model), (x,), progress=False)

    def refuse(*args, **kwargs):
        raise AssertionError("the op ran a recorded call")

    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True):
        x2 = torch.randn(2, 64, 16, 16, device="cuda", requires_grad=True)
        monkeypatch.setattr(ops, "conv_transpose2d", refuse)
        y = patched(x2)
        want = model(x2)
        assert torch.equal(y, want)
        g = torch.randn_like(y)
        got = torch.autograd.grad(y, [x2, patched.weight], g)
        expected = torch.autograd.grad(want, [x2, model.weight], g)
        for a, b in zip(got, expected):
            assert torch.equal(a, b)


def test_forced_variant_runs_recorded_calls(monkeypatch):
    ref, fast, x = _pair()
    variant = fast.plan_for(x).variant
    calls = []
    real = modules.conv_transpose2d

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(modules, "conv_transpose2d", spy)
    grad = torch.randn(4, 64, 64, 64, device="cuda", dtype=x.dtype)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False), planner.use_variant(variant):
        got_y, got = _step(fast, x, grad)
    assert calls
    want_y, want = _step(ref, x, grad)
    torch.testing.assert_close(got_y.float(), want_y.float(), rtol=2e-2, atol=2e-2)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w.float(), rtol=2e-2, atol=2e-2)


def test_compiled_training_graph_keeps_aten_convolutions():
    ref, fast, x = _pair(torch.float32)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(fast, backend=backend)
    grad = torch.randn(4, 64, 64, 64, device="cuda")
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=False):
        got_y, got = _step(compiled, x, grad)
        want_y, want = _step(ref, x, grad)
    targets = [str(n.target) for gm in graphs for n in gm.graph.nodes]
    assert graphs and not any("deconv_patch" in t for t in targets)
    torch.testing.assert_close(got_y, want_y, rtol=1e-5, atol=1e-5)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
