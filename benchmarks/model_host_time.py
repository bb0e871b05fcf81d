"""Host time per forward of the demo generator: original, patched, patched without fusion.

A small model at a small batch is host-bound: its forward's Python and launch work takes longer
than its kernels, so the wall time of back-to-back unsynchronised calls is the host's issue
rate. This prints that per forward (and the synchronised time per call) for each variant,
in fp32 (TF32 allowed) and bf16.

    python benchmarks/model_host_time.py [--batch 64]
"""

from __future__ import annotations

import argparse
import copy
import time
from typing import Callable, Dict

import torch

import deconv_patch
from deconv_patch.cli.demo import DemoGenerator, _trained_batchnorm


def per_call_us(fn: Callable[[], object], calls: int, sync_each: bool) -> float:
    """Median over 5 rounds of the wall microseconds per call."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
            if sync_each:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
    return sorted(rounds)[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    print(f"{'dtype':6} {'model':18} {'host us/fwd':>12} {'synced us/fwd':>14}")
    for dtype in (torch.float32, torch.bfloat16):
        original = DemoGenerator()
        _trained_batchnorm(original, 0)
        original = original.cuda().to(dtype).eval()
        z = torch.randn(args.batch, 100, 1, 1, device="cuda", dtype=dtype)
        models: Dict[str, torch.nn.Module] = {
            "original": original,
            "patched": deconv_patch.optimize(copy.deepcopy(original), (z,)),
            "patched fuse=False": deconv_patch.optimize(copy.deepcopy(original), (z,),
                                                        fuse=False),
        }
        with torch.no_grad():
            for name, model in models.items():
                host = per_call_us(lambda: model(z), args.calls, False)
                synced = per_call_us(lambda: model(z), args.calls, True)
                print(f"{str(dtype)[6:]:6} {name:18} {host:12.1f} {synced:14.1f}")


if __name__ == "__main__":
    main()
