"""The stride-phase GEMMs (gemm_phase's, gemm_phase_sm90's and gemm_phase_tma's configs) on the
suite's layers with few output channels, where they are autotune candidates with padded n
tiles: each config at full size in 16-bit, TF32 and (gemm_phase_tma's 3xTF32) fp32 strict,
both layouts, every element against a float64 reference (tests/helpers.py: check_full_layer)."""

from __future__ import annotations

import pytest
import torch

from deconv_patch.kernels import planner
from tests.helpers import check_full_layer

pytestmark = pytest.mark.cuda


# The suite's layers with few output channels (DCGAN's 64 > 3 output layer, FSRCNN's 56 > 1 k9
# s3), where the stride-phase GEMMs are autotune candidates (padded n tiles): each config at
# full size, 16-bit and TF32 (and gemm_phase_tma's 3xTF32 for fp32 strict).
FEW_OUT_LAYERS = [(64, 64, 3, (32, 32), 4, 2, 1, 0, 1), (16, 56, 1, (64, 64), 9, 3, 4, 2, 1)]


@pytest.mark.parametrize("variant", planner.PHASE_CONFIGS + planner.SM90_CONFIGS +
                         planner.PHASE_TMA_CONFIGS)
@pytest.mark.parametrize("layer", FEW_OUT_LAYERS, ids=["dcgan.g5", "fsrcnn.x3"])
@pytest.mark.parametrize("mode", ["bf16", "tf32", "fp32"])
def test_phase_gemms_on_few_output_channel_layers(variant, layer, mode):
    hopper_only = variant in planner.SM90_CONFIGS + planner.PHASE_TMA_CONFIGS
    if hopper_only and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("Hopper (sm_90a) kernel")
    if mode != "bf16" and variant in planner.SM90_CONFIGS:
        pytest.skip("gemm_phase_sm90 is 16-bit only")
    if mode == "fp32" and variant not in planner.PHASE_TMA_CONFIGS:
        pytest.skip("fp32 strict: only gemm_phase_tma's 3xTF32 is a candidate")
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    for channels_last in (False, True):
        check_full_layer(variant, layer, channels_last, dtype, tf32=mode != "fp32", seed=7)
