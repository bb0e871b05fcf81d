"""grad_calls on the CPU: which calls autograd records, that a recorded call runs PyTorch's
path unless a variant is forced, and that a patched layer's recorded call is
nn.ConvTranspose2d's (the CUDA side: tests/gpu/test_grad_calls.py)."""

from __future__ import annotations

import pytest
import torch

from deconv_patch import grad_calls
from deconv_patch.kernels import planner
from tests.helpers import tf32_settings_restored


def _may_train(layer, dtype: torch.dtype) -> bool:
    """Whether some recorded call of `layer` in `dtype` may train on a kernel of ours by
    default (its prefilter's answer from the hyperparameters and, for fp32, the TF32 and
    autocast settings)."""
    return layer._training_prefilter().least_macs(dtype) is not None


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
        # not the grouped kernel's: in TF32 our forward with ATen's backward may run them
        (128, 128, 2, 4, 2, 0, 2, False, True, False),     # 64 per group
        (64, 64, 64, 4, 8, 0, 2, False, True, False),      # stride area 64
        # dense: in fp32 without TF32 where gemm_phase_tma's kernel takes the input gradient
        # (the plan and the device then decide: trains_on_kernel); in 16-bit a k4 s2 layer
        # keeps PyTorch's (kernel == stride layers only: test below)
        (64, 32, 1, 4, 2, 0, 2, False, True, True),
        (64, 32, 1, 4, 2, 1, 2, False, True, True),        # dense, output_padding < stride
        (64, 30, 1, 4, 2, 0, 1, False, True, False),       # 30 fp32 channels: no 16-byte rows
        (64, 8, 1, 2, 2, 0, 1, False, True, False),        # sums of 32 products: below 3xTF32's
        (64, 32, 1, 16, 16, 0, 1, False, True, False),     # stride 16
        # dense, output_padding >= stride: no cuDNN kernel; ATen's native GEMMs follow cuBLAS's
        # TF32 setting (off: the tf32 column), so fp32 trains on ours with either conv setting
        (64, 32, 1, 4, 1, 1, 2, True, True, True),
        # 3 out, 64 in: the tensor-core gradients in 16-bit (fp32 with TF32 keeps PyTorch's)
        (64, 3, 1, 4, 2, 0, 1, True, False, False),
        (56, 1, 1, 9, 3, 0, 1, True, False, False),
        (64, 3, 1, 4, 2, 0, 2, True, False, False),        # dilated
        (64, 3, 1, 5, 2, 1, 1, True, False, False),        # k5 s2 (WGAN-GP's output)
        (64, 4, 1, 4, 2, 0, 1, True, False, True),         # 4 out: also in fp32 without TF32
        (16, 3, 1, 4, 2, 0, 1, False, True, False),        # 3 out, 16 in: a dense layer
        (128, 4, 2, 4, 2, 0, 1, False, True, False),       # 2 out, 64 in per group: dense
    ])
def test_which_layers_may_train_on_kernels_by_default(
        in_channels, out_channels, groups, kernel, stride, output_padding, dilation, may, tf32,
        strict):
    from torch import nn

    import deconv_patch

    layer = deconv_patch.FastConvTranspose2d.from_module(
        nn.ConvTranspose2d(in_channels, out_channels, kernel, stride, 1, output_padding,
                           groups=groups, dilation=dilation))
    assert layer.kernels_in_training is None
    assert _may_train(layer, torch.bfloat16) == may
    assert _may_train(layer, torch.float16) == may
    assert not _may_train(layer, torch.float64)
    with tf32_settings_restored():
        torch.backends.cuda.matmul.allow_tf32 = False
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
            assert _may_train(layer, torch.float32) == tf32
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            assert _may_train(layer, torch.float32) == strict
        # TF32 in cuBLAS too: a layer without a cuDNN kernel is then a TF32 call either way
        torch.backends.cuda.matmul.allow_tf32 = True
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            no_cudnn = output_padding >= stride
            assert _may_train(layer, torch.float32) == (strict and not no_cudnn)
    layer.kernels_in_training = False
    assert layer.training_backend == planner.ATEN
    layer.kernels_in_training = True
    assert layer.training_backend == layer.backend


@pytest.mark.parametrize("padding,output_padding,dilation,may", [
    (0, 0, 1, True), (1, 0, 1, False), (0, 1, 1, False), (0, 0, 2, False)])
def test_sixteen_bit_dense_layers_may_train_on_our_forward_where_kernel_is_stride(
        padding, output_padding, dilation, may):
    """In 16-bit a dense layer with a cuDNN kernel may run our forward in training only where
    every output pixel takes one tap (kernel == stride, no padding, output_padding or
    dilation: gemm_kxs's GEMM); the call's size then decides (test_planner)."""
    from torch import nn

    import deconv_patch

    layer = deconv_patch.FastConvTranspose2d.from_module(
        nn.ConvTranspose2d(128, 64, 2, 2, padding, output_padding, dilation=dilation))
    assert _may_train(layer, torch.bfloat16) == may
    assert _may_train(layer, torch.float16) == may


def test_under_cuda_autocast_a_float32_inputs_call_is_answered_in_autocasts_dtype(monkeypatch):
    """A float32 input's call under CUDA autocast runs in autocast's dtype: a k4 s2 layer that
    may train on ours in fp32 without TF32 does not in 16-bit, a kernel == stride layer does.
    (CUDA autocast cannot be entered on a CPU-only build: its two getters stand in.)"""
    from torch import nn

    import deconv_patch

    k4s2 = deconv_patch.FastConvTranspose2d.from_module(nn.ConvTranspose2d(64, 32, 4, 2, 1))
    kxs = deconv_patch.FastConvTranspose2d.from_module(nn.ConvTranspose2d(64, 32, 2, 2))
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        assert _may_train(k4s2, torch.float32) and _may_train(kxs, torch.float32)
        monkeypatch.setattr(planner, "_any_autocast", lambda: True)
        monkeypatch.setattr(torch, "is_autocast_enabled", lambda device=None: device == "cuda")
        monkeypatch.setattr(torch, "get_autocast_dtype", lambda device: torch.bfloat16)
        assert not _may_train(k4s2, torch.float32)
        assert _may_train(kxs, torch.float32)


@pytest.mark.parametrize("dtype,kernel,padding", [
    (torch.float32, 4, 1),     # TF32, stride phases: from MIN_TF32_STRIDE_PHASE_MACS on
    (torch.float32, 2, 0),     # TF32, kernel == stride: from MIN_TF32_MACS on
    (torch.bfloat16, 2, 0),    # 16-bit: kernel == stride layers, from MIN_SIXTEEN_BIT_MACS on
])
def test_a_recorded_calls_size_decides_before_any_planning(dtype, kernel, padding, monkeypatch):
    """A recorded call of a layer whose forward may train on ours (forward_in_training) goes to
    PyTorch's convolution straight from the forward below the layer's least multiply-adds, and
    on to the planned path from there on (meta tensors: the sizes alone decide)."""
    from torch import nn

    import deconv_patch
    from deconv_patch.kernels import forward_in_training

    layer = deconv_patch.FastConvTranspose2d.from_module(
        nn.ConvTranspose2d(512, 256, kernel, 2, padding, device="meta", dtype=dtype))
    planned = []
    monkeypatch.setattr(type(layer), "_conv", lambda self, x, *rest: planned.append(x.shape))
    least = {(torch.float32, 4): forward_in_training.MIN_TF32_STRIDE_PHASE_MACS,
             (torch.float32, 2): forward_in_training.MIN_TF32_MACS,
             (torch.bfloat16, 2): forward_in_training.MIN_SIXTEEN_BIT_MACS}[dtype, kernel]
    pixels = least // (512 * 256 * kernel * kernel)  # rows of 16: a batch of 4, rows of 4
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        for rows, goes_on in ((pixels // 16 - 1, False), (pixels // 16, True)):
            x = torch.empty(4, 512, rows, 4, device="meta", dtype=dtype, requires_grad=True)
            y = layer(x)
            assert bool(planned) == goes_on and (goes_on or y.shape[0] == 4)
            planned.clear()
            with torch.no_grad():  # (an unrecorded call is planned whatever its size)
                layer(x)
            assert planned == [x.shape]
            planned.clear()


def test_an_fp32_strict_recorded_call_goes_on_to_planning_only_on_hopper(monkeypatch):
    """fp32 without TF32: a dense layer whose input gradient gemm_phase_tma's kernel takes may
    train on ours on Hopper only, so elsewhere its recorded calls go to PyTorch's convolution
    before any planning, whatever their size; on Hopper the plan decides."""
    from torch import nn

    import deconv_patch

    layer = deconv_patch.FastConvTranspose2d.from_module(nn.ConvTranspose2d(64, 32, 4, 2, 1))
    planned = []
    monkeypatch.setattr(type(layer), "_conv", lambda self, x, *rest: planned.append(x.shape))
    x = torch.randn(2, 64, 5, 5, requires_grad=True)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        want = nn.functional.conv_transpose2d(x, layer.weight, layer.bias, 2, 1)
        assert torch.equal(layer(x), want) and not planned  # (not Hopper: the CPU)
        monkeypatch.setattr(planner, "hopper_device", lambda device: device == x.device)
        layer(x)
        assert planned == [x.shape]
        planned.clear()
        # (16-bit: a k4 s2 layer never)
        assert not layer._training_prefilter().may_train(x.detach().bfloat16())
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        layer(x)  # (TF32: 2^17 multiply-adds, below MIN_TF32_STRIDE_PHASE_MACS)
        assert not planned


def test_the_training_column_of_a_layer_whose_calls_size_decides(monkeypatch):
    """A layer whose recorded calls run our forward only from some size on (TF32,
    forward_in_training): before any planned call the summary says PyTorch's (its recorded
    calls so far were sent there before planning); after a planned call, that call's answer."""
    from torch import nn

    import deconv_patch
    from deconv_patch.modules import _Entry

    layer = deconv_patch.optimize(nn.Sequential(nn.ConvTranspose2d(512, 256, 4, 2, 1)))[0]
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        assert _may_train(layer, torch.float32)
        monkeypatch.setattr(type(layer), "backend", property(lambda self: "gemm_phase_tma"))
        assert layer.training_backend == planner.ATEN
        for trains in (True, False):  # (the planned call's own answer, worked out on CUDA)
            plan = planner.Plan("gemm_phase_tma", "test")
            layer.__dict__["_plan_cache"] = {"call": _Entry(plan, trains=trains)}
            layer.__dict__["_last_plan"] = (layer.weight.device, torch.float32, plan)
            assert layer.training_backend == ("gemm_phase_tma" if trains else planner.ATEN)


@pytest.mark.parametrize("autocast", [None, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("hopper", [False, True])
def test_a_recorded_calls_answer_is_its_dtypes_least_multiply_adds(hopper, autocast,
                                                                   monkeypatch):
    """may_train (every recorded call asks it, so it reads the device only where that decides)
    answers as least_macs does for the call's dtype and device, over layers of every kind,
    each dtype, the TF32 settings, CUDA autocast (its getters stand in: a CPU-only build cannot
    enter it) and sizes on both sides of each threshold (meta tensors)."""
    import itertools

    from deconv_patch.arguments import ConvTransposeArgs

    monkeypatch.setattr(planner, "hopper_device", lambda device: hopper)
    if autocast is not None:
        monkeypatch.setattr(planner, "_any_autocast", lambda: True)
        monkeypatch.setattr(torch, "is_autocast_enabled", lambda device=None: device == "cuda")
        monkeypatch.setattr(torch, "get_autocast_dtype", lambda device: autocast)
    layers = [  # (in, out, kernel, stride, output_padding, groups, dilation)
        (64, 64, 4, 2, 0, 64, 1), (512, 256, 4, 2, 0, 1, 1), (512, 256, 2, 2, 0, 1, 1),
        (64, 32, 4, 1, 1, 1, 1), (64, 3, 4, 2, 0, 1, 1), (64, 30, 4, 2, 0, 1, 2),
        (128, 128, 2, 4, 0, 2, 1)]
    sizes = [1, 2 ** 20, 2 ** 26, 2 ** 28]  # input elements
    answers = set()
    for (cin, cout, k, s, op, g, d), dtype, (cudnn_tf32, cublas_tf32) in itertools.product(
            layers, (torch.float32, torch.bfloat16, torch.float16, torch.float64),
            itertools.product((False, True), repeat=2)):
        args = ConvTransposeArgs((s, s), (0, 0), (op, op), (d, d), g)
        prefilter = planner.TrainingPrefilter.for_layer(cin, cout, (k, k), args)
        with tf32_settings_restored(), torch.backends.cudnn.flags(enabled=True,
                                                                  allow_tf32=cudnn_tf32):
            torch.backends.cuda.matmul.allow_tf32 = cublas_tf32
            for elements in sizes:
                x = torch.empty(elements // cin + 1, cin, device="meta", dtype=dtype)
                least = prefilter.least_macs(dtype, x.device)
                want = least is not None and (
                    least == 0 or x.numel() * cout // g * k * k >= least)
                assert prefilter.may_train(x) == want, (cin, cout, k, s, op, g, d, dtype,
                                                        cudnn_tf32, cublas_tf32, elements)
                answers.add(want)
    assert answers == {True, False}


def test_the_prefilters_answer_follows_changes_of_the_hyperparameters():
    """The layer's arguments the prefilter reads are kept until an attribute changes: a stride
    or output_padding set afterwards is seen."""
    from torch import nn

    import deconv_patch

    layer = deconv_patch.FastConvTranspose2d.from_module(
        nn.ConvTranspose2d(128, 64, 3, 2, 1, dilation=2, groups=2))
    assert not _may_train(layer, torch.bfloat16)
    assert "_prefilter" in layer.__dict__
    layer.stride, layer.output_padding = (1, 1), (1, 1)  # no cuDNN kernel now
    assert "_prefilter" not in layer.__dict__
    assert _may_train(layer, torch.bfloat16)
    with tf32_settings_restored(), torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        torch.backends.cuda.matmul.allow_tf32 = True  # (ATen's GEMMs here: TF32 calls)
        assert not _may_train(layer, torch.float32)  # (its own answer per call)
    layer.stride = (2, 2)
    assert not _may_train(layer, torch.bfloat16)


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
    # the default: a dense layer's large TF32 calls run our forward; with no call planned
    # (here), PyTorch's (test_the_training_column_of_a_layer_whose_calls_size_decides)
    (1, "gemm_out_tile", None, "aten"),
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
