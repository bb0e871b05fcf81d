"""The op's registration, fake kernel, CPU path and autograd, checked against ATen on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import deconv_patch  # noqa: F401  (registers the op)
from deconv_patch.kernels import planner
from deconv_patch.ops import conv_transpose2d
from tests.cases import call_args, random_case

OP = torch.ops.deconv_patch.conv_transpose2d


def test_schema_matches_functional_signature():
    schema = OP.default._schema
    names = [a.name for a in schema.arguments]
    assert names == ["input", "weight", "bias", "stride", "padding", "output_padding", "groups",
                     "dilation"]
    defaults = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    assert defaults == {"bias": None, "stride": [1, 1], "padding": [0, 0],
                        "output_padding": [0, 0], "groups": 1, "dilation": [1, 1]}


@pytest.mark.skipif(not hasattr(torch.Tag, "flexible_layout"), reason="no such tag here")
def test_inductor_may_hand_the_op_any_layout():
    """Tagged flexible_layout: under Inductor the op takes the layout its producer has
    (channels_last around convolutions) instead of a copy in the traced strides, and its fake
    kernel follows the layout it is given (test_fake_and_meta_shapes_match_real_output: inputs
    of every layout, real against fake)."""
    assert torch.Tag.flexible_layout in OP.default.tags
    x = torch.randn(2, 8, 5, 7).contiguous(memory_format=torch.channels_last)
    w = torch.randn(8, 4, 3, 3)
    with FakeTensorMode() as mode:
        fake = OP(mode.from_tensor(x), mode.from_tensor(w), None, [2, 2], [1, 1])
    assert fake.stride() == F.conv_transpose2d(x, w, None, 2, 1).stride()


@pytest.mark.parametrize("seed", range(200))
def test_fake_and_meta_shapes_match_real_output(seed):
    case = random_case(seed + 1000, dtypes=(torch.float32,))
    x, w, b = case.make("cpu", seed)
    real = F.conv_transpose2d(*call_args(case, x, w, b))
    with FakeTensorMode() as mode:
        fx, fw = mode.from_tensor(x), mode.from_tensor(w)
        fb = None if b is None else mode.from_tensor(b)
        fake = OP(*call_args(case, fx, fw, fb))
    assert fake.shape == real.shape and fake.dtype == real.dtype
    assert fake.stride() == real.stride(), str(case)
    meta_b = None if b is None else b.to("meta")
    meta = OP(*call_args(case, x.to("meta"), w.to("meta"), meta_b))
    assert meta.shape == real.shape


@pytest.mark.parametrize("seed", range(60))
def test_cpu_path_equals_aten_exactly(seed):
    case = random_case(seed + 2000, dtypes=(torch.float32, torch.float64, torch.bfloat16))
    x, w, b = case.make("cpu", seed)
    expected = F.conv_transpose2d(*call_args(case, x, w, b))
    got = OP(*call_args(case, x, w, b))
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_defaults_and_unbatched_input():
    x, w, b = torch.randn(4, 5, 6), torch.randn(4, 3, 3, 3), torch.randn(3)
    assert torch.equal(OP(x, w), F.conv_transpose2d(x, w))
    assert torch.equal(conv_transpose2d(x, w, b, 2, 1, 1), F.conv_transpose2d(x, w, b, 2, 1, 1))


def _gradcheck_case(seed: int):
    return random_case(seed + 3000, dtypes=(torch.float64,), max_channels=4)


def _gradcheck_work(seed: int) -> int:
    """Input elements x output elements: the numerical Jacobian runs the op twice per input
    element, each time over the whole output."""
    case = _gradcheck_case(seed)
    x, w, b = case.make("cpu", seed)
    inputs = x.numel() + w.numel() + (0 if b is None else b.numel())
    oh, ow = case.args.output_hw(case.hw, case.kernel)
    return inputs * max(case.batch, 1) * case.out_channels * oh * ow


# Cases whose gradcheck does more than 1.5e6 element-evaluations (6-16 s each on a 2-core CPU)
# are extended checks (run with --extended; CI runs them in a step of their own).
GRADCHECK_SEEDS = [
    pytest.param(s, marks=[pytest.mark.extended] if _gradcheck_work(s) > 1_500_000 else [])
    for s in range(8)]


@pytest.mark.parametrize("seed", GRADCHECK_SEEDS)
def test_autograd_gradcheck(seed):
    case = _gradcheck_case(seed)
    x, w, b = case.make("cpu", seed)
    if x.numel() == 0:
        pytest.skip("empty batch")
    x = x.detach().clone().requires_grad_()
    w = w.detach().clone().requires_grad_()
    b = None if b is None else b.detach().clone().requires_grad_()
    inputs = (x, w) if b is None else (x, w, b)

    def fn(*t):
        return OP(*call_args(case, t[0], t[1], t[2] if len(t) > 2 else None))

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5)


def test_gradients_match_aten():
    x = torch.randn(2, 6, 5, 7, requires_grad=True)
    w = torch.randn(6, 2, 3, 4, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    grad = torch.randn(2, 6, 10, 15)
    ours = torch.autograd.grad(OP(x, w, b, 2, 1, 1, 3, 1), (x, w, b), grad)
    theirs = torch.autograd.grad(F.conv_transpose2d(x, w, b, 2, 1, 1, 3, 1), (x, w, b), grad)
    for a, e in zip(ours, theirs):
        torch.testing.assert_close(a, e)


def test_torch_compile_fullgraph_and_export():
    w, b = torch.randn(8, 4, 4, 4), torch.randn(4)

    def f(x):
        return torch.relu(OP(x, w, b, 2, 1, 0, 1, 1))

    x = torch.randn(2, 8, 5, 5)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), f(x))

    class M(torch.nn.Module):
        def forward(self, x):
            return f(x)

    exported = torch.export.export(M(), (x,))
    targets = {n.target for n in exported.graph.nodes if n.op == "call_function"}
    assert OP.default in targets
    torch.testing.assert_close(exported.module()(x), f(x))


def test_planner_reports_every_fallback():
    cpu = planner.device_support(torch.device("cpu"), torch.float32)
    assert cpu is not None and "CUDA-only" in cpu
    fp64 = planner.device_support(torch.device("cuda"), torch.float64)
    assert fp64 is not None and "float64" in fp64
    complex_ = planner.device_support(torch.device("cuda"), torch.complex64)
    assert complex_ is not None
    args = deconv_patch.arguments.ConvTransposeArgs()
    assert planner.describe(torch.device("cpu"), torch.float32, (3, 3), args) == "aten"
    x, w = torch.randn(1, 2, 3, 3), torch.randn(2, 2, 3, 3)
    p = planner.plan(x, w, args)
    assert not p.uses_kernel and p.fallback and p.reason == cpu
    with planner.use_variant("direct"):  # forcing never overrides a device that cannot run it
        assert planner.plan(x, w, args).variant == "aten"
    with pytest.raises(ValueError):
        with planner.use_variant("nonexistent"):
            pass


def test_invalid_call_raises_pytorchs_own_error():
    x, w = torch.randn(2, 5, 4, 4), torch.randn(4, 3, 3, 3)
    with pytest.raises(RuntimeError) as ours:
        OP(x, w)
    with pytest.raises(RuntimeError) as theirs:
        F.conv_transpose2d(x, w)
    assert str(ours.value) == str(theirs.value)


def test_double_backward_gradgradcheck():
    x = torch.randn(1, 4, 3, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)

    def fn(x, w, b):
        return OP(x, w, b, 2, 1, 1, 2, 1)

    assert torch.autograd.gradgradcheck(fn, (x, w, b), eps=1e-6, atol=1e-5)


def test_both_ops_have_a_cuda_autocast_rule_that_leaves_other_tensors_alone():
    """Under torch.autocast("cuda") the ops cast like ATen's conv_transpose2d (GPU tests check
    the dtypes end to end); tensors autocast would not touch come back as they are."""
    from deconv_patch.ops import autocast_cast

    key = torch._C.DispatchKey.AutocastCUDA
    assert torch.ops.deconv_patch.conv_transpose2d.default.has_kernel_for_dispatch_key(key)
    assert torch.ops.deconv_patch.conv_transpose2d_fused.default.has_kernel_for_dispatch_key(key)
    for t in (torch.randn(3), torch.randn(3, dtype=torch.float64), torch.arange(3), None):
        assert autocast_cast(t, torch.bfloat16) is t
