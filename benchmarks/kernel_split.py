"""Where a layer's GPU time goes, kernel by kernel: each path (cuDNN, or a forced variant) runs
a few warm calls under torch.profiler; prints each CUDA kernel's mean duration per call. Used to
split gemm_col2im's time between its GEMM and its col2im (and any input re-layout).

    python benchmarks/kernel_split.py --layer "keypointrcnn 512>17 14" --dtype bf16 \
        --channels-last --variants aten,gemm_col2im:128x256s4,gemm_col2im:128x128s6pp
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Dict, List, Tuple

import torch
from torch.profiler import ProfilerActivity, profile

import deconv_patch
from benchmarks.layers import SUITE

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def kernel_times(fn, calls: int) -> List[Tuple[str, float]]:
    """(kernel name, mean us per call) of every CUDA kernel `fn` launches, in launch order."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    total: Dict[str, float] = defaultdict(float)
    order: List[str] = []
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = event.name
        if name.startswith("Memcpy") or name.startswith("Memset"):
            continue
        if name not in total:
            order.append(name)
        total[name] += event.device_time_total if hasattr(event, "device_time_total") \
            else event.cuda_time_total
    return [(name, total[name] / calls) for name in order]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layer", required=True, help="a layer name from benchmarks/layers.py")
    parser.add_argument("--dtype", default="bf16", choices=tuple(_DTYPES))
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--variants", default="aten", help="comma-separated; aten = cuDNN")
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    layer = next(l for l in SUITE if l.name == args.layer)
    dtype = _DTYPES[args.dtype]
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    conv, x = layer.module_and_input(dtype, args.channels_last)
    fast = deconv_patch.FastConvTranspose2d.from_module(conv)
    fmt = "nhwc" if args.channels_last else "nchw"
    with torch.no_grad():
        for variant in args.variants.split(","):
            if variant == "aten":
                rows = kernel_times(lambda: conv(x), args.calls)
            else:
                with deconv_patch.use_variant(variant):
                    rows = kernel_times(lambda: fast(x), args.calls)
            total = sum(us for _, us in rows)
            print(f"{layer.name} {args.dtype} {fmt} {variant}: {total:.1f} us of kernels per call")
            for name, us in rows:
                print(f"    {us:8.1f} us  {name[:110]}")


if __name__ == "__main__":
    main()
