"""On CUDA: an eager call planned on a kernel of ours records it, and torch.compile then makes
the layer our op, a stride-phase layer the graph-time rule alone leaves to aten included; the
compiled output is checked against float64 on fresh inputs. Compiled training steps give the op
to the grouped kernel's layers, checked with their gradients."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from deconv_patch import FastConvTranspose2d
from deconv_patch.kernels import planner
from tests.helpers import (allowed_error, calls_our_op, capturing_compile, compiled_graph_calls,
                           graph_calls, max_error)

pytestmark = pytest.mark.cuda
OP = torch.ops.deconv_patch.conv_transpose2d


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_stride_phase_layer_planned_on_our_kernel_compiles_to_the_op(dtype):
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=True):
        layer = FastConvTranspose2d.from_module(
            nn.ConvTranspose2d(256, 128, 4, 2, 1, device="cuda", dtype=dtype)).eval()
        x = torch.randn(16, 256, 8, 8, device="cuda", dtype=dtype)
        args = layer._args(layer.output_padding)
        assert not planner.may_use_kernel(x.device, dtype, layer.kernel_size, args,
                                          (256, 128))  # the graph-time rule: aten
        assert not calls_our_op(compiled_graph_calls(layer, x)[0])
        with torch.no_grad():
            layer(x)  # the eager plan
        if not layer.plan_for(x).uses_kernel:
            pytest.skip(f"the eager plan here is {layer.plan_for(x).variant}")
        assert calls_our_op(compiled_graph_calls(layer, x)[0])
        fresh = torch.randn_like(x)
        with torch.no_grad():
            got = torch.compile(layer, fullgraph=True)(fresh)
        ref = F.conv_transpose2d(fresh.double(), layer.weight.double(), layer.bias.double(),
                                 2, 1)
        pytorch = F.conv_transpose2d(fresh, layer.weight, layer.bias, 2, 1)
        assert max_error(got, ref) <= allowed_error(max_error(pytorch, ref), ref, dtype)


def _decoder(dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.ConvTranspose2d(256, 128, 4, 2, 1), nn.ReLU(),
                         nn.ConvTranspose2d(128, 64, 4, 2, 1)).to("cuda", dtype).eval()


def _float64(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    first, second = model[0], model[2]
    y = F.conv_transpose2d(x.double(), first.weight.double(), first.bias.double(), 2, 1)
    return F.conv_transpose2d(y.relu(), second.weight.double(), second.bias.double(), 2, 1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_example_inputs_make_compiled_graphs_follow_their_plans(dtype):
    """torch.compile(optimize(model, example_inputs)), with no eager call in between: the
    example calls' kernel plans make the layers our op."""
    import deconv_patch

    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=True):
        model = _decoder(dtype)
        x = torch.randn(16, 256, 8, 8, device="cuda", dtype=dtype)
        patched = deconv_patch.optimize(model, x, progress=False)
        planned = [m.__dict__.get("_kernel_planned") for m in (patched[0], patched[2])]
        if not any(planned):
            pytest.skip("no layer's example call is planned on a kernel of ours here")
        targets = compiled_graph_calls(patched, torch.randn_like(x))[0]
        assert sum(t in (OP, OP.default) for t in targets) == sum(1 for p in planned if p)
        fresh = torch.randn_like(x)
        with torch.no_grad():
            got = torch.compile(patched, fullgraph=True)(fresh)
            pytorch = model(fresh)
    ref = _float64(model, fresh)
    assert max_error(got, ref) <= allowed_error(max_error(pytorch, ref), ref, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_reduce_overhead_replays_follow_in_place_weight_updates(dtype, layout):
    """mode="reduce-overhead" (Inductor's CUDA-graph trees): the warm-up runs keep no packed
    weight or workspace from the graphs' pool (the trees refuse live allocations they do not
    know of), and each replay computes with the weights as they are then (a captured call packs
    its weight inside the graph), checked against float64."""
    import deconv_patch

    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=True):
        model = _decoder(dtype).to(memory_format=layout)
        x = torch.randn(16, 256, 8, 8, device="cuda", dtype=dtype).contiguous(
            memory_format=layout)
        patched = deconv_patch.optimize(model, x, progress=False)
        compiled = torch.compile(patched, mode="reduce-overhead")
        with torch.no_grad():
            for step in range(4):
                if step:
                    for m in (model[0], model[2]):
                        m.weight.mul_(-0.5).add_(0.01)  # both models share no tensors
                    for m in (patched[0], patched[2]):
                        m.weight.mul_(-0.5).add_(0.01)
                fresh = torch.randn_like(x)  # keeps x's layout
                got = compiled(fresh).clone()
                pytorch = model(fresh)
                ref = _float64(model, fresh)
                assert max_error(got, ref) <= allowed_error(max_error(pytorch, ref), ref, dtype)


def test_reduce_overhead_with_weight_heavy_layers_and_autotune():
    """pix2pix's inner layers at batch 16 (weights larger than input and output together) under
    mode="reduce-overhead" with cudnn.benchmark on: the warm-up plans and times each layer, the
    capture packs each kernel's weight in the graph, and each replay is checked against
    float64."""
    import deconv_patch

    dtype = torch.bfloat16
    with torch.backends.cudnn.flags(enabled=True, benchmark=True, allow_tf32=True):
        torch.manual_seed(0)
        model = nn.Sequential(nn.ConvTranspose2d(1024, 512, 4, 2, 1), nn.ReLU(),
                              nn.ConvTranspose2d(512, 256, 4, 2, 1)).to("cuda", dtype).eval()
        x = torch.randn(16, 1024, 2, 2, device="cuda", dtype=dtype)
        patched = deconv_patch.optimize(model, x, progress=False)
        compiled = torch.compile(patched, mode="reduce-overhead")
        with torch.no_grad():
            for _ in range(3):
                fresh = torch.randn_like(x)
                got = compiled(fresh).clone()
                pytorch = model(fresh)
                ref = _float64(model, fresh)
                assert max_error(got, ref) <= allowed_error(max_error(pytorch, ref), ref, dtype)


class _SkipUNet(nn.Module):
    """pix2pix's decoder step: an encoder convolution (Inductor lays the graph out channels_last
    for it), a transposed convolution on its output, and a skip concatenation."""

    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Conv2d(64, 256, 4, 2, 1)
        self.up = nn.ConvTranspose2d(256, 64, 4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.up(torch.relu(self.down(x))), x], 1)

    def float64(self, x: torch.Tensor) -> torch.Tensor:
        d = F.conv2d(x.double(), self.down.weight.double(), self.down.bias.double(), 2, 1)
        u = F.conv_transpose2d(d.relu(), self.up.weight.double(), self.up.bias.double(), 2, 1)
        return torch.cat([u, x.double()], 1)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_op_takes_the_layout_inductor_gives_it(mode, dtype):
    """The op takes any input layout (tagged flexible_layout), so in a graph Inductor lays out
    channels_last for its convolutions it gets channels_last inputs; its fake kernel gives the
    output strides the CUDA kernel returns for them. Checked against float64 on fresh inputs."""
    import deconv_patch

    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=True):
        torch.manual_seed(0)
        model = _SkipUNet().to("cuda", dtype).eval()
        x = torch.randn(8, 64, 64, 64, device="cuda", dtype=dtype)
        patched = deconv_patch.optimize(model, x, progress=False)
        torch._dynamo.reset()
        compiled = torch.compile(patched, mode=mode)
        with torch.no_grad():
            for _ in range(3):
                fresh = torch.randn_like(x)
                got = compiled(fresh).clone()
                ref = model.float64(fresh)
                pytorch = model(fresh)
                assert got.shape == ref.shape
                assert max_error(got, ref) <= allowed_error(max_error(pytorch, ref), ref, dtype)


@pytest.mark.parametrize("mode", ["tf32", "bf16 autocast"])
@pytest.mark.parametrize("layer_args", [
    ((32, 64, (3, 5)), dict(stride=(2, 3), padding=(1, 2), output_padding=(1, 1), groups=4,
                            dilation=(2, 1))),
    ((64, 64, 4), dict(stride=2, padding=1, groups=64)),
    ((256, 128, 4), dict(stride=2, padding=1)),  # dense: PyTorch's convolution
])
def test_compiled_training_steps_run_the_grouped_kernels_layers_on_the_op(mode, layer_args):
    """A compiled training step gives our op (forward on the grouped kernel, ATen's backward)
    to the layers whose recorded eager calls train on the grouped kernel, and PyTorch's
    convolution to the rest. Three steps with optimizer updates on fresh inputs: the output and
    the three gradients against float64, each within twice PyTorch's error plus one ulp."""
    from tests.helpers import assert_step_within_bar

    positional, keywords = layer_args
    torch.manual_seed(5)
    ref = nn.ConvTranspose2d(*positional, **keywords, device="cuda")
    layer = FastConvTranspose2d.from_module(copy.deepcopy(ref)).train()
    autocast = mode == "bf16 autocast"
    run_dtype = torch.bfloat16 if autocast else torch.float32
    grouped = keywords.get("groups", 1) > 1
    shape = (4, positional[0], 24, 20)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=True), \
            torch.autocast("cuda", torch.bfloat16, enabled=autocast):
        captured, graphs = capturing_compile(layer)
        captured(torch.randn(shape, device="cuda", requires_grad=True))
        assert calls_our_op(graph_calls(graphs[0])) is grouped
        torch._dynamo.reset()
        compiled = torch.compile(layer, fullgraph=True)
        opt = torch.optim.SGD(layer.parameters(), lr=0.1)
        for _ in range(3):
            with torch.no_grad():
                ref.weight.copy_(layer.weight)
                ref.bias.copy_(layer.bias)
            x = torch.randn(shape, device="cuda")
            xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
            got_y = compiled(xs[0])
            want_y = ref(xs[1])
            dy = torch.randn_like(want_y)
            got = [got_y, *torch.autograd.grad(got_y, [xs[0], layer.weight, layer.bias], dy)]
            want = [want_y, *torch.autograd.grad(want_y, [xs[1], ref.weight, ref.bias], dy)]
            x64 = x.double().requires_grad_()
            w64 = ref.weight.detach().double().requires_grad_()
            b64 = ref.bias.detach().double().requires_grad_()
            y64 = F.conv_transpose2d(x64, w64, b64, ref.stride, ref.padding, ref.output_padding,
                                     ref.groups, ref.dilation)
            exact = [y64, *torch.autograd.grad(y64, [x64, w64, b64], dy.double())]
            assert_step_within_bar(got, want, exact, run_dtype)
            for p, g in zip(layer.parameters(), got[2:]):
                p.grad = g
            opt.step()
