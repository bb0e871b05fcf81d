"""GPU correctness of the direct kernel (one thread per output element, any hyperparameter):
forced on a NaN-poisoned random sweep of every configuration PyTorch accepts (any stride,
padding, output_padding, dilation, groups, layout, dtype, bias, unbatched, batch 0) against a
float64 reference with the bound of tests/helpers.py (2x PyTorch's own error + 1 ulp of the
output)."""

from __future__ import annotations

import pytest

from deconv_patch.kernels import planner
from tests.helpers import check_variant

pytestmark = pytest.mark.cuda
SWEEP_SIZE = 1200


@pytest.mark.parametrize("seed", range(SWEEP_SIZE))
def test_direct_kernel_random_sweep(seed):
    check_variant(planner.DIRECT, seed)
