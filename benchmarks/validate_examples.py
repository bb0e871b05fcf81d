"""Patch example models with optimize() and print validate()'s side-by-side report for each.

    python benchmarks/validate_examples.py [--models unet,dcgan] [--dtypes fp32,bf16] [--out DIR]
                                           [--cudnn-benchmark]

Writes report_<model>_<dtype>.{json,html} into --out. Exit code 1 if any report fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `examples`

import deconv_patch  # noqa: E402
from examples.registry import get  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="unet,dcgan")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--small", action="store_true", help="small CPU-friendly sizes")
    parser.add_argument("--cudnn-benchmark", action="store_true",
                        help="torch.backends.cudnn.benchmark on, so the planner times its "
                        "candidates against cuDNN (autotune), as benchmarks/models.py runs")
    args = parser.parse_args(argv)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    device = "cuda" if torch.cuda.is_available() else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    ok = True
    for name in args.models.split(","):
        example = get(name)
        for dname in args.dtypes.split(","):
            dtype = DTYPES[dname]
            torch.manual_seed(0)
            model = example.build(small=args.small).to(device).eval()
            inputs = example.inputs(example.test_batch if args.small else example.bench_batch,
                                    device, torch.float32, small=args.small)
            patched = deconv_patch.optimize(model, inputs)
            report = deconv_patch.validate(model, patched, inputs, dtype=dtype)
            print(f"===== {example.title} ({dname}, TF32 allowed: "
                  f"{torch.backends.cudnn.allow_tf32})")
            print(report)
            stem = args.out / f"report_{name}_{dname}{'_tuned' if args.cudnn_benchmark else ''}"
            report.to_json(f"{stem}.json")
            report.to_html(f"{stem}.html")
            ok &= report.passed
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
