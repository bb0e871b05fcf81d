"""The `deconv-patch bench` command: forward time of IN before and after patching (CUDA events on
a GPU, a wall clock elsewhere).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any, Callable

from .loading import _check_inputs, _eager, _inputs, _is_oom, _load, _oom_error, _target
from ..exit_codes import ExitCode


def _cmd_bench(args: argparse.Namespace) -> int:
    import torch

    from ..optimize import optimize

    target = _target(args)
    source = _load(args.input, args)
    original = _eager(source, target)
    inputs = _inputs(args.input_shape, target)
    _check_inputs(original, inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        patched = original if source.kind == "patched" else optimize(original, inputs)
    try:
        with torch.no_grad():
            if target.device.type == "cuda":
                from ..timing import median_interleaved

                ms_o, ms_p = median_interleaved(
                    [lambda: original(*inputs), lambda: patched(*inputs)], args.warmup,
                    args.reps)
            else:
                ms_o, ms_p = (_cpu_ms(lambda: f(*inputs), args.warmup, args.reps)
                              for f in (original, patched))
    except Exception as exc:
        if _is_oom(exc):
            raise _oom_error("timing", exc)
        raise
    where = f"{target.device} {str(target.dtype).replace('torch.', '')}"
    if target.device.type == "cuda":
        print(f"forward on {where}: PyTorch {ms_o:.3f} ms, deconv_patch {ms_p:.3f} ms, speedup "
              f"{ms_o / ms_p:.2f}x (median of {args.reps})")
        return ExitCode.OK
    # both sides run PyTorch's kernels here: a ratio would be timing noise presented as a result
    print(f"forward on {where}: original {ms_o:.3f} ms, patched {ms_p:.3f} ms (median of "
          f"{args.reps}); this compares PyTorch with PyTorch: off CUDA the patched model runs "
          "PyTorch's own kernels, so nothing is faster here; run bench on a CUDA GPU to measure "
          "deconv_patch")
    return ExitCode.OK


def _cpu_ms(fn: Callable[[], Any], warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)
