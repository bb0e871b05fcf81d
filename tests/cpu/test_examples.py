"""Every example model on the CPU: patched completely, and patched outputs match the original:
exact equality without fusion (both sides run ATen), the float64 accuracy bound with BN folded
(GPU, fp32 and bf16 within the foundation bound: tests/gpu/test_examples.py).
"""

from __future__ import annotations

import copy
import sys
from typing import List

import pytest
import torch
from torch import nn

from deconv_patch.modules import FastConvTranspose2d
from deconv_patch.optimize import optimize
from deconv_patch.summary import summary
from examples._common import flatten_tensors
from examples.registry import EXAMPLES, Example
from tests.helpers import FUSED_LAYERS, ROOT, bound_check, to_double

IDS = [e.name for e in EXAMPLES]


def _conv_transposes(model: nn.Module) -> List[nn.Module]:
    return [m for m in model.modules() if isinstance(m, nn.ConvTranspose2d)]


@pytest.fixture(scope="module", params=EXAMPLES, ids=IDS)
def small_example(request):
    """(example, eval-mode small model, inputs), built once per example for the CPU tests."""
    example: Example = request.param
    torch.manual_seed(0)
    model = example.build(small=True).eval()
    inputs = example.inputs(example.test_batch, small=True)
    return example, model, inputs


def test_every_conv_transpose_is_patched_and_output_is_identical(small_example):
    example, model, inputs = small_example
    count = len(_conv_transposes(model))
    assert count == example.conv_transpose
    patched = optimize(model, inputs, fuse=False)
    info = summary(patched, quiet=True)
    assert info.path == "in-place", info.reason
    assert type(patched) is type(model)
    assert info.num_patched == count and info.num_fused == 0
    assert all(isinstance(m, FastConvTranspose2d) for m in _conv_transposes(patched))
    assert not any(isinstance(m, FastConvTranspose2d) for m in model.modules())  # a copy
    with torch.no_grad():
        expected, got = model(*inputs), patched(*inputs)
    expected_t, got_t = flatten_tensors(expected), flatten_tensors(got)
    assert len(got_t) == len(expected_t) and expected_t
    for a, b in zip(expected_t, got_t):
        assert torch.equal(a, b)  # same ATen kernels on the CPU: bit-identical


# The float64 run of the whole Mask R-CNN detector takes about 25 s of a 2-core CPU: an extended
# check (run with --extended; CI runs it in a step of its own).
@pytest.mark.parametrize("small_example", [
    pytest.param(e, id=e.name, marks=[pytest.mark.extended] if e.name == "mask_rcnn" else [])
    for e in EXAMPLES], indirect=True)
@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_fused_output_within_float64_bound(small_example):
    example, model, inputs = small_example
    patched = optimize(model, inputs)
    info = summary(patched, quiet=True)
    assert info.num_fused == FUSED_LAYERS[example.name]
    assert len(_conv_transposes(patched)) == example.conv_transpose
    with torch.no_grad():
        original, out = model(*inputs), patched(*inputs)
        if info.num_fused == 0:
            for a, b in zip(flatten_tensors(original), flatten_tensors(out)):
                assert torch.equal(a, b)
            return
        reference = copy.deepcopy(model).double()(*to_double(inputs))
    bound_check(reference, original, out, torch.float32, example.name)


def test_mask_rcnn_mask_head_actually_runs():
    """The random-init detector keeps boxes (box_score_thresh=0), so the patched layer runs."""
    from examples.mask_rcnn import mask_head_input

    example = next(e for e in EXAMPLES if e.name == "mask_rcnn")
    model = example.build(small=True).eval()
    (images,) = example.inputs(1, small=True)
    features = mask_head_input(optimize(model), images)
    assert features.shape[0] > 0 and features.shape[1:] == (256, 14, 14)


@pytest.mark.parametrize("name", ["dcgan", "fsrcnn"])
def test_example_main_runs(name, capsys):
    example = next(e for e in EXAMPLES if e.name == name)
    assert example.module.main(["--small", "--batch", "1", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "max |patched - original|" in out and "path=" in out



@pytest.mark.parametrize("script", ["models.py", "compiled_steps.py", "step_spread.py"])
def test_model_benchmark_without_gpu_exits_with_a_clear_message(capsys, script):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the benchmark would run")
    import importlib.util

    path = ROOT / "benchmarks" / script
    spec = importlib.util.spec_from_file_location("benchmark_" + path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defining
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    assert module.main([]) == 2
    assert f"benchmarks/{script} needs a CUDA GPU" in capsys.readouterr().err
