"""The fx pass itself: which nodes it rewrites, when it folds BN, and what it leaves alone."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn

from deconv_patch import planner
from deconv_patch.fx_pass import OUR_OP, UntraceableError, fx_patch, trace
from deconv_patch.modules import FastConvTranspose2d
from tests.modelkit import random_bn


def _eval_bn(channels: int) -> nn.BatchNorm2d:
    return random_bn(channels).eval()


class ConvBnRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
        self.bn = _eval_bn(6)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.up(x)))


class Functional(nn.Module):
    """F.conv_transpose2d with weights from Parameters, in every calling style."""

    def __init__(self, cin: int = 4) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(cin, 3, 3, 3))
        self.b1 = nn.Parameter(torch.randn(3))
        self.w2 = nn.Parameter(torch.randn(3, 2, 2, 4))  # groups=1
        self.w3 = nn.Parameter(torch.randn(2, 1, 3, 3))  # groups=2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.conv_transpose2d(x, self.w1, self.b1, 2, 1, 1)  # positional
        y = torch.conv_transpose2d(y, self.w2, stride=(2,), padding=(0, 1), dilation=1)  # kwargs
        y = F.conv_transpose2d(input=y, weight=self.w3, groups=2)  # all keywords, defaults
        return y


class SharedTwice(nn.Module):
    """One ConvTranspose2d module applied twice (weight sharing), followed by BN."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 3, 3, padding=1)
        self.bn = _eval_bn(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.up(self.up(x)))


class TwoUsers(nn.Module):
    """The conv output feeds BN *and* a residual add: folding would change the add."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 3, 3, padding=1)
        self.bn = _eval_bn(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up(x)
        return self.bn(y) + y


def _graph_targets(gm: fx.GraphModule):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_module_conv_replaced_and_bn_folded_outputs_match():
    model = ConvBnRelu().eval()
    x = torch.randn(2, 4, 5, 6)
    result = fx_patch(copy.deepcopy(model))
    gm = result.module
    assert isinstance(gm.get_submodule("up"), FastConvTranspose2d)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in gm.modules())
    assert [layer.fused for layer in result.summary.layers] == ["bn(folded)+relu"]
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x), rtol=1e-5, atol=1e-6)
    # the activation moved into the conv's epilogue: its module call left the graph
    assert gm.get_submodule("up").activation == "relu"
    assert not any(n.op == "call_module" and n.target == "act" for n in gm.graph.nodes)


def test_no_fold_when_fuse_false_or_training():
    model = ConvBnRelu().eval()
    for gm in (fx_patch(copy.deepcopy(model), fuse=False).module,
               fx_patch(copy.deepcopy(model).train()).module):
        assert isinstance(gm.get_submodule("bn"), nn.BatchNorm2d)
        assert isinstance(gm.get_submodule("up"), FastConvTranspose2d)
    x = torch.randn(2, 4, 5, 6)
    with torch.no_grad():
        assert torch.equal(fx_patch(copy.deepcopy(model), fuse=False).module(x), model(x))


def test_functional_calls_use_our_op_with_same_semantics():
    model = Functional()
    x = torch.randn(2, 4, 5, 5)
    result = fx_patch(copy.deepcopy(model))
    targets = _graph_targets(result.module)
    assert targets.count(OUR_OP) == 3 and F.conv_transpose2d not in targets
    assert [layer.kind for layer in result.summary.layers] == ["function"] * 3
    first = result.summary.layers[0]
    assert (first.in_channels, first.out_channels, first.stride, first.output_padding) == (
        4, 3, (2, 2), (1, 1))
    assert result.summary.layers[2].groups == 2 and result.summary.layers[2].out_channels == 2
    assert all(layer.backend == planner.ATEN for layer in result.summary.layers)  # CPU
    out = result.module(x)
    torch.testing.assert_close(out, model(x), rtol=0, atol=0)
    out.sum().backward()  # gradients reach the original Parameters
    assert model.w1.grad is None and result.module.w1.grad is not None


def test_shared_module_called_twice_is_patched_once_and_not_folded():
    model = SharedTwice().eval()
    x = torch.randn(2, 3, 5, 5)
    result = fx_patch(copy.deepcopy(model))
    gm = result.module
    calls = [n for n in gm.graph.nodes if n.op == "call_module" and n.target == "up"]
    assert len(calls) == 2
    assert isinstance(gm.get_submodule("up"), FastConvTranspose2d)
    assert isinstance(gm.get_submodule("bn"), nn.BatchNorm2d)  # folding would hit both calls
    (layer,) = result.summary.layers
    assert layer.calls == 2 and layer.fused == "-"
    assert any("called 2 times" in note for note in result.summary.notes)
    with torch.no_grad():
        assert torch.equal(gm(x), model(x))


def test_no_fold_when_conv_output_has_another_user():
    model = TwoUsers().eval()
    x = torch.randn(2, 3, 4, 4)
    gm = fx_patch(copy.deepcopy(model)).module
    assert isinstance(gm.get_submodule("bn"), nn.BatchNorm2d)
    with torch.no_grad():
        assert torch.equal(gm(x), model(x))


def test_filter_fn_skips_modules_and_functions():
    class Both(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.keep = nn.ConvTranspose2d(3, 3, 2, 2)
            self.skip = nn.ConvTranspose2d(3, 3, 2, 2)
            self.w = nn.Parameter(torch.randn(3, 3, 1, 1))

        def forward(self, x):
            return F.conv_transpose2d(self.skip(self.keep(x)), self.w)

    seen = []

    def filter_fn(name, module):
        seen.append((name, type(module).__name__))
        return name == "keep"

    result = fx_patch(Both(), filter_fn=filter_fn)
    gm = result.module
    assert type(gm.get_submodule("keep")) is FastConvTranspose2d
    assert type(gm.get_submodule("skip")) is nn.ConvTranspose2d
    assert OUR_OP not in _graph_targets(gm)
    assert ("conv_transpose2d", "NoneType") in seen
    assert set(result.summary.skipped) == {"skip", "conv_transpose2d"}


def test_pass_is_idempotent_on_its_own_output():
    model = nn.Sequential(ConvBnRelu(), Functional(cin=6)).eval()
    first = fx_patch(copy.deepcopy(model)).module
    second = fx_patch(first).module
    assert second.code == first.code
    assert second.state_dict().keys() == first.state_dict().keys()
    x = torch.randn(1, 4, 4, 4)
    with torch.no_grad():
        assert torch.equal(second(x), first(x))


def test_given_model_is_not_mutated():
    model = ConvBnRelu().eval()
    before = copy.deepcopy(model.state_dict())
    fx_patch(model)
    assert type(model.up) is nn.ConvTranspose2d and isinstance(model.bn, nn.BatchNorm2d)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key])


def test_untraceable_raises_with_one_line_reason():
    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.ConvTranspose2d(3, 3, 2, 2)

        def forward(self, x):
            if x.sum() > 0:
                return self.up(x)
            return self.up(-x)

    with pytest.raises(UntraceableError) as info:
        trace(Branchy())
    assert "\n" not in str(info.value) and "TraceError" in str(info.value)


def test_hooks_on_traced_through_modules_prevent_tracing():
    model = nn.Sequential(nn.Sequential(nn.ConvTranspose2d(3, 3, 2, 2)))
    model[0].register_forward_hook(lambda m, i, o: o * 2)
    with pytest.raises(UntraceableError, match="hooks"):
        trace(model)


def test_unused_submodules_and_buffers_stay_in_state_dict():
    class Extra(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.ConvTranspose2d(3, 3, 2, 2)
            self.unused = nn.Linear(2, 2)
            self.register_buffer("scale", torch.randn(3), persistent=False)
            self.register_buffer("kept", torch.randn(3))

        def forward(self, x):
            return self.up(x) * self.scale.view(1, -1, 1, 1)

    model = Extra()
    gm = fx_patch(copy.deepcopy(model)).module
    assert gm.state_dict().keys() == model.state_dict().keys()
    x = torch.randn(1, 3, 2, 2)
    assert torch.equal(gm(x), model(x))


def test_conv_transpose_inside_a_torch_nn_leaf_or_unused_is_swapped_by_name():
    """nn.DataParallel is a torch.nn leaf: fx does not see into it, a swap by name still works."""
    inner = nn.Sequential(nn.ConvTranspose2d(3, 3, 2, 2), nn.ReLU())

    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dp = nn.DataParallel(inner)  # a leaf for fx; no GPU needed on CPU
            self.spare = nn.ConvTranspose2d(3, 3, 1)  # never called

        def forward(self, x):
            return self.dp(x)

    model = Wrapped()
    result = fx_patch(copy.deepcopy(model))
    gm = result.module
    names = sorted(layer.name for layer in result.summary.layers)
    assert names == ["dp.module.0", "spare"]
    assert isinstance(gm.get_submodule("dp.module.0"), FastConvTranspose2d)
    assert any("swapped by name" in note for note in result.summary.notes)
    x = torch.randn(1, 3, 4, 4)
    with torch.no_grad():
        assert torch.equal(gm(x), model(x))


def test_string_annotations_do_not_reach_the_generated_code():
    """Models written with `from __future__ import annotations` (this file) annotate forward
    with strings; torch < 2.13 cannot pickle a GraphModule whose code has str globals."""
    result = fx_patch(copy.deepcopy(ConvBnRelu().eval()))
    code = result.module.graph.python_code("self")
    assert not any(isinstance(v, str) for v in code.globals.values())
    assert all(not isinstance(n.type, str) for n in result.module.graph.nodes)
