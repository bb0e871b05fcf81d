"""The scatter reference (written from the definition) agrees with ATen in float64."""

from __future__ import annotations

import pytest
import torch

from deconv_patch.reference import conv_transpose2d_float64, conv_transpose2d_scatter
from tests.cases import random_case


@pytest.mark.parametrize("seed", range(120))
def test_scatter_reference_matches_aten_float64(seed):
    case = random_case(seed + 4000, dtypes=(torch.float32,))
    x, w, b = case.make("cpu", seed)
    ours = conv_transpose2d_scatter(x, w, b, case.args)
    aten = conv_transpose2d_float64(x, w, b, case.args)
    assert ours.dtype == torch.float64 and ours.shape == aten.shape, str(case)
    torch.testing.assert_close(ours, aten, rtol=1e-10, atol=1e-10)
