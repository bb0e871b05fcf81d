"""Whether torch.jit.trace is running: while it records, and while it checks its record.

A trace records dispatcher calls only, so a patched layer runs PyTorch's convolution while one
records (modules, functional_calls). torch.jit.trace then checks the record against the model
run again outside tracing, at 1e-5: on deconv_patch's kernels that run would differ from the
recorded PyTorch convolution by the kernels' rounding (TF32's, by default), and the check would
warn that the trace does not match. So the checking run takes PyTorch's path too. Tracing a
module sets `torch.jit._trace._trace_module_map` for the whole call, check included.
"""

from __future__ import annotations

import torch
from torch.jit import _trace


def in_jit_trace() -> bool:
    """Whether a torch.jit.trace records now, or checks its record (see above)."""
    return torch._C._is_tracing() or getattr(_trace, "_trace_module_map", None) is not None


__all__ = ["in_jit_trace"]
