"""GPU correctness of gemm_phase in fp32 without TF32 (3xTF32, forced: the planner does not list
it): a NaN-poisoned random sweep within PyTorch's own fp32 error bound (tests/helpers.py; sums
shallower than planner.MIN_3XTF32_DEPTH are refused and skip), and the split really being there
on a deep reduction."""

from __future__ import annotations

import pytest

from deconv_patch.kernels import planner
from tests.cases import random_phase_case
from tests.helpers import check_3xtf32_beats_tf32, check_strict

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("seed", range(200))
def test_gemm_phase_3xtf32_sweep(seed):
    check_strict(planner.GEMM_PHASE, seed + 75_000, random_phase_case)


def test_3xtf32_is_much_more_accurate_than_tf32():
    """K = 1024 channels x 4 taps (k4 s2): 3xTF32's error a small fraction of TF32 operands'."""
    check_3xtf32_beats_tf32(planner.GEMM_PHASE, stride=2, kernel=4)
