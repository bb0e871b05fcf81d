"""GPU correctness of gemm_kxs (kernel == stride layers as one GEMM per tap, mma.sync): forced on
a NaN-poisoned random sweep against a float64 reference with the bound of tests/helpers.py
(2x PyTorch's own error + 1 ulp of the output), and the planner's choice of it (and of
gemm_kxs_sm90 on Hopper) for kernel == stride layers."""

from __future__ import annotations

import pytest
import torch

from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from tests.cases import random_kxs_case
from tests.helpers import check_variant

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("seed", range(400))
def test_gemm_kxs_kernel_random_sweep(seed):
    check_variant(planner.GEMM_KXS, seed, random_kxs_case)


def test_planner_picks_gemm_kxs_for_kernel_equal_stride():
    x = torch.randn(8, 128, 160, 128, device="cuda", dtype=torch.bfloat16)  # 80 MiB output
    w = torch.randn(128, 64, 2, 2, device="cuda", dtype=torch.bfloat16)
    on_sm90 = torch.cuda.get_device_capability() == (9, 0)
    # dense 16-bit NCHW: the TMA + wgmma kernel reads it in place on Hopper (kernel-area tiles
    # for the NCHW output)
    assert planner.plan(x, w, ConvTransposeArgs.from_values(stride=2)).variant == (
        planner.KXS_SM90_NCHW_WINNER if on_sm90 else "gemm_kxs")
    assert planner.plan(x[:, :, :, :127], w, ConvTransposeArgs.from_values(stride=2)).variant \
        == "gemm_kxs"  # a view, not dense NCHW
    small = planner.plan(x[:1, :, :16, :16], w, ConvTransposeArgs.from_values(stride=2))
    assert small.variant == "aten" and "gemm_kxs" in small.candidates  # overhead would dominate
    nhwc = planner.plan(x.contiguous(memory_format=torch.channels_last), w,
                        ConvTransposeArgs.from_values(stride=2))
    # channels_last: the TMA + wgmma kernel on Hopper, else tap-major (16-byte stores)
    assert nhwc.variant == (planner.KXS_SM90_WINNER if on_sm90 else planner.KXS_TAP_MAJOR)
    # TF32 channels_last input: the cooperative 128x256 tile on Hopper (fp32 stores regrouped)
    nhwc32 = planner.plan(x[:2].float().contiguous(memory_format=torch.channels_last), w.float(),
                          ConvTransposeArgs.from_values(stride=2))
    if on_sm90:
        assert nhwc32.variant == planner.KXS_SM90_TF32_WINNER, nhwc32
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        strict = planner.plan(x.float(), w.float(), ConvTransposeArgs.from_values(stride=2))
        shallow = planner.plan(x[:, :8].float(), w[:8].float(),
                               ConvTransposeArgs.from_values(stride=2))
    # 128-deep sums: 3xTF32, on Hopper gemm_phase_tma's (the untimed rule), else gemm_kxs's
    assert "3xTF32" in strict.reason
    assert strict.variant.startswith(planner.GEMM_PHASE_TMA) if on_sm90 else \
        strict.variant == "gemm_kxs"
    assert shallow.variant == planner.ATEN  # 8-deep sums: 3xTF32 would miss fp32's bound
