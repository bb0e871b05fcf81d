"""Where a torch.compile'd patched model spends its host time, against compiled PyTorch.

Under torch.compile each patched layer is a call of the registered op (not the module's C++
fast path), so a host-bound model pays the op's dispatch and Python per layer. This prints, for
one example model: event time per forward of eager / patched / compiled / compiled + patched
(interleaved), the host time per forward (back-to-back, unsynchronised), the op plan cache's
misses per forward, and the Python functions of 50 compiled + patched forwards by own time
(cProfile), and Dynamo's graphs and graph breaks of the patched model. --kernels also prints
each compiled side's GPU kernels per forward (torch.profiler, by total time): where a GPU-bound
compiled model's time goes, and what the patched graph runs that the original's does not.

    python benchmarks/profile_compiled.py [--model dcgan] [--dtype bf16] [--batch 128]
                                          [--no-benchmark] [--kernels]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `examples`
sys.path.insert(0, str(Path(__file__).resolve().parent))

from host_overhead import host_us  # noqa: E402
from models import DTYPES  # noqa: E402

from deconv_patch import ops  # noqa: E402
from deconv_patch.optimize import optimize  # noqa: E402
from deconv_patch.timing import time_interleaved  # noqa: E402
from examples.registry import EXAMPLES  # noqa: E402


def print_kernels(name: str, fn: Callable[[], object], top: int, forwards: int = 10) -> None:
    """`fn`'s GPU kernels per forward over `forwards` forwards, by total GPU time."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(forwards):
            fn()
        torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if e.device_time_total > 0]
    rows.sort(key=lambda e: -e.device_time_total)
    total = sum(e.device_time_total for e in rows) / forwards
    print(f"\n  GPU kernels of {name}, per forward ({total / 1e3:.3f} ms in all): us, calls, name")
    for e in rows[:top]:
        print(f"    {e.device_time_total / forwards:9.1f}  x{e.count / forwards:<5.1f} "
              f"{e.key[:100]}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="dcgan")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--no-benchmark", action="store_true",
                   help="cudnn.benchmark off (PyTorch's default) on both sides")
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile's mode for both sides (e.g. reduce-overhead)")
    p.add_argument("--kernels", action="store_true",
                   help="each compiled side's GPU kernels per forward")
    args = p.parse_args(argv)
    torch.backends.cudnn.benchmark = not args.no_benchmark
    dtype = DTYPES[args.dtype]
    example = {e.name: e for e in EXAMPLES}[args.model]
    torch.manual_seed(0)
    model = example.build(small=False).to(device="cuda", dtype=dtype).eval()
    inputs = example.inputs(args.batch, "cuda", dtype)
    patched = optimize(model, inputs, progress=False)
    compiled = torch.compile(model, mode=args.compile_mode)
    compiled_patched = torch.compile(patched, mode=args.compile_mode)
    paths: Dict[str, Callable[[], object]] = {
        "eager": lambda: model(*inputs), "patched": lambda: patched(*inputs),
        "compiled": lambda: compiled(*inputs),
        "compiled + patched": lambda: compiled_patched(*inputs),
    }
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {args.model} "
          f"{args.dtype} batch {args.batch}; cudnn.benchmark {torch.backends.cudnn.benchmark}")
    with torch.no_grad():
        explained = torch._dynamo.explain(patched)(*inputs)
    print(f"  patched under Dynamo: {explained.graph_count} graph(s), "
          f"{explained.graph_break_count} break(s), {explained.op_count} op(s)")
    for reason in explained.break_reasons[:5]:
        print(f"    break: {str(reason.reason)[:200]}")
    torch._dynamo.reset()
    with torch.no_grad():
        for fn in paths.values():  # compile outside the timed regions
            fn()
        times = time_interleaved(list(paths.values()), 5, 30)
        print(f"  {'path':20s} {'event ms':>9s} {'host ms':>8s}")
        for (name, fn), ts in zip(paths.items(), times):
            print(f"  {name:20s} {statistics.median(ts):9.3f} {host_us(fn) / 1e3:8.3f}")
        if args.kernels:
            for name in ("compiled", "compiled + patched"):
                print_kernels(name, paths[name], args.top)
        misses = ops.op_plans().misses
        for _ in range(20):
            compiled_patched(*inputs)
        print(f"  op plan cache: {ops.op_plans().misses - misses} misses in 20 compiled + patched "
              f"forwards, {len(ops.op_plans().entries)} entries")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(50):
            compiled_patched(*inputs)
        prof.disable()
        torch.cuda.synchronize()
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(args.top)
        lines: List[str] = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
        print(f"\n  cProfile, 50 compiled + patched forwards, by {key}:")
        for ln in lines[3:]:
            print("   ", ln[:150])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
