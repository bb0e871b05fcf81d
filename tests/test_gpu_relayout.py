"""GPU test of the binding's NCHW -> channels_last re-layout (cuda/relayout_channels_last.cu),
which the row-reading kernels (gemm_phase_tma, gemm_kxs_sm90, 16-bit gemm_phase) run on NCHW
input: bit-identical to PyTorch's own copy, every element, over odd sizes, element sizes, batches
past the grid's z limit, and layouts it hands to PyTorch's copy instead."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.cuda

SHAPES = [(1, 1, 1, 1), (2, 3, 5, 7), (3, 32, 8, 4), (2, 33, 31, 3), (4, 256, 14, 14),
          (1, 1000, 1, 40), (5, 17, 64, 64), (70_000, 2, 1, 3)]


def _relayout(x: torch.Tensor) -> torch.Tensor:
    from deconv_patch.extension import load_extension
    return load_extension().channels_last_copy(x)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_relayout_matches_pytorch_bit_for_bit(shape, dtype):
    gen = torch.Generator(device="cuda").manual_seed(sum(shape))
    x = torch.randn(*shape, device="cuda", generator=gen).to(dtype)
    got = _relayout(x)
    expected = x.contiguous(memory_format=torch.channels_last)
    torch.cuda.synchronize()
    assert got.shape == expected.shape and got.stride() == expected.stride()
    assert got.data_ptr() != x.data_ptr()
    assert torch.equal(got.view(torch.int16 if x.element_size() == 2 else torch.int32),
                       expected.view(torch.int16 if x.element_size() == 2 else torch.int32))


def test_relayout_of_other_layouts_is_pytorchs_copy():
    x = torch.randn(4, 8, 10, 12, device="cuda")[:, ::2]  # neither NCHW- nor NHWC-dense
    got = _relayout(x)
    assert torch.equal(got, x) and got.is_contiguous(memory_format=torch.channels_last)
    y = torch.randn(2, 6, 5, 5, device="cuda", dtype=torch.float64)  # 8-byte elements
    assert torch.equal(_relayout(y), y)
