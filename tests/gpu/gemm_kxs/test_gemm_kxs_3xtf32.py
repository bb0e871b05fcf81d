"""GPU correctness of gemm_kxs in fp32 without TF32 (3xTF32: each operand split into a TF32 high
and low part, three products summed), plain and tap-major: NaN-poisoned random sweeps within
PyTorch's own fp32 error bound (tests/helpers.py; sums shallower than
planner.MIN_3XTF32_DEPTH are refused and skip), and the split really being there on a deep
reduction."""

from __future__ import annotations

import pytest

from deconv_patch.kernels import planner
from tests.cases import random_kxs_case
from tests.helpers import check_3xtf32_beats_tf32, check_strict

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("seed", range(200))
def test_gemm_kxs_3xtf32_sweep(seed):
    check_strict(planner.GEMM_KXS, seed + 73_000, random_kxs_case)


@pytest.mark.parametrize("seed", range(100))
def test_gemm_kxs_tap_major_3xtf32_sweep(seed):
    check_strict(planner.KXS_TAP_MAJOR, seed + 74_000, random_kxs_case)


def test_3xtf32_is_much_more_accurate_than_tf32():
    """K = 1024 channels x 1 tap (k2 s2): 3xTF32's error a small fraction of TF32 operands'."""
    check_3xtf32_beats_tf32(planner.GEMM_KXS, stride=2, kernel=2)
