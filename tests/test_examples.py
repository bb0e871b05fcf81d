"""Every example model: patched completely, and patched outputs match the original.

CPU: exact equality without fusion (both sides run ATen), the float64 accuracy bound with BN
folded. GPU (@pytest.mark.cuda): fp32 and bf16 within the foundation bound, fused and unfused.
"""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path
from typing import Any, List

import pytest
import torch
from torch import nn

try:
    import examples  # noqa: F401  (python -m pytest from the repo root puts it on sys.path)
except ImportError:  # plain `pytest`: the repo root is not on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deconv_patch.modules import FastConvTranspose2d  # noqa: E402
from deconv_patch.optimize import optimize  # noqa: E402
from deconv_patch.summary import summary  # noqa: E402
from examples._common import flatten_tensors  # noqa: E402
from examples.registry import EXAMPLES, Example  # noqa: E402

FUSED_LAYERS = {"dcgan": 5, "unet": 0, "pix2pix": 8, "cyclegan": 0, "simple_baseline": 3,
                "fsrcnn": 0, "mask_rcnn": 1}
IDS = [e.name for e in EXAMPLES]


def _conv_transposes(model: nn.Module) -> List[nn.Module]:
    return [m for m in model.modules() if isinstance(m, nn.ConvTranspose2d)]


def _to_double(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.double()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_double(v) for v in value)
    return value


def _ulp(value: float, dtype: torch.dtype) -> float:
    """One unit in the last place of `value` in `dtype`."""
    if value == 0:
        return torch.finfo(dtype).tiny
    return torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(value))


def _bound_check(reference: Any, original: Any, patched: Any, dtype: torch.dtype,
                 label: str) -> None:
    """The foundation bound: |patched - fp64| <= 2 |original - fp64| + 1 ulp(max |fp64|)."""
    refs, origs, outs = (flatten_tensors(v) for v in (reference, original, patched))
    assert len(refs) == len(origs) == len(outs) and refs
    for ref, orig, out in zip(refs, origs, outs):
        assert out.shape == ref.shape and out.dtype == orig.dtype
        assert torch.isfinite(out).all(), label
        err_orig = (orig.double() - ref).abs().max().item()
        err_out = (out.double() - ref).abs().max().item()
        limit = 2 * err_orig + _ulp(ref.abs().max().item(), dtype)
        assert err_out <= limit, f"{label}: error {err_out:.3e} > limit {limit:.3e}"


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
        reference = copy.deepcopy(model).double()(*_to_double(inputs))
    _bound_check(reference, original, out, torch.float32, example.name)


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


# ------------------------------------------------------------------------------------- GPU


DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.dense_output],
                         ids=[e.name for e in EXAMPLES if e.dense_output])
def test_cuda_example_within_foundation_bound(example: Example, dtype: torch.dtype):
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = example.build(small=False).to(device=device, dtype=dtype).eval()
    inputs = example.inputs(example.test_batch, device, dtype)
    unfused = optimize(model, inputs, fuse=False)
    fused = optimize(model, inputs)
    assert summary(fused, quiet=True).num_fused == FUSED_LAYERS[example.name]
    for layer in summary(unfused, quiet=True).layers:  # the table shows what each layer runs
        assert layer.backend == unfused.get_submodule(layer.name).backend
    with torch.no_grad():
        original = model(*inputs)
        out_unfused = unfused(*inputs)
        out_fused = fused(*inputs)
        reference = copy.deepcopy(model).double()(*_to_double(inputs))
    _bound_check(reference, original, out_unfused, dtype, f"{example.name} unfused")
    # fused: BN folded into rounded weights; held to the bound against the worse of the two
    refs = flatten_tensors(reference)
    worse = [o if (o.double() - r).abs().max() >= (u.double() - r).abs().max() else u
             for r, o, u in zip(refs, flatten_tensors(original), flatten_tensors(out_unfused))]
    _bound_check(reference, worse, out_fused, dtype, f"{example.name} fused")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_cuda_mask_rcnn(dtype: torch.dtype):
    """On CUDA: detections unchanged, and the patched mask predictor within the bound
    on the exact RoI features the detector produced (a float64 run of the whole detector would
    pick other boxes, so the bound is checked where the ConvTranspose2d is)."""
    from examples.mask_rcnn import mask_head_input

    example = next(e for e in EXAMPLES if e.name == "mask_rcnn")
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = example.build(small=False).to(device).eval()
    (images,) = example.inputs(example.test_batch, device)
    patched = optimize(model)
    assert summary(patched, quiet=True).path == "in-place"
    with torch.no_grad():
        out_o, out_p = model(images), patched(images)
    for det_o, det_p in zip(out_o, out_p):
        for key in ("boxes", "labels", "scores"):
            assert torch.equal(det_o[key], det_p[key]), key
    features = mask_head_input(model, images).to(dtype)
    predictor = model.roi_heads.mask_predictor.to(dtype)
    fast = patched.roi_heads.mask_predictor.to(dtype)
    assert isinstance(fast.conv5_mask, FastConvTranspose2d)
    with torch.no_grad():
        original, out = predictor(features), fast(features)
        reference = copy.deepcopy(predictor).double()(features.double())
    _bound_check(reference, original, out, dtype, f"mask_rcnn predictor {dtype}")


def test_model_benchmark_without_gpu_exits_with_a_clear_message(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the benchmark would run")
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "models.py"
    spec = importlib.util.spec_from_file_location("benchmark_models", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defining
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    assert module.main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
