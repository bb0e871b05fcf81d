"""The module's C++ fast path (cuda/binding/prepared_call.cpp: ModuleFastPath + PreparedCall).

After one call, a FastConvTranspose2d answers an identical call from C++; every change the plan
depends on (geometry, strides, dtype, backend flags, autograd, modes, autocast, weights) must
either be honoured or send the call back through Python. Each test compares every element with
PyTorch on fresh random data, and checks which path ran where that is the point.
"""

from __future__ import annotations

import contextlib
import copy
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from deconv_patch import FastConvTranspose2d
from deconv_patch.kernels import packed_weights, planner
from deconv_patch.ops import kernel_call
from deconv_patch.arguments import ConvTransposeArgs

pytestmark = pytest.mark.cuda


def _layer(cin=64, cout=64, k=2, s=2, p=0, dtype=torch.bfloat16, bias=True) -> FastConvTranspose2d:
    ref = torch.nn.ConvTranspose2d(cin, cout, k, s, p, bias=bias, device="cuda", dtype=dtype)
    return FastConvTranspose2d.from_module(ref)


def _input(n=4, c=64, hw=64, dtype=torch.bfloat16, channels_last=True) -> torch.Tensor:
    x = torch.randn(n, c, hw, hw, device="cuda", dtype=dtype)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def _expected(m: FastConvTranspose2d, x: torch.Tensor) -> torch.Tensor:
    return F.conv_transpose2d(x, m.weight, m.bias, m.stride, m.padding, m.output_padding,
                              m.groups, m.dilation)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype and got.stride() == want.stride()
    tol = 2e-2 if want.dtype != torch.float32 else 2e-3
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)


@pytest.fixture(autouse=True)
def _no_autotune():
    # The planner's heuristics alone (autotune would time variants on first calls).
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=True):
        yield


def test_armed_after_first_call_and_matches_pytorch_on_repeats():
    m = _layer()  # k == stride, channels_last, 8 MiB output: gemm_kxs_sm90 or tap-major
    with torch.no_grad():
        assert planner.reads_packed_weight(m.plan_for(_input()).variant)
        assert "_fast_path" not in m.__dict__
        for _ in range(3):
            x = _input()
            _close(m(x), _expected(m, x))
            assert "_fast_path" in m.__dict__


def test_new_geometry_layout_and_dtype_go_back_through_python():
    m = _layer()
    with torch.no_grad():
        for x in (_input(), _input(hw=48), _input(channels_last=False), _input(n=1),
                  _input()[:, :, 1:, 1:], _input()[0]):  # sizes, layout, batch, view, unbatched
            _close(m(x), _expected(m, x))
        m.float()
        x = _input(dtype=torch.float32)
        _close(m(x), _expected(m, x))


def test_weight_changes_in_place_and_by_replacement_are_seen():
    m = _layer()
    x = _input()
    with torch.no_grad():
        m(x)
        packs = packed_weights.cache().packs
        m.weight.mul_(-0.5)  # version bump: the prepared call re-asks for its packed weight
        _close(m(x), _expected(m, x))
        assert packed_weights.cache().packs == packs + 1
        m.weight = torch.nn.Parameter(torch.randn_like(m.weight))  # a new tensor
        _close(m(x), _expected(m, x))
        m.bias = None
        _close(m(x), _expected(m, x))


def test_backend_flag_changes_are_seen():
    m = _layer(dtype=torch.float32)
    x = _input(dtype=torch.float32)
    with torch.no_grad():
        _close(m(x), _expected(m, x))
        with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=False):
            want = _expected(m, x)
            got = m(x)  # fp32 strict: 3xTF32 or cuDNN, never the TF32 prepared call
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        _close(m(x), _expected(m, x))


@pytest.mark.parametrize("kernels_in_training", [False, True])
def test_recorded_calls_and_the_armed_fast_path(kernels_in_training):
    m = _layer()
    m.kernels_in_training = kernels_in_training
    x = _input()
    with torch.no_grad():
        m(x)  # armed, no grad
    armed = m.__dict__["_fast_path"]
    xg = x.clone().requires_grad_()
    # by default PyTorch's convolution records its backward (grad_calls); with
    # kernels_in_training the armed path answers in C++, as a node with ATen's backward
    y = m(xg)
    assert m.__dict__["_fast_path"] is armed
    assert ("ConvTransposeFunction" in y.grad_fn.name()) == kernels_in_training
    _close(y.detach(), _expected(m, x))
    y.float().square().sum().backward()
    xr = x.clone().requires_grad_()
    _expected(m, xr).float().square().sum().backward()
    torch.testing.assert_close(xg.grad.float(), xr.grad.float(), rtol=5e-2, atol=5e-2)


def test_recorded_calls_that_do_not_train_on_the_planned_kernel_run_pytorch_from_cpp():
    """fp32 without TF32 on Hopper, a layer planned on a kernel of ours whose small NCHW
    training calls stay PyTorch's by default (planner.trains_on_kernel): its first recorded
    call arms the path, the next ones run PyTorch's convolution from C++ without planning in
    Python; an unrecorded call then prepares the kernel, and recorded calls stay PyTorch's."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the default trains such layers on ours on Hopper only")
    torch.manual_seed(4)
    ref = torch.nn.ConvTranspose2d(64, 64, 3, 1, 2, dilation=2, device="cuda")
    m = FastConvTranspose2d.from_module(copy.deepcopy(ref))
    x = _input(n=16, c=64, hw=32, dtype=torch.float32, channels_last=False)
    planned = []
    entry_for = m._entry_for
    m.__dict__["_entry_for"] = lambda *a: planned.append(1) or entry_for(*a)

    def step(fresh: torch.Tensor) -> torch.Tensor:
        xg = fresh.clone().requires_grad_()
        y = m(xg)
        assert "ConvTransposeFunction" not in y.grad_fn.name(), y.grad_fn
        xr = fresh.clone().requires_grad_()
        want = ref(xr)
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
        dy = torch.randn_like(y)
        y.backward(dy)
        want.backward(dy)
        torch.testing.assert_close(xg.grad, xr.grad, rtol=1e-5, atol=1e-5)
        return y

    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=False):
        if not m.plan_for(x).uses_kernel:
            pytest.skip(f"the plan here is {m.plan_for(x).variant}")
        planned.clear()
        step(x)
        assert planned and "_fast_path" in m.__dict__ and m.training_backend == planner.ATEN
        planned.clear()
        step(torch.randn_like(x))
        assert not planned  # (answered in C++)
        with torch.no_grad():
            fresh = torch.randn_like(x)
            torch.testing.assert_close(m(fresh), ref(fresh), rtol=1e-4, atol=1e-4)
        assert planned  # (the kernel's call prepared and armed)
        planned.clear()
        step(torch.randn_like(x))
        with torch.no_grad():
            m(torch.randn_like(x))
        assert not planned


def test_pytorch_plan_armed_too_and_keeps_autograd():
    m = _layer(cin=64, cout=12, k=4, s=2, p=1, dtype=torch.float32)  # cuDNN by plan
    x = _input(c=64, hw=16, dtype=torch.float32, channels_last=False)
    assert m.plan_for(x).variant == planner.ATEN
    with torch.no_grad():
        m(x)
    assert "_fast_path" in m.__dict__
    xg = x.clone().requires_grad_()
    y = m(xg)  # a recorded call: PyTorch's convolution records its backward (grad_calls)
    _close(y.detach(), _expected(m, x))
    y.sum().backward()
    assert xg.grad is not None and m.weight.grad is not None


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_dispatch_modes_autocast_and_compile_see_the_call():
    m = _layer(dtype=torch.float32)
    x = _input(dtype=torch.float32)
    with torch.no_grad():
        m(x)
        with _Recorder() as rec:
            y = m(x)
        assert any("deconv_patch" in op or "convolution" in op for op in rec.ops), rec.ops
        _close(y, _expected(m, x))
        with torch.autocast("cuda", dtype=torch.bfloat16):
            got = m(x)
            want = _expected(m, x)
        assert got.dtype == want.dtype == torch.bfloat16
        _close(got, want)


def _python_path_forbidden(m: FastConvTranspose2d) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the call went back through the module's Python planning")
    m.__dict__["_entry_for"] = refuse  # (an instance attribute shadows the method)


@pytest.mark.parametrize("recorded", [False, True])
def test_autocast_calls_are_answered_in_cpp_with_atens_casts(recorded):
    m = _layer(dtype=torch.float32)
    ref = copy.deepcopy(m)
    m.kernels_in_training = True
    x = _input(dtype=torch.float32)
    # (recorded: grad mode on from the arming call on, as in a training step; a weight cast
    # made under no_grad may be cached for the rest of the autocast region)
    grad_mode = contextlib.nullcontext if recorded else torch.no_grad
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True), \
            torch.autocast("cuda", dtype=torch.bfloat16):
        with grad_mode():
            m(x)  # armed under autocast, on the cast tensors
        _python_path_forbidden(m)
        for _ in range(2):
            x2 = _input(dtype=torch.float32).requires_grad_(recorded)
            with grad_mode():
                got = m(x2)
                want = F.conv_transpose2d(x2, ref.weight, ref.bias, 2)
            assert got.dtype == want.dtype == torch.bfloat16
            _close(got.detach(), want.detach())
            if recorded:
                assert "ConvTransposeFunction" in got.grad_fn.name()
                g = torch.randn_like(got)
                grads = torch.autograd.grad(got, [x2, m.weight, m.bias], g)
                wants = torch.autograd.grad(want, [x2, ref.weight, ref.bias], g)
                for a, b in zip(grads, wants):  # ATen's backward on the same cast tensors
                    assert a.dtype == b.dtype and torch.equal(a, b)
    with torch.no_grad():  # autocast off: not the armed context, back through Python
        del m.__dict__["_entry_for"]
        y = m(x)
        assert y.dtype == torch.float32
        _close(y, _expected(m, x))


def test_forced_variant_is_not_bypassed():
    m = _layer()
    x = _input()
    with torch.no_grad():
        m(x)  # armed with tap-major
        with planner.use_variant(planner.DIRECT):
            assert m.plan_for(x).variant == planner.DIRECT
            _close(m(x), _expected(m, x))


def test_attribute_changes_disarm_and_copies_do_not_carry_it():
    m = _layer()
    x = _input()
    with torch.no_grad():
        m(x)
        assert "_fast_path" in m.__dict__
        m.activation = "relu"  # (what optimize()'s fusion sets)
        assert "_fast_path" not in m.__dict__
        _close(m(x), torch.relu(_expected(m, x)))
        for clone in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
            assert "_fast_path" not in clone.__dict__
            _close(clone(x), torch.relu(_expected(clone, x)))


def test_weights_made_under_inference_mode():
    with torch.inference_mode():
        m = _layer()
        x = _input()
        for _ in range(2):
            _close(m(x), _expected(m, x))


@pytest.mark.parametrize("variant", [planner.GEMM_PHASE, planner.KXS_TAP_MAJOR, planner.DIRECT])
def test_prepared_call_refreshes_its_packed_weight(variant):
    k, s, p = (4, 2, 1) if variant == planner.GEMM_PHASE else (2, 2, 0)
    w = torch.randn(32, 16, k, k, device="cuda", dtype=torch.float16)
    x = _input(c=32, hw=12, dtype=torch.float16)
    args = ConvTransposeArgs((s, s), (p, p), (0, 0), (1, 1), 1)
    call = kernel_call(variant, x, w, args)
    for _ in range(2):
        want = F.conv_transpose2d(x, w, None, s, p)
        _close(call(x, w, None), want)
        w.add_(torch.randn_like(w))  # in place: the next call must not read a stale pack


def _prefilter_spy(m: FastConvTranspose2d) -> list:
    """The recorded calls that reach the training prefilter (the module's Python path)."""
    asked: list = []
    prefilter = m._training_prefilter()
    m.__dict__["_prefilter"] = type("Spy", (), {"may_train": staticmethod(
        lambda input: asked.append(input.shape) or prefilter.may_train(input))})()
    return asked


@pytest.mark.parametrize("mode", ["tf32", "strict", "bf16 autocast", "bf16 channels_last"])
def test_recorded_calls_on_pytorchs_path_run_from_cpp_with_its_gradients(mode):
    """A training layer the prefilter sends to PyTorch's convolution: the second recorded call
    of a geometry in a row arms the recorded path, and the calls after it run in C++ without
    asking the prefilter. Outputs and the three gradients equal nn.ConvTranspose2d's bit for
    bit on fresh data every step (the same ATen calls; under autocast its casts, cache
    included)."""
    from deconv_patch.kernels import extension

    extension.load_core()
    torch.manual_seed(11)
    dtype = torch.bfloat16 if mode == "bf16 channels_last" else torch.float32
    # (30 output channels: no fp32 input gradient on gemm_phase_tma's kernel, which the
    # default gives such calls on Hopper; deterministic: the gradients compared bit for bit)
    cout = 30 if mode == "strict" else 32
    ref = torch.nn.ConvTranspose2d(64, cout, 4, 2, 1, device="cuda", dtype=dtype)
    m = FastConvTranspose2d.from_module(copy.deepcopy(ref))
    asked = _prefilter_spy(m)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16 autocast")
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True,
                                    allow_tf32=mode != "strict"):
        for step in range(4):
            x = _input(n=8, c=64, hw=8, dtype=dtype, channels_last=mode == "bf16 channels_last")
            xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
            with autocast:
                got, want = m(xs[0]), ref(xs[1])
            assert got.dtype == want.dtype and got.stride() == want.stride()
            assert torch.equal(got, want)
            g = torch.randn_like(want)
            for module, y in ((m, got), (ref, want)):
                module.zero_grad(set_to_none=True)
                y.backward(g)
            for a, b in ((xs[0].grad, xs[1].grad), (m.weight.grad, ref.weight.grad),
                         (m.bias.grad, ref.bias.grad)):
                assert torch.isfinite(a).all() and torch.equal(a, b)
            assert ("_fast_path_recorded" in m.__dict__) == (step >= 1)
        assert len(asked) == 2, asked  # (the first two calls; the rest answered in C++)


def test_training_backend_answers_for_autocasts_dtype_on_pytorchs_path():
    """An fp32 layer trained under bf16 autocast with TF32 off: in fp32 its recorded calls would
    train on ours (on Hopper), in bf16 they run PyTorch's convolution and plan nothing.
    training_backend answers for the calls' dtype (PyTorch's), also after fp32 eval calls
    planned a kernel; a recorded fp32 call planned after them answers for fp32 again."""
    torch.manual_seed(12)
    ref = torch.nn.ConvTranspose2d(64, 32, 4, 2, 1, device="cuda")
    m = FastConvTranspose2d.from_module(copy.deepcopy(ref))
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=False):
        prefilter = m._training_prefilter()
        if prefilter.least_macs(torch.float32) != 0 or \
                prefilter.least_macs(torch.bfloat16) is not None:
            pytest.skip("here fp32 and bf16 recorded calls of this layer train alike")
        for step in range(3):
            x = torch.randn(8, 64, 16, 16, device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                got = m(x.clone().requires_grad_())
                want = ref(x)
            assert got.dtype == torch.bfloat16 and torch.equal(got, want)
            assert m.training_backend == planner.ATEN, step
        with torch.no_grad():  # eval calls in fp32 (a validation pass): planned, on a kernel
            _close(m(x), _expected(m, x))
        assert m.training_backend == planner.ATEN
        y = m(torch.randn(4, 64, 16, 16, device="cuda").requires_grad_())  # fp32, recorded
        trains = "ConvTransposeFunction" in y.grad_fn.name()
        assert (m.training_backend != planner.ATEN) == trains


def test_recorded_path_sends_other_contexts_and_geometries_back_through_python():
    """The armed recorded path answers only its geometry and context: TF32 turned off,
    autocast, deterministic mode and another batch each reach the prefilter again (whose answer
    may differ there), with PyTorch's result; geometries or memory formats that alternate
    never arm it."""
    from deconv_patch.kernels import extension

    extension.load_core()
    torch.manual_seed(12)
    ref = torch.nn.ConvTranspose2d(64, 32, 4, 2, 1, device="cuda")
    m = FastConvTranspose2d.from_module(copy.deepcopy(ref))
    asked = _prefilter_spy(m)
    a = _input(n=8, c=64, hw=8, dtype=torch.float32, channels_last=False)
    b = _input(n=4, c=64, hw=8, dtype=torch.float32, channels_last=False)

    def call(x: torch.Tensor) -> None:
        fresh = torch.randn_like(x)
        y = m(fresh.clone().requires_grad_())
        _close(y.detach(), F.conv_transpose2d(fresh, ref.weight, ref.bias, 2, 1))

    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=True):
        for _ in range(3):
            call(a)
        assert "_fast_path_recorded" in m.__dict__ and len(asked) == 2
        contexts = [torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=False),
                    torch.autocast("cuda", dtype=torch.bfloat16),
                    torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=True,
                                               deterministic=True)]
        for context in contexts:
            before = len(asked)
            with context:
                call(a)
            assert len(asked) == before + 1
        before = len(asked)
        call(b)
        assert len(asked) == before + 1
        m.__dict__.pop("_fast_path_recorded", None)
        m.__dict__.pop("_recorded_seen", None)
        for x in (a, b, a, b, a):
            call(x)
        assert "_fast_path_recorded" not in m.__dict__ and len(asked) == before + 6
        a_last = a.contiguous(memory_format=torch.channels_last)  # (a's sizes, other strides)
        for x in (a_last, a, a_last, a, a_last):
            call(x)
        assert "_fast_path_recorded" not in m.__dict__ and len(asked) == before + 11


def test_a_training_loop_alone_arms_the_recorded_path_from_the_built_core():
    """In a process whose calls all run PyTorch's convolution nothing plans a kernel, so nothing
    loads the extension: the recorded path loads the core from its build (never compiling
    one), arms, and the calls after it match nn.ConvTranspose2d's, gradients included."""
    import os
    import subprocess
    import sys
    import textwrap

    from deconv_patch.kernels import extension

    extension.load_core()  # (its build in the cache the child process reads)
    code = textwrap.dedent("""
        import copy
        import torch
        import deconv_patch
        from deconv_patch.kernels import extension

        torch.manual_seed(0)
        ref = torch.nn.Sequential(torch.nn.ConvTranspose2d(64, 32, 4, 2, 1)).cuda()
        model = deconv_patch.optimize(copy.deepcopy(ref))
        for step in range(4):
            x = torch.randn(8, 64, 8, 8, device="cuda")
            xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
            with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True):
                ys = [model(xs[0]), ref(xs[1])]
                g = torch.randn_like(ys[1])
                grads = [torch.autograd.grad(y, [xi, *m.parameters()], g)
                         for y, xi, m in zip(ys, xs, (model, ref))]
            assert torch.equal(ys[0], ys[1])
            assert all(torch.equal(a, b) for a, b in zip(*grads))
            if step == 0:
                assert extension.loaded_extension() is None, "loaded by something else"
        assert "_fast_path_recorded" in model[0].__dict__
        print("armed")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ))
    assert out.returncode == 0 and "armed" in out.stdout, out.stdout[-1000:] + out.stderr[-3000:]


def test_eval_calls_on_pytorchs_path_arm_from_the_built_core():
    """An eval-only process whose layers all plan PyTorch's convolution loads no kernel: the
    eval path, too, arms from the core's build, and its calls match nn.ConvTranspose2d's."""
    import os
    import subprocess
    import sys
    import textwrap

    from deconv_patch.kernels import extension

    extension.load_core()
    code = textwrap.dedent("""
        import copy
        import torch
        import deconv_patch
        from deconv_patch.kernels import extension

        torch.manual_seed(0)
        # (float64: PyTorch's convolution is the plan)
        ref = torch.nn.Sequential(torch.nn.ConvTranspose2d(64, 32, 4, 2, 1)).cuda().double()
        model = deconv_patch.optimize(copy.deepcopy(ref)).eval()
        ref.eval()
        assert extension.loaded_extension() is None, "loaded by something else"
        with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, deterministic=True):
            for step in range(3):
                x = torch.randn(8, 64, 8, 8, device="cuda", dtype=torch.float64)
                assert torch.equal(model(x), ref(x))
                if step == 0:
                    assert model[0].plan_for(x).variant == "aten", model[0].plan_for(x)
                    assert "_fast_path" in model[0].__dict__
        print("armed", extension.loaded_extension() is not None)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ))
    assert out.returncode == 0 and "armed True" in out.stdout, \
        out.stdout[-1000:] + out.stderr[-3000:]
