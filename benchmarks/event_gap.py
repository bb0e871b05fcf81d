"""Why a layer's event time exceeds its GPU time when the GPU, not the host, is the bottleneck.

The layer benchmark records one CUDA event pair around each call; its GPU-time column replays
the calls from a CUDA graph. On large layers (U-Net up1: 77 us of GPU time, 10 us of host work)
the two differ by 7-10 us for our kernel and 3-5 us for cuDNN. This times each path several ways
in one process, same input, so the difference can be taken apart:
  * event/call     - one event pair per call, calls back to back (what layers.py records),
  * event/call+keep - the same, every output kept alive (no buffer reuse by the allocator),
  * block/call     - one event pair around `calls` back-to-back calls, divided,
  * graph/call     - `calls` calls captured into a CUDA graph, replayed, divided,
  * kernel (cupti) - the median kernel duration in eager calls, from the profiler's trace,
  * gap (cupti)    - the median time from one call's last kernel end to the next one's start,
  * interleaved    - event/call with cuDNN's and our calls taking turns (as layers.py does),
  * after FILLER   - event/call of a path, inputs rotated past the L2 (as layers.py does), each
                     call preceded (outside its events) by a filler: nothing, a tiny kernel, 64 MB
                     written, 64 MB read, the other path; which one costs time says why.

    python benchmarks/event_gap.py [--only unet.up1,maskrcnn] [--modes tf32] [--formats nhwc]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_overhead import gpu_us  # noqa: E402
from layers import MODES, SUITE, Layer  # noqa: E402

import deconv_patch  # noqa: E402
from deconv_patch.kernels import planner  # noqa: E402
from deconv_patch.timing import time_cuda, time_interleaved  # noqa: E402

Fn = Callable[[], object]


def event_per_call(fn: Fn, reps: int = 100, keep: bool = False,
                   before: Optional[Fn] = None) -> float:
    """Median us of one event pair per call, calls back to back; `keep`: every output kept
    alive; `before`: run before each call, outside its events (a filler)."""
    kept: List[object] = []
    for _ in range(10):
        if before is not None:
            before()
        fn()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(reps)]
    for s, e in pairs:
        if before is not None:
            before()
        s.record()
        y = fn()
        e.record()
        if keep:
            kept.append(y)
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in pairs)


def block_per_call(fn: Fn, calls: int = 50) -> float:
    """Median us per call of one event pair around `calls` back-to-back calls."""
    return time_cuda(lambda: [fn() for _ in range(calls)], 1, 5).median_ms * 1e3 / calls


def gpu_events(prof) -> List[dict]:
    """The GPU activities (kernels, memsets, copies) of a finished torch.profiler run, in
    start order, from its Chrome trace (name, ts and dur in us)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        with open(f.name) as trace_file:
            trace = json.load(trace_file)
    return sorted((x for x in trace.get("traceEvents", [])
                   if x.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")),
                  key=lambda x: x["ts"])


def cupti(fn: Fn, calls: int = 40, with_events: bool = True) -> Dict[str, object]:
    """Kernel durations and inter-call gaps of eager calls, from torch.profiler's trace."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            if with_events:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
            else:
                fn()
        torch.cuda.synchronize()
    ev = gpu_events(prof)
    names: Dict[str, int] = {}
    for x in ev:
        names[x["name"][:60]] = names.get(x["name"][:60], 0) + 1
    durs = [float(x["dur"]) for x in ev]
    gaps = [ev[i]["ts"] - (ev[i - 1]["ts"] + ev[i - 1]["dur"]) for i in range(1, len(ev))]
    return {"kernels_per_call": len(ev) / calls,
            "kernel_us": statistics.median(durs) if durs else float("nan"),
            "gap_us": statistics.median(gaps) if gaps else float("nan"),
            "names": names}


def paths_for(layer: Layer, mode: str, layout: str, variant: Optional[str]) -> Dict[str, Fn]:
    dtype, tf32 = MODES[mode]
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    x = torch.randn(layer.batch, layer.cin, *layer.hw, device="cuda", dtype=dtype
                    ).contiguous(memory_format=fmt)
    # Copies past twice the L2 (50 MB on H100), taken in turn: no input is found in the L2.
    copies = max(2, -(-100 * 2**20 // (x.numel() * x.element_size())))
    xs = [torch.randn_like(x) for _ in range(copies)]
    turn = [0]

    def rot() -> torch.Tensor:
        turn[0] += 1
        return xs[turn[0] % copies]
    reference = torch.nn.ConvTranspose2d(
        layer.cin, layer.cout, layer.kernel, layer.stride, layer.padding,  # type: ignore[arg-type]
        layer.output_padding, layer.groups, layer.bias, layer.dilation,  # type: ignore[arg-type]
        device="cuda", dtype=dtype)
    fast = deconv_patch.FastConvTranspose2d.from_module(reference)
    with torch.no_grad():
        err = (fast(x).double() - F.conv_transpose2d(
            x.double(), reference.weight.double(),
            None if reference.bias is None else reference.bias.double(),
            layer.args.stride, layer.args.padding, layer.args.output_padding, layer.args.groups,
            layer.args.dilation)).abs().max().item()
    print(f"  planner: {fast.plan_for(x).variant}  max err vs float64 {err:.3g}")
    # A GEMM of the same shape through cuBLAS: [N*H*W x Cin] @ [Cin x Cout*kh*kw].
    m = layer.batch * layer.hw[0] * layer.hw[1]
    a = torch.randn(m, layer.cin, device="cuda", dtype=dtype)
    b = torch.randn(layer.cin, layer.cout * layer.kernel[0] * layer.kernel[1], device="cuda",
                    dtype=dtype)
    paths: Dict[str, Fn] = {"cudnn": lambda: reference(x), "ours": lambda: fast(x),
                            "cublas mm": lambda: a @ b,
                            "rotated cudnn": lambda: reference(rot()),
                            "rotated ours": lambda: fast(rot())}
    if variant:
        def forced() -> object:
            with planner.use_variant(variant):
                return fast(x)
        paths[f"ours {variant}"] = forced
    return paths


def kernel_after(fn: Fn, filler: Optional[Fn], match: str, calls: int = 30) -> str:
    """The median duration of fn's kernel (the one whose name holds `match`) and the median
    idle time before it (from the end of the kernel before it), eager calls with event pairs,
    each preceded by `filler`."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            if filler is not None:
                filler()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
    ev = gpu_events(prof)
    durs, gaps = [], []
    longest = max((float(x["dur"]) for x in ev if match in x["name"]), default=0.0)
    for i, x in enumerate(ev):
        # The measured path's own kernel: a filler's kernel of the same family is far shorter.
        if match in x["name"] and i > 0 and float(x["dur"]) > 0.5 * longest:
            durs.append(float(x["dur"]))
            gaps.append(x["ts"] - ev[i - 1]["ts"] - ev[i - 1]["dur"])
    if not durs:
        return "-"
    return f"{statistics.median(durs):.1f}+{statistics.median(gaps):.1f}"


def filler_kernels() -> Dict[str, Fn]:
    """Kernels to run just before a timed call (outside its events): elementwise ones, reductions,
    a softmax, a small cuBLAS mm and a small cuDNN conv, each on its own fresh data."""
    big = torch.randn(16 * 1024 * 1024, device="cuda")
    tiny = torch.randn(1024, device="cuda")
    big2 = torch.empty_like(big)
    sq = torch.randn(512, 512, device="cuda")
    img = torch.randn(1, 64, 32, 32, device="cuda")
    ker = torch.randn(64, 64, 3, 3, device="cuda")
    return {"tiny kernel": lambda: tiny.add_(1.0),
            "64 MB written": lambda: big.add_(1.0), "64 MB read": lambda: big.sum(),
            "1 MB read": lambda: big[:262144].sum(), "64 MB copied": lambda: big2.copy_(big),
            "softmax 1MB": lambda: torch.softmax(sq, 1), "small mm": lambda: sq @ sq,
            "small conv": lambda: F.conv2d(img, ker, padding=1)}


def after_fillers(rotated: Dict[str, Fn], reps: int = 60) -> None:
    fillers: Dict[str, Optional[Fn]] = {"nothing": None, **filler_kernels(),
                                        "cudnn": rotated["cudnn"], "ours": rotated["ours"]}
    print(f"  after filler (event/call, inputs rotated): {'':14s} " +
          " ".join(f"{k:>13s}" for k in fillers))
    for name, fn in rotated.items():
        cells = [event_per_call(fn, reps, before=filler) for filler in fillers.values()]
        print(f"    {name:44s} " + " ".join(f"{c:13.1f}" for c in cells), flush=True)
    for name, match in (("ours", "deconv_patch"), ("cublas mm", "gemm"), ("cudnn", "dgrad")):
        if name in rotated:
            print(f"    {name + ': kernel + idle before it (cupti)':44s} " +
                  " ".join(f"{kernel_after(rotated[name], f, match):>13s}"
                           for f in fillers.values()), flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="unet.up1,maskrcnn")
    p.add_argument("--modes", default="tf32")
    p.add_argument("--formats", default="nhwc")
    p.add_argument("--variant", default="", help="also time this variant forced")
    p.add_argument("--fillers-only", action="store_true",
                   help="the per-path table for cudnn and ours only, then the filler table")
    args = p.parse_args(argv)
    torch.backends.cudnn.benchmark = True
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for layer in SUITE:
        if not any(layer.name.startswith(o) for o in args.only.split(",")):
            continue
        for mode in args.modes.split(","):
            for layout in args.formats.split(","):
                print(f"\n{layer.name} {mode} {layout}")
                with torch.no_grad():
                    paths = paths_for(layer, mode, layout, args.variant or None)
                    print(f"  {'path':28s} {'ev/call':>8s} {'ev+keep':>8s} {'block':>8s} "
                          f"{'graph':>8s} {'kernel':>8s} {'gap':>6s} {'gap/noev':>8s} "
                          f"{'k/call':>6s}")
                    for name, fn in paths.items():
                        if args.fillers_only and name not in ("cudnn", "ours"):
                            continue
                        c = cupti(fn)
                        c2 = cupti(fn, with_events=False)
                        print(f"  {name:28s} {event_per_call(fn):8.1f} "
                              f"{event_per_call(fn, keep=True):8.1f} {block_per_call(fn):8.1f} "
                              f"{gpu_us(fn) or float('nan'):8.1f} {c['kernel_us']:8.1f} "
                              f"{c['gap_us']:6.1f} {c2['gap_us']:8.1f} "
                              f"{c['kernels_per_call']:6.1f}", flush=True)
                        print(f"      kernels: {c['names']}")
                    inter = time_interleaved([paths["cudnn"], paths["ours"]], 5, 100)
                    print(f"  interleaved (event/call): cudnn "
                          f"{statistics.median(inter[0]) * 1e3:.1f}  ours "
                          f"{statistics.median(inter[1]) * 1e3:.1f}")
                    after_fillers({"cudnn": paths["rotated cudnn"],
                                   "ours": paths["rotated ours"],
                                   "cublas mm": paths["cublas mm"]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
