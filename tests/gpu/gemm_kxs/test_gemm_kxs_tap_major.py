"""GPU correctness of gemm_kxs with tap-major columns (a packed weight; 16-byte stores into
channels_last output): forced on NaN-poisoned random sweeps (NCHW and channels_last output)
against a float64 reference with the bound of tests/helpers.py (2x PyTorch's own error + 1 ulp
of the output), the fused epilogue on its store paths, and the packed weight following an
in-place weight update."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from tests.cases import Case, random_kxs_case
from tests.helpers import (check_epilogue, check_repacks_after_an_in_place_weight_update,
                           check_variant)

pytestmark = pytest.mark.cuda


def _channels_last_out(make_case):
    """make_case with channels_last input (so PyTorch's output, and ours, is channels_last)."""
    def make(seed: int) -> Case:
        return dataclasses.replace(make_case(seed), channels_last=True, non_contiguous=False,
                                   unbatched=False)
    return make


@pytest.mark.parametrize("seed", range(300))
def test_gemm_kxs_tap_major_sweep(seed):
    check_variant(planner.KXS_TAP_MAJOR, seed + 70_000, random_kxs_case)


@pytest.mark.parametrize("seed", range(200))
def test_gemm_kxs_tap_major_channels_last_sweep(seed):
    """Mostly the 16-byte store path (channels_last output, Cout/g a multiple of 8 or 4)."""
    check_variant(planner.KXS_TAP_MAJOR, seed + 71_000, _channels_last_out(random_kxs_case))


@pytest.mark.parametrize("seed", range(60))
def test_gemm_kxs_tap_major_epilogue_sweep(seed):
    """Fused epilogues on the tap-major store paths (fp32 staging when an activation is on)."""
    case = _channels_last_out(random_kxs_case)(seed + 72_000)
    if case.dtype == torch.float32:
        case = dataclasses.replace(case, tf32=True)
    check_epilogue(planner.KXS_TAP_MAJOR, case, seed)


def test_gemm_kxs_tap_major_repacks_after_an_in_place_weight_update():
    x = torch.randn(2, 32, 9, 7, device="cuda", dtype=torch.bfloat16
                    ).contiguous(memory_format=torch.channels_last)
    w = torch.randn(32, 16, 2, 2, device="cuda", dtype=torch.bfloat16)
    check_repacks_after_an_in_place_weight_update(planner.KXS_TAP_MAJOR, x, w,
                                                  ConvTransposeArgs.from_values(stride=2))
