"""The fused epilogue on the CPU: the fused op's reference path, its fake kernel and autograd, the
module's `activation`, and optimize() running activation modules in the conv's call (GPU kernels:
tests/gpu/test_epilogue.py)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import deconv_patch
from deconv_patch import FastConvTranspose2d, optimize, summary
from deconv_patch.epilogue import ACTIVATIONS, activation_of_module, apply_epilogue
from deconv_patch.summary import PatchWarning

FUSED = torch.ops.deconv_patch.conv_transpose2d_fused

# Each activation name next to the torch.nn module that computes it.
MODULES = {
    "relu": nn.ReLU(), "leaky_relu": nn.LeakyReLU(0.2), "silu": nn.SiLU(), "gelu": nn.GELU(),
    "gelu_tanh": nn.GELU(approximate="tanh"), "tanh": nn.Tanh(), "sigmoid": nn.Sigmoid(),
    "hardswish": nn.Hardswish(),
}


def _conv_args():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 5, 7, dtype=torch.float64)
    w = torch.randn(6, 4, 3, 3, dtype=torch.float64)  # groups=2 -> 8 output channels
    b = torch.randn(8, dtype=torch.float64)
    return x, w, b, (2, 1), (1, 0), (1, 0), 2, (1, 2)


@pytest.mark.parametrize("name", list(MODULES))
def test_fused_op_matches_conv_then_affine_then_module(name):
    x, w, b, stride, padding, output_padding, groups, dilation = _conv_args()
    scale, shift = torch.rand(8, dtype=torch.float64) + 0.5, torch.randn(8, dtype=torch.float64)
    slope = 0.2 if name == "leaky_relu" else 0.01
    got = FUSED(x, w, b, stride, padding, output_padding, groups, dilation, scale, shift, name,
                slope)
    conv = F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)
    expected = MODULES[name](conv.float() * scale.float().view(-1, 1, 1)
                             + shift.float().view(-1, 1, 1)).double()
    assert got.dtype == torch.float64 and got.shape == conv.shape
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    assert activation_of_module(MODULES[name]).name == name


def test_fused_op_without_epilogue_is_the_plain_op_bit_for_bit():
    x, w, b, *hyper = _conv_args()
    assert torch.equal(FUSED(x, w, b, *hyper), torch.ops.deconv_patch.conv_transpose2d(x, w, b,
                                                                                       *hyper))
    only_act = FUSED(x, w, b, *hyper, None, None, "relu")
    assert torch.equal(only_act, F.relu(F.conv_transpose2d(x, w, b, *hyper)))


def test_fused_op_rejects_bad_epilogue_arguments():
    x, w, b, *hyper = _conv_args()
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        FUSED(x, w, b, *hyper, None, None, "swish")
    with pytest.raises(RuntimeError, match=r"scale must have shape \[8\]"):
        FUSED(x, w, b, *hyper, torch.ones(6, dtype=torch.float64))
    assert set(ACTIVATIONS) >= set(MODULES) | {"none"}


def test_fused_op_fake_kernel_and_opcheck():
    x, w, b, *hyper = _conv_args()
    scale, shift = torch.rand(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    with FakeTensorMode() as mode:
        fake = FUSED(*(mode.from_tensor(t) for t in (x, w, b)), *hyper,
                     mode.from_tensor(scale), mode.from_tensor(shift), "silu", 0.01)
    real = FUSED(x, w, b, *hyper, scale, shift, "silu", 0.01)
    assert fake.shape == real.shape and fake.stride() == real.stride()
    torch.library.opcheck(FUSED, (x.float(), w.float(), b.float(), *hyper, scale.float(),
                                  shift.float(), "leaky_relu", 0.1))


@pytest.mark.parametrize("name", ["relu", "leaky_relu", "gelu", "sigmoid", "hardswish"])
def test_fused_op_gradients_match_unfused_autograd(name):
    x, w, b, *hyper = _conv_args()
    scale, shift = torch.rand(8, dtype=torch.float64) + 0.5, torch.randn(8, dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in (x, w, b, scale, shift)]
    twins = [t.clone().requires_grad_() for t in (x, w, b, scale, shift)]
    FUSED(*leaves[:3], *hyper, leaves[3], leaves[4], name, 0.3).pow(2).sum().backward()
    conv = F.conv_transpose2d(*twins[:3], *hyper)
    apply_epilogue(conv, twins[3], twins[4], name, 0.3).pow(2).sum().backward()
    for a, b_ in zip(leaves, twins):
        torch.testing.assert_close(a.grad, b_.grad, rtol=1e-5, atol=1e-6)
    # only some inputs needing gradients
    xs = x.clone().requires_grad_()
    FUSED(xs, w, b, *hyper, scale, shift, name, 0.3).sum().backward()
    assert xs.grad is not None and xs.grad.shape == x.shape


class UpAct(nn.Module):
    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 6, 4, stride=2, padding=1)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.up(x))


class FunctionalActs(nn.Module):
    """Activations as functions and tensor methods after conv modules."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1)
        self.b = nn.ConvTranspose2d(4, 4, 3, stride=1, padding=1)
        self.c = nn.ConvTranspose2d(4, 4, 2, stride=2)
        self.d = nn.ConvTranspose2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.leaky_relu(self.a(x), 0.1)
        y = self.b(y).sigmoid()
        y = F.gelu(self.c(y), approximate="tanh")
        return torch.relu(self.d(y))


@pytest.mark.usefixtures("chains_fold_on_cpu")
@pytest.mark.parametrize("name", list(MODULES))
def test_optimize_moves_each_activation_module_into_the_conv(name):
    torch.manual_seed(0)
    model = UpAct(copy.deepcopy(MODULES[name])).eval()
    patched = optimize(model, torch.randn(1, 4, 3, 3))
    assert [layer.fused for layer in summary(patched, quiet=True).layers] == [name]
    chain = patched.get_submodule("up").__dict__["_fused_chain"]
    assert chain.activation == name and chain.act is patched.act and chain.bn is None
    assert type(patched.act).__name__ == type(model.act).__name__
    x = torch.randn(2, 4, 5, 6)  # a fresh input, other shape
    with torch.no_grad():
        assert torch.equal(patched(x), model(x))  # CPU: PyTorch conv + the same activation
        assert torch.equal(patched.act(x), model.act(x))  # other inputs: the activation itself


def test_function_and_method_activations_stay_as_written():
    torch.manual_seed(0)
    model = FunctionalActs().eval()
    x = torch.randn(2, 4, 5, 6)
    patched = optimize(model, x)
    info = summary(patched, quiet=True)
    assert {layer.name: layer.fused for layer in info.layers} == dict.fromkeys("abcd", "-")
    assert not info.declined  # nothing that could be fused was declined
    with torch.no_grad():
        fresh = torch.randn(3, 4, 4, 7)
        assert torch.equal(patched(fresh), model(fresh))


class Branching(nn.Module):
    """Cases that must not fuse: the conv output has a second user, or the conv runs twice."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 4, 2, stride=2)
        self.twice = nn.ConvTranspose2d(4, 4, 1)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up(x)
        z = self.act(y) + y  # y is used twice
        return self.act(self.twice(z)) + self.act(self.twice(z * 2))


def test_no_fusion_when_the_output_is_shared_or_the_conv_is_reused():
    model = Branching().eval()
    x = torch.randn(1, 4, 3, 3)
    with pytest.warns(PatchWarning, match="2 fusion"):
        patched = optimize(model, x)
    info = summary(patched, quiet=True)
    assert all(layer.fused == "-" for layer in info.layers)
    reasons = dict(info.declined)
    assert "2 uses" in reasons["up"] and "called 2 times" in reasons["twice"]
    with torch.no_grad():
        fresh = torch.randn(2, 4, 5, 3)
        assert torch.equal(patched(fresh), model(fresh))


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_training_models_and_fuse_false_keep_activations_separate():
    model = UpAct(nn.ReLU())
    x = torch.randn(2, 4, 3, 3)
    trained = optimize(model, x)  # fused chain planned, but training mode runs it unfused
    off = optimize(model.eval(), x, fuse=False)
    assert "_fused_chain" not in off.get_submodule("up").__dict__
    assert type(off.act) is nn.ReLU
    with torch.no_grad():
        assert torch.equal(off(x), model(x))
        assert torch.equal(trained.train()(x), model.train()(x))
    assert trained.get_submodule("up").activation == "none"


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_optimize_twice_does_not_fuse_twice():
    model = UpAct(nn.Tanh()).eval()
    once = optimize(model, torch.randn(1, 4, 3, 3))
    twice = optimize(once, torch.randn(1, 4, 3, 3))
    assert [layer.fused for layer in summary(twice, quiet=True).layers] == ["tanh"]
    assert twice.get_submodule("up").activation == "none"
    x = torch.randn(1, 4, 3, 3)
    with torch.no_grad():
        assert torch.equal(twice(x), model(x))


def test_module_with_activation_repr_pickle_and_state_dict():
    conv = nn.ConvTranspose2d(4, 6, 3, stride=2)
    fast = FastConvTranspose2d.from_module(conv, "leaky_relu", 0.2)
    assert "activation=leaky_relu(0.2)" in repr(fast)
    assert fast.weight is conv.weight and set(fast.state_dict()) == set(conv.state_dict())
    clone = pickle.loads(pickle.dumps(fast))
    x = torch.randn(1, 4, 4, 4)
    with torch.no_grad():
        assert torch.equal(clone(x), F.leaky_relu(conv(x), 0.2))
    with pytest.raises(ValueError, match="already has a fused activation"):
        FastConvTranspose2d.from_module(fast, "relu")
    with pytest.raises(ValueError, match="unknown activation"):
        FastConvTranspose2d.from_module(conv, "swish")
    # training through the fused module: gradients equal the unfused module's
    x.requires_grad_()
    fast(x).sum().backward()
    grad_fused = conv.weight.grad.clone()
    conv.weight.grad = None
    F.leaky_relu(conv(x), 0.2).sum().backward()
    assert torch.equal(grad_fused, conv.weight.grad)


def test_public_function_wraps_the_op():
    x, w, b, *hyper = _conv_args()
    out = deconv_patch.conv_transpose2d_fused(x, w, b, *hyper, activation="tanh")
    assert torch.equal(out, torch.tanh(F.conv_transpose2d(x, w, b, *hyper)))
