"""The direct backward kernels (cuda/direct_backward): input and weight gradients against
float64 and ATen over hyperparameters, dtypes and layouts, in memory the allocator has just held
NaN (an element left unwritten shows); bit-identical repeats of the weight gradient; and a
recorded call's backward (kernels_in_training) running them where planner.backward_plan says,
with a double backward keeping ATen's differentiable one."""

from __future__ import annotations

import copy
from typing import Optional, Tuple

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import deconv_patch
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.kernels import planner
from deconv_patch.kernels.extension import load_units
from tests.helpers import (allowed_error, assert_step_within_bar, max_error,
                           tf32_settings_restored)

pytestmark = pytest.mark.cuda

# (batch, in, out, (h, w), kernel, stride, padding, output_padding, dilation, groups)
Case = Tuple[int, int, int, Tuple[int, int], Tuple[int, int], Tuple[int, int], Tuple[int, int],
             Tuple[int, int], Tuple[int, int], int]
CASES = [
    (4, 64, 64, (16, 16), (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 64),    # depthwise k4 s2
    (3, 48, 3, (12, 10), (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 1),      # DCGAN's RGB output
    (2, 56, 1, (20, 18), (9, 9), (3, 3), (4, 4), (2, 2), (1, 1), 1),      # FSRCNN's k9 s3
    (2, 32, 64, (9, 11), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 16),     # 2 in / 4 out per group
    (2, 16, 16, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1), (2, 2), 4),       # output_padding >= stride
    (2, 8, 4, (7, 9), (3, 5), (1, 2), (1, 2), (0, 1), (2, 1), 2),         # asymmetric, dilated
    (1, 3, 2, (1, 1), (4, 4), (1, 1), (0, 0), (0, 0), (1, 1), 1),         # a 1 x 1 input
    (2, 40, 40, (33, 35), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 40),    # k == s, odd sizes
    (2, 96, 48, (10, 14), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),     # two channel blocks
]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(scope="module")
def core():
    return load_units(())


def _tensors(case: Case, dtype: torch.dtype, channels_last: bool, seed: int):
    n, cin, cout, hw, k, s, p, op, d, g = case
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(n, cin, *hw, device="cuda", generator=gen).to(dtype)
    w = (torch.randn(cin, cout // g, *k, device="cuda", generator=gen) / 4).to(dtype)
    out = F.conv_transpose2d(x.float(), w.float(), None, s, p, op, g, d)
    dy = torch.randn(out.shape, device="cuda", generator=gen).to(dtype)
    if channels_last:
        x, dy = (t.contiguous(memory_format=torch.channels_last) for t in (x, dy))
    return x, w, dy


def _aten(x, w, dy, case: Case, mask) -> Tuple[torch.Tensor, ...]:
    _, _, _, _, _, s, p, op, d, g = case
    return torch.ops.aten.convolution_backward(dy, x, w, None, list(s), list(p), list(d), True,
                                               list(op), g, mask)


def assert_gradient(got: torch.Tensor, like: torch.Tensor, exact: torch.Tensor,
                    pytorch: torch.Tensor, dtype: torch.dtype) -> None:
    """A gradient with `like`'s sizes and strides, in `dtype`, finite, and within the bar
    against float64 (`exact`) given PyTorch's own error."""
    assert got.shape == like.shape and got.dtype == dtype and got.stride() == like.stride()
    assert torch.isfinite(got).all()
    assert max_error(got, exact) <= allowed_error(max_error(pytorch, exact), exact, dtype)


def _poison(numel: int) -> None:
    """Leaves the caching allocator a just-freed block of NaN of `numel` floats."""
    torch.full((numel,), float("nan"), device="cuda")


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_gradients_against_float64(core, case, dtype, channels_last):
    x, w, dy = _tensors(case, dtype, channels_last, seed=hash((case, str(dtype))) % 1000)
    _, _, _, _, _, s, p, _, d, g = case
    hyper = (list(s), list(p), list(d), g)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        pytorch_x, pytorch_w, _ = _aten(x, w, dy, case, [True, True, False])
        _poison(4 * (x.numel() + w.numel()) * 4)
        got_x = core.direct_grad_input(x, dy, w, *hyper)
        _poison(4 * w.numel() * 64)
        got_w = core.direct_weight_grad(x, dy, w, *hyper)
        _poison(4 * (x.numel() + w.numel()) * 4)
        got_tiled = core.tiled_grad_input(x, dy, w, *hyper)
        _poison(4 * w.numel() * 512)
        got_tiled_w = core.tiled_weight_grad(x, dy, w, *hyper)
    ref_x, ref_w, _ = _aten(x.double(), w.double(), dy.double(), case, [True, True, False])
    assert_gradient(got_tiled_w, w, ref_w, pytorch_w, dtype)
    assert_gradient(got_tiled, x, ref_x, pytorch_x, dtype)
    assert_gradient(got_x, x, ref_x, pytorch_x, dtype)
    assert_gradient(got_w, w, ref_w, pytorch_w, dtype)


def test_strided_views_are_read_in_place(core):
    case = CASES[0]
    x, w, dy = _tensors(case, torch.float32, False, seed=7)
    x_view = torch.randn(x.shape[0], x.shape[1], x.shape[2], 2 * x.shape[3],
                         device="cuda")[..., ::2].copy_(x)
    hyper = ([2, 2], [1, 1], [1, 1], 64)
    ref_x, ref_w, _ = _aten(x.double(), w.double(), dy.double(), case, [True, True, False])
    pytorch_x, pytorch_w, _ = _aten(x, w, dy, case, [True, True, False])
    got_x = core.direct_grad_input(x_view, dy, w, *hyper)
    got_tiled = core.tiled_grad_input(x_view, dy.transpose(2, 3).contiguous().transpose(2, 3), w,
                                      *hyper)
    got_w = core.direct_weight_grad(x_view, dy.transpose(2, 3).contiguous().transpose(2, 3), w,
                                    *hyper)
    got_tiled_w = core.tiled_weight_grad(x_view, dy.transpose(2, 3).contiguous().transpose(2, 3),
                                         w, *hyper)
    assert max_error(got_x, ref_x) <= allowed_error(max_error(pytorch_x, ref_x), ref_x,
                                                    torch.float32)
    assert max_error(got_tiled, ref_x) <= allowed_error(max_error(pytorch_x, ref_x), ref_x,
                                                        torch.float32)
    assert max_error(got_w, ref_w) <= allowed_error(max_error(pytorch_w, ref_w), ref_w,
                                                    torch.float32)
    assert max_error(got_tiled_w, ref_w) <= allowed_error(max_error(pytorch_w, ref_w), ref_w,
                                                          torch.float32)


@pytest.mark.parametrize("tiled", [False, True], ids=["direct", "tiled"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weight_gradient_repeats_bit_for_bit(core, dtype, tiled):
    case = CASES[1]
    x, w, dy = _tensors(case, dtype, True, seed=5)
    grad = core.tiled_weight_grad if tiled else core.direct_weight_grad
    first = grad(x, dy, w, [2, 2], [1, 1], [1, 1], 1)
    for _ in range(3):
        _poison(first.numel() * 512)
        assert torch.equal(grad(x, dy, w, [2, 2], [1, 1], [1, 1], 1), first)


def test_an_empty_batch(core):
    w = torch.randn(16, 1, 4, 4, device="cuda")
    x = torch.randn(0, 16, 5, 5, device="cuda")
    dy = torch.randn(0, 16, 10, 10, device="cuda")
    assert core.direct_grad_input(x, dy, w, [2, 2], [1, 1], [1, 1], 16).shape == x.shape
    assert core.tiled_grad_input(x, dy, w, [2, 2], [1, 1], [1, 1], 16).shape == x.shape
    assert torch.equal(core.direct_weight_grad(x, dy, w, [2, 2], [1, 1], [1, 1], 16),
                       torch.zeros_like(w))
    assert torch.equal(core.tiled_weight_grad(x, dy, w, [2, 2], [1, 1], [1, 1], 16),
                       torch.zeros_like(w))


def test_refuses_what_it_does_not_take(core):
    x = torch.randn(2, 4, 5, 5, device="cuda", dtype=torch.float64)
    w = torch.randn(4, 4, 3, 3, device="cuda", dtype=torch.float64)
    dy = torch.randn(2, 4, 9, 9, device="cuda", dtype=torch.float64)
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        core.direct_grad_input(x, dy, w, [2, 2], [1, 1], [1, 1], 1)


def _kernel_names(fn) -> list:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events()]


def step_inputs(fast, ref, x_shape, dy_shape, dtype: torch.dtype, layout: torch.memory_format,
                dy_dtype: Optional[torch.dtype] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """A training step's fresh input (requiring a gradient) and grad_output in `layout`, with
    ref (an nn.ConvTranspose2d) given fast's parameters as the optimizer left them."""
    with torch.no_grad():
        ref.weight.copy_(fast.weight)
        ref.bias.copy_(fast.bias)
    x = torch.randn(*x_shape, device="cuda", dtype=dtype).contiguous(
        memory_format=layout).requires_grad_()
    dy = torch.randn(*dy_shape, device="cuda", dtype=dy_dtype or dtype).contiguous(
        memory_format=layout)
    return x, dy


def recorded_step(fast, ref, x: torch.Tensor, dy: torch.Tensor, exact_conv):
    """One training call of `fast` and of `ref` (an nn.ConvTranspose2d holding fast's parameters)
    on x with grad_output dy: the CUDA kernels fast's call ran (profiled), then its output and
    gradients (x, weight, bias), ref's, and float64's (`exact_conv(x, w, b)`)."""
    box = {}

    def run():
        box["y"] = y = fast(x)
        box["grads"] = torch.autograd.grad(y, [x, fast.weight, fast.bias], dy)

    names = _kernel_names(run)
    want_y = ref(x)
    want = torch.autograd.grad(want_y, [x, ref.weight, ref.bias], dy)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, fast.weight, fast.bias))
    y64 = exact_conv(x64, w64, b64)
    exact = torch.autograd.grad(y64, [x64, w64, b64], dy.double())
    return names, (box["y"], *box["grads"]), (want_y, *want), (y64, *exact)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_training_step_with_kernels_in_training_runs_them(dtype, channels_last):
    """A depthwise layer (planner.backward_plan: the direct weight gradient, and in channels_last
    the direct input gradient), its step's gradients against float64 and nn.ConvTranspose2d's on
    inputs other than the planning ones."""
    torch.manual_seed(0)
    original = nn.ConvTranspose2d(64, 64, 4, 2, 1, groups=64, device="cuda", dtype=dtype)
    layer = deconv_patch.FastConvTranspose2d.from_module(original)
    layer.kernels_in_training = True
    layout = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(8, 64, 32, 32, device="cuda", dtype=dtype).contiguous(memory_format=layout)
    args = ConvTransposeArgs.from_values((2, 2), (1, 1), (0, 0), 64, (1, 1))
    backward = planner.backward_plan(x.device, dtype, layer.weight.shape, args, channels_last)
    assert backward.weight_grad.variant == planner.DIRECT_BACKWARD, backward
    assert (backward.grad_input.variant == planner.DIRECT_BACKWARD) == channels_last, backward
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True, benchmark=False):
        if not layer.plan_for(x).uses_kernel:
            pytest.skip(f"the forward's plan here is {layer.plan_for(x).variant}")
        fresh = torch.randn_like(x).requires_grad_()
        dy = torch.randn(8, 64, 64, 64, device="cuda", dtype=dtype).contiguous(
            memory_format=layout)

        def step():
            layer.zero_grad(set_to_none=True)
            fresh.grad = None
            layer(fresh).backward(dy)

        step()  # (plans)
        names = _kernel_names(step)
        assert any("direct_grad_input" in n for n in names) == channels_last, names
        assert any("direct_weight_grad_partial" in n for n in names), names
        got_x, got_w, got_b = fresh.grad, layer.weight.grad, layer.bias.grad
        fresh.grad = None
        original.zero_grad(set_to_none=True)
        original(fresh).backward(dy)
    case = (8, 64, 64, (32, 32), (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 64)
    ref_x, ref_w, _ = _aten(fresh.detach().double(), layer.weight.detach().double(),
                            dy.double(), case, [True, True, False])
    assert max_error(got_x, ref_x) <= allowed_error(max_error(fresh.grad, ref_x), ref_x, dtype)
    assert max_error(got_w, ref_w) <= \
        allowed_error(max_error(original.weight.grad, ref_w), ref_w, dtype)
    ref_b = dy.double().sum((0, 2, 3))
    assert max_error(got_b, ref_b) <= \
        allowed_error(max_error(original.bias.grad, ref_b), ref_b, dtype)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("mode", ["bf16", "fp32-strict", "tf32", "tf32-gemms"])
def test_a_layer_without_a_cudnn_kernel_trains_on_ours_by_default(mode, channels_last):
    """output_padding >= stride (PyTorch's native im2col kernels, forward and backward, whose
    GEMMs follow cuBLAS's TF32 setting): with kernels_in_training left at None, recorded calls
    run our forward with the tensor-core gradients in bf16 and the tiled ones in fp32 (on Hopper
    the input gradient on gemm_phase_tma's kernel), with TF32 off or allowed for convolutions
    alone (PyTorch's default), where ATen's GEMMs are fp32 either way; with TF32 in cuBLAS too
    ("tf32-gemms") they stay PyTorch's. Three steps with optimizer updates on fresh inputs (the
    planned call, then the armed C++ path); outputs and all three gradients against float64
    next to PyTorch's."""
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    hopper = torch.cuda.get_device_capability() == (9, 0)
    torch.manual_seed(5)
    hyper = dict(stride=1, padding=1, output_padding=1, dilation=2)
    ref = nn.ConvTranspose2d(32, 24, 3, **hyper, device="cuda", dtype=dtype)
    model = deconv_patch.optimize(nn.Sequential(copy.deepcopy(ref)))
    fast = model[0]
    assert fast.kernels_in_training is None
    layout = torch.channels_last if channels_last else torch.contiguous_format
    ours = mode != "tf32-gemms"
    opt = torch.optim.SGD(fast.parameters(), lr=0.1)
    with tf32_settings_restored(), torch.backends.cudnn.flags(
            enabled=True, benchmark=False, allow_tf32=mode.startswith("tf32")):
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32-gemms"
        for step in range(3):
            x, dy = step_inputs(fast, ref, (4, 32, 20, 18), (4, 24, 23, 21), dtype, layout)
            if ours and not fast.plan_for(x).uses_kernel:
                pytest.skip(f"the forward's plan here is {fast.plan_for(x).variant}")
            names, got, want, exact = recorded_step(
                fast, ref, x, dy, lambda x, w, b: F.conv_transpose2d(x, w, b, 1, 1, 1, 1, 2))
            assert ("ConvTransposeFunction" in got[0].grad_fn.name()) == ours, got[0].grad_fn
            assert (fast.training_backend != planner.ATEN) == ours, fast.training_backend
            kind = {"bf16": "mma", "fp32-strict": "tiled", "tf32": "tiled"}.get(mode, "none")
            assert any(f"{kind}_weight_grad_partial" in n for n in names) == ours, names
            # On Hopper the input gradient is gemm_phase_tma's GEMM (after the forward's, where
            # that is the forward's kernel too)
            tma_gemms = sum("conv_transpose2d_gemm_phase_tma_kernel" in n for n in names)
            if hopper and ours:
                forward_tma = fast.plan_for(x).variant.startswith(planner.GEMM_PHASE_TMA)
                assert tma_gemms == 1 + forward_tma, names
                assert not any(f"{kind}_grad_input" in n for n in names), names
            else:
                assert any(f"{kind}_grad_input" in n for n in names) == ours, names
            assert_step_within_bar(got, want, exact, dtype)
            # (ATen's native kernel gives a channels_last input an NCHW gradient; ours keeps
            # the input's layout)
            assert got[1].stride() in (want[1].stride(), x.stride())
            for p, g in zip(fast.parameters(), got[2:]):
                p.grad = g
            opt.step()


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("kernels_in_training", [None, True], ids=["default", "on"])
def test_fp32_strict_training_runs_the_input_gradient_on_gemm_phase_tma(
        kernels_in_training, channels_last):
    """fp32 without TF32 on Hopper, by default and with kernels_in_training=True: a dense layer
    with a cuDNN kernel (DCGAN's second layer at batch 64: 32 output tiles, so its sums run in k
    slices) trains on its planned forward with the input gradient on gemm_phase_tma's kernel
    (3xTF32) and the reduce of its slices; the weight gradient stays cuDNN's. Three steps with
    optimizer updates on fresh inputs; outputs and all three gradients against float64 next to
    PyTorch's."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("gemm_phase_tma runs on compute capability 9.0 only")
    dtype = torch.float32
    torch.manual_seed(9)
    ref = nn.ConvTranspose2d(512, 256, 4, 2, 1, device="cuda", dtype=dtype)
    model = deconv_patch.optimize(nn.Sequential(copy.deepcopy(ref)),
                                  kernels_in_training=kernels_in_training)
    fast = model[0]
    layout = torch.channels_last if channels_last else torch.contiguous_format
    opt = torch.optim.SGD(fast.parameters(), lr=0.1)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=False):
        for step in range(3):
            x, dy = step_inputs(fast, ref, (64, 512, 4, 4), (64, 256, 8, 8), dtype, layout)
            backward = planner.backward_plan(x.device, dtype, fast.weight.shape,
                                             fast._args(fast.output_padding), channels_last)
            assert backward.grad_input.variant == planner.PHASE_TMA_BACKWARD, backward
            assert backward.weight_grad.variant == planner.ATEN, backward
            if not fast.plan_for(x).uses_kernel:
                pytest.skip(f"the forward's plan here is {fast.plan_for(x).variant}")
            names, got, want, exact = recorded_step(
                fast, ref, x, dy, lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1))
            assert "ConvTransposeFunction" in got[0].grad_fn.name(), got[0].grad_fn
            assert fast.training_backend != planner.ATEN, fast.training_backend
            forward_tma = fast.plan_for(x).variant.startswith(planner.GEMM_PHASE_TMA)
            tma_gemms = sum("conv_transpose2d_gemm_phase_tma_kernel" in n for n in names)
            assert tma_gemms == 1 + forward_tma, names
            assert any("k_slice_reduce" in n for n in names), names
            assert_step_within_bar(got, want, exact, dtype)
            for p, g in zip(fast.parameters(), got[2:]):
                p.grad = g
            opt.step()


def test_a_recorded_call_follows_the_cublas_tf32_setting_between_steps():
    """A layer without a cuDNN kernel in fp32 with TF32 allowed for convolutions, training on
    ours (kernels_in_training=True): its forward and input gradient follow ATen's GEMMs, TF32
    where cuBLAS may use TF32 (the input gradient on Hopper's gemm_phase_tma kernel), fp32's
    precision where it may not (3xTF32 on that kernel, elsewhere the fp32 tiled one). The same
    geometry called again after the setting changed is planned again (the module's armed C++
    path and plan cache key on it): with fp32 GEMMs a stale TF32 call would miss the bar by
    orders of magnitude. Each step against float64 next to PyTorch's under the same settings."""
    torch.manual_seed(11)
    dtype, hopper = torch.float32, torch.cuda.get_device_capability() == (9, 0)
    ref = nn.ConvTranspose2d(32, 24, 3, 1, 1, 1, dilation=2, device="cuda", dtype=dtype)
    fast = deconv_patch.FastConvTranspose2d.from_module(copy.deepcopy(ref))
    fast.kernels_in_training = True
    with tf32_settings_restored(), \
            torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=True):
        for matmul_tf32 in (True, False, True, False):
            torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
            x, dy = step_inputs(fast, ref, (4, 32, 20, 18), (4, 24, 23, 21), dtype,
                                torch.contiguous_format)
            if not fast.plan_for(x).uses_kernel:
                pytest.skip(f"the forward's plan here is {fast.plan_for(x).variant}")
            names, got, want, exact = recorded_step(
                fast, ref, x, dy, lambda x, w, b: F.conv_transpose2d(x, w, b, 1, 1, 1, 1, 2))
            assert "ConvTransposeFunction" in got[0].grad_fn.name(), got[0].grad_fn
            tma_gemms = sum("conv_transpose2d_gemm_phase_tma_kernel" in n for n in names)
            forward_tma = fast.plan_for(x).variant.startswith(planner.GEMM_PHASE_TMA)
            assert tma_gemms == forward_tma + hopper, (matmul_tf32, names)
            assert any("tiled_grad_input" in n for n in names) == (
                not matmul_tf32 and not hopper), names
            # (with TF32 in cuBLAS the output is a TF32 forward's next to ATen's, whose bar is
            # the forward tests' TF32 one; with fp32 GEMMs the whole step is fp32's)
            first = 1 if matmul_tf32 else 0
            assert_step_within_bar(got[first:], want[first:], exact[first:], dtype)


def test_a_double_backward_keeps_atens_differentiable_gradients():
    """create_graph=True (a gradient penalty): the first-order gradients are recorded, so they
    come from ATen's differentiable backward, and the second-order ones match the original's."""
    torch.manual_seed(1)
    dtype = torch.float32
    original = nn.ConvTranspose2d(32, 32, 4, 2, 1, groups=32, device="cuda", dtype=dtype)
    layer = deconv_patch.FastConvTranspose2d.from_module(original)
    layer.kernels_in_training = True
    x = torch.randn(4, 32, 16, 16, device="cuda", dtype=dtype)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False, benchmark=False):
        layer(x)  # the forward's plan
        results = []
        for m in (layer, original):
            fresh = x.clone().requires_grad_()
            (gx,) = torch.autograd.grad(m(fresh).square().sum(), fresh, create_graph=True)
            assert gx.grad_fn is not None
            (gw,) = torch.autograd.grad(gx.square().sum(), m.weight)
            results.append((gx.detach(), gw))
    (gx_ours, gw_ours), (gx_torch, gw_torch) = results
    torch.testing.assert_close(gx_ours, gx_torch, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gw_ours, gw_torch, rtol=1e-4, atol=1e-4)
