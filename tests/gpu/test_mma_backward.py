"""The tensor-core backward kernels (cuda/direct_backward/grad_input_mma.cu, weight_grad_mma.cu):
input and weight gradients in float16 and bfloat16, and in float32 (3xTF32), against float64
and ATen over hyperparameters and layouts (several k steps, channel blocks and pixel ranges), in
memory the allocator has just held NaN; any strides; bit-identical repeats of the weight
gradient; and a training step on them by default where planner.trains_on_kernel says."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import deconv_patch
from deconv_patch.kernels import planner
from deconv_patch.kernels.extension import load_units
from deconv_patch.reference import tf32_round
from tests.gpu.test_direct_backward import CASES as DIRECT_CASES
from tests.gpu.test_direct_backward import Case, _aten, _poison, _tensors, assert_gradient, \
    recorded_step, step_inputs
from tests.helpers import allowed_error, assert_step_within_bar, max_error

pytestmark = pytest.mark.cuda

CASES = DIRECT_CASES + [
    (2, 96, 48, (13, 11), (3, 3), (1, 1), (1, 1), (0, 0), (1, 1), 1),   # 432 k: 14 steps
    (16, 64, 3, (32, 32), (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 1),   # DCGAN g5, 128 ranges
    (4, 128, 128, (9, 9), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 8),   # 16 per group
    (8, 100, 72, (1, 1), (4, 4), (1, 1), (0, 0), (0, 0), (1, 1), 1),    # a 1 x 1 input
    (2, 130, 66, (6, 5), (2, 3), (3, 2), (0, 1), (2, 1), (1, 2), 2),    # 65 / 33 per group
]
DTYPES = [torch.bfloat16, torch.float16]


@pytest.fixture(scope="module")
def core():
    return load_units(())


def _hyper(case: Case):
    _, _, _, _, _, s, p, _, d, g = case
    return list(s), list(p), list(d), g


def _mma_gradients(core, case: Case, x, w, dy):
    """Both mma gradients, each into memory the allocator has just held NaN, and float64's."""
    _poison(4 * (x.numel() + w.numel()) * 4)
    got_x = core.mma_grad_input(x, dy, w, *_hyper(case))
    _poison(4 * w.numel() * 512)
    got_w = core.mma_weight_grad(x, dy, w, *_hyper(case))
    ref_x, ref_w, _ = _aten(x.double(), w.double(), dy.double(), case, [True, True, False])
    return got_x, got_w, ref_x, ref_w


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_gradients_against_float64(core, case, dtype, channels_last):
    x, w, dy = _tensors(case, dtype, channels_last, seed=hash((case, str(dtype), 3)) % 1000)
    pytorch_x, pytorch_w, _ = _aten(x, w, dy, case, [True, True, False])
    got_x, got_w, ref_x, ref_w = _mma_gradients(core, case, x, w, dy)
    assert_gradient(got_x, x, ref_x, pytorch_x, dtype)
    assert_gradient(got_w, w, ref_w, pytorch_w, dtype)


def test_strided_operands_are_read_in_place(core):
    """x a strided view, grad_output with its rows and columns swapped in memory, the weight
    channels_last: each read through its strides."""
    case = CASES[-1]
    x, w, dy = _tensors(case, torch.bfloat16, False, seed=11)
    x_view = torch.randn(x.shape[0], x.shape[1], x.shape[2], 2 * x.shape[3], device="cuda",
                         dtype=x.dtype)[..., ::2].copy_(x)
    dy_t = dy.transpose(2, 3).contiguous().transpose(2, 3)
    w_cl = w.contiguous(memory_format=torch.channels_last)
    hyper = _hyper(case)
    ref_x, ref_w, _ = _aten(x.double(), w.double(), dy.double(), case, [True, True, False])
    pytorch_x, pytorch_w, _ = _aten(x, w, dy, case, [True, True, False])
    got_x = core.mma_grad_input(x_view, dy_t, w_cl, *hyper)
    got_w = core.mma_weight_grad(x_view, dy_t, w_cl, *hyper)
    assert got_w.stride() == w_cl.stride()
    assert max_error(got_x, ref_x) <= allowed_error(max_error(pytorch_x, ref_x), ref_x,
                                                    torch.bfloat16)
    assert max_error(got_w, ref_w) <= allowed_error(max_error(pytorch_w, ref_w), ref_w,
                                                    torch.bfloat16)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_weight_gradient_repeats_bit_for_bit(core, channels_last):
    case = CASES[-4]
    x, w, dy = _tensors(case, torch.bfloat16, channels_last, seed=5)
    first = core.mma_weight_grad(x, dy, w, *_hyper(case))
    for _ in range(3):
        _poison(first.numel() * 512)
        assert torch.equal(core.mma_weight_grad(x, dy, w, *_hyper(case)), first)


def test_an_empty_batch(core):
    w = torch.randn(16, 4, 4, 4, device="cuda", dtype=torch.float16)
    x = torch.randn(0, 16, 5, 5, device="cuda", dtype=torch.float16)
    dy = torch.randn(0, 4, 10, 10, device="cuda", dtype=torch.float16)
    assert core.mma_grad_input(x, dy, w, [2, 2], [1, 1], [1, 1], 1).shape == x.shape
    assert torch.equal(core.mma_weight_grad(x, dy, w, [2, 2], [1, 1], [1, 1], 1),
                       torch.zeros_like(w))


def assert_within_tf32_bar(got: torch.Tensor, exact: torch.Tensor, pytorch: torch.Tensor,
                           tf32: torch.Tensor) -> float:
    """The bar with TF32 allowed: PyTorch's error counted as at least `tf32`'s (float64 on
    TF32-rounded operands). Returns that TF32 error."""
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    err, tf32_err = max_error(got, exact), max_error(tf32, exact)
    bar = allowed_error(max(max_error(pytorch, exact), tf32_err), exact, torch.float32)
    assert err <= bar, (err, bar)
    return tf32_err


def assert_3xtf32(got: torch.Tensor, like: torch.Tensor, exact: torch.Tensor,
                  pytorch: torch.Tensor, tf32: torch.Tensor) -> None:
    """An fp32 gradient with `like`'s sizes and strides within the bar with TF32 allowed and at
    most a tenth of TF32's own error: three TF32 products, about fp32's accuracy, not one."""
    assert got.shape == like.shape and got.stride() == like.stride()
    tf32_err = assert_within_tf32_bar(got, exact, pytorch, tf32)
    if got.numel():
        assert max_error(got, exact) <= 0.1 * tf32_err, (max_error(got, exact), tf32_err)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_float32_gradients_are_3xtf32(core, case, channels_last):
    """fp32 operands run as 3xTF32, for the layers the planner gives them with TF32 allowed:
    both gradients within that mode's bar and far inside TF32's own error (assert_3xtf32)."""
    x, w, dy = _tensors(case, torch.float32, channels_last, seed=hash((case, 32)) % 1000)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        pytorch_x, pytorch_w, _ = _aten(x, w, dy, case, [True, True, False])
    got_x, got_w, ref_x, ref_w = _mma_gradients(core, case, x, w, dy)
    x_r, w_r, dy_r = (tf32_round(t.double()) for t in (x, w, dy))
    tf32_x, tf32_w, _ = _aten(x_r, w_r, dy_r, case, [True, True, False])
    assert_3xtf32(got_x, x, ref_x, pytorch_x, tf32_x)
    assert_3xtf32(got_w, w, ref_w, pytorch_w, tf32_w)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("mode", ["bf16", "fp16", "tf32", "tf32-kernels", "fp32",
                                  "bf16-autocast"])
def test_a_few_output_channel_layer_trains_on_ours_by_default(mode, channels_last):
    """DCGAN's RGB output (64 > 3, k4 s2): with kernels_in_training left at None, recorded calls
    in 16-bit (and under bf16 autocast) run our forward with both gradients on the tensor-core
    kernels; fp32 calls stay PyTorch's, with TF32 allowed or not. With kernels_in_training=True
    ("tf32-kernels") an fp32 call with TF32 allowed runs our forward and the tensor-core weight
    gradient (3xTF32, as assert_3xtf32 says). Three steps with
    optimizer updates on fresh inputs (the planned call, then the armed C++ path); outputs and
    all three gradients against float64 next to PyTorch's."""
    autocast = mode.endswith("autocast")
    tf32 = mode.startswith("tf32")
    dtype = torch.float32 if tf32 or mode == "fp32" or autocast else \
        {"bf16": torch.bfloat16, "fp16": torch.float16}[mode]
    run_dtype = torch.bfloat16 if autocast else dtype
    torch.manual_seed(3)
    ref = nn.ConvTranspose2d(64, 3, 4, 2, 1, device="cuda", dtype=dtype)
    chosen = True if mode == "tf32-kernels" else None
    model = deconv_patch.optimize(nn.Sequential(copy.deepcopy(ref)), kernels_in_training=chosen)
    fast = model[0]
    assert fast.kernels_in_training is chosen
    layout = torch.channels_last if channels_last else torch.contiguous_format
    ours = mode not in ("tf32", "fp32")
    opt = torch.optim.SGD(fast.parameters(), lr=0.1)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=mode != "fp32"), \
            torch.autocast("cuda", torch.bfloat16, enabled=autocast):
        for _ in range(3):
            x, dy = step_inputs(fast, ref, (16, 64, 24, 20), (16, 3, 48, 40), dtype, layout,
                                dy_dtype=run_dtype)
            variant = fast.plan_for(x).variant  # (under autocast, for autocast's casts)
            if ours and chosen is None and not autocast and not planner.trains_on_kernel(
                    variant, dtype, fast._args(fast.output_padding), tuple(fast.weight.shape)):
                pytest.skip(f"the forward's plan here is {variant}")
            names, got, want, exact = recorded_step(
                fast, ref, x, dy, lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1))
            assert ("ConvTransposeFunction" in got[0].grad_fn.name()) == ours, got[0].grad_fn
            # (training_backend answers for the dtype the calls ran in: autocast's)
            assert (fast.training_backend != planner.ATEN) == ours
            assert any("mma_weight_grad_partial" in n for n in names) == ours, names
            assert any("mma_grad_input" in n for n in names) == (ours and not tf32), names
            if ours and tf32:  # the bias's gradient is ATen's on both sides
                x_r, w_r, dy_r = (tf32_round(t.detach().double()) for t in (x, fast.weight, dy))
                tf32_y = F.conv_transpose2d(x_r.requires_grad_(), w_r.requires_grad_(),
                                            fast.bias.detach().double(), 2, 1)
                tf32_x, tf32_w = torch.autograd.grad(tf32_y, [x_r, w_r], dy_r)
                assert_within_tf32_bar(got[0], exact[0], want[0], tf32_y)
                assert_within_tf32_bar(got[1], exact[1], want[1], tf32_x)  # (cuDNN's)
                assert_3xtf32(got[2], fast.weight, exact[2], want[2], tf32_w)
                assert_step_within_bar(got[3:], want[3:], exact[3:], run_dtype)
            else:
                assert_step_within_bar(got, want, exact, run_dtype)
            for p, g in zip(fast.parameters(), got[2:]):
                p.grad = g
            opt.step()
