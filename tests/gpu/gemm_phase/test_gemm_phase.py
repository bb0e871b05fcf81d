"""GPU correctness of gemm_phase (stride-phase implicit GEMM, mma.sync; any kernel, stride,
padding, output_padding, dilation, groups): the planner's config and the 128x128x64 config (two
k-tiles per stage) forced on NaN-poisoned random sweeps, tiny channel counts with TF32 among
them, against a float64 reference with the bound of tests/helpers.py (2x PyTorch's own error
+ 1 ulp of the output)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from deconv_patch.kernels import planner
from tests.cases import random_case, random_phase_case
from tests.helpers import check_variant

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("seed", range(600))
def test_gemm_phase_kernel_random_sweep(seed):
    check_variant(planner.GEMM_PHASE, seed, random_phase_case)


def _tf32_random_case(seed: int):
    """random_case with TF32 allowed for fp32 (gemm_phase's fp32 mode): tiny channel counts,
    depthwise and every hyperparameter."""
    case = random_case(seed + 20_000)
    return dataclasses.replace(case, tf32=True) if case.dtype == torch.float32 else case


@pytest.mark.parametrize("seed", range(300))
def test_gemm_phase_deep_k_tile_sweep(seed):
    """Config 128x128x64 (two 32-deep k-tiles per stage; odd tile counts end half-filled)."""
    check_variant("gemm_phase:128x128x64", seed + 5000, random_phase_case)


@pytest.mark.parametrize("seed", range(300))
def test_gemm_phase_kernel_small_channel_sweep(seed):
    check_variant(planner.GEMM_PHASE, seed, _tf32_random_case)
