"""optimize() on the corpus (tests/corpus.py): the result is the user's model, computes what
it computed on fresh inputs (bit-identical on the CPU, fused chains included, which fold only on
CUDA; gradients and buffers too in train mode), patches or reports every
transposed convolution that runs, leaves the original untouched and is idempotent."""

from __future__ import annotations

import copy
import warnings
from typing import Any, Dict, List, Tuple

import pytest
import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from deconv_patch import FastConvTranspose2d, optimize, summary
from deconv_patch.patching import copy_model
from tests.corpus import CASES, Case, library_cases


def _leaves(out: Any) -> List[Any]:
    return tree_flatten(out)[0]


def _same(expected: Any, got: Any, what: str) -> None:
    """Bit for bit: on the CPU every layer, fused chains included, runs PyTorch's own math."""
    a, b = _leaves(expected), _leaves(got)
    assert len(a) == len(b) and a, what
    for e, g in zip(a, b):
        if not isinstance(e, torch.Tensor):
            assert e == g, what
            continue
        assert isinstance(g, torch.Tensor) and g.dtype == e.dtype and g.shape == e.shape, what
        assert torch.equal(g, e), f"{what}: not bit-identical"


def _run(model: nn.Module, inputs: Tuple[tuple, dict], train: bool, seed: int) -> Any:
    args, kwargs = inputs
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if not train:
            with torch.no_grad():
                return model(*args, **kwargs)
        out = model(*args, **kwargs)
    floats = [t for t in _leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
    g = torch.Generator().manual_seed(seed)
    loss = sum((t * torch.randn(t.shape, generator=g)).sum() for t in floats)
    loss.backward()
    return out


def _running_convs(model: nn.Module, inputs: Tuple[tuple, dict], train: bool) -> List[str]:
    """Names of the ConvTranspose2d modules (or TorchScript ones) a forward of `model` runs."""
    ran: List[str] = []
    probe = copy_model(model)
    handles = []
    for name, m in probe.named_modules():
        if isinstance(m, nn.ConvTranspose2d) or getattr(m, "original_name", "") == "ConvTranspose2d":
            if isinstance(m, torch.jit.ScriptModule):
                ran.append(name)  # (scripted modules take no hooks; they run with their parent)
                continue
            handles.append(m.register_forward_pre_hook(
                lambda mod, a, name=name: ran.append(name) if name not in ran else None))
    _run(probe, copy.deepcopy(inputs), False, 0)
    for h in handles:
        h.remove()
    return ran


def _snapshot(model: nn.Module) -> Dict[str, Any]:
    return {"types": [(n, type(m)) for n, m in model.named_modules()],
            "state": {k: v.clone() for k, v in model.state_dict().items()
                      if not isinstance(v, nn.parameter.UninitializedTensorMixin)},
            "hooks": [(n, len(m._forward_hooks), len(m._forward_pre_hooks))
                      for n, m in model.named_modules()],
            "forward": [(n, "forward" in m.__dict__) for n, m in model.named_modules()]}


@pytest.mark.parametrize("with_inputs", [True, False], ids=["example_inputs", "first_call"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_model(case: Case, with_inputs: bool) -> None:
    check_case(case, with_inputs)


# Mask R-CNN (a torchvision detector) takes about 90 s of a 2-core CPU for both modes: an
# extended check (run with --extended; CI runs it in a step of its own).
LIBRARY = [pytest.param(c, id=c.name,
                        marks=[pytest.mark.extended] if c.name == "mask_rcnn" else [])
           for c in library_cases()]


@pytest.mark.parametrize("with_inputs", [True, False], ids=["example_inputs", "first_call"])
@pytest.mark.parametrize("case", LIBRARY)
def test_library_model(case: Case, with_inputs: bool) -> None:
    pytest.importorskip(case.tags[0])
    check_case(case, with_inputs)


def check_case(case: Case, with_inputs: bool) -> None:
    """Every property in the module docstring, for one corpus model."""
    torch.manual_seed(0)
    model = case.build().train(case.train)
    example = case.inputs(0)
    before = _snapshot(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        patched = optimize(model, example[0] if with_inputs else None,
                           example_kwargs=example[1] if with_inputs else None)
    after = _snapshot(model)
    assert after["types"] == before["types"] and after["hooks"] == before["hooks"]
    assert after["forward"] == before["forward"]
    assert before["state"].keys() == after["state"].keys()
    assert all(torch.equal(before["state"][k], v) for k, v in after["state"].items())
    assert type(patched) is type(model)
    assert patched.state_dict().keys() == model.state_dict().keys()
    for name in dir(model):
        if not name.startswith("_"):
            assert hasattr(patched, name), name

    reference = copy_model(model)  # runs side by side with the patched model from here on
    for draw in (1, 2, 3):
        inputs = case.inputs(draw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = _run(patched, copy.deepcopy(inputs), case.train, draw)
        expected = _run(reference, copy.deepcopy(inputs), case.train, draw)
        _same(expected, got, what=f"{case.name} draw {draw}")
        if case.train:
            for (name, p_ref), (_, p) in zip(reference.named_parameters(),
                                             patched.named_parameters()):
                assert (p.grad is None) == (p_ref.grad is None), name
                if p.grad is not None:
                    assert torch.equal(p.grad, p_ref.grad), name
                p.grad = p_ref.grad = None
            for (name, b_ref), (_, b) in zip(reference.named_buffers(), patched.named_buffers()):
                assert torch.equal(b, b_ref), name

    info = summary(patched, quiet=True)
    if case.fuses and not case.train and with_inputs:
        assert info.num_fused > 0, info.table()
    assert len(info.left) == case.left, info.table()
    ran = _running_convs(model, case.inputs(1), case.train)
    patched_modules = dict(patched.named_modules())
    reported = {name for name, _ in info.left} | set(info.skipped)
    for name in ran:
        m = patched_modules.get(name)
        assert isinstance(m, FastConvTranspose2d) or any(r.startswith(name) or name.startswith(r)
                                                         for r in reported), name
    if case.check is not None:
        case.check(reference, patched)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = optimize(patched, example[0] if with_inputs else None,
                         example_kwargs=example[1] if with_inputs else None)
    if "lazy" not in case.tags:  # (a lazy layer is patched once it has materialised)
        assert [(l.name, l.fused) for l in summary(again, quiet=True).layers] == \
            [(l.name, l.fused) for l in summary(patched, quiet=True).layers]
    inputs = case.inputs(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _same(_run(patched, copy.deepcopy(inputs), case.train, 4),
              _run(again, copy.deepcopy(inputs), case.train, 4),
              what=f"{case.name}: optimize twice")
