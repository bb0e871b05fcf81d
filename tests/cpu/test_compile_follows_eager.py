"""torch.compile gives our op the layers whose eager calls were planned on a kernel of ours
(FastConvTranspose2d._kernel_planned_eagerly), on top of the graph-time rule; torch.export keeps
the rule alone. On the CPU no call is planned on a kernel, so the record is written here as an
eager CUDA call writes it (tests/gpu/test_compile_follows_eager.py makes it by a call); what is
checked is the graph Dynamo captures and that the compiled output stays PyTorch's."""

from __future__ import annotations

from typing import List

import pytest
import torch
import torch.nn as nn

from deconv_patch import FastConvTranspose2d
from deconv_patch.modules import _device_dtype
from tests.helpers import calls_our_op, capturing_compile, compiled_graph_calls, graph_calls


def _layer() -> FastConvTranspose2d:
    torch.manual_seed(0)
    return FastConvTranspose2d.from_module(nn.ConvTranspose2d(8, 4, 4, 2, 1)).eval()


def _ops_in_compiled_graph(module: nn.Module, x: torch.Tensor) -> List[object]:
    """The call targets of the graph Dynamo captures for module(x), after checking that the
    compiled output is the eager one."""
    targets, out = compiled_graph_calls(module, x)
    with torch.no_grad():
        torch.testing.assert_close(out, module(x), rtol=1e-5, atol=1e-6)
    return targets


def test_a_layer_planned_on_a_kernel_eagerly_becomes_the_op():
    layer = _layer()
    x = torch.randn(2, 8, 5, 5)
    assert not calls_our_op(_ops_in_compiled_graph(layer, x))  # the rule: aten
    layer.__dict__["_kernel_planned"] = frozenset({_device_dtype(x.device, x.dtype)})
    assert calls_our_op(_ops_in_compiled_graph(layer, x))


def test_the_record_is_per_device_and_dtype():
    layer = _layer()
    x = torch.randn(2, 8, 5, 5)
    layer.__dict__["_kernel_planned"] = frozenset({_device_dtype(x.device, torch.bfloat16)})
    assert not calls_our_op(_ops_in_compiled_graph(layer, x))


def test_export_keeps_the_graph_time_rule():
    layer = _layer()
    x = torch.randn(2, 8, 5, 5)
    layer.__dict__["_kernel_planned"] = frozenset({_device_dtype(x.device, x.dtype)})
    with torch.no_grad():  # (with gradients on, the call is recorded: aten either way)
        program = torch.export.export(layer, (x,))
    targets = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert not calls_our_op(targets)
    torch.testing.assert_close(program.module()(x), layer(x), rtol=1e-5, atol=1e-6)


def test_the_record_is_not_copied():
    import copy
    import pickle
    layer = _layer()
    layer.__dict__["_kernel_planned"] = frozenset({("cuda:0", "torch.float32")})
    for clone in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert "_kernel_planned" not in clone.__dict__


@pytest.mark.parametrize("recorded", [False, True])
def test_a_training_graph_keeps_aten_convolutions(recorded):
    layer = _layer().train(recorded)
    x = torch.randn(2, 8, 5, 5)
    layer.__dict__["_kernel_planned"] = frozenset({_device_dtype(x.device, x.dtype)})
    compiled, graphs = capturing_compile(layer)
    if recorded:
        out = compiled(x)  # parameters require gradients: autograd records the call
    else:
        with torch.no_grad():
            out = compiled(x)
    torch.testing.assert_close(out, layer(x), rtol=1e-5, atol=1e-6)
    assert calls_our_op(graph_calls(graphs[0])) is not recorded


def test_optimize_with_example_inputs_records_a_kernel_plan(monkeypatch):
    """optimize(model, example_inputs) plans the layers' calls before any runs (so that their
    kernels compile together); a kernel plan there is recorded as an eager call's is, so that
    torch.compile(optimize(model, example_inputs)) follows it. On the CPU no call is planned on
    a kernel, so the example plan is stubbed to one."""
    import deconv_patch
    from deconv_patch import modules
    from deconv_patch.kernels import planner

    torch.manual_seed(0)
    model = nn.Sequential(nn.ConvTranspose2d(8, 4, 4, 2, 1), nn.Tanh()).eval()
    x = torch.randn(2, 8, 5, 5)
    plain = deconv_patch.optimize(model, x, progress=False)
    assert "_kernel_planned" not in plain[0].__dict__
    assert not calls_our_op(_ops_in_compiled_graph(plain, torch.randn_like(x)))

    def example_plan(module, *geometry, activations=()):
        return planner.Plan(planner.GEMM_PHASE_TMA, "stub"), ()

    monkeypatch.setattr(modules, "example_plan", example_plan)
    patched = deconv_patch.optimize(model, x, progress=False)
    assert patched[0].__dict__["_kernel_planned"] == {_device_dtype(x.device, x.dtype)}
    assert calls_our_op(_ops_in_compiled_graph(patched, torch.randn_like(x)))
    with planner.use_variant(planner.ATEN):  # a forced variant's plan is no eager plan
        forced = deconv_patch.optimize(model, x, progress=False)
    assert "_kernel_planned" not in forced[0].__dict__


def test_a_repeated_record_recompiles_nothing():
    """Eager calls of new geometries on a recorded device and dtype leave the record as it is
    (the same object), so a compiled graph does not recompile; a new dtype grows it once."""
    layer = _layer()
    x = torch.randn(2, 8, 5, 5)
    layer._record_kernel_plan(x.device, x.dtype)
    record = layer.__dict__["_kernel_planned"]
    compiles: List[int] = []

    def backend(gm, _inputs):
        compiles.append(1)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(layer, backend=backend)
    with torch.no_grad():
        compiled(x)
        layer._record_kernel_plan(x.device, x.dtype)  # another geometry's eager plan
        assert layer.__dict__["_kernel_planned"] is record
        compiled(torch.randn_like(x))
        assert len(compiles) == 1
        layer._record_kernel_plan(x.device, torch.bfloat16)
        for _ in range(3):
            compiled(torch.randn_like(x))
    assert len(compiles) <= 2


def test_a_training_graph_calls_the_op_where_the_rule_says_and_keeps_the_gradients(monkeypatch):
    """A recorded call in a compiled graph becomes our op where
    planner.trains_in_compiled_graphs says so (stubbed here: on the CPU no layer is given one),
    asked with the call's device, dtype, hyperparameters and channel counts; never for a layer
    with kernels_in_training=False. The compiled output and all three gradients are the eager
    ones on fresh inputs (the op's autograd: ATen's convolution_backward)."""
    from deconv_patch.kernels import planner

    asked = []

    def rule(device, dtype, args, in_channels, out_channels):
        asked.append((device.type, dtype, args, in_channels, out_channels))
        return True

    monkeypatch.setattr(planner, "trains_in_compiled_graphs", rule)
    torch.manual_seed(1)
    ref = nn.ConvTranspose2d(8, 16, (3, 5), (2, 3), (1, 2), (1, 1), groups=4, dilation=(2, 1))
    layer = FastConvTranspose2d.from_module(ref).train()
    for chosen, want_op in ((None, True), (False, False)):
        layer.kernels_in_training = chosen
        compiled, graphs = capturing_compile(layer)
        x = torch.randn(2, 8, 6, 7, requires_grad=True)
        out = compiled(x)
        assert calls_our_op(graph_calls(graphs[0])) is want_op
        grad = torch.randn_like(out)
        got = torch.autograd.grad(out, [x, layer.weight, layer.bias], grad)
        x_ref = x.detach().clone().requires_grad_()
        want_out = ref(x_ref)
        want = torch.autograd.grad(want_out, [x_ref, ref.weight, ref.bias], grad)
        torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-5)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert asked and asked[0] == ("cpu", torch.float32, layer._args(layer.output_padding), 8,
                                  16)
