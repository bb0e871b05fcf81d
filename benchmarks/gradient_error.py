"""The tensor-core gradients' fp32 (3xTF32) error against fp32's bar, per case.

The mma backward kernels (cuda/direct_backward/grad_input_mma.cu, weight_grad_mma.cu) run fp32
as 3xTF32. This prints, for the GPU tests' cases and three suite layers (DCGAN's and FSRCNN's
output layers, an output_padding >= stride layer), the worst ratio over seeds and both layouts
of their error against float64 to fp32 strict's bar (tests/helpers.py: twice cuDNN's error
with TF32 off, plus one ulp of the largest value; below 1 passes), per gradient, next to how
many products a sum has. It is what the planner's fp32 rule for these kernels was read from
(docs/kernels.md, fp32 as 3xTF32).
    python benchmarks/gradient_error.py [--seeds 3]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deconv_patch.kernels.extension import load_units  # noqa: E402
from tests.gpu.test_direct_backward import _aten, _tensors  # noqa: E402
from tests.gpu.test_mma_backward import CASES, _hyper  # noqa: E402
from tests.helpers import allowed_error, max_error  # noqa: E402

# (batch, in, out, (h, w), kernel, stride, padding, output_padding, dilation, groups)
SUITE_LAYERS = [
    (16, 64, 64, (32, 32), (3, 3), (1, 1), (1, 1), (1, 1), (2, 2), 1),  # output_padding >= stride
    (64, 64, 3, (32, 32), (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 1),   # DCGAN g5
    (16, 56, 1, (64, 64), (9, 9), (3, 3), (4, 4), (2, 2), (1, 1), 1),   # FSRCNN x3
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/gradient_error.py needs a CUDA GPU.", file=sys.stderr)
        return 2
    core = load_units(())
    print("case  products a sum (input grad, weight grad)  error / fp32 bar (input, weight)")
    for i, case in enumerate(CASES + SUITE_LAYERS):
        worst = [0.0, 0.0]
        for seed in range(args.seeds):
            for channels_last in (False, True):
                x, w, dy = _tensors(case, torch.float32, channels_last, seed=seed)
                with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
                    strict = _aten(x, w, dy, case, [True, True, False])[:2]
                got = (core.mma_grad_input(x, dy, w, *_hyper(case)),
                       core.mma_weight_grad(x, dy, w, *_hyper(case)))
                exact = _aten(x.double(), w.double(), dy.double(), case,
                              [True, True, False])[:2]
                for j in range(2):
                    bar = allowed_error(max_error(strict[j], exact[j]), exact[j], torch.float32)
                    if bar > 0:
                        worst[j] = max(worst[j], max_error(got[j], exact[j]) / bar)
        n, _, cout, (h, w_), (kh, kw), (sh, sw) = case[:6]
        per_input = max(1, cout // case[9] * kh * kw // (sh * sw))
        print(f"{i:4d}  {per_input:8d} {n * h * w_:10d}  {worst[0]:6.2f} {worst[1]:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
