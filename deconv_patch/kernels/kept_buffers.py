"""Whether a device tensor made now may be kept past the call that makes it (a packed weight, a
folded BatchNorm): the Python side of cuda/binding/kept_buffers.hpp, which says why; and the
stream a kept tensor belongs to.

Not while a CUDA graph is being captured (the graph's replays alone write it), and not while
Inductor's CUDA-graph trees (torch.compile's "reduce-overhead") warm a graph up: the thread's
allocations then come from the graph's private pool, and a tensor kept there is a live
allocation the trees do not know of. The trees turn off ATen's conv-benchmark cache emptying for
their warm-up runs (their recording is a stream capture), which is the one sign of it that can be
read.
"""

from __future__ import annotations

import torch

# A kept tensor is read only on the stream that made it, so the caches keep one per stream:
# another stream could read it before the kernels that make it ran, or after the caching
# allocator, which orders a freed block's reuse by the stream that made it, gave its memory to
# that stream's next allocation (threads on streams of their own sharing a model).
_CURRENT_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)

# The trees' flag's getter, looked up once (a fused chain asks on every call); None in a torch
# without it.
_CONV_CACHE_EMPTYING = getattr(torch._C, "_cuda_get_conv_benchmark_empty_cache", None)


def may_keep_buffers(device: torch.device) -> bool:
    """False while a tensor made on `device` now would belong to a CUDA graph (see above)."""
    if device.type != "cuda":
        return True
    if torch.cuda.is_current_stream_capturing():
        return False
    return _CONV_CACHE_EMPTYING is None or bool(_CONV_CACHE_EMPTYING())


def stream_key(device: torch.device) -> int:
    """The current stream on a CUDA `device` as a number (0 on other devices): part of the key
    of every cache of kept tensors (see above)."""
    if device.type != "cuda" or _CURRENT_RAW_STREAM is None:
        return 0
    return _CURRENT_RAW_STREAM(device.index if device.index is not None else
                               torch.cuda.current_device())
