"""Threads on CUDA streams of their own sharing a patched model (a server's workers): a packed
weight or a folded BatchNorm made on one stream must never be read on another before it is
made. Each case queues a long sleep on the first stream ahead of the call that packs or folds
there, then calls on a second stream at once, and checks that the second call finished while
the first stream still slept: a copy shared across streams would have been read unwritten.
Both calls' outputs are compared with the original's."""

from __future__ import annotations

import copy
from typing import Callable, Tuple

import pytest
import torch
import torch.nn as nn

from deconv_patch import FastConvTranspose2d, optimize
from deconv_patch.kernels import packed_weights, planner
from tests.helpers import assert_within_scale, random_bn

pytestmark = pytest.mark.cuda

SLEEP_CYCLES = 1_000_000_000  # about half a second of GPU clock: far longer than either call
# TF32 on both sides (PyTorch's default for convolutions): a pack or fold read before it was
# written is off by the output's whole magnitude.
WITHIN = 5e-3


@pytest.fixture(autouse=True)
def _defaults():
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=True):
        yield


def _race(call: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
          ) -> Tuple[torch.Tensor, torch.Tensor]:
    """call(x) on stream 1 behind a sleep, then on stream 2; both outputs once both ran."""
    first_stream, second_stream = torch.cuda.Stream(), torch.cuda.Stream()
    for stream in (first_stream, second_stream):
        stream.wait_stream(torch.cuda.current_stream())  # x and the weights as they are now
    slept = torch.cuda.Event()
    second_done = torch.cuda.Event()
    with torch.no_grad():
        with torch.cuda.stream(first_stream):
            torch.cuda._sleep(SLEEP_CYCLES)
            slept.record()
            first = call(x)
        with torch.cuda.stream(second_stream):
            second = call(x)
            second_done.record()
    second_done.synchronize()
    assert not slept.query(), "the second stream's call waited for the first stream"
    torch.cuda.synchronize()
    return first, second


def test_a_packed_weight_is_never_read_on_another_stream_before_it_is_packed():
    torch.manual_seed(0)
    reference = nn.ConvTranspose2d(64, 32, 4, 2, 1).cuda().eval()
    layer = FastConvTranspose2d.from_module(copy.deepcopy(reference)).eval()
    x = torch.randn(8, 64, 32, 32, device="cuda")
    with planner.use_variant(planner.GEMM_PHASE):  # a variant that reads a packed weight
        with torch.no_grad():
            layer(x)  # planned, units loaded, packed on the default stream
            packs = packed_weights.cache().packs
            for module in (reference, layer):
                module.weight.mul_(-0.5)  # re-packed at the next call, on that call's stream
        first, second = _race(layer, x)
    with torch.no_grad():
        expected = reference(x)
    assert_within_scale(first, expected, "first stream", WITHIN)
    assert_within_scale(second, expected, "second stream", WITHIN)
    assert packed_weights.cache().packs == packs + 2  # one pack per stream


class _Chain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Sequential(nn.ConvTranspose2d(64, 64, 4, 2, 1, bias=False), random_bn(64),
                                nn.ReLU())
        self.out = nn.ConvTranspose2d(64, 16, 2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.up(x))


def test_a_folded_batchnorm_is_never_read_on_another_stream_before_it_is_folded():
    torch.manual_seed(1)
    reference = _Chain().cuda().eval()
    x = torch.randn(8, 64, 16, 16, device="cuda")
    patched = optimize(copy.deepcopy(reference), x)
    assert "_fused_chain" in patched.up[0].__dict__
    with torch.no_grad():
        patched(x)  # folded (and packed where the plan packs) on the default stream
        for model in (reference, patched):
            model.up[1].running_mean.add_(0.5)  # refolded at the next call, on its stream
        x = torch.randn(8, 64, 16, 16, device="cuda")
        first, second = _race(patched, x)
        expected = reference(x)
    assert_within_scale(first, expected, "first stream", WITHIN)
    assert_within_scale(second, expected, "second stream", WITHIN)
