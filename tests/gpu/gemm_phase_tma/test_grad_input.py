"""The input gradient on gemm_phase_tma's kernel (cuda/binding/phase_tma_grad_input.cpp: the
strided correlation of grad_output with the weight, common/params.h's InputGather): against
float64 and ATen in every dtype and fp32 mode (TF32 against the project's bar, which counts the
error of TF32-rounded operands; 3xTF32 on sums of at least MIN_3XTF32_DEPTH products:
grad_output channels x kernel taps), both layouts, over a random sweep of strides,
paddings, output paddings, dilations and kernel sizes (offsets below zero, strides up to 8,
1 x 1 inputs), in memory the allocator has just held NaN; and a clear refusal where it does not
run. Layers of few output tiles run in k slices (a reduce adds the slices' fp32 sums in order).
"""

from __future__ import annotations

import random

import pytest
import torch

from deconv_patch.kernels.extension import load_units
from deconv_patch.kernels.precision import MIN_3XTF32_DEPTH
from deconv_patch.reference import tf32_round
from tests.gpu.test_direct_backward import Case, _aten, _poison, _tensors
from tests.helpers import allowed_error, max_error

pytestmark = pytest.mark.cuda

# (batch, in, out, (h, w), kernel, stride, padding, output_padding, dilation, groups): one group
LAYERS = [
    (4, 256, 128, (8, 8), (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 1),      # DCGAN g3
    (2, 128, 64, (14, 14), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 1),     # k == stride (U-Net)
    (2, 64, 96, (9, 11), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),       # k3 s2 op1, odd sizes
    (2, 32, 40, (7, 9), (3, 5), (1, 2), (1, 2), (0, 1), (2, 1), 1),        # asymmetric, dilated
    (2, 48, 32, (6, 5), (8, 8), (4, 4), (2, 2), (0, 0), (1, 1), 1),        # stride 4
    (2, 56, 8, (10, 12), (9, 9), (3, 3), (4, 4), (2, 2), (1, 1), 1),       # FSRCNN-like k9 s3
    (3, 100, 64, (1, 1), (4, 4), (1, 1), (0, 0), (0, 0), (1, 1), 1),       # a 1 x 1 input
    (2, 32, 32, (8, 8), (1, 1), (2, 2), (1, 1), (0, 0), (1, 1), 1),        # offset below zero
    (1, 16, 16, (5, 4), (2, 3), (8, 7), (0, 1), (3, 2), (1, 1), 1),        # strides 8 and 7
    (8, 512, 256, (16, 16), (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 1),    # many tiles per CTA
]


def _random_case(seed: int) -> Case:
    """A layer in the kernel's domain: one group, output channels filling 16-byte rows of
    grad_output in 16-bit (a multiple of 8), strides up to 8, any padding that leaves an
    output, output_padding below stride or dilation."""
    r = random.Random(seed)
    k = (r.randint(1, 6), r.randint(1, 6))
    s = (r.randint(1, 5), r.randint(1, 5))
    d = (r.randint(1, 3), r.randint(1, 3))
    hw = (r.randint(1, 13), r.randint(1, 13))
    p = tuple(r.randint(0, (ki - 1) * di + 1) for ki, di in zip(k, d))
    op = tuple(r.randint(0, max(si, di) - 1) for si, di in zip(s, d))
    out = [(h - 1) * si - 2 * pi + di * (ki - 1) + oi + 1
           for h, si, pi, di, ki, oi in zip(hw, s, p, d, k, op)]
    if min(out) < 1:
        p = (0, 0)
    return (r.randint(1, 3), r.choice([8, 24, 40, 72, 136]), r.choice([8, 16, 48, 80]), hw, k,
            s, p, op, d, 1)  # type: ignore[return-value]


SWEEP = [_random_case(seed) for seed in range(40)]


@pytest.fixture(scope="module")
def core():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("gemm_phase_tma runs on compute capability 9.0 only")
    return load_units(["gemm_phase_tma"])


def _grad_input(x, w, dy, case: Case) -> torch.Tensor:
    return _aten(x, w, dy, case, [True, False, False])[0]


def _check(core, case: Case, dtype: torch.dtype, tf32: bool, channels_last: bool,
           seed: int) -> None:
    _, _, cout, _, k, _, _, _, _, _ = case
    if dtype == torch.float32 and not tf32 and cout * k[0] * k[1] < MIN_3XTF32_DEPTH:
        pytest.skip("3xTF32 on sums shallower than fp32's bar allows (planner keeps cuDNN)")
    x, w, dy = _tensors(case, dtype, channels_last, seed)
    _, _, _, _, _, s, p, _, d, _ = case
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
        pytorch = _grad_input(x, w, dy, case)
        _poison(4 * x.numel() + 4096)
        got = core.phase_tma_grad_input(x, dy, w, list(s), list(p), list(d), 1)
    exact = _grad_input(x.double(), w.double(), dy.double(), case)
    assert got.shape == x.shape and got.dtype == dtype and got.stride() == x.stride()
    assert torch.isfinite(got).all()
    torch_err = max_error(pytorch, exact)
    if dtype == torch.float32 and tf32:  # the bar counts the error inherent to TF32 operands
        rounded = _grad_input(x.double(), tf32_round(w).double(), tf32_round(dy).double(), case)
        torch_err = max(torch_err, max_error(rounded, exact))
    err, bar = max_error(got, exact), allowed_error(torch_err, exact, dtype)
    assert err <= bar, f"{case} {dtype} tf32={tf32}: error {err:.3e} against a bar of {bar:.3e}"


MODES = [(torch.float32, True), (torch.float32, False), (torch.bfloat16, False),
         (torch.float16, False)]
MODE_IDS = ["tf32", "fp32", "bf16", "fp16"]


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", LAYERS, ids=[f"layer{i}" for i in range(len(LAYERS))])
def test_layers_against_float64(core, case, mode, channels_last):
    _check(core, case, *mode, channels_last, seed=LAYERS.index(case))


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", SWEEP, ids=[f"sweep{i}" for i in range(len(SWEEP))])
def test_sweep_against_float64(core, case, mode):
    _check(core, case, *mode, SWEEP.index(case) % 2 == 1, seed=100 + SWEEP.index(case))


# Few output tiles with deep sums (DCGAN's first layers at batch 64, a 1 x 1 input): the kernel
# splits each tile's sums into k slices, fp32 partials added in order by a reduce kernel.
SLICED = [
    (64, 512, 256, (4, 4), (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 1),    # DCGAN g2
    (64, 100, 512, (1, 1), (4, 4), (1, 1), (0, 0), (0, 0), (1, 1), 1),    # DCGAN g1: 100 channels
    (8, 256, 128, (8, 8), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),     # k3 s2 op1
]
MANY_TILES = (8, 64, 64, (64, 64), (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 1)


def _reduce_ran(fn) -> bool:
    """Whether `fn` launched the k slices' reduce kernel (common/k_slice_reduce.cuh)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return any("k_slice_reduce" in e.name for e in prof.events())


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", SLICED, ids=[f"sliced{i}" for i in range(len(SLICED))])
def test_k_slices_against_float64(core, case, mode, channels_last):
    _check(core, case, *mode, channels_last, seed=200 + SLICED.index(case))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_k_slices_run_where_tiles_are_few_and_repeat_exactly(core, dtype):
    """The sliced layers run the reduce, a layer of many tiles does not; the slices' sum is the
    same, bit for bit, on every call (a fixed order, no atomics)."""
    sliced, many = SLICED[0], MANY_TILES
    x, w, dy = _tensors(sliced, dtype, False, seed=7)
    _, _, _, _, _, s, p, _, d, _ = sliced
    call = lambda: core.phase_tma_grad_input(x, dy, w, list(s), list(p), list(d), 1)  # noqa: E731
    assert _reduce_ran(call)
    first = call()
    for _ in range(3):
        _poison(4 * x.numel() + 4096)
        assert torch.equal(call(), first)
    x2, w2, dy2 = _tensors(many, dtype, False, seed=8)
    _, _, _, _, _, s2, p2, _, d2, _ = many
    assert not _reduce_ran(
        lambda: core.phase_tma_grad_input(x2, dy2, w2, list(s2), list(p2), list(d2), 1))


def test_refuses_what_it_does_not_run(core):
    """Groups (the swapped weight is no strided view) and grad_output channels that do not fill
    16-byte rows are refused with KernelRefused, never computed wrong."""
    x = torch.randn(2, 32, 8, 8, device="cuda")
    w = torch.randn(32, 8, 4, 4, device="cuda")
    dy = torch.randn(2, 16, 16, 16, device="cuda")
    with pytest.raises(RuntimeError, match="one group"):
        core.phase_tma_grad_input(x, dy, w, [2, 2], [1, 1], [1, 1], 2)
    w3 = torch.randn(32, 3, 4, 4, device="cuda")
    dy3 = torch.randn(2, 3, 16, 16, device="cuda")
    with pytest.raises(RuntimeError, match="does not support|supports"):
        core.phase_tma_grad_input(x, dy3, w3, [2, 2], [1, 1], [1, 1], 1)
