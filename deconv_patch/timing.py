"""GPU timing with CUDA events: warm-up, many repetitions, median."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, List

import torch


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call over `reps` timed repetitions."""

    median_ms: float
    min_ms: float
    max_ms: float
    reps: int


def time_cuda(fn: Callable[[], object], warmup: int = 10, reps: int = 50) -> Timing:
    """Times `fn` on the current CUDA stream, one event pair per call."""
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times: List[float] = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return Timing(statistics.median(times), min(times), max(times), reps)
