"""fp32-strict (3xTF32) error against the GPU tests' bound, by reduction depth.

3xTF32 carries x as hi + lo, two TF32 numbers: 22 significant bits against fp32's 24, and the
tensor core's sums truncate. So a product of 3xTF32 is a few fp32 ulps off, where cuDNN's FFMA
is half an ulp off; deep reductions hide that under fp32's own accumulation error, shallow ones
do not. This prints, per reduction depth (planner.reduction_depth), the worst ratio of our
error to the bound of the GPU tests (tests/helpers.py: 2x PyTorch's error + 1 ulp of the output;
below 1 passes), beside the plain-fp32 direct kernel's on the same case. It is how
planner.MIN_3XTF32_DEPTH was chosen.
    python benchmarks/strict_error_scan.py [--cases 600] [--variants gemm_phase_tma,...]"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deconv_patch.kernels import planner  # noqa: E402
from deconv_patch.ops import run_variant  # noqa: E402
from deconv_patch.reference import conv_transpose2d_float64  # noqa: E402
from tests.cases import call_args, random_kxs_case, random_phase_case  # noqa: E402
from tests.helpers import allowed_error, max_error  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", type=int, default=600)
    ap.add_argument("--variants", default="",
                    help="comma-separated subset of the scanned variants (default: all)")
    args = ap.parse_args()
    only = {v for v in args.variants.split(",") if v}
    planner.MIN_3XTF32_DEPTH = 0  # measure every depth (the kernels refuse shallow sums)
    for variant, make in ((planner.GEMM_KXS, random_kxs_case),
                          (planner.KXS_TAP_MAJOR, random_kxs_case),
                          (planner.GEMM_PHASE, random_phase_case),
                          (planner.GEMM_PHASE_TMA, random_phase_case)):
        if only and variant not in only:
            continue
        # per depth bucket: (worst ratio, the direct FFMA kernel's ratio on that case, case)
        worst: dict[int, tuple] = {}
        for seed in range(args.cases):
            case = dataclasses.replace(make(seed + 123_000), dtype=torch.float32, tf32=False)
            if case.batch == 0:
                continue
            x, w, b = case.make("cuda", seed)
            with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
                expected = F.conv_transpose2d(*call_args(case, x, w, b))
                try:
                    got = run_variant(variant, x, w, b, case.args)
                except RuntimeError as e:
                    if "does not support" in str(e):
                        continue
                    raise
                direct = run_variant(planner.DIRECT, x, w, b, case.args)
            ref = conv_transpose2d_float64(x, w, b, case.args)
            bound = allowed_error(max_error(expected, ref), ref, torch.float32)
            if bound == 0:  # an all-zero output (every tap out of range): nothing to compare
                continue
            ratio = max_error(got, ref) / bound
            depth = planner.reduction_depth(case.in_channels // case.args.groups, case.kernel,
                                            case.args)
            bucket = 1 << (depth.bit_length() - 1)  # powers of two
            if ratio > worst.get(bucket, (0.0,))[0]:
                worst[bucket] = (ratio, max_error(direct, ref) / bound, str(case))
        print(f"{variant}: worst error / bound by products per output (bucket: depth >= key); "
              "in brackets the direct FFMA kernel's on the same case")
        print("   " + "  ".join(f"{k}:{v[0]:.2f}({v[1]:.2f})" for k, v in sorted(worst.items())))
        top = max(worst.values())
        print(f"   worst: {top[2]}: {top[0]:.2f} (direct {top[1]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
