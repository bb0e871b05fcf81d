"""What a user's first run compiles and how long it takes, at PyTorch's default settings
(`cudnn.benchmark` off, so no autotune): the demo's generator in fp32 and bf16, each through
`optimize()` then `validate()`, timed per step, and the build units the cache holds after each.
With --together, both optimize() calls run inside `deconv_patch.compile_together()` (as the
demo does), so both dtypes' units compile in one step at its end (timed as its own row).
Run it on an empty cache (DECONV_PATCH_CACHE) to time a first use; prints a table last."""

from __future__ import annotations

import argparse
import contextlib
import copy
import time

import torch

from deconv_patch import compile_together, optimize, validate
from deconv_patch.cli.demo import DemoGenerator, _trained_batchnorm
from deconv_patch.kernels.extension import cache_dir


def built_units() -> list:
    root = cache_dir()
    return sorted(p.parent.name for p in root.glob("*/*.so")) if root.is_dir() else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--together", action="store_true",
                        help="optimize both dtypes inside compile_together(), then validate")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/first_use.py needs a CUDA GPU")
    torch.manual_seed(0)
    original = DemoGenerator()
    _trained_batchnorm(original, 0)
    original = original.cuda().eval()
    rows = []
    runs = []
    block = compile_together() if args.together else contextlib.nullcontext()
    block_before, block_start = set(built_units()), time.perf_counter()
    with block:
        for dtype in (torch.float32, torch.bfloat16):
            model = copy.deepcopy(original).to(dtype)
            z = torch.randn(args.batch, 100, 1, 1, device="cuda", dtype=dtype)
            before, start = set(built_units()), time.perf_counter()
            patched = optimize(model, (z,))
            runs.append((dtype, model, patched, z, time.perf_counter() - start,
                         sorted(set(built_units()) - before)))
    block_s = time.perf_counter() - block_start
    if args.together:
        rows.append(("block", block_s - sum(r[4] for r in runs), 0.0,
                     "compile_together's end", sorted(set(built_units()) - block_before)))
    for dtype, model, patched, z, optimize_s, new in runs:
        before, start = set(built_units()), time.perf_counter()
        report = validate(model, patched, (z,), progress=False)
        validate_s = time.perf_counter() - start
        rows.append((str(dtype).replace("torch.", ""), optimize_s, validate_s, report.verdict,
                     sorted(set(new) | (set(built_units()) - before))))
    print(f"{'dtype':8s} {'optimize s':>10s} {'validate s':>10s}  verdict / units compiled")
    for name, opt_s, val_s, verdict, new in rows:
        print(f"{name:8s} {opt_s:10.1f} {val_s:10.1f}  {verdict.splitlines()[0]}")
        print(f"{'':31s}{' '.join(new)}")
    print(f"first use in all: {sum(r[1] + r[2] for r in rows):.1f} s")


if __name__ == "__main__":
    main()
