"""GPU correctness of gemm_kxs's global-load widths.

The launcher gives the input (A) chunks of 16, 8 or 4 bytes or one element, by what its strides
(and, for channel-contiguous input, the group's first channel) allow, and the weight (B) 16-byte
chunks whenever its rows allow, whatever A got. Each layer below reaches one (A, B) pair on
purpose (the comment names the 16-bit pair; fp32 channel-contiguous A gets 16 bytes or one
element): NaN-poisoned output, every element against a float64 reference with check_variant's
bound, the op and the fake kernel agreeing."""

from __future__ import annotations

import pytest
import torch

from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from tests.cases import Case
from tests.helpers import check_variant

pytestmark = pytest.mark.cuda

# (batch, cin, cout, (h, w), k, groups, channels_last, output_padding)
_LAYERS = {
    "latent100": (64, 100, 512, (1, 1), 4, 1, False, 0),  # DCGAN's latent input: A 8 B, B 16 B
    "cl12": (3, 12, 16, (5, 5), 2, 1, True, 0),           # A 8 B, B 16 B
    "cl6": (2, 6, 8, (3, 4), 2, 1, True, 1),              # A 4 B, B 16 B, output_padding
    "cl66": (2, 66, 16, (3, 3), 2, 1, True, 0),           # A 4 B; fp32: one element, 3xTF32 deep
    "cl7": (2, 7, 8, (3, 3), 2, 1, True, 0),              # A one element, B 16 B
    "g2cl20": (2, 20, 32, (3, 3), 2, 2, True, 0),         # 10 channels a group: A 4 B, B 16 B
    "cl12c3": (2, 12, 3, (3, 3), 2, 1, True, 0),          # 12 weight columns: both one element
    "nchw7x7": (3, 16, 8, (7, 7), 2, 1, False, 0),        # 49-pixel planes: A one element, B 16 B
}
_MODES = {"bf16": (torch.bfloat16, True), "fp16": (torch.float16, True),
          "tf32": (torch.float32, True), "fp32": (torch.float32, False)}


def _case(name: str, dtype: torch.dtype, tf32: bool) -> Case:
    batch, cin, cout, hw, k, groups, channels_last, op = _LAYERS[name]
    return Case(batch=batch, in_channels=cin, out_channels=cout, hw=hw, kernel=(k, k),
                args=ConvTransposeArgs((k, k), (0, 0), (op, op), (1, 1), groups),
                bias=True, dtype=dtype, channels_last=channels_last, weight_channels_last=False,
                non_contiguous=False, unbatched=False, tf32=tf32)


@pytest.mark.parametrize("variant", [planner.GEMM_KXS, planner.KXS_TAP_MAJOR])
@pytest.mark.parametrize("name", sorted(_LAYERS))
@pytest.mark.parametrize("mode", sorted(_MODES))
def test_gemm_kxs_load_widths(variant, name, mode):
    dtype, tf32 = _MODES[mode]
    case = _case(name, dtype, tf32)
    if not tf32 and case.in_channels // case.args.groups < planner.MIN_3XTF32_DEPTH:
        pytest.skip("fp32 strict (3xTF32) needs sums of MIN_3XTF32_DEPTH products")
    check_variant(variant, sum(map(ord, name)), make_case=lambda _seed: case)
