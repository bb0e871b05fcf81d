"""`deconv_patch.optimize`: the user-facing contract (copies, modes, idempotence, fallbacks)."""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from deconv_patch.modules import FastConvTranspose2d
from deconv_patch.optimize import optimize
from deconv_patch.summary import PatchSummary, summary
from tests.modelkit import random_bn


_eval_bn = random_bn


class Decoder(nn.Module):
    """ConvT+BN+ReLU twice, then a plain ConvT: two folds, one plain swap."""

    def __init__(self) -> None:
        super().__init__()
        self.block1 = nn.Sequential(nn.ConvTranspose2d(8, 6, 4, 2, 1, bias=False), _eval_bn(6),
                                    nn.ReLU())
        self.block2 = nn.Sequential(nn.ConvTranspose2d(6, 4, 3, 2, 1, 1), _eval_bn(4), nn.ReLU())
        self.out = nn.ConvTranspose2d(4, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.out(self.block2(self.block1(x))))


class Branchy(nn.Module):
    """Data-dependent control flow: fx cannot trace it, a plain swap works."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 4, 2, 2)
        self.bn = _eval_bn(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.mean() > 0:
            return self.bn(self.up(x))
        return self.up(-x)


def _x() -> torch.Tensor:
    return torch.randn(2, 8, 5, 5)


def _count(model: nn.Module, cls: type) -> int:
    return sum(1 for m in model.modules() if isinstance(m, cls))


def test_fx_path_patches_folds_and_matches():
    model = Decoder().eval()
    x = _x()
    patched = optimize(model)
    info = summary(patched, quiet=True)
    assert info.path == "fx"
    assert info.num_patched == _count(model, nn.ConvTranspose2d) == 3
    assert [layer.fused for layer in info.layers] == ["bn(folded)+relu", "bn(folded)+relu", "tanh"]
    assert _count(patched, FastConvTranspose2d) == 3 and _count(patched, nn.BatchNorm2d) == 0
    with torch.no_grad():
        torch.testing.assert_close(patched(x), model(x), rtol=1e-5, atol=1e-6)


def test_mode_device_dtype_and_values_kept():
    for train in (False, True):
        model = Decoder().double().train(train)
        model.block2[1].eval()  # a submodule whose mode differs from its parent's
        before = copy.deepcopy(model.state_dict())
        patched = optimize(model, _x().double())
        assert patched.training == train
        assert patched.get_submodule("block2.0").training == train
        assert patched.get_submodule("block2").training == train
        if train:  # nothing folded in training mode; BN kept its own mode
            assert patched.get_submodule("block2.1").training is False
        for p in patched.parameters():
            assert p.dtype == torch.float64 and p.device.type == "cpu"
        for key, value in model.state_dict().items():  # the original is untouched
            assert torch.equal(value, before[key]), key


def test_training_mode_folds_nothing_and_matches_with_gradients():
    model = Decoder().train()
    patched = optimize(model)
    info = summary(patched, quiet=True)
    assert info.num_fused == 0 and any("training mode" in n for n in info.notes)
    x = _x()
    out_ref, out = model(x), patched(x)
    assert torch.equal(out, out_ref)  # same ATen math on CPU, batch statistics
    out_ref.square().sum().backward()
    out.square().sum().backward()
    for (name, p_ref), p in zip(model.named_parameters(), patched.parameters()):
        torch.testing.assert_close(p.grad, p_ref.grad, rtol=0, atol=0, msg=name)


def test_example_inputs_run_leaves_buffers_alone():
    model = Decoder().train()
    before = {k: v.clone() for k, v in model.named_buffers()}
    patched = optimize(model, _x())
    for name, buf in patched.named_buffers():
        if name in before:
            assert torch.equal(buf, before[name]), name


def test_idempotent():
    model = Decoder().eval()
    once = optimize(model)
    twice = optimize(once)
    assert twice.code == once.code
    assert summary(twice, quiet=True).layers == summary(once, quiet=True).layers
    sd1, sd2 = once.state_dict(), twice.state_dict()
    assert sd1.keys() == sd2.keys() and all(torch.equal(sd1[k], sd2[k]) for k in sd1)
    x = _x()
    with torch.no_grad():
        assert torch.equal(twice(x), once(x))
    swapped = optimize(Branchy())
    again = optimize(swapped)
    assert summary(again, quiet=True).layers == summary(swapped, quiet=True).layers


def test_state_dict_round_trip_when_nothing_fused():
    model = Decoder().eval()
    patched = optimize(model, fuse=False)
    assert patched.state_dict().keys() == model.state_dict().keys()
    other = Decoder().eval()  # different random weights
    patched.load_state_dict(other.state_dict())
    x = _x()
    with torch.no_grad():
        assert torch.equal(patched(x), other(x))
    model.load_state_dict(patched.state_dict())
    with torch.no_grad():
        assert torch.equal(model(x), patched(x))


def test_state_dict_keys_change_when_folded_as_documented():
    model = Decoder().eval()
    keys = set(optimize(model).state_dict())
    assert "block1.1.running_mean" not in keys and "block1.0.bias" in keys
    assert "block1.0.bias" not in model.state_dict()


def test_inplace():
    model = Decoder().eval()
    patched = optimize(model, inplace=True, fuse=False)
    assert patched.get_submodule("out").weight is model.out.weight  # shared, not copied
    branchy = Branchy()
    assert optimize(branchy, inplace=True) is branchy
    assert isinstance(branchy.up, FastConvTranspose2d)


def test_untraceable_model_falls_back_to_swap():
    model = Branchy().eval()
    patched = optimize(model)
    info = summary(patched, quiet=True)
    assert info.path == "swap" and "TraceError" in info.reason
    assert "\n" not in info.reason
    assert [layer.name for layer in info.layers] == ["up"] and info.layers[0].fused == "-"
    assert isinstance(patched.up, FastConvTranspose2d) and type(model.up) is nn.ConvTranspose2d
    for sign in (1.0, -1.0):  # both branches
        x = sign * (torch.rand(2, 3, 4, 4) + 0.1)
        with torch.no_grad():
            assert torch.equal(patched(x), model(x))


def test_traced_graph_failing_on_example_inputs_falls_back():
    class DictOrTensor(nn.Module):
        """Traces (the Proxy is not a Tensor, so fx records the dict branch) but the graph is wrong."""

        def __init__(self) -> None:
            super().__init__()
            self.up = nn.ConvTranspose2d(3, 3, 2, 2)

        def forward(self, x):
            if isinstance(x, torch.Tensor):
                return self.up(x)
            return self.up(x.image)

    x = torch.randn(1, 3, 4, 4)
    patched = optimize(DictOrTensor(), x)
    info = summary(patched, quiet=True)
    assert info.path == "swap" and "example_inputs" in info.reason
    assert torch.equal(patched(x), patched.up(x))


def test_model_without_conv_transpose_is_returned_unchanged():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    with pytest.warns(UserWarning, match="returned unchanged"):
        patched = optimize(model)
    info = summary(patched, quiet=True)
    assert info.path == "none" and info.num_patched == 0
    assert type(patched) is nn.Sequential and patched is not model
    x = torch.randn(1, 3, 6, 6)
    assert torch.equal(patched(x), model(x))
    with pytest.warns(UserWarning, match="no ConvTranspose2d"):
        optimize(nn.Sequential(nn.Conv2d(3, 3, 1)), inplace=True)


def test_filter_fn():
    model = Decoder().eval()
    patched = optimize(model, filter_fn=lambda name, m: name != "block2.0")
    info = summary(patched, quiet=True)
    assert [layer.name for layer in info.layers] == ["block1.0", "out"]
    assert info.skipped == ("block2.0",)
    assert type(patched.get_submodule("block2.0")) is nn.ConvTranspose2d
    assert isinstance(patched.get_submodule("block2.1"), nn.BatchNorm2d)  # skipped: not folded
    with pytest.warns(UserWarning, match="filter_fn skipped all 1 layers"):
        swapped = optimize(Branchy(), filter_fn=lambda name, m: False)
    assert summary(swapped, quiet=True).path == "none"


def test_shared_module_used_twice_and_registered_twice():
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.ConvTranspose2d(3, 3, 3, padding=1)
            self.alias = self.up  # same module under a second name
            self.bn = _eval_bn(3)

        def forward(self, x):
            return self.bn(self.alias(self.up(x)))

    model = Shared().eval()
    patched = optimize(model)
    (layer,) = summary(patched, quiet=True).layers
    assert layer.calls == 2 and layer.fused == "-"
    assert patched.get_submodule("alias") is patched.get_submodule("up")
    assert patched.state_dict().keys() == model.state_dict().keys()
    x = torch.randn(2, 3, 5, 5)
    with torch.no_grad():
        assert torch.equal(patched(x), model(x))


def test_functional_conv_transpose_with_parameter_weights():
    class Fn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(4, 2, 3, 3))
            self.bias = nn.Parameter(torch.randn(2))

        def forward(self, x):
            return F.conv_transpose2d(x, self.weight, self.bias, stride=2, padding=1,
                                      output_padding=1)

    model = Fn()
    patched = optimize(model)
    info = summary(patched, quiet=True)
    assert info.path == "fx" and [layer.kind for layer in info.layers] == ["function"]
    assert "deconv_patch.conv_transpose2d" in patched.code
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    out_ref, out = model(x), patched(x)
    assert torch.equal(out, out_ref)
    g_ref = torch.autograd.grad(out_ref.sum(), (x, model.weight))
    g = torch.autograd.grad(out.sum(), (x, patched.weight))
    assert all(torch.equal(a, b) for a, b in zip(g, g_ref))


def test_summary_table_and_errors():
    patched = optimize(Decoder().eval())
    buffer = io.StringIO()
    info = summary(patched, file=buffer)
    text = buffer.getvalue()
    assert isinstance(info, PatchSummary) and text == info.table() + "\n"
    for expected in ("path=fx", "block1.0", "block2.0", "out", "bn(folded)", "fused",
                     "activation runs in the conv kernel", "aten"):
        assert expected in text
    assert summary(copy.deepcopy(patched), quiet=True).layers == info.layers
    with pytest.raises(ValueError, match="not returned by deconv_patch.optimize"):
        summary(Decoder())
    with pytest.raises(TypeError):
        optimize("not a module")  # type: ignore[arg-type]


def test_progress_bar_only_for_many_layers(capsys):
    many = nn.Sequential(*[nn.ConvTranspose2d(2, 2, 1) for _ in range(25)])
    optimize(many)
    assert "deconv_patch" in capsys.readouterr().err
    optimize(Decoder())
    assert "deconv_patch" not in capsys.readouterr().err


def test_validate_needs_example_inputs():
    with pytest.raises(ValueError, match="example_inputs"):
        optimize(Decoder(), validate=True)


def test_validate_attaches_report():
    pytest.importorskip("deconv_patch.validation")
    model = Decoder().eval()
    patched = optimize(model, _x(), validate=True)
    report = summary(patched, quiet=True).validation
    assert report is not None
    assert getattr(report, "passed", True), str(report)  # folded layers compared as conv + BN


def test_patched_model_compiles_without_graph_breaks():
    """The op has a fake kernel, so Dynamo/AOTAutograd trace straight through the patched model."""
    model = Decoder().eval()
    patched = optimize(model)
    torch._dynamo.reset()
    compiled = torch.compile(patched, backend="aot_eager", fullgraph=True)
    x = _x()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), patched(x), rtol=0, atol=0)


def test_example_inputs_check_leaves_the_random_state_alone():
    model = nn.Sequential(nn.ConvTranspose2d(3, 3, 2, 2), nn.Dropout(0.5)).train()
    x = torch.randn(1, 3, 4, 4)
    state = torch.random.get_rng_state()
    optimize(model, x)
    assert torch.equal(torch.random.get_rng_state(), state)
