"""grad_calls on the CPU: which calls autograd records, that a recorded call runs PyTorch's
path unless a variant is forced, and that a patched layer's recorded call is
nn.ConvTranspose2d's (the CUDA side: tests/gpu/test_grad_calls.py)."""

from __future__ import annotations

import pytest
import torch

from deconv_patch import grad_calls
from deconv_patch.kernels import planner
from tests.helpers import tf32_settings_restored


def _tensors(x_grad: bool, w_grad: bool, b_grad: bool):
    x = torch.randn(2, 4, 5, 5, requires_grad=x_grad)
    w = torch.randn(4, 3, 2, 2, requires_grad=w_grad)
    b = torch.randn(3, requires_grad=b_grad)
    return x, w, b


@pytest.mark.parametrize("x_grad,w_grad,b_grad", [(False, False, False), (True, False, False),
                                                  (False, True, False), (False, False, True),
                                                  (True, True, True)])
def test_records_grad(x_grad, w_grad, b_grad):
    x, w, b = _tensors(x_grad, w_grad, b_grad)
    wanted = x_grad or w_grad or b_grad
    assert grad_calls.records_grad(x, w, b) == wanted
    assert grad_calls.records_grad(x, w, None) == (x_grad or w_grad)
    with torch.no_grad():
        assert not grad_calls.records_grad(x, w, b)
    # what autograd itself says about the same call
    assert torch.nn.functional.conv_transpose2d(x, w, b, 2).requires_grad == wanted


def test_recorded_calls_run_pytorch_unless_forced():
    x, w, b = _tensors(True, True, True)
    assert grad_calls.runs_on_pytorch(x, w, b)
    with planner.use_variant("gemm_kxs"):
        assert not grad_calls.runs_on_pytorch(x, w, b)
    with torch.no_grad():
        assert not grad_calls.runs_on_pytorch(x, w, b)
    assert not grad_calls.runs_on_pytorch(*_tensors(False, False, False))


@pytest.mark.parametrize("output_size", [None, [12, 12]])
def test_recorded_module_calls_are_nn_conv_transpose2d(output_size):
    """A recorded call of a patched layer computes what nn.ConvTranspose2d (then its fused
    activation) does, gradients included, and reads a parametrized weight once per call."""
    from torch import nn
    from torch.nn.utils import parametrize

    from deconv_patch import FastConvTranspose2d

    class Counted(nn.Module):
        calls = 0

        def forward(self, w):
            Counted.calls += 1
            return w * 0.5

    torch.manual_seed(3)
    ref = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1)
    parametrize.register_parametrization(ref, "weight", Counted())
    fast = FastConvTranspose2d.from_module(ref)
    plain = FastConvTranspose2d.from_module(nn.ConvTranspose2d(4, 3, 3, 2, 1), activation="relu")
    x = torch.randn(2, 4, 6, 6, requires_grad=True)
    g = torch.randn(2, 3, 12, 12) if output_size else torch.randn(2, 3, 11, 11)
    before = Counted.calls
    got = fast(x, output_size=output_size)
    assert Counted.calls == before + 1
    want = nn.ConvTranspose2d.forward(ref, x, output_size)
    assert torch.equal(got, want)
    params = [x, ref.parametrizations.weight.original, ref.bias]
    for a, b in zip(torch.autograd.grad(got, params, g), torch.autograd.grad(want, params, g)):
        assert torch.equal(a, b)
    y = plain(x, output_size=output_size)
    expected = torch.relu(nn.ConvTranspose2d.forward(plain, x, output_size))
    assert torch.equal(y, expected) and y.grad_fn is not None


def test_summary_says_where_training_runs_pytorch():
    import warnings

    from torch import nn

    import deconv_patch
    from deconv_patch.summary import TRAINING_DEFAULT_NOTE, TRAINING_NOTE

    model = nn.Sequential(nn.ConvTranspose2d(4, 3, 2, 2), nn.ReLU())
    info = deconv_patch.summary(deconv_patch.optimize(model), quiet=True)
    assert TRAINING_DEFAULT_NOTE in info.notes and TRAINING_DEFAULT_NOTE in info.table()
    off = deconv_patch.summary(deconv_patch.optimize(model, kernels_in_training=False),
                               quiet=True)
    assert TRAINING_NOTE in off.notes and TRAINING_DEFAULT_NOTE not in off.notes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (nothing to patch: optimize warns)
        none = deconv_patch.summary(deconv_patch.optimize(nn.Linear(2, 2)), quiet=True)
    assert TRAINING_DEFAULT_NOTE not in none.notes and TRAINING_NOTE not in none.notes


@pytest.mark.parametrize(
    "in_channels,out_channels,groups,kernel,stride,output_padding,dilation,may,tf32,strict", [
        (64, 64, 64, 4, 2, 0, 2, True, True, True),        # depthwise
        (128, 128, 8, 4, 2, 0, 2, True, True, True),       # 16 per group
        (128, 128, 2, 4, 2, 0, 2, False, False, False),    # 64 per group: not the grouped kernel's
        (64, 64, 64, 4, 8, 0, 2, False, False, False),     # stride area 64: cuDNN's
        # dense: in fp32 without TF32 where gemm_phase_tma's kernel takes the input gradient
        # (the plan and the device then decide: trains_on_kernel)
        (64, 32, 1, 4, 2, 0, 2, False, False, True),
        (64, 32, 1, 4, 2, 1, 2, False, False, True),       # dense, output_padding < stride
        (64, 30, 1, 4, 2, 0, 1, False, False, False),      # 30 fp32 channels: no 16-byte rows
        (64, 8, 1, 2, 2, 0, 1, False, False, False),       # sums of 32 products: below 3xTF32's
        (64, 32, 1, 16, 16, 0, 1, False, False, False),    # stride 16
        # dense, output_padding >= stride: no cuDNN kernel; ATen's native GEMMs follow cuBLAS's
        # TF32 setting (off: the tf32 column), so fp32 trains on ours with either conv setting
        (64, 32, 1, 4, 1, 1, 2, True, True, True),
        # 3 out, 64 in: the tensor-core gradients in 16-bit (fp32 keeps PyTorch's)
        (64, 3, 1, 4, 2, 0, 1, True, False, False),
        (56, 1, 1, 9, 3, 0, 1, True, False, False),
        (64, 3, 1, 4, 2, 0, 2, True, False, False),        # dilated
        (64, 3, 1, 5, 2, 1, 1, True, False, False),        # k5 s2 (WGAN-GP's output)
        (64, 4, 1, 4, 2, 0, 1, True, False, True),         # 4 out: also in fp32 without TF32
        (16, 3, 1, 4, 2, 0, 1, False, False, False),       # 3 out, 16 in
        (128, 4, 2, 4, 2, 0, 1, False, False, False),      # 2 out, 64 in per group: unmeasured
    ])
def test_only_grouped_cudnn_less_and_few_output_layers_may_train_on_kernels_by_default(
        in_channels, out_channels, groups, kernel, stride, output_padding, dilation, may, tf32,
        strict):
    from torch import nn

    import deconv_patch

    layer = deconv_patch.FastConvTranspose2d.from_module(
        nn.ConvTranspose2d(in_channels, out_channels, kernel, stride, 1, output_padding,
                           groups=groups, dilation=dilation))
    assert layer.kernels_in_training is None
    assert layer._may_train_on_kernel(torch.bfloat16) == may
    assert layer._may_train_on_kernel(torch.float16) == may
    with tf32_settings_restored():
        torch.backends.cuda.matmul.allow_tf32 = False
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
            assert layer._may_train_on_kernel(torch.float32) == tf32
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            assert layer._may_train_on_kernel(torch.float32) == strict
        # TF32 in cuBLAS too: a layer without a cuDNN kernel is then a TF32 call either way
        torch.backends.cuda.matmul.allow_tf32 = True
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            no_cudnn = output_padding >= stride
            assert layer._may_train_on_kernel(torch.float32) == (strict and not no_cudnn)
    layer.kernels_in_training = False
    assert not layer._may_train_on_kernel(torch.bfloat16)
    layer.kernels_in_training = True
    assert layer._may_train_on_kernel(torch.float32)


def test_the_prefilters_answer_from_the_hyperparameters_follows_their_changes():
    """A layer answers may_ever_train_on_kernel once (most layers: never) and keeps it until an
    attribute changes: a stride or output_padding set afterwards is seen."""
    from torch import nn

    import deconv_patch

    layer = deconv_patch.FastConvTranspose2d.from_module(
        nn.ConvTranspose2d(128, 64, 3, 2, 1, dilation=2, groups=2))
    assert not layer._may_train_on_kernel(torch.bfloat16)
    assert layer.__dict__["_may_ever_train"] is False
    layer.stride, layer.output_padding = (1, 1), (1, 1)  # no cuDNN kernel now
    assert "_may_ever_train" not in layer.__dict__
    assert layer._may_train_on_kernel(torch.bfloat16)
    with tf32_settings_restored(), torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        torch.backends.cuda.matmul.allow_tf32 = True  # (ATen's GEMMs here: TF32 calls)
        assert not layer._may_train_on_kernel(torch.float32)  # (its own answer per call)
    layer.stride = (2, 2)
    assert not layer._may_train_on_kernel(torch.bfloat16)


def test_a_dense_layers_recorded_call_asks_the_plan_only_in_fp32_without_tf32(monkeypatch):
    """A dense layer with a cuDNN kernel may train on ours only in fp32 without TF32 on Hopper
    (the plan then decides): its cached answer says so, and a recorded call in another dtype,
    with TF32 allowed or on another device goes to PyTorch's convolution from the dtype, the
    flag and the device alone. A layer whose input gradient gemm_phase_tma's kernel cannot take
    (30 fp32 output channels fill no 16-byte rows) is answered never."""
    from torch import nn

    import deconv_patch
    from deconv_patch.kernels import planner

    layer = deconv_patch.FastConvTranspose2d.from_module(nn.ConvTranspose2d(64, 32, 4, 2, 1))
    x = torch.randn(2, 64, 5, 5)
    assert not layer._may_train_on_kernel(torch.bfloat16)
    assert layer.__dict__["_may_ever_train"] is planner.FP32_STRICT_ONLY
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # (a CPU input: never Hopper)
        assert layer._trains_on_pytorch(x)
    monkeypatch.setattr(planner, "hopper_device", lambda device: device == x.device)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        assert layer._trains_on_pytorch(x) and not layer._may_train_on_kernel(torch.float32)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        assert not layer._trains_on_pytorch(x) and layer._may_train_on_kernel(torch.float32)
        assert layer._trains_on_pytorch(x.bfloat16()) and layer._trains_on_pytorch(x.double())
        assert layer._trains_on_pytorch(x.to("meta"))
    odd = deconv_patch.FastConvTranspose2d.from_module(nn.ConvTranspose2d(64, 30, 4, 2, 1))
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        assert not odd._may_train_on_kernel(torch.float32)
        assert odd.__dict__["_may_ever_train"] is False and odd._trains_on_pytorch(x)
    grouped = deconv_patch.FastConvTranspose2d.from_module(
        nn.ConvTranspose2d(128, 128, 4, 2, 1, groups=2))
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        assert not grouped._may_train_on_kernel(torch.float32) and grouped._trains_on_pytorch(x)


def test_kernels_in_training_is_set_on_every_layer_and_said_in_the_summary():
    from torch import nn

    import deconv_patch
    from deconv_patch import FastConvTranspose2d
    from deconv_patch.summary import TRAINING_DEFAULT_NOTE, TRAINING_KERNELS_NOTE, TRAINING_NOTE

    torch.manual_seed(3)
    model = nn.Sequential(nn.ConvTranspose2d(4, 6, 2, 2), nn.ReLU(),
                          nn.ConvTranspose2d(6, 3, 3, 2, 1, output_padding=1))
    patched = deconv_patch.optimize(model, kernels_in_training=True)
    layers = [m for m in patched.modules() if isinstance(m, FastConvTranspose2d)]
    assert len(layers) == 2 and all(m.kernels_in_training for m in layers)
    info = deconv_patch.summary(patched, quiet=True)
    assert TRAINING_KERNELS_NOTE in info.notes and TRAINING_NOTE not in info.notes
    # off CUDA a recorded call is still nn.ConvTranspose2d's computation, gradients included
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    y, want = patched(x), model(x_ref)
    assert torch.equal(y, want)
    grad = torch.randn_like(y)
    y.backward(grad)
    want.backward(grad)
    assert torch.equal(x.grad, x_ref.grad)
    for a, b in zip(patched.parameters(), model.parameters()):
        assert torch.equal(a.grad, b.grad)
    again = deconv_patch.optimize(patched, inplace=True)  # the default: per layer again
    assert all(m.kernels_in_training is None for m in again.modules()
               if isinstance(m, FastConvTranspose2d))
    assert TRAINING_DEFAULT_NOTE in deconv_patch.summary(again, quiet=True).notes


@pytest.mark.parametrize("groups,planned,kernels_in_training,want", [
    (64, "grouped", None, "grouped"),            # the default: the grouped kernel trains
    (64, "grouped", False, "aten"),
    (1, "gemm_out_tile", None, "aten"),          # the default: other kernels do not
    (1, "gemm_out_tile", True, "gemm_out_tile"),
    (64, "aten", True, "aten"),                  # planned on PyTorch's: PyTorch's either way
])
def test_training_backend_says_what_a_recorded_call_runs_and_the_summary_shows_it(
        groups, planned, kernels_in_training, want):
    from torch import nn

    import deconv_patch

    model = deconv_patch.optimize(nn.Sequential(nn.ConvTranspose2d(64, 64, 4, 2, 1,
                                                                   groups=groups)),
                                  kernels_in_training=kernels_in_training)
    layer = model[0]
    # as if its last call had been planned on `planned` (on CUDA; here the weight's device)
    layer.__dict__["_last_plan"] = (layer.weight.device, layer.weight.dtype,
                                    planner.Plan(planned, "test"))
    assert layer.backend == planned
    assert layer.training_backend == want
    row = deconv_patch.summary(model, quiet=True).layers[0]
    assert (row.backend, row.training) == (planned, want)
    assert deconv_patch.summary(model, quiet=True).table().splitlines()[1].split()[-1] == \
        "training"
    layer.activation = "relu"  # a fused activation of its own: PyTorch's in training
    layer.__dict__["_last_plan"] = (layer.weight.device, layer.weight.dtype,
                                    planner.Plan(planned, "test"))
    assert layer.training_backend == "aten"


@pytest.mark.parametrize("last_dtype,planned,want", [
    (torch.bfloat16, "gemm_out_tile", "gemm_out_tile"),  # a bf16-autocast call: 16-bit's rule
    (torch.float16, "direct", "direct"),
    (torch.float32, "ffma_tile", "aten"),                # an fp32 call: fp32's rule
])
def test_an_fp32_layers_training_column_follows_the_dtype_its_last_call_ran_in(
        last_dtype, planned, want):
    """An fp32 model trained under CUDA autocast: its few-output layer's recorded calls run in
    16-bit, where they train on ours; the summary says so, not what fp32's rule would say."""
    from torch import nn

    import deconv_patch

    model = deconv_patch.optimize(nn.Sequential(nn.ConvTranspose2d(64, 3, 4, 2, 1)))
    layer = model[0]
    assert layer.training_backend == "aten"  # fp32, no call yet
    layer.__dict__["_last_plan"] = (layer.weight.device, last_dtype, planner.Plan(planned, "t"))
    assert (layer.backend, layer.training_backend) == (planned, want)
    row = deconv_patch.summary(model, quiet=True).layers[0]
    assert (row.backend, row.training) == (planned, want)
    model.half()  # a 16-bit model: an fp32 call's record does not answer for it (on the CPU
    layer.__dict__["_last_plan"] = (layer.weight.device, torch.float32, planner.Plan(planned, "t"))
    assert layer.backend == layer.training_backend == "aten"  # every plan is PyTorch's)


def test_the_training_column_takes_the_last_calls_own_answer():
    """A layer whose default answer depends on the call (fp32 without TF32 in NCHW: its size):
    training_backend reads the cached answer of the call its last plan came from, and the
    layer's answer where that call is not cached (here on the CPU: not Hopper, PyTorch's)."""
    from torch import nn

    import deconv_patch
    from deconv_patch.modules import _Entry

    layer = deconv_patch.optimize(nn.Sequential(nn.ConvTranspose2d(64, 64, 3, 1, 2,
                                                                   dilation=2)))[0]
    tma = planner.Plan(planner.GEMM_PHASE_TMA, "test")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        layer.__dict__["_last_plan"] = (layer.weight.device, torch.float32, tma)
        assert layer.training_backend == planner.ATEN
        for trains in (False, True, False):
            layer.__dict__["_plan_cache"] = {"a call": _Entry(tma, trains=trains)}
            assert layer.training_backend == (planner.GEMM_PHASE_TMA if trains else planner.ATEN)
        other = planner.Plan(planner.GEMM_PHASE_TMA, "another call's plan")
        layer.__dict__["_plan_cache"] = {"a call": _Entry(other, trains=True)}
        assert layer.training_backend == planner.ATEN


def test_the_default_records_on_the_grouped_kernel_only_once_autotune_has_timed_the_call():
    """A plan autotune has yet to time (the op would time it on the recorded call itself and
    could return a TF32 candidate's output) runs PyTorch's under the default; True keeps it."""
    from torch import nn

    import deconv_patch
    from deconv_patch.modules import _Entry

    layer = deconv_patch.FastConvTranspose2d.from_module(
        nn.ConvTranspose2d(64, 64, 4, 2, 1, groups=64))
    grouped = planner.Plan(planner.GROUPED, "test")
    # (trains: planner.trains_on_kernel for the entry's call, worked out when it is planned)
    assert layer._records_on(_Entry(grouped, trains=True))
    assert not layer._records_on(_Entry(grouped, tune=True, trains=True))
    assert not layer._records_on(_Entry(planner.Plan("gemm_out_tile", "test")))
    # a plan turned PyTorch's after its kernel refused the call
    assert not layer._records_on(_Entry(planner.Plan(planner.ATEN, "refused"), trains=True))
    layer.kernels_in_training = True
    assert layer._records_on(_Entry(grouped, tune=True))
    layer.kernels_in_training = False
    assert not layer._records_on(_Entry(grouped, trains=True))
