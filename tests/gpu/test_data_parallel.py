"""nn.DataParallel over a patched model with fused chains, on two GPUs: its replicas share
each conv's chain, whose BatchNorm and activation are the original's modules on the first GPU.
Every output and gradient must be what DataParallel over the original computes, and the model
itself must still fuse when called directly."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from deconv_patch import optimize
from tests.helpers import ChainDecoder, assert_within_scale

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs"),
]


@pytest.fixture(autouse=True)
def _defaults():
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=True):
        yield


def _pair(train: bool) -> tuple:
    torch.manual_seed(0)
    reference = ChainDecoder().cuda().train(train)
    patched = optimize(copy.deepcopy(reference), torch.randn(2, 64, 8, 8, device="cuda"))
    assert sum("_fused_chain" in m.__dict__ for m in patched.modules()) == 2
    return reference, patched


def test_eval_under_data_parallel_computes_the_originals_outputs():
    reference, patched = _pair(train=False)
    parallel_reference, parallel = nn.DataParallel(reference), nn.DataParallel(patched)
    with torch.no_grad():
        for batch, size in ((4, 8), (7, 11), (2, 16)):
            x = torch.randn(batch, 64, size, size, device="cuda")
            assert_within_scale(parallel(x), parallel_reference(x), f"batch {batch}")
        x = torch.randn(3, 64, 8, 8, device="cuda")
        assert_within_scale(patched(x), reference(x), "the model itself")
    assert all(m.__dict__["_fused_chain"].disabled is None
               for m in patched.modules() if "_fused_chain" in m.__dict__)


def test_a_training_step_under_data_parallel_matches_the_originals():
    reference, patched = _pair(train=True)
    x = torch.randn(6, 64, 8, 8, device="cuda")
    target = torch.randn(6, 3, 32, 32, device="cuda")  # (8 x 8 -> 16 -> 32)
    for model in (reference, patched):
        loss = nn.functional.mse_loss(nn.DataParallel(model)(x), target)
        loss.backward()
    for (name, p_ref), p in zip(reference.named_parameters(), patched.parameters()):
        assert_within_scale(p.grad, p_ref.grad, name)
    for (name, b_ref), b in zip(reference.named_buffers(), patched.buffers()):
        assert_within_scale(b, b_ref, name)
    reference.eval()
    patched.eval()
    with torch.no_grad():
        x = torch.randn(5, 64, 8, 8, device="cuda")
        assert_within_scale(nn.DataParallel(patched)(x), nn.DataParallel(reference)(x),
                            "eval after")
