"""GPU correctness of 1 x 1 inputs (DCGAN's first layer: a latent vector to a k x k map), which
the kernels run as k == stride layers whatever the stride (ConvTransposeArgs.kernel_view): every
k == stride variant forced on such layers with strides 1, 2, k and more than k, NaN-poisoned
output checked element by element against a float64 reference (check_full_layer's bound), and
the planner listing the k == stride GEMMs for them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.ops import conv_transpose2d
from tests.helpers import check_full_layer

pytestmark = pytest.mark.cuda

# gemm_kxs (mma.sync) in both column orders, and gemm_kxs_sm90's cooperative and ping-pong tiles
# (Hopper; its TMA rows need Cin * element size % 16 == 0).
_VARIANTS = (planner.GEMM_KXS, planner.KXS_TAP_MAJOR, *planner.KXS_SM90_CONFIGS[:3])
# (batch, cin, cout, kernel, stride): DCGAN's 100 > 512 k4 at batch 64 (Cin 100: no 16-byte
# 16-bit rows, so gemm_kxs_sm90 refuses it in 16-bit), strides below, at and above k.
_LAYERS = [(64, 100, 512, 4, 1), (3, 64, 96, 4, 2), (1, 32, 40, 3, 3), (5, 48, 64, 2, 5),
           (16, 128, 256, 5, 1)]


def _sm90_refuses(variant: str, cin: int, dtype: torch.dtype) -> bool:
    if not variant.startswith(planner.GEMM_KXS_SM90):
        return False
    if torch.cuda.get_device_capability() != (9, 0):
        return True
    return (cin * (4 if dtype == torch.float32 else 2)) % 16 != 0


@pytest.mark.parametrize("variant", _VARIANTS)
@pytest.mark.parametrize("layer", _LAYERS, ids=lambda l: "n{}c{}>{}k{}s{}".format(*l))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("channels_last", [False, True])
def test_latent_input_runs_as_a_k_equal_stride_gemm(variant, layer, dtype, channels_last):
    n, cin, cout, k, s = layer
    if _sm90_refuses(variant, cin, dtype):
        pytest.skip("gemm_kxs_sm90: Hopper only, 16-byte TMA rows")
    check_full_layer(variant, (n, cin, cout, (1, 1), k, s, 0, 0, 1), channels_last, dtype,
                     seed=n + cin + k + s)


@pytest.mark.parametrize("variant", [planner.GEMM_KXS, planner.KXS_TAP_MAJOR])
def test_latent_input_fp32_strict(variant):
    """3xTF32 (gemm_kxs only): 100 products per output, above MIN_3XTF32_DEPTH."""
    check_full_layer(variant, (64, 100, 512, (1, 1), 4, 1, 0, 0, 1), False, torch.float32,
                     tf32=False, seed=7)


def test_planner_lists_the_k_equal_stride_gemms_for_a_latent_input():
    x = torch.randn(64, 100, 1, 1, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(100, 512, 4, 4, device="cuda", dtype=torch.bfloat16)
    plan = planner.plan(x, w, ConvTransposeArgs.from_values(stride=1))
    assert planner.GEMM_KXS in plan.candidates, plan
    assert planner.KXS_TAP_MAJOR in plan.candidates, plan
    # the untimed default too (not cuDNN's stride-1 view, though the output is only 1 MB)
    assert plan.variant in (planner.GEMM_KXS, planner.KXS_TAP_MAJOR), plan
    # padding changes the output (k - 2p): no k == stride view, the phase GEMMs as before
    padded = planner.plan(x, w, ConvTransposeArgs.from_values(stride=1, padding=1))
    assert planner.GEMM_KXS not in padded.candidates, padded


@pytest.mark.parametrize("unbatched", [False, True])
def test_latent_input_through_the_op(unbatched):
    """The op with stride 1 and a forced k == stride variant: the same values and shape as
    PyTorch (bias included; an unbatched 3-D input keeps its rank)."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(8, 64, 1, 1, generator=gen).cuda().to(torch.bfloat16)
    if unbatched:
        x = x[0]
    w = (torch.randn(64, 32, 4, 4, generator=gen) / 8).cuda().to(torch.bfloat16)
    b = torch.randn(32, generator=gen).cuda().to(torch.bfloat16)
    expected = F.conv_transpose2d(x.double(), w.double(), b.double())
    with planner.use_variant(planner.GEMM_KXS):
        got = conv_transpose2d(x, w, b)
    assert got.shape == expected.shape
    assert torch.allclose(got.double(), expected, atol=0.06, rtol=0.02), \
        (got.double() - expected).abs().max()
