"""Runs one layer a few times for a profiler (ncu / nsys): cuDNN, then a forced variant.

    ncu -k regex:'gemm_phase|gemm_kxs' python benchmarks/profile_layer.py --layer "dcgan.g3 256>128 8x8"
"""

from __future__ import annotations

import argparse

import torch

import deconv_patch
from benchmarks.layers import SUITE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layer", required=True, help="a layer name from benchmarks/layers.py")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--variant", default="gemm_phase")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--filler", default="cudnn", choices=("cudnn", "none", "add", "sum"),
                        help="what runs before each of our calls: cuDNN's call of the layer, "
                        "nothing, an elementwise kernel on 64 MB, a 1 MB sum (a reduction)")
    args = parser.parse_args()
    layer = next(l for l in SUITE if l.name == args.layer)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    conv, x = layer.module_and_input(dtype, args.channels_last)
    fast = deconv_patch.FastConvTranspose2d.from_module(conv)
    torch.backends.cudnn.benchmark = False
    big = torch.randn(16 * 1024 * 1024, device="cuda")
    fillers = {"cudnn": lambda: conv(x), "none": lambda: None, "add": lambda: big.add_(1.0),
               "sum": lambda: big[:262144].sum()}
    with torch.no_grad(), deconv_patch.use_variant(args.variant):
        for _ in range(args.reps):
            fillers[args.filler]()
            fast(x)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
