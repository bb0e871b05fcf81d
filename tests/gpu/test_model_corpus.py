"""The model corpus (tests/corpus.py) on CUDA in fp32 and bf16: optimize() with and without
example inputs, then validate() against the original (float64 reference, the report's
per-dtype tolerance) on fresh inputs, where fused chains and our kernels run."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_map

from deconv_patch import optimize, summary, validate
from deconv_patch.patching import copy_model
from tests.corpus import CASES, Case

pytestmark = pytest.mark.cuda

GPU_CASES = [c for c in CASES if "lazy" not in c.tags]


def _to(obj: Any, dtype: torch.dtype) -> Any:
    def move(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        t = t.cuda()
        return t.to(dtype) if t.is_floating_point() else t
    return tree_map(move, obj)


@pytest.mark.parametrize("with_inputs", [True, False], ids=["example_inputs", "first_call"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", GPU_CASES, ids=[c.name for c in GPU_CASES])
def test_gpu_corpus_model(case: Case, dtype: torch.dtype, with_inputs: bool) -> None:
    if dtype != torch.float32 and "fp32_only" in case.tags:
        pytest.skip("the model itself casts to float32 inside its forward")
    torch.manual_seed(0)
    model = case.build().train(case.train).cuda().to(dtype)
    args, kwargs = _to(case.inputs(0), dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        patched = optimize(model, args if with_inputs else None,
                           example_kwargs=kwargs if with_inputs else None)
        if not with_inputs:  # the first call decides fusion
            with torch.no_grad():
                patched(*args, **kwargs)
    assert type(patched) is type(model)
    for draw in (1, 2):
        d_args, d_kwargs = _to(case.inputs(draw), dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = validate(copy_model(model), patched, d_args, example_kwargs=d_kwargs,
                              speed=False)
        assert report.passed, f"{case.name} draw {draw}: {report.failures}\n" \
                              f"{summary(patched, quiet=True).table()}"
    if case.fuses and not case.train and with_inputs:
        assert summary(patched, quiet=True).num_fused > 0
