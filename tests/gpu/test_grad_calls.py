"""Calls autograd records (deconv_patch/grad_calls.py): PyTorch's convolution runs them by
default; with kernels_in_training a patched layer runs its plan's kernel as a node whose backward
is ATen's convolution_backward, autotune on or off, for whichever of input, weight and bias need
gradients, across optimizer steps and double backward, while a layer's own activation and routed
functional calls still run PyTorch's; training graphs under torch.compile keep aten
convolutions. Every check compares outputs and gradients with nn.ConvTranspose2d's or ATen's
backward on fresh random data."""

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
from tests.helpers import assert_step_within_bar

pytestmark = pytest.mark.cuda


def _pair(dtype=torch.bfloat16, kernels_in_training=True):
    """A layer whose untimed plan is a kernel of ours (k == stride, channels_last input), as
    nn.ConvTranspose2d and as patched, sharing nothing."""
    torch.manual_seed(0)
    ref = nn.ConvTranspose2d(64, 64, 2, 2, device="cuda", dtype=dtype).train()
    fast = deconv_patch.FastConvTranspose2d.from_module(copy.deepcopy(ref))
    fast.kernels_in_training = kernels_in_training
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


def _recorded_by_us(y: torch.Tensor) -> bool:
    """Whether y's autograd node is the recorded kernel call's (cuda/binding/recorded_call.cpp)."""
    return "ConvTransposeFunction" in y.grad_fn.name()


def _aten_grads(x, weight, bias, grad, args):
    """ATen's convolution_backward for these tensors: what the recorded node must return."""
    stride, padding, output_padding, groups, dilation = args
    return torch.ops.aten.convolution_backward(
        grad, x, weight, None if bias is None else [bias.shape[0]], stride, padding, dilation,
        True, output_padding, groups, [True, True, bias is not None])


# (not named `benchmark`: pytest-benchmark's fixture has that name)
@pytest.mark.parametrize("kernels_in_training", [None, False], ids=["default", "off"])
@pytest.mark.parametrize("cudnn_benchmark", [False, True])
def test_recorded_calls_of_a_dense_layer_run_pytorch(cudnn_benchmark, kernels_in_training,
                                                     tmp_path, monkeypatch):
    monkeypatch.setattr(autotune, "_CACHE", AutotuneCache(tmp_path / "a.json"))
    ref, fast, x = _pair(kernels_in_training=kernels_in_training)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        assert fast.plan_for(x).uses_kernel  # what an inference call of this layer runs
    with torch.backends.cudnn.flags(enabled=True, benchmark=cudnn_benchmark,
                                    deterministic=True):
        _poison_kernels(monkeypatch)
        grad = torch.randn(4, 64, 64, 64, device="cuda", dtype=x.dtype)
        for _ in range(3):  # the second call reads the cached answer, the third runs in C++
            got_y, got = _step(fast, x, grad)
            want_y, want = _step(ref, x, grad)
            assert torch.equal(got_y, want_y) and got_y.stride() == want_y.stride()
            for g, w in zip(got, want):
                assert torch.equal(g, w)


@pytest.mark.parametrize("cudnn_benchmark", [False, True])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("groups", [64, 4], ids=["depthwise", "16-per-group"])
def test_recorded_calls_of_grouped_kernel_layers_run_it_by_default(
        groups, dtype, channels_last, cudnn_benchmark, tmp_path, monkeypatch):
    """kernels_in_training=None (optimize's default): a layer planned on the grouped kernel
    records its calls on it, armed C++ path included, with the planned backward; its
    gradients against float64 next to nn.ConvTranspose2d's, on fresh inputs each step, across
    optimizer steps; with autotune, recorded calls run PyTorch's until a call without
    gradients has timed the layer, then the grouped kernel if it won; with
    kernels_in_training=False the same layer records PyTorch's."""
    monkeypatch.setattr(autotune, "_CACHE", AutotuneCache(tmp_path / "a.json"))
    torch.manual_seed(4)
    ref = nn.ConvTranspose2d(64, 64, 4, 2, 1, groups=groups, device="cuda", dtype=dtype)
    model = deconv_patch.optimize(nn.Sequential(copy.deepcopy(ref)))
    fast = model[0]
    assert fast.kernels_in_training is None
    layout = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(4, 64, 24, 24, device="cuda", dtype=dtype).contiguous(memory_format=layout)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        if fast.plan_for(x).variant != planner.GROUPED:
            pytest.skip(f"the forward's untimed plan here is {fast.plan_for(x).variant}")
    with torch.backends.cudnn.flags(enabled=True, benchmark=cudnn_benchmark, allow_tf32=True):
        if cudnn_benchmark:
            assert not _recorded_by_us(fast(x.clone().requires_grad_()))  # not timed yet
            with torch.no_grad():
                fast(x)  # (times it)
        opt = torch.optim.SGD(fast.parameters(), lr=0.1)
        for step in range(3):  # the planned call, the armed C++ path, after optimizer steps
            with torch.no_grad():  # the reference on the weights the optimizer left
                ref.weight.copy_(fast.weight)
                ref.bias.copy_(fast.bias)
            x = torch.randn_like(x)
            grad = torch.randn(4, 64, 48, 48, device="cuda", dtype=dtype).contiguous(
                memory_format=layout)
            xg = x.clone().requires_grad_()
            y = fast(xg)
            if not cudnn_benchmark:
                assert fast.backend == fast.training_backend == planner.GROUPED
                assert _recorded_by_us(y), y.grad_fn
            else:  # the timed plan's kernel where it is the grouped one or another kernel
                # whose calls train on ours (planner.trains_on_kernel: in TF32 NCHW our
                # forward), else PyTorch's
                trains = planner.trains_on_kernel(
                    fast.backend, dtype, fast._args(fast.output_padding), fast.weight.shape,
                    hopper=planner.hopper_device(x.device), call=(x.shape, channels_last))
                assert _recorded_by_us(y) == trains, fast.backend
                assert fast.training_backend == (fast.backend if trains else planner.ATEN)
                if fast.backend == planner.GROUPED:
                    assert trains
            got = torch.autograd.grad(y, [xg, fast.weight, fast.bias], grad)
            want_y, want = _step(ref, x, grad)
            x64, w64, b64 = (t.detach().double().requires_grad_()
                             for t in (x, fast.weight, fast.bias))
            y64 = F.conv_transpose2d(x64, w64, b64, 2, 1, 0, groups)
            exact = torch.autograd.grad(y64, [x64, w64, b64], grad.double())
            assert_step_within_bar((y, *got), (want_y, *want), (y64, *exact), dtype)
            for p, g in zip(fast.parameters(), got[1:]):
                p.grad = g
            opt.step()
        fast.kernels_in_training = False
        assert not _recorded_by_us(fast(x.clone().requires_grad_()))


@pytest.mark.parametrize("cudnn_benchmark", [False, True])
def test_recorded_calls_run_the_plan_with_atens_backward(cudnn_benchmark, tmp_path,
                                                          monkeypatch):
    monkeypatch.setattr(autotune, "_CACHE", AutotuneCache(tmp_path / "a.json"))
    ref, fast, x = _pair()
    with torch.backends.cudnn.flags(enabled=True, benchmark=cudnn_benchmark, deterministic=True):
        grad = torch.randn(4, 64, 64, 64, device="cuda", dtype=x.dtype)
        for i in range(3):  # autotune's first call, the planned call, the armed C++ path
            xg = x.detach().clone().requires_grad_()
            y = fast(xg)
            with torch.no_grad():
                eval_y = fast(x)  # the plan's kernel, outside autograd
            assert torch.equal(y.detach(), eval_y) and y.stride() == eval_y.stride()
            if i > 0:
                assert fast.backend != planner.ATEN and _recorded_by_us(y)
            want_y, want = _step(ref, x, grad)
            torch.testing.assert_close(y.detach().float(), want_y.float(), rtol=2e-2, atol=2e-2)
            got = torch.autograd.grad(y, [xg, fast.weight, fast.bias], grad)
            # the same backward as nn.ConvTranspose2d's: equal to its gradients bit for bit
            for g, w in zip(got, want):
                assert torch.equal(g, w)


@pytest.mark.parametrize("case", ["no_bias", "frozen_bias", "frozen_weight", "input_only",
                                  "unbatched", "fp32_nchw"])
def test_recorded_calls_give_atens_gradients_for_what_requires_them(case):
    dtype = torch.float32 if case == "fp32_nchw" else torch.bfloat16
    torch.manual_seed(2)
    fast = deconv_patch.FastConvTranspose2d.from_module(nn.ConvTranspose2d(
        64, 32, 4, 2, 1, bias=case != "no_bias", device="cuda", dtype=dtype))
    fast.kernels_in_training = True
    # (fp32: a layer above the untimed rule's TF32 size floor, so a kernel of ours runs it)
    x = torch.randn(*((8, 64, 64, 64) if dtype == torch.float32 else (2, 64, 24, 24)),
                    device="cuda", dtype=dtype)
    if case != "fp32_nchw":
        x = x.contiguous(memory_format=torch.channels_last)
    if case == "unbatched":
        x = x[0]
    if case == "frozen_bias":
        fast.bias.requires_grad_(False)
    if case in ("frozen_weight", "input_only"):
        fast.weight.requires_grad_(False)
        if fast.bias is not None:
            fast.bias.requires_grad_(case != "input_only")
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True):
        assert fast.plan_for(x).uses_kernel
        for _ in range(2):  # planned in Python, then the armed C++ path
            xg = x.detach().clone().requires_grad_()
            y = fast(xg)
            assert _recorded_by_us(y)
            grad = torch.randn_like(y)
            leaves = [t for t in (xg, fast.weight, fast.bias) if t is not None and t.requires_grad]
            got = torch.autograd.grad(y, leaves, grad)
            batched = (x.unsqueeze(0), grad.unsqueeze(0)) if x.dim() == 3 else (x, grad)
            want = _aten_grads(batched[0], fast.weight, fast.bias, batched[1],
                               (fast.stride, fast.padding, fast.output_padding, fast.groups,
                                fast.dilation))
            want = [want[0].reshape(x.shape), want[1], want[2]]
            wanted = [w for t, w in zip((xg, fast.weight, fast.bias), want)
                      if t is not None and t.requires_grad]
            assert len(got) == len(wanted)
            for g, w in zip(got, wanted):
                assert torch.equal(g, w)


def test_recorded_calls_see_optimizer_steps():
    """Each step's forward reads the weight as the optimizer left it (the packed copy follows
    the weight's version), over several SGD steps against nn.ConvTranspose2d's."""
    ref, fast, _ = _pair(torch.float32)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.5)
    opt_fast = torch.optim.SGD(fast.parameters(), lr=0.5)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=False,
                                    deterministic=True):
        assert fast.plan_for(_pair(torch.float32)[2]).uses_kernel
        for _ in range(4):
            x = torch.randn(4, 64, 32, 32, device="cuda").contiguous(
                memory_format=torch.channels_last)
            grad = torch.randn(4, 64, 64, 64, device="cuda")
            for module, opt in ((ref, opt_ref), (fast, opt_fast)):
                opt.zero_grad(set_to_none=True)
                y = module(x.requires_grad_(False))
                y.backward(grad)
                opt.step()
            # (fp32 strict: both sides within a few fp32 ulps of the output's scale; a stale
            # packed weight would be off by the step's whole change)
            torch.testing.assert_close(fast.weight, ref.weight, rtol=1e-4, atol=1e-5)
            with torch.no_grad():
                want = ref(x)
                torch.testing.assert_close(fast(x), want, rtol=0,
                                           atol=1e-5 * want.abs().max().item())


def test_double_backward_through_a_recorded_call():
    ref, fast, x = _pair(torch.float32)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=False):
        results = []
        for module in (fast, ref):
            xg = x.detach().clone().requires_grad_()
            y = module(xg)
            (gx,) = torch.autograd.grad(y.square().sum(), [xg], create_graph=True)
            results.append(torch.autograd.grad(gx.square().sum(), [xg, module.weight]))
        assert _recorded_by_us(fast(x.detach().clone().requires_grad_()))
        for g, w in zip(*results):
            torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-3)


def test_recorded_calls_with_the_modules_activation_run_pytorch(monkeypatch):
    ref, fast, x = _pair()
    fast.activation = "relu"
    _poison_kernels(monkeypatch)
    grad = torch.randn(4, 64, 64, 64, device="cuda", dtype=x.dtype)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True):
        got_y, got = _step(fast, x, grad)
        xg = x.detach().clone().requires_grad_()
        want_y = torch.relu(ref(xg))
        want = torch.autograd.grad(want_y, [xg, ref.weight, ref.bias], grad)
    assert torch.equal(got_y, want_y.detach())
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
    patched = deconv_patch.optimize(copy.deepcopy(model), (x,), progress=False,
                                    kernels_in_training=True)

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


def test_forced_variant_runs_recorded_calls():
    ref, fast, x = _pair()
    variant = fast.plan_for(x).variant
    grad = torch.randn(4, 64, 64, 64, device="cuda", dtype=x.dtype)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True), \
            planner.use_variant(variant):
        xg = x.detach().clone().requires_grad_()
        y = fast(xg)
        assert _recorded_by_us(y)
        got = torch.autograd.grad(y, [xg, fast.weight, fast.bias], grad)
    # (PyTorch's side under the same cuDNN flags: bit for bit needs the same algorithms)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True):
        want_y, want = _step(ref, x, grad)
    torch.testing.assert_close(y.detach().float(), want_y.float(), rtol=2e-2, atol=2e-2)
    for g, w in zip(got, want):
        assert torch.equal(g, w)


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
