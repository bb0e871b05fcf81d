"""Patched layers and models captured in a CUDA graph: every replay reads the parameters as they
are at that replay. A kernel reading a packed weight packs inside the graph, and a fused chain
folds its BatchNorm inside it, so in-place updates between replays (an optimizer or EMA step,
load_state_dict) are followed, as they are by nn.ConvTranspose2d's own graph. Each round changes
the input and the parameters in place and compares every element of the replay with an eager
call on the updated parameters (a stale pack or fold would be off by the whole update)."""

from __future__ import annotations

import copy
from typing import Callable, Tuple

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from deconv_patch import FastConvTranspose2d, optimize, summary
from deconv_patch.kernels import planner
from deconv_patch.timing import capture_graph
from tests.helpers import assert_within_scale

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def _no_autotune():
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=True):
        yield


def _captured(fn: Callable[[], object]) -> Tuple[Callable[[], None], object]:
    """`fn` warmed up on a side stream (plans, the armed fast path, packed weights), then
    captured: the replay and the captured call's static output."""
    outs = []
    replay, _graph = capture_graph(lambda: outs.append(fn()))
    return replay, outs[-1]


def _fresh_state(module: nn.Module) -> dict:
    return {k: torch.randn_like(v) if v.is_floating_point() else v
            for k, v in module.state_dict().items()}


def test_layer_replays_follow_in_place_weight_updates():
    ref = nn.ConvTranspose2d(64, 64, 2, 2, device="cuda", dtype=torch.bfloat16)
    m = FastConvTranspose2d.from_module(ref)
    x = torch.randn(4, 64, 64, 64, device="cuda", dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last)
    assert planner.reads_packed_weight(m.plan_for(x).variant)  # the case a stale pack breaks
    with torch.no_grad():
        replay, out = _captured(lambda: m(x))
        updates = {
            "input only": lambda: None,
            "weight.add_": lambda: m.weight.add_(torch.randn_like(m.weight)),
            "load_state_dict": lambda: m.load_state_dict(_fresh_state(m)),
            "weight.copy_ and bias.mul_": lambda: (m.weight.copy_(torch.randn_like(m.weight)),
                                                   m.bias.mul_(-3.0)),
        }
        for what, update in updates.items():
            x.copy_(torch.randn_like(x))
            update()
            replay()
            assert_within_scale(out, F.conv_transpose2d(x, m.weight, m.bias, 2), what)
            assert torch.equal(out, m(x)), f"{what}: the eager call after the replay"


def test_fused_chain_replays_follow_conv_and_batchnorm_updates():
    torch.manual_seed(0)
    model = nn.Sequential(nn.ConvTranspose2d(512, 256, 4, 2, 1), nn.BatchNorm2d(256),
                          nn.ReLU()).cuda().eval()  # a pix2pix decoder layer: a phase GEMM
    model.load_state_dict({**_fresh_state(model), "1.running_var":
                           torch.rand(256, device="cuda") + 0.5})
    x = torch.randn(8, 512, 16, 16, device="cuda")
    patched = optimize(copy.deepcopy(model), (x,), progress=False)
    assert summary(patched, quiet=True).num_fused == 1
    assert planner.reads_packed_weight(patched[0].plan_for(x).variant)
    with torch.no_grad():
        replay, out = _captured(lambda: patched(x))
        bn = patched[1]
        updates = {
            "input only": lambda: None,
            "conv weight": lambda: patched[0].weight.add_(torch.randn_like(patched[0].weight)),
            "running statistics": lambda: (bn.running_mean.normal_(),
                                           bn.running_var.uniform_(0.5, 2.0)),
            "load_state_dict": lambda: patched.load_state_dict(
                {**_fresh_state(patched), "1.running_var": torch.rand(256, device="cuda") + 0.5}),
        }
        for what, update in updates.items():
            x.copy_(torch.randn_like(x))
            update()
            replay()
            eager = patched(x)  # refolds and repacks by version counters
            assert torch.equal(out, eager), what  # the same kernels on the same values
            model.load_state_dict(patched.state_dict())
            assert_within_scale(eager, model(x), what)


def test_a_weight_changed_inside_the_captured_region_is_packed_again():
    """Each call in a capture packs the weight for itself, so an in-place update captured
    between two calls reaches the second call."""
    ref = nn.ConvTranspose2d(64, 64, 2, 2, device="cuda", dtype=torch.bfloat16)
    m = FastConvTranspose2d.from_module(ref)
    x = torch.randn(4, 64, 64, 64, device="cuda", dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last)
    assert planner.reads_packed_weight(m.plan_for(x).variant)
    delta = torch.randn_like(m.weight)
    with torch.no_grad():
        replay, (before, after) = _captured(lambda: (m(x), m.weight.add_(delta), m(x))[::2])
        for i in range(3):
            x.copy_(torch.randn_like(x))
            weight = m.weight.clone()
            replay()  # each replay adds delta once, between its two calls
            assert not torch.equal(m.weight, weight)
            assert_within_scale(before, F.conv_transpose2d(x, weight, m.bias, 2),
                                f"replay {i}: before")
            assert_within_scale(after, F.conv_transpose2d(x, m.weight, m.bias, 2),
                                f"replay {i}: after")
