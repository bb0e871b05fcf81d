"""GPU timing with CUDA events: warm-up, many repetitions, median; and the copy a benchmark
times as its A/A control."""

from __future__ import annotations

import copy
import gc
import statistics
from dataclasses import dataclass
from typing import Any, Callable, List, Sequence, Tuple

import torch


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call over `reps` timed repetitions."""

    median_ms: float
    min_ms: float
    max_ms: float
    reps: int


def turn_orders(count: int, rotate: bool = False) -> List[List[int]]:
    """The orders in which `count` fns take turns, one per rep, cycled: forward and reversed;
    with `rotate`, every rotation of both, so that each fn sits in each place equally often
    (three fns: every order, so each also follows each other equally often; two: as without)."""
    forward = list(range(count))
    starts = range(count) if rotate else range(1)
    orders = [forward[s:] + forward[:s] for s in starts]
    orders += [order[::-1] for order in orders]
    return [list(o) for o in dict.fromkeys(tuple(o) for o in orders)]


def time_interleaved(fns: Sequence[Callable[[], Any]], warmup: int, reps: int,
                     rotate: bool = False) -> List[List[float]]:
    """Milliseconds per call for each fn, one CUDA event pair per call, the fns taking turns
    (turn_orders) so drift and ordering effects hit all of them alike. The garbage collector is
    off while they are timed, as timeit has it: a collection lands in one call at random, and
    in a process holding many models it takes milliseconds."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
               for _ in range(reps)] for _ in fns]
    orders = turn_orders(len(fns), rotate)
    # (No gc.collect() first: autotune times here on a layer's first call, where a full
    # collection in a large process would cost more than the timing.)
    collecting = gc.isenabled()
    gc.disable()
    try:
        for r in range(reps):
            for i in orders[r % len(orders)]:
                start, end = events[i][r]
                start.record()
                fns[i]()
                end.record()
        torch.cuda.synchronize()
    finally:
        if collecting:
            gc.enable()
    return [[s.elapsed_time(e) for s, e in per_fn] for per_fn in events]


def median_interleaved(fns: Sequence[Callable[[], Any]], warmup: int, reps: int,
                       rotate: bool = False) -> List[float]:
    """Median ms per call of each fn, timed as time_interleaved times them (blocks of calls
    timed one fn after the other move with the GPU clock and the host)."""
    return [statistics.median(times) for times in time_interleaved(fns, warmup, reps, rotate)]


def time_cuda(fn: Callable[[], object], warmup: int = 10, reps: int = 50) -> Timing:
    """Times `fn` on the current CUDA stream, one event pair per call."""
    times = time_interleaved([fn], warmup, reps)[0]
    return Timing(statistics.median(times), min(times), max(times), reps)


def capture_graph(fn: Callable[[], Any]) -> Tuple[Callable[[], Any], Any]:
    """fn captured into a CUDA graph: (replay, graph). Warm-up runs on a side stream first."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay, graph


def control_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` to time against it (the A/A control), whose class is a subclass of
    its own made for it: torch.compile then gives the copy a compiled entry of its own, as it
    does the patched model. (A plain deepcopy passes the original's guards and runs the
    original's compiled entry: the control would then not pay for a second entry as the
    patched side does.)"""
    copied = copy.deepcopy(model)
    cls = type(model)
    copied.__class__ = type(cls.__name__, (cls,), {"__module__": cls.__module__,
                                                   "__qualname__": cls.__qualname__})
    return copied
