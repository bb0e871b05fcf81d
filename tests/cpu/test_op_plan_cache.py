"""The op's per-geometry plan cache (ops.OpPlanCache), exercised through the op's CUDA kernel
function called with CPU tensors (the planner sends those to PyTorch, with a FallbackWarning):
what must hit, what must miss, and that results do not change."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from deconv_patch import ops
from deconv_patch.kernels import planner
from deconv_patch.epilogue import Epilogue


@pytest.fixture(autouse=True)
def _fresh_cache():
    ops.op_plans().clear()
    yield
    ops.op_plans().clear()


def _call(x, w, b=None, stride=(2, 2), padding=(1, 1), output_padding=(0, 0), groups=1,
          dilation=(1, 1)):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ops.FallbackWarning)
        return ops._conv_transpose2d_cuda(x, w, b, stride, padding, output_padding, groups,
                                          dilation)


def test_repeated_call_hits_and_matches_pytorch():
    x, w, b = torch.randn(2, 6, 5, 4), torch.randn(6, 3, 4, 4), torch.randn(3)
    cache = ops.op_plans()
    first = _call(x, w, b)
    assert cache.misses == 1 and len(cache.entries) == 1
    second = _call(torch.randn(2, 6, 5, 4), w, b)  # same geometry, new data
    assert cache.misses == 1
    torch.testing.assert_close(first, F.conv_transpose2d(x, w, b, 2, 1))
    assert not torch.equal(first, second)


@pytest.mark.parametrize("change", ["shape", "stride_of_input", "dtype", "hyper", "bias",
                                    "tf32_flag", "forced_variant"])
def test_anything_a_plan_depends_on_misses(change):
    x, w = torch.randn(2, 6, 5, 4), torch.randn(6, 3, 4, 4)
    _call(x, w)
    cache = ops.op_plans()
    assert cache.misses == 1
    if change == "shape":
        _call(torch.randn(3, 6, 5, 4), w)
    elif change == "stride_of_input":
        _call(x.contiguous(memory_format=torch.channels_last), w)
    elif change == "dtype":
        _call(x.double(), w.double())
    elif change == "hyper":
        _call(x, w, padding=(0, 0))
    elif change == "bias":
        _call(x, w, torch.randn(3))
    elif change == "tf32_flag":
        with torch.backends.cudnn.flags(enabled=True,
                                        allow_tf32=not torch.backends.cudnn.allow_tf32):
            _call(x, w)
    elif change == "forced_variant":
        with planner.use_variant(planner.DIRECT):
            _call(x, w)
    assert cache.misses == 2


def test_invalid_call_still_raises_pytorchs_error_every_time():
    x, w = torch.randn(2, 5, 5, 4), torch.randn(6, 3, 4, 4)  # 5 channels in, weight wants 6
    for _ in range(2):
        with pytest.raises(RuntimeError):
            _call(x, w)


def test_epilogue_with_tensors_is_never_cached():
    x, w = torch.randn(2, 6, 5, 4), torch.randn(6, 3, 4, 4)
    scale = torch.rand(3) + 0.5
    args = ops.ConvTransposeArgs.from_values((2, 2), (1, 1), (0, 0), 1, (1, 1))
    epi = Epilogue(scale, None, "relu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ops.FallbackWarning)
        got = ops._cuda(x, w, None, args, epi)
        scale.mul_(2.0)  # in place: a cached call would keep the old values
        again = ops._cuda(x, w, None, args, epi)
    assert len(ops.op_plans().entries) == 0
    torch.testing.assert_close(got, torch.relu(F.conv_transpose2d(x, w, None, 2, 1)
                                               * (scale / 2)[:, None, None]))
    torch.testing.assert_close(again, torch.relu(F.conv_transpose2d(x, w, None, 2, 1)
                                                 * scale[:, None, None]))


def test_cache_is_bounded():
    cache = ops.OpPlanCache(limit=3)
    x, w = torch.randn(1, 2, 3, 3), torch.randn(2, 2, 2, 2)
    args = ops.ConvTransposeArgs.from_values((1, 1), (0, 0), (0, 0), 1, (1, 1))
    for i in range(5):
        cache.plan(("geometry", i), x, w, None, args)
    assert len(cache.entries) <= 3 and cache.misses == 5


def test_first_run_turns_a_kernel_refusal_into_a_pytorch_plan():
    """A kernel's own limits refuse with a typed error (ops.KernelRefusal, or the binding's
    KernelRefused): the first run then returns None and turns the entry's plan to PyTorch,
    unless use_variant forced the kernel; any other error propagates, whatever its text; a
    success keeps the call on the entry."""
    OpPlan, first_run = ops.OpPlan, ops.first_run

    def refusing(*_):
        raise ops.KernelRefusal("deconv_patch: the grouped kernel does not support this call")

    def failing(*_):
        raise RuntimeError("deconv_patch: grouped kernel launch failed: out of memory")

    def untyped(*_):  # a refusal's wording alone is no refusal
        raise RuntimeError("deconv_patch: the grouped kernel does not support this call")

    def entry() -> OpPlan:
        return OpPlan(planner.Plan(planner.GROUPED, "few channels", candidates=("grouped",)),
                      ops.ConvTransposeArgs.from_values())

    x = torch.randn(1, 2, 3, 3)
    refused = entry()
    assert first_run(refused, refusing, x, x, None) is None and refused.call is None
    assert refused.plan.variant == planner.ATEN and "grouped does not support" in refused.plan.reason
    assert refused.plan.candidates == ("grouped",)
    with pytest.raises(RuntimeError, match="launch failed"):
        first_run(entry(), failing, x, x, None)
    with pytest.raises(RuntimeError, match="does not support"):
        first_run(entry(), untyped, x, x, None)
    with planner.use_variant(planner.GROUPED), pytest.raises(RuntimeError, match="support"):
        first_run(entry(), refusing, x, x, None)
    ran = entry()

    def add_one(a, b, c):
        return a + 1

    assert torch.equal(first_run(ran, add_one, x, x, None), x + 1)
    assert ran.call is add_one and ran.plan.variant == planner.GROUPED
