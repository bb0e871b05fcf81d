"""A patched model with fused chains through the life users give it, on the GPU with the kernels:
eval after training steps (running statistics updated in the kernel, no version counter bumped),
modes put back by assignment (PyTorch Lightning's validation loop), threads sharing the model,
torch.jit.trace, `.data` assignments, and writes through `.data` brought up to date by
load_state_dict. Every output is compared with the original model's on fresh inputs; a stale
fold or pack, or a BatchNorm applied twice, is off by far more than the tolerance."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn as nn

from deconv_patch import optimize
from deconv_patch.fused_chain import ActivationGate, BatchNormGate
from tests.helpers import ChainDecoder, assert_within_scale, forwards_interleaved

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def _defaults():
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=True):
        yield


def _x(batch: int = 4, size: int = 16) -> torch.Tensor:
    return torch.randn(batch, 64, size, size, device="cuda")


def _pair() -> tuple:
    torch.manual_seed(0)
    reference = ChainDecoder().cuda().eval()
    patched = optimize(copy.deepcopy(reference), _x(2))
    chains = [m.__dict__.get("_fused_chain") for m in patched.modules()]
    assert sum(c is not None for c in chains) == 2
    return reference, patched


def _gated(model: nn.Module) -> bool:
    return all(isinstance(model.get_submodule(f"{b}.1"), BatchNormGate) and
               isinstance(model.get_submodule(f"{b}.2"), ActivationGate)
               for b in ("block1", "block2"))


def test_eval_after_training_forwards_folds_the_new_statistics():
    reference, patched = _pair()
    x = _x()
    with torch.no_grad():
        assert_within_scale(patched(x), reference(x), "before training")  # folded and cached
        for model in (reference, patched):
            model.train()
            torch.manual_seed(1)
            for _ in range(3):
                model(_x() * 3 + 2)  # running statistics move far
            model.eval()
        for a, b in zip(reference.buffers(), patched.buffers()):  # (TF32 convs on both sides)
            if a.is_floating_point():
                assert_within_scale(b, a, "running statistics")
            else:
                assert torch.equal(a, b)
        x = _x()
        assert_within_scale(patched(x), reference(x), "after training")


def test_modes_put_back_by_assignment_train_without_gates_and_fuse_again():
    """Lightning's loop: training mode set by train(); each validation run captures the modes,
    calls eval(), runs under inference_mode and assigns the modes back."""
    reference, patched = _pair()
    opts = [torch.optim.SGD(m.parameters(), lr=1e-3) for m in (reference, patched)]
    for model in (reference, patched):
        model.train()
    for epoch in range(2):
        x = _x()
        outs = []
        for model in (reference, patched):
            modes = {name: m.training for name, m in model.named_modules()}
            model.eval()
            with torch.inference_mode():
                outs.append(model(x))
            for name, m in model.named_modules():
                m.training = modes[name]
        assert_within_scale(outs[1], outs[0], f"validation {epoch}")
        assert _gated(patched)  # (until its next call)
        for _ in range(2):
            x = _x()
            for model, opt in zip((reference, patched), opts):
                opt.zero_grad()
                model(x).square().mean().backward()
                opt.step()
            assert not _gated(patched)
        for a, b in zip(reference.parameters(), patched.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_threads_sharing_the_model_each_take_their_own_hand_over(monkeypatch):
    reference, patched = _pair()
    inputs = {"A": _x(2), "B": _x(3)}
    outputs = forwards_interleaved(patched, inputs, monkeypatch)
    with torch.no_grad():
        for name, x in inputs.items():
            assert_within_scale(outputs[name], reference(x), name)


def test_torch_jit_trace_records_pytorchs_convolution_unfused():
    reference, patched = _pair()
    with torch.no_grad():
        patched(_x())  # fused, packed weights cached
        with warnings.catch_warnings():  # its check compares the record to a PyTorch run
            warnings.simplefilter("error", torch.jit.TracerWarning)
            traced = torch.jit.trace(patched, _x())
        kinds = [node.kind() for node in traced.inlined_graph.nodes()]
        assert not any("deconv_patch" in k for k in kinds), sorted(set(kinds))
        assert kinds.count("aten::batch_norm") == 2
        for _ in range(2):
            x = _x(3, 12)  # another batch and size than the traced call's
            torch.testing.assert_close(traced(x), reference(x), rtol=1e-4, atol=1e-4)


def test_load_state_dict_brings_writes_through_data_up_to_date():
    """`.data` writes bump no version counter, so the caches keep the earlier weights until a
    counted write; load_state_dict(state_dict()) is that write (README)."""
    reference, patched = _pair()
    x = _x()
    with torch.no_grad():
        patched(x)  # packed and folded
        for model in (reference, patched):
            for p in model.parameters():
                p.data.mul_(-1.5).add_(0.25)
        patched.load_state_dict(patched.state_dict())
        assert_within_scale(patched(x), reference(x), "after load_state_dict")


def test_tensors_given_new_storage_through_data_are_refolded_and_repacked():
    """`.data = new` keeps the tensor object and its version counter but swaps its storage
    (older training code, dtype or device helpers): folds and packs made from the old storage
    are not read again."""
    reference, patched = _pair()
    x = _x()
    with torch.no_grad():
        patched(x)  # packed and folded
        for model in (reference, patched):
            bn, conv = model.block1[1], model.block1[0]
            bn.running_mean.data = bn.running_mean.data * 0.5 + 1.0
            conv.weight.data = conv.weight.data.flip(0).contiguous()
            out = model.out
            out.weight.data = out.weight.data * -1.5
        assert_within_scale(patched(x), reference(x), "after .data assignments")
