"""The TF32 setting our kernels follow is the one PyTorch's convolutions read: with the
per-operator API (torch.backends.cudnn.conv.fp32_precision), the conv setting. Setting conv
and RNN apart that way makes torch.backends.cudnn.allow_tf32's getter raise; a patched model
(optimize, training and eval calls, validate, the op) keeps working and reads the conv
setting."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from deconv_patch import ops, optimize, validate
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.epilogue import IDENTITY
from deconv_patch.kernels import direct_backward, precision
from deconv_patch.kernels.planner import conv_tf32
from deconv_patch.kernels.precision import matmul_tf32
from tests.helpers import HAS_FP32_PRECISION_API, tf32_settings_restored

needs_api = pytest.mark.skipif(not HAS_FP32_PRECISION_API,
                               reason="torch without the per-operator fp32_precision API")


@pytest.fixture
def restored_tf32():
    with tf32_settings_restored():
        yield


def test_the_legacy_flag_is_the_setting(restored_tf32):
    torch.backends.cudnn.allow_tf32 = False
    assert conv_tf32() is False
    torch.backends.cudnn.allow_tf32 = True
    assert conv_tf32() is True


@needs_api
@pytest.mark.parametrize("conv", ["ieee", "tf32"])
def test_conv_set_apart_from_rnn_is_read_without_the_legacy_getter(restored_tf32, conv):
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.conv.fp32_precision = conv
    torch.backends.cudnn.rnn.fp32_precision = "tf32" if conv == "ieee" else "ieee"
    with pytest.raises(RuntimeError, match="allow_tf32"):
        torch._C._get_cudnn_allow_tf32()  # (what a read of the legacy flag meets)
    assert conv_tf32() is (conv == "tf32")


class _Model(nn.Module):
    """A chain to fuse and a layer without a cuDNN kernel (output_padding >= stride), whose
    training calls ask the TF32 setting."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 6, 4, 2, 1)
        self.bn = nn.BatchNorm2d(6)
        self.act = nn.ReLU()
        self.odd = nn.ConvTranspose2d(6, 3, 3, stride=1, padding=1, output_padding=1,
                                      dilation=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.odd(self.act(self.bn(self.up(x))))


@pytest.mark.usefixtures("chains_fold_on_cpu")
@needs_api
def test_a_patched_model_runs_with_conv_and_rnn_set_apart(restored_tf32):
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    torch.manual_seed(0)
    reference = _Model().train()
    patched = optimize(copy.deepcopy(reference), torch.randn(2, 4, 5, 5))
    x = torch.randn(3, 4, 6, 5)
    out, expected = patched(x), reference(x)
    assert torch.equal(out, expected)
    out.sum().backward()
    expected.sum().backward()
    assert all(torch.equal(p.grad, q.grad)
               for p, q in zip(patched.parameters(), reference.parameters()))
    patched.eval()
    reference.eval()
    with torch.no_grad():
        torch.testing.assert_close(patched(x), reference(x), rtol=1e-5, atol=1e-6)
    report = validate(reference, patched, (x,), speed=False)
    assert report.passed, report.failures
    assert report.environment.tf32_cudnn is False
    w = torch.randn(4, 6, 4, 4)
    torch.testing.assert_close(
        torch.ops.deconv_patch.conv_transpose2d(x, w, None, [2, 2], [1, 1], [0, 0], 1, [1, 1]),
        torch.nn.functional.conv_transpose2d(x, w, None, 2, 1))


@needs_api
def test_matmul_set_apart_from_the_backend_is_read_without_the_legacy_getter(restored_tf32):
    """The matmul setting (cuBLAS: the GEMMs of ATen's native convolution kernels, which the
    input gradient of a layer without a cuDNN kernel is chosen against)."""
    torch.backends.fp32_precision = "ieee"
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    with pytest.raises(RuntimeError, match="tf32"):
        torch._C._get_cublas_allow_tf32()
    assert matmul_tf32() is True
    args = ConvTransposeArgs(stride=(1, 1), padding=(1, 1), output_padding=(1, 1),
                             dilation=(2, 2))  # (output_padding >= stride: no cuDNN kernel)
    assert direct_backward.grad_input_kernel((6, 3, 3, 3), args, torch.float32, False) is None
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    assert matmul_tf32() is False
    assert direct_backward.grad_input_kernel((6, 3, 3, 3), args, torch.float32, False) \
        is not None


def test_a_plan_is_kept_per_cublas_tf32_setting(restored_tf32):
    """A recorded call's input-gradient plan reads the matmul setting (the layer without a cuDNN
    kernel above), so the module's and the op's plan caches key on it: a plan made under one
    setting is not reused under the other."""
    layer = optimize(nn.Sequential(nn.ConvTranspose2d(6, 3, 3, stride=1, padding=1,
                                                      output_padding=1, dilation=2)))[0]
    x, w = torch.randn(2, 6, 5, 7), torch.randn(6, 3, 3, 3)
    hyper = ([1, 1], [1, 1], [1, 1], 1, [2, 2])
    keys, plans = [], []
    for allowed in (True, False, True):
        torch.backends.cuda.matmul.allow_tf32 = allowed
        assert matmul_tf32() is allowed
        keys.append(ops.op_call_key(x, w, None, hyper, IDENTITY))
        layer.plan_for(x)
        plans.append(len(layer.__dict__["_plan_cache"]))
    assert keys[0] != keys[1] and keys[0] == keys[2]
    assert plans == [1, 2, 2]


@pytest.mark.parametrize("conv", [True, False], ids=["conv-tf32", "conv-ieee"])
@pytest.mark.parametrize("matmul", [True, False], ids=["matmul-tf32", "matmul-ieee"])
def test_a_call_follows_the_tf32_setting_of_the_kernels_pytorch_runs_it_on(restored_tf32, conv,
                                                                          matmul):
    """cuDNN's convolutions read the conv setting; where PyTorch runs its native kernels (no
    cuDNN kernel for output_padding >= stride, cuDNN disabled, a dilated layer in deterministic
    mode) their cuBLAS GEMMs read the matmul one, and so does a call of ours."""
    plain = ConvTransposeArgs.from_values(stride=2, padding=1)
    dilated = ConvTransposeArgs.from_values(stride=2, padding=1, dilation=2)
    no_cudnn = ConvTransposeArgs.from_values(stride=1, padding=1, output_padding=1, dilation=2)
    torch.backends.cudnn.allow_tf32 = conv
    torch.backends.cuda.matmul.allow_tf32 = matmul
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=conv):
        assert precision.tf32_allowed(plain) is conv
        assert precision.tf32_allowed(dilated) is conv
        assert precision.tf32_allowed(no_cudnn) is matmul
        assert precision.fp32_strict(torch.float32, no_cudnn) is not matmul
        assert not precision.fp32_strict(torch.bfloat16, no_cudnn)
    with torch.backends.cudnn.flags(enabled=False, allow_tf32=conv):
        assert precision.tf32_allowed(plain) is matmul
    with torch.backends.cudnn.flags(enabled=True, deterministic=True, allow_tf32=conv):
        assert precision.tf32_allowed(plain) is conv
        assert precision.tf32_allowed(dilated) is matmul
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=conv):
            assert precision.tf32_allowed(dilated) is matmul
    finally:
        torch.use_deterministic_algorithms(False)


def test_a_plan_is_kept_per_deterministic_mode(restored_tf32):
    """Deterministic mode moves a dilated layer's calls off cuDNN in PyTorch (and so to the
    matmul setting's precision), so the module's and the op's plan caches key on it."""
    layer = optimize(nn.Sequential(nn.ConvTranspose2d(6, 3, 3, stride=2, padding=2,
                                                      dilation=2)))[0]
    x, w = torch.randn(2, 6, 5, 7), torch.randn(6, 3, 3, 3)
    hyper = ([2, 2], [2, 2], [0, 0], 1, [2, 2])
    keys, plans = [], []
    for deterministic in (False, True, False):
        with torch.backends.cudnn.flags(enabled=True, deterministic=deterministic):
            keys.append(ops.op_call_key(x, w, None, hyper, IDENTITY))
            layer.plan_for(x)
            plans.append(len(layer.__dict__["_plan_cache"]))
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        keys.append(ops.op_call_key(x, w, None, hyper, IDENTITY))
    finally:
        torch.use_deterministic_algorithms(False)
    assert keys[0] != keys[1] and keys[0] == keys[2] and keys[3] not in (keys[0], keys[1])
    assert plans == [1, 2, 2]


def test_validate_allows_tf32s_error_only_in_layers_whose_pytorch_call_may_use_it(restored_tf32):
    """validate() holds a patched layer to TF32's error only where PyTorch's own call may round
    to TF32: a layer cuDNN runs at the convolution setting, one PyTorch runs on its native
    kernels (output_padding >= stride) at cuBLAS's; other reported modules at the convolution
    setting."""
    from deconv_patch import validation

    model = optimize(nn.Sequential(nn.ConvTranspose2d(8, 8, 4, 2, 1),
                                   nn.ConvTranspose2d(8, 8, 3, 1, 1, output_padding=1,
                                                      dilation=2)))
    plain, native = model[0], model[1]
    for conv, matmul in ((True, False), (True, True), (False, True), (False, False)):
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = conv, matmul
        assert validation._may_run_tf32(plain) is conv
        assert validation._may_run_tf32(native) is matmul
        assert validation._may_run_tf32(nn.ReLU()) is conv
