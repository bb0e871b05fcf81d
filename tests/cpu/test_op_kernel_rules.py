"""What the op's C++ kernel may keep per call geometry (kernel_calls.op_kernel_miss) and that
clearing the plan cache clears its cache too, with CPU tensors and a stand-in for the loaded
extension (tests/gpu/test_op_kernel.py runs the C++ kernel itself). The Python cache's entries
are set up as a CUDA call would leave them."""

from __future__ import annotations

import warnings
from typing import List

import pytest
import torch
import torch.nn.functional as F

from deconv_patch import kernel_calls, ops
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.epilogue import IDENTITY
from deconv_patch.kernels import planner

HYPER = ([2, 2], [1, 1], [0, 0], 1, [1, 1])


class _PreparedCall:
    """Stands in for the extension's PreparedCall: PyTorch's convolution, calls counted."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, input, weight, bias=None, out=None):
        self.calls += 1
        return F.conv_transpose2d(input, weight, bias, 2, 1)


class _Extension:
    PreparedCall = _PreparedCall

    def __init__(self) -> None:
        self.cleared: List[bool] = []

    def clear_op_kernel_cache(self) -> None:
        self.cleared.append(True)


@pytest.fixture()
def ext(monkeypatch):
    stand_in = _Extension()
    monkeypatch.setattr(kernel_calls, "loaded_extension", lambda: stand_in)
    ops.op_plans().clear()
    yield stand_in
    ops.op_plans().clear()


def _tensors():
    return torch.randn(2, 6, 5, 4), torch.randn(6, 3, 4, 4), torch.randn(3)


def _cache_entry(x, w, b, plan: planner.Plan, call=None) -> ops.OpPlan:
    """An entry as a CUDA call leaves it in the Python cache under the call's key."""
    key = ops.op_call_key(x, w, b, HYPER, IDENTITY)
    entry = ops.OpPlan(plan, ConvTransposeArgs.from_values(*HYPER), call)
    ops.op_plans().entries[key] = entry
    return entry


def _miss(x, w, b):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ops.FallbackWarning)
        return kernel_calls.op_kernel_miss(x, w, b, *HYPER)


def test_pytorchs_path_is_kept(ext):
    x, w, b = _tensors()
    _cache_entry(x, w, b, planner.Plan(planner.ATEN, "cuDNN is faster here"))
    out, keep, call = _miss(x, w, b)
    assert (keep, call) == (kernel_calls.KEEP_ATEN, None)
    torch.testing.assert_close(out, F.conv_transpose2d(x, w, b, 2, 1))


def test_a_prepared_call_is_kept(ext):
    x, w, b = _tensors()
    prepared = _PreparedCall()
    _cache_entry(x, w, b, planner.Plan(planner.GEMM_KXS, "a kernel"), prepared)
    out, keep, call = _miss(x, w, b)
    assert keep == kernel_calls.KEEP_CALL and call is prepared and prepared.calls == 1
    torch.testing.assert_close(out, F.conv_transpose2d(x, w, b, 2, 1))


def test_a_call_that_is_not_the_extensions_is_not_kept(ext):
    x, w, b = _tensors()
    _cache_entry(x, w, b, planner.Plan(planner.GEMM_KXS, "a kernel"),
                 lambda i, wt, bs: F.conv_transpose2d(i, wt, bs, 2, 1))
    assert _miss(x, w, b)[1] == kernel_calls.KEEP_NOTHING


def test_a_plan_that_warns_is_not_kept(ext):
    x, w, b = _tensors()
    _cache_entry(x, w, b, planner.Plan(planner.ATEN, "our kernels cannot run", True))
    with pytest.warns(ops.FallbackWarning):
        out, keep, _ = kernel_calls.op_kernel_miss(x, w, b, *HYPER)
    assert keep == kernel_calls.KEEP_NOTHING


def test_a_forced_variant_is_not_kept(ext):
    x, w, b = _tensors()
    with planner.use_variant(planner.ATEN):
        _cache_entry(x, w, b, planner.Plan(planner.ATEN, "forced"))
        assert _miss(x, w, b)[1] == kernel_calls.KEEP_NOTHING


def test_a_plan_the_python_cache_does_not_hold_is_not_kept(ext, monkeypatch):
    # The call runs an entry the cache does not hold under its key, as a plan made during a
    # CUDA graph capture (never stored).
    x, w, b = _tensors()
    ran = _cache_entry(x, w, b, planner.Plan(planner.ATEN, "cuDNN"))
    _cache_entry(x, w, b, ran.plan)  # the cache holds another entry under the key
    monkeypatch.setattr(ops.op_plans(), "lookup", lambda *args, **kwargs: ran)
    assert _miss(x, w, b)[1] == kernel_calls.KEEP_NOTHING


def test_clearing_the_plan_cache_clears_the_kernels_cache(ext):
    x, w, b = _tensors()
    _cache_entry(x, w, b, planner.Plan(planner.ATEN, "cuDNN"))
    cleared = len(ext.cleared)
    ops.op_plans().clear()
    assert not ops.op_plans().entries and len(ext.cleared) == cleared + 1
