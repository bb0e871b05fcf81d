"""GPU correctness of gemm_phase_sm90 (the stride-phase GEMM on wgmma; Hopper, sm_90a builds,
16-bit): the planner's config and every named config forced on NaN-poisoned random sweeps against a
float64 reference with the bound of tests/helpers.py (2x PyTorch's own error + 1 ulp of the
output), every config with every activation, and its config count matching the extension's."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from deconv_patch.kernels import planner
from deconv_patch.epilogue import ACTIVATIONS
from tests.cases import Case, random_phase_case
from tests.helpers import check_epilogue, check_variant

pytestmark = pytest.mark.cuda


def _sm90_case(seed: int) -> Case:
    """random_phase_case in fp16/bf16 with Cin/groups a multiple of 8 (the kernel's domain; the
    binding re-lays other input layouts to channels_last)."""
    case = random_phase_case(seed)
    groups = case.args.groups
    cin_g = case.in_channels // groups
    if cin_g % 8:
        cin_g = 8 * (1 + cin_g // 8)
    dtype = (torch.bfloat16, torch.float16)[seed % 2]
    return dataclasses.replace(case, in_channels=cin_g * groups, dtype=dtype, tf32=False)


def _needs_sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("gemm_phase_sm90 runs on compute capability 9.0 only")


@pytest.mark.parametrize("variant", (planner.GEMM_PHASE_SM90, *planner.SM90_CONFIGS))
@pytest.mark.parametrize("seed", range(150))
def test_gemm_phase_sm90_sweep(variant, seed):
    _needs_sm90()
    check_variant(variant, seed + 76_000, _sm90_case)


@pytest.mark.parametrize("variant", (planner.GEMM_PHASE_SM90, *planner.SM90_CONFIGS))
@pytest.mark.parametrize("seed", range(2 * len(ACTIVATIONS)))
def test_gemm_phase_sm90_epilogue_sweep(variant, seed):
    """Every config x every activation (the seed picks it), twice: each config instantiates its
    store once per activation (common/epilogue.cuh: dispatch_activation)."""
    _needs_sm90()
    check_epilogue(variant, _sm90_case(seed + 77_000), seed)


def test_gemm_phase_sm90_configs_match_the_extension():
    from deconv_patch.kernels.extension import load_extension
    code = planner.kernels.BY_NAME[planner.GEMM_PHASE_SM90].code
    assert len(load_extension().config_names(code)) == len(planner.SM90_CONFIGS)
