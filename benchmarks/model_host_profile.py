"""cProfile of the demo generator's patched forward (host-bound at a small batch): where the
host time per call goes, by function.

    python benchmarks/model_host_profile.py [--fuse 0|1] [--dtype bf16]
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import pstats

import torch

import deconv_patch
from deconv_patch.cli.demo import DemoGenerator, _trained_batchnorm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--fuse", type=int, default=1)
    parser.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
    original = DemoGenerator()
    _trained_batchnorm(original, 0)
    original = original.cuda().to(dtype).eval()
    z = torch.randn(args.batch, 100, 1, 1, device="cuda", dtype=dtype)
    model = deconv_patch.optimize(copy.deepcopy(original), (z,), fuse=bool(args.fuse))
    with torch.no_grad():
        for _ in range(50):
            model(z)
        torch.cuda.synchronize()
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.calls):
            model(z)
        torch.cuda.synchronize()
        profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
