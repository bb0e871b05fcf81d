"""FastConvTranspose2d behaves exactly like the nn.ConvTranspose2d it replaces."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torch import nn

from deconv_patch import FastConvTranspose2d, swap_conv_transpose2d

CONFIGS = [
    dict(in_channels=8, out_channels=4, kernel_size=3, stride=2, padding=1, output_padding=1),
    dict(in_channels=6, out_channels=9, kernel_size=(2, 5), stride=(2, 1), padding=(0, 2),
         groups=3, bias=False),
    dict(in_channels=4, out_channels=4, kernel_size=3, stride=3, dilation=2, groups=4),
]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_from_module_matches_original_and_shares_parameters(cfg):
    ref = nn.ConvTranspose2d(**cfg)
    fast = FastConvTranspose2d.from_module(ref)
    assert isinstance(fast, nn.ConvTranspose2d)
    assert fast.weight is ref.weight and fast.bias is ref.bias
    for attr in ("in_channels", "out_channels", "kernel_size", "stride", "padding",
                 "output_padding", "groups", "dilation", "padding_mode"):
        assert getattr(fast, attr) == getattr(ref, attr)
    x = torch.randn(2, cfg["in_channels"], 5, 6)
    torch.testing.assert_close(fast(x), ref(x), rtol=0, atol=0)
    torch.testing.assert_close(fast(x[0]), ref(x[0]), rtol=0, atol=0)


def test_output_size_argument():
    ref = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1)
    fast = FastConvTranspose2d.from_module(ref)
    x = torch.randn(1, 4, 5, 5)
    for size in ([9, 9], [10, 10], [10, 9], (1, 3, 10, 9)):
        out = fast(x, output_size=size)
        torch.testing.assert_close(out, ref(x, output_size=size), rtol=0, atol=0)
        assert list(out.shape[-2:]) == list(size[-2:])
    with pytest.raises(ValueError):
        fast(x, output_size=[13, 13])


def test_state_dict_loads_both_ways():
    ref = nn.ConvTranspose2d(5, 7, 4, 2, 1)
    fast = FastConvTranspose2d(5, 7, 4, 2, 1)
    assert ref.state_dict().keys() == fast.state_dict().keys()
    fast.load_state_dict(ref.state_dict())
    x = torch.randn(2, 5, 3, 3)
    torch.testing.assert_close(fast(x), ref(x), rtol=0, atol=0)
    other = nn.ConvTranspose2d(5, 7, 4, 2, 1)
    other.load_state_dict(fast.state_dict())
    torch.testing.assert_close(other(x), ref(x), rtol=0, atol=0)


def test_repr_names_backend():
    fast = FastConvTranspose2d.from_module(nn.ConvTranspose2d(4, 3, 3, stride=2))
    assert repr(fast).startswith("FastConvTranspose2d(4, 3, kernel_size=(3, 3), stride=(2, 2)")
    assert "backend=aten" in repr(fast)  # CPU tensors run on PyTorch


def test_moves_casts_pickles_and_copies():
    fast = FastConvTranspose2d(4, 3, 3, stride=2)
    x = torch.randn(1, 4, 5, 5)
    half = copy.deepcopy(fast).half()
    assert half.weight.dtype == torch.float16
    dbl = copy.deepcopy(fast).to(torch.float64)
    torch.testing.assert_close(dbl(x.double()), fast(x).double(), rtol=1e-6, atol=1e-6)
    restored = pickle.loads(pickle.dumps(fast))
    assert isinstance(restored, FastConvTranspose2d)
    torch.testing.assert_close(restored(x), fast(x), rtol=0, atol=0)
    buf = io.BytesIO()
    torch.save(fast, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    torch.testing.assert_close(loaded(x), fast(x), rtol=0, atol=0)


def test_from_module_is_idempotent_and_checks_type():
    fast = FastConvTranspose2d(4, 3, 3)
    assert FastConvTranspose2d.from_module(fast) is fast
    with pytest.raises(TypeError):
        FastConvTranspose2d.from_module(nn.Conv2d(3, 3, 3))


def test_training_mode_and_autograd_preserved():
    ref = nn.ConvTranspose2d(4, 3, 3).eval()
    assert not FastConvTranspose2d.from_module(ref).training
    fast = FastConvTranspose2d.from_module(ref.train())
    assert fast.training
    fast(torch.randn(1, 4, 4, 4)).sum().backward()
    assert ref.weight.grad is not None and ref.bias.grad is not None


def test_swap_replaces_every_layer_and_keeps_sharing():
    shared = nn.ConvTranspose2d(3, 3, 3, padding=1)
    model = nn.Sequential(nn.ConvTranspose2d(2, 3, 2, 2), shared, nn.ReLU(), shared,
                          nn.Sequential(nn.ConvTranspose2d(3, 2, 1)))
    x = torch.randn(1, 2, 4, 4)
    expected = model(x)
    names = swap_conv_transpose2d(model)
    assert names == ["0", "1", "3", "4.0"]
    assert isinstance(model[1], FastConvTranspose2d) and model[1] is model[3]
    assert not any(type(m) is nn.ConvTranspose2d for m in model.modules())
    torch.testing.assert_close(model(x), expected, rtol=0, atol=0)
    assert swap_conv_transpose2d(model) == []


def test_swap_leaves_subclasses_with_their_own_forward():
    class Scaled(nn.ConvTranspose2d):
        def forward(self, x, output_size=None):
            return 2 * super().forward(x, output_size)

    model = nn.Sequential(Scaled(2, 3, 2, 2), nn.ConvTranspose2d(3, 3, 1))
    assert swap_conv_transpose2d(model) == ["1"]
    assert type(model[0]) is Scaled


def test_plan_cache_with_prepared_calls_is_not_pickled_or_copied():
    import copy as copy_
    import pickle as pickle_

    from deconv_patch.kernels import planner
    from deconv_patch.modules import _Entry

    fast = FastConvTranspose2d(4, 6, 3, stride=2)
    x = torch.randn(1, 4, 5, 5)
    fast.plan_for(x)  # (calls off CUDA run PyTorch without planning)
    cache = fast.__dict__["_plan_cache"]
    key = next(iter(cache))
    cache[key] = _Entry(planner.Plan(planner.ATEN, "test"), call=lambda *a: None)  # a closure
    for clone in (pickle_.loads(pickle_.dumps(fast)), copy_.deepcopy(fast)):
        assert "_plan_cache" not in clone.__dict__
        with torch.no_grad():
            assert torch.equal(clone(x), fast(x))
    assert fast.__dict__["_plan_cache"] is cache  # the original keeps its cache


def test_weight_norm_and_parametrizations_still_work():
    from torch.nn.utils import parametrizations, weight_norm

    torch.manual_seed(0)
    x = torch.randn(2, 4, 5, 5)
    for wrap in (lambda m: weight_norm(m, dim=1), lambda m: parametrizations.weight_norm(m, dim=1)):
        ref = wrap(nn.ConvTranspose2d(4, 6, 3, stride=2))
        fast = wrap(FastConvTranspose2d(4, 6, 3, stride=2))
        fast.load_state_dict(ref.state_dict())
        with torch.no_grad():
            assert torch.equal(fast(x), ref(x))


def test_fast_path_is_consulted_first_and_only_where_it_may_answer():
    """The armed C++ fast path (a stand-in here: it needs the CUDA extension) answers plain
    calls; output_size= calls, forced variants and a None answer go through Python."""
    from deconv_patch.kernels import planner

    fast = FastConvTranspose2d(4, 6, 3, stride=2)
    x = torch.randn(1, 4, 5, 5)
    seen = []
    sentinel = torch.full((1,), 7.0)

    def answer(input, weight, bias):
        seen.append((input, weight, bias))
        return sentinel

    fast.__dict__["_fast_path"] = answer
    with torch.no_grad():  # (a call autograd records never reaches it: the real one refuses)
        assert fast(x) is sentinel and seen[-1] == (x, fast.weight, fast.bias)
        want = nn.functional.conv_transpose2d(x, fast.weight, fast.bias, 2)
        assert torch.equal(fast(x, output_size=[11, 11]), want)
        with planner.use_variant(planner.ATEN):
            assert torch.equal(fast(x), want)
        assert len(seen) == 1
        fast.__dict__["_fast_path"] = lambda *a: None  # not the armed geometry
        assert torch.equal(fast(x), want)


def test_recorded_fast_path_answers_recorded_calls_only():
    """The path armed for recorded calls that go to PyTorch's convolution (a stand-in here)
    answers calls autograd records, before the training prefilter; calls without gradients,
    output_size= calls, forced variants and a None answer go through Python, which asks the
    prefilter and computes PyTorch's convolution with its gradients."""
    from deconv_patch.kernels import planner

    fast = FastConvTranspose2d(4, 6, 3, stride=2)
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    seen = []
    sentinel = torch.full((1,), 7.0)

    def answer(input, weight, bias):
        seen.append((input, weight, bias))
        return sentinel

    asked = []
    prefilter = fast._training_prefilter()
    fast.__dict__["_prefilter"] = type("Spy", (), {"may_train": staticmethod(
        lambda input: asked.append(input) or prefilter.may_train(input))})()
    fast.__dict__["_fast_path_recorded"] = answer
    assert fast(x) is sentinel and seen[-1] == (x, fast.weight, fast.bias) and not asked
    want = nn.functional.conv_transpose2d(x, fast.weight, fast.bias, 2)
    with torch.no_grad():
        assert torch.equal(fast(x), want)
    assert torch.equal(fast(x, output_size=[12, 12]),
                       nn.functional.conv_transpose2d(x, fast.weight, fast.bias, 2, 0, 1))
    with planner.use_variant(planner.ATEN):
        assert torch.equal(fast(x), want)
    assert len(seen) == 1
    fast.__dict__["_fast_path_recorded"] = lambda *a: None  # not the armed geometry or context
    asked.clear()
    y = fast(x)
    assert asked == [x] and torch.equal(y, want)
    g = torch.randn_like(y)
    assert all(torch.equal(a, b) for a, b in zip(
        torch.autograd.grad(y, [x, fast.weight, fast.bias], g),
        torch.autograd.grad(want, [x, fast.weight, fast.bias], g)))


def test_attribute_changes_disarm_the_fast_path_and_copies_drop_it():
    import copy as copy_
    import pickle as pickle_

    fast = FastConvTranspose2d(4, 6, 3, stride=2)
    slots = ("_fast_path", "_fast_path_recorded")
    for change in (lambda m: setattr(m, "padding", (1, 1)),
                   lambda m: setattr(m, "weight", nn.Parameter(m.weight.detach().clone())),
                   lambda m: setattr(m, "activation", "relu"), lambda m: m.train(False),
                   lambda m: setattr(m, "kernels_in_training", False)):
        for slot in slots:
            fast.__dict__[slot] = object()
        change(fast)
        assert not any(slot in fast.__dict__ for slot in slots)
    for slot in slots:
        fast.__dict__[slot] = object()
    for clone in (pickle_.loads(pickle_.dumps(fast)), copy_.deepcopy(fast)):
        assert not any(slot in clone.__dict__ for slot in slots)
    assert all(slot in fast.__dict__ for slot in slots)


def test_fast_path_never_armed_for_cpu_calls():
    fast = FastConvTranspose2d(4, 6, 3, stride=2)
    with torch.no_grad():
        for _ in range(2):
            fast(torch.randn(1, 4, 5, 5))
    for _ in range(3):  # (recorded calls: the same geometry in a row)
        fast(torch.randn(1, 4, 5, 5, requires_grad=True))
    assert "_fast_path" not in fast.__dict__ and "_fast_path_recorded" not in fast.__dict__


def test_patched_parametrized_layer_copies_without_its_process_caches():
    """A prepared C++ call (here a stand-in) is per process: deepcopy leaves it behind, also
    for parametrized layers, whose own deepcopy copies everything else."""
    import copy as copy_

    from torch.nn.utils import parametrizations, parametrize

    from deconv_patch.patching import patch_modules

    model = nn.Sequential(parametrizations.spectral_norm(nn.ConvTranspose2d(4, 6, 4, 2, 1)))
    patch_modules(model)
    model[0].__dict__["_fast_path"] = object()
    clone = copy_.deepcopy(model)
    assert "_fast_path" not in clone[0].__dict__
    assert isinstance(clone[0], FastConvTranspose2d) and parametrize.is_parametrized(clone[0])
    x = torch.randn(2, 4, 5, 5)
    with torch.no_grad():
        assert torch.equal(clone.eval()(x), model.eval()(x))
    parametrize.remove_parametrizations(clone[0], "weight")
    assert type(clone[0]) is FastConvTranspose2d


def test_a_call_off_cuda_runs_pytorch_without_planning(monkeypatch):
    """Off CUDA every plan is PyTorch's convolution, so a call runs it straight away (as cheap
    as nn.ConvTranspose2d's): bit for bit nn.ConvTranspose2d's result, with or without
    gradients, output_size=, and a fused activation applied after it."""
    torch.manual_seed(0)
    ref = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1)
    fast = FastConvTranspose2d.from_module(ref)
    relu = FastConvTranspose2d.from_module(ref, activation="relu")

    def no_planning(*args, **kwargs):
        raise AssertionError("planned a call off CUDA")

    monkeypatch.setattr(FastConvTranspose2d, "_entry_for", no_planning)
    x = torch.randn(2, 4, 5, 5)
    with torch.no_grad():
        assert torch.equal(fast(x), ref(x))
        assert torch.equal(fast(x, output_size=[10, 10]), ref(x, output_size=[10, 10]))
        assert torch.equal(relu(x), torch.relu(ref(x)))
    y = fast(x.requires_grad_())
    y.square().sum().backward()
    grad = x.grad.clone()
    x.grad = None
    ref(x).square().sum().backward()
    assert torch.equal(grad, x.grad)
