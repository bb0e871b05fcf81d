"""torch.use_deterministic_algorithms(True): a patched model keeps its kernels and its results
repeat bit for bit. The forward kernels reduce in a fixed order (no atomics), so deterministic
mode needs no other plan. With kernels_in_training=False a training step's recorded calls run
PyTorch's convolution, so its gradients are the original model's, bit for bit; by default (the
grouped kernel's layers, layers cuDNN has no kernel for outside fp32 with TF32, and 16-bit layers
with few output channels) and with kernels_in_training=True they run our kernels, with
the planned backward (the direct, tiled and mma weight gradients add in a fixed order too), and
repeat bit for bit."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import deconv_patch
from deconv_patch import FastConvTranspose2d
from deconv_patch.kernels import planner

pytestmark = pytest.mark.cuda


class _Decoder(nn.Module):
    """A latent layer (1 x 1 input, k == stride GEMM), two stride-2 phase layers with BatchNorm
    and ReLU (fused in eval), a depthwise layer, a layer cuDNN has no kernel for (output_padding
    >= stride) and a 3-channel output layer."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.ConvTranspose2d(32, 128, 4, 1, 0, bias=False), nn.BatchNorm2d(128), nn.ReLU(),
            nn.ConvTranspose2d(128, 64, 4, 2, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
            nn.ConvTranspose2d(64, 64, 4, 2, 1, groups=64), nn.ReLU(),
            nn.ConvTranspose2d(64, 32, 3, 1, 2, output_padding=1, dilation=2),  # 16 -> 17
            nn.ConvTranspose2d(32, 3, 4, 2, 2), nn.Tanh())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def _model(dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)
    model = _Decoder()
    with torch.no_grad():  # BatchNorm statistics that are not the identity
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return model.cuda().to(dtype)


def _layers(model: nn.Module) -> list:
    return [m for m in model.modules() if isinstance(m, FastConvTranspose2d)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eval_keeps_the_kernels_and_repeats_bit_for_bit(deterministic, dtype):
    original = _model(dtype).eval()
    example = torch.randn(16, 32, 1, 1, device="cuda", dtype=dtype)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        patched = deconv_patch.optimize(original, (example,))
        z = torch.randn(8, 32, 1, 1, device="cuda", dtype=dtype)  # not the example's batch
        with torch.no_grad():
            first = patched(z)
            second = patched(z.clone())
            want = original(z)
        # the same plans as without deterministic mode: it rules out no kernel of ours
        plans = [layer.backend for layer in _layers(patched)]
        torch.use_deterministic_algorithms(False)
        with torch.no_grad():
            patched(z)
        assert [layer.backend for layer in _layers(patched)] == plans
    assert any(plan != "aten" for plan in plans), plans
    assert torch.equal(first, second)
    assert torch.isfinite(first).all()
    reference = copy.deepcopy(_model(dtype)).eval().double()
    with torch.no_grad():
        exact = reference(z.double())
    tol = 5e-2 if dtype == torch.bfloat16 else 5e-3
    torch.testing.assert_close(first.double(), exact, rtol=tol, atol=tol)
    torch.testing.assert_close(first.float(), want.float(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_training_step_gives_the_originals_gradients_bit_for_bit(deterministic, dtype):
    original = _model(dtype).train()
    patched = deconv_patch.optimize(copy.deepcopy(original), kernels_in_training=False)
    z = torch.randn(8, 32, 1, 1, device="cuda", dtype=dtype)
    target = torch.randn(8, 3, 32, 32, device="cuda", dtype=dtype)
    grads = []
    for model in (original, patched, patched):
        grads.append(_grads(model, z, target))
    for got in grads[1:]:
        assert len(got) == len(grads[0])
        for a, b in zip(grads[0], got):
            assert torch.equal(a, b)


def _grads(model: nn.Module, z: torch.Tensor, target: torch.Tensor) -> list:
    model.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(z).double(), target.double()).backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("kernels_in_training", [None, True], ids=["default", "on"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernels_in_training_repeat_bit_for_bit(deterministic, dtype, kernels_in_training):
    """fp32 strict (no TF32: TF32's forward error, amplified by training-mode BatchNorm, is not
    PyTorch's when cuDNN runs a small layer in full fp32) and bf16."""
    original = _model(dtype).train()
    patched = deconv_patch.optimize(copy.deepcopy(original),
                                    kernels_in_training=kernels_in_training)
    exact = copy.deepcopy(original).double()
    z = torch.randn(8, 32, 1, 1, device="cuda", dtype=dtype)
    target = torch.randn(8, 3, 32, 32, device="cuda", dtype=dtype)
    seen = []  # per patched call: (whether a kernel of ours should record it, its node)

    def hook(module, args, out):
        x = args[0]
        plan = module.plan_for(x)
        planned = module.activation == "none" and (
            plan.uses_kernel if kernels_in_training else planner.trains_on_kernel(
                plan.variant, x.dtype, module._args(module.output_padding),
                module.weight.shape, hopper=planner.hopper_device(x.device),
                call=(x.shape, x.is_contiguous(memory_format=torch.channels_last))))
        seen.append((planned, "ConvTransposeFunction" in out.grad_fn.name()))

    for layer in _layers(patched):
        layer.register_forward_hook(hook)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=False):
        want = _grads(original, z, target)
        first = _grads(patched, z, target)
        second = _grads(patched, z.clone(), target)
        reference = _grads(exact, z.double(), target)
    # a layer without an activation of its own runs its plan's kernel, recorded in C++
    assert seen and all(planned == ours for planned, ours in seen), seen
    # (the depthwise layer; the one without a cuDNN kernel, in fp32 strict and bf16)
    assert sum(ours for _, ours in seen) >= 2, seen
    assert len(first) == len(want) == len(reference)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    # as close to float64's gradients as PyTorch's own step, within 2x (the project's bar)
    ulp = torch.finfo(dtype).eps
    for got, theirs, exact_grad in zip(first, want, reference):
        assert torch.isfinite(got).all()
        ours_err = (got.double() - exact_grad).abs().max().item()
        their_err = (theirs.double() - exact_grad).abs().max().item()
        assert ours_err <= 2 * their_err + ulp * exact_grad.abs().max().item(), (
            ours_err, their_err)
