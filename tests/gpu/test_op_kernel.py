"""The op's C++ CUDA kernel (cuda/binding/op_kernel.cpp): after a geometry's first call it runs
the kept plan without Python, and must give what the Python kernel gives. Repeated calls are
checked against the first (the Python kernel's) bit for bit and against float64; in-place
weight updates, new weight tensors, use_variant blocks, plans that warn per call and clearing
the plan cache are each checked on calls the kernel already holds a plan for."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from deconv_patch import ops
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.epilogue import IDENTITY
from deconv_patch.kernels import planner
from deconv_patch.kernels.extension import load_units, loaded_extension
from deconv_patch.ops import FallbackWarning
from tests.helpers import OP, allowed_error, max_error

pytestmark = pytest.mark.cuda

# (input shape, weight shape, stride, padding, output_padding, groups, dilation, dtype, layout)
GEOMETRIES = [
    ((4, 64, 16, 16), (64, 32, 2, 2), 2, 0, 0, 1, 1, torch.bfloat16, torch.channels_last),
    ((2, 48, 9, 11), (48, 24, 4, 4), 2, 1, 0, 1, 1, torch.float32, torch.contiguous_format),
    ((3, 32, 12, 12), (32, 8, 3, 3), (2, 1), (1, 0), (1, 0), 4, (1, 2), torch.float16,
     torch.channels_last),
    ((16, 7, 7), (16, 12, 3, 3), 3, 1, 2, 1, 1, torch.bfloat16, torch.contiguous_format),
    ((0, 16, 5, 5), (16, 8, 3, 3), 2, 0, 0, 1, 1, torch.float32, torch.contiguous_format),
]


@pytest.fixture(autouse=True)
def _defaults():
    # The core loaded (a call planned on PyTorch's path would not load it, and the C++ kernel
    # comes with it); cuDNN deterministic, so that such a plan repeats its output bit for bit.
    load_units(())
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True,
                                    allow_tf32=True):
        yield


def _tensors(geometry, seed: int):
    shape, wshape, *_, dtype, layout = geometry
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, device="cuda", generator=g).to(dtype)
    if x.dim() == 4:
        x = x.contiguous(memory_format=layout)
    w = torch.randn(wshape, device="cuda", generator=g).to(dtype) / wshape[0] ** 0.5
    b = torch.randn(wshape[1] * geometry[5], device="cuda", generator=g).to(dtype)
    return x, w, b


def _hyper(geometry):
    def pair(v):
        return [v, v] if isinstance(v, int) else list(v)
    _, _, stride, padding, output_padding, groups, dilation, _, _ = geometry
    return pair(stride), pair(padding), pair(output_padding), groups, pair(dilation)


def _check_float64(got, x, w, b, hyper):
    s, p, op, g, d = hyper
    ref = F.conv_transpose2d(x.double(), w.double(), b.double(), s, p, op, g, d)
    torch_out = F.conv_transpose2d(x, w, b, s, p, op, g, d)
    assert got.shape == torch_out.shape and got.stride() == torch_out.stride()
    assert max_error(got, ref) <= allowed_error(max_error(torch_out, ref), ref, x.dtype)


def _op_kernel_cpp() -> bool:
    """Whether the op's CUDA key is the C++ kernel (the first CUDA call installs it)."""
    lines = torch._C._dispatch_dump("deconv_patch::conv_transpose2d").splitlines()
    return any(line.startswith("CUDA: ") and "op_kernel.cpp" in line for line in lines)


@pytest.mark.parametrize("index", range(len(GEOMETRIES)))
def test_kept_plans_give_the_python_kernels_output(index):
    geometry = GEOMETRIES[index]
    hyper = _hyper(geometry)
    ops.op_plans().clear()
    x, w, b = _tensors(geometry, 10 + index)
    first = OP(x, w, b, *hyper)  # planned in Python
    assert _op_kernel_cpp()
    again = OP(x, w, b, *hyper)
    # Kept by the C++ kernel at its first miss: this call's, or the first's where the kernel
    # was installed before it.
    assert loaded_extension().op_kernel_cache_size() == 1
    for _ in range(2):
        out = OP(x, w, b, *hyper)  # the C++ kernel's own plan
        assert torch.equal(out, first) and torch.equal(again, first)
        assert out.stride() == first.stride()
    _check_float64(out, x, w, b, hyper)
    # New tensors of the same geometry: fresh values, the same plan.
    x2, w2, b2 = _tensors(geometry, 100 + index)
    _check_float64(OP(x2, w2, b2, *hyper), x2, w2, b2, hyper)


def test_a_kept_plan_follows_in_place_weight_updates():
    geometry = GEOMETRIES[0]  # a kernel that reads a packed weight
    hyper = _hyper(geometry)
    x, w, b = _tensors(geometry, 3)
    assert planner.reads_packed_weight(ops.op_plans().lookup(
        ops.op_call_key(x, w, b, tuple(hyper), IDENTITY), x, w, b,
        lambda: ConvTransposeArgs.from_values(*hyper)).plan.variant)
    for _ in range(3):
        OP(x, w, b, *hyper)
    for step in range(3):
        w.add_(torch.randn_like(w))
        b.mul_(-1.5)
        x.copy_(torch.randn_like(x))
        _check_float64(OP(x, w, b, *hyper), x, w, b, hyper)


def test_a_forced_variant_is_not_answered_from_kept_plans():
    geometry = GEOMETRIES[0]
    hyper = _hyper(geometry)
    x, w, b = _tensors(geometry, 4)
    for _ in range(3):
        ours = OP(x, w, b, *hyper)
    cudnn = F.conv_transpose2d(x, w, b, *hyper)
    assert not torch.equal(ours, cudnn), "the kernel and cuDNN round alike here: pick another case"
    with planner.use_variant(planner.ATEN):
        for _ in range(2):
            assert torch.equal(OP(x, w, b, *hyper), cudnn)
    assert torch.equal(OP(x, w, b, *hyper), ours)


def test_a_plan_that_warns_warns_on_every_call():
    x = torch.randn(2, 4, 5, 5, device="cuda", dtype=torch.float64)
    w = torch.randn(4, 3, 3, 3, device="cuda", dtype=torch.float64)
    for _ in range(3):
        with pytest.warns(FallbackWarning, match="float64"):
            got = OP(x, w, None, 2)
        torch.testing.assert_close(got, F.conv_transpose2d(x, w, None, 2), rtol=1e-12,
                                   atol=1e-12)


def test_clearing_the_plan_cache_clears_the_kept_plans():
    geometry = GEOMETRIES[1]
    hyper = _hyper(geometry)
    x, w, b = _tensors(geometry, 5)
    for _ in range(2):
        OP(x, w, b, *hyper)
    ext = loaded_extension()
    assert ext.op_kernel_cache_size() > 0
    ops.op_plans().clear()
    assert ext.op_kernel_cache_size() == 0
    misses = ops.op_plans().misses
    out = OP(x, w, b, *hyper)  # back through Python, which plans again
    assert ops.op_plans().misses == misses + 1
    _check_float64(out, x, w, b, hyper)


def _autograd_cpp() -> bool:
    """Whether the op's AutogradCUDA key is the C++ kernel (installed with the CUDA one)."""
    lines = torch._C._dispatch_dump("deconv_patch::conv_transpose2d").splitlines()
    return any(line.startswith("AutogradCUDA: ") and "op_kernel.cpp" in line for line in lines)


@pytest.mark.parametrize("index", [0, 1, 3])
def test_the_cpp_autograd_kernel_gives_atens_gradients(index):
    geometry = GEOMETRIES[index]
    s, p, op, g, d = _hyper(geometry)
    x, w, b = _tensors(geometry, seed=11 + index)
    OP(x, w, b, s, p, op, g, d)  # installs the C++ kernels
    assert _autograd_cpp()
    leaves = [t.detach().requires_grad_() for t in (x, w, b)]
    out = OP(*leaves, s, p, op, g, d)
    assert "ConvTransposeFunction" in out.grad_fn.name()  # the C++ node, not a Python one
    dy = torch.randn_like(out)
    got = torch.autograd.grad(out, leaves, dy)
    ref_leaves = [t.detach().double().requires_grad_() for t in (x, w, b)]
    ref = torch.autograd.grad(F.conv_transpose2d(*ref_leaves, s, p, op, g, d), ref_leaves,
                              dy.double())
    torch_leaves = [t.detach().requires_grad_() for t in (x, w, b)]
    pytorch = torch.autograd.grad(F.conv_transpose2d(*torch_leaves, s, p, op, g, d),
                                  torch_leaves, dy)
    for ours, theirs, exact in zip(got, pytorch, ref):
        assert ours.shape == exact.shape
        assert max_error(ours, exact) <= allowed_error(max_error(theirs, exact), exact, x.dtype)
    with torch.no_grad():
        assert OP(*leaves, s, p, op, g, d).grad_fn is None
