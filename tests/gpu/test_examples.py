"""Every example model with a dense output on CUDA in fp32 and bf16: optimize() with and without
fusion, each within the foundation bound against float64 (tests/helpers.py: bound_check);
Mask R-CNN's detections unchanged and its patched mask predictor within the bound."""

from __future__ import annotations

import copy

import pytest
import torch

from deconv_patch.modules import FastConvTranspose2d
from deconv_patch.optimize import optimize
from deconv_patch.summary import summary
from examples._common import flatten_tensors
from examples.registry import EXAMPLES, Example
from tests.helpers import FUSED_LAYERS, bound_check, to_double

pytestmark = pytest.mark.cuda


DTYPES = [torch.float32, torch.bfloat16]


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
        reference = copy.deepcopy(model).double()(*to_double(inputs))
    bound_check(reference, original, out_unfused, dtype, f"{example.name} unfused")
    # fused: BN folded into rounded weights; held to the bound against the worse of the two
    refs = flatten_tensors(reference)
    worse = [o if (o.double() - r).abs().max() >= (u.double() - r).abs().max() else u
             for r, o, u in zip(refs, flatten_tensors(original), flatten_tensors(out_unfused))]
    bound_check(reference, worse, out_fused, dtype, f"{example.name} fused")


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
    bound_check(reference, original, out, dtype, f"mask_rcnn predictor {dtype}")
