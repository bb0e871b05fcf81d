"""Speed-measurement pieces for validate(): whether speed can be measured here at all, and the
closures that get timed (gradient-free calls, forward + backward through autograd.grad).

The timing itself (_compare_speed and its callers) stays in deconv_patch.validation, which is
where the timer `time_interleaved` and `_speed_skip_reason` are looked up (tests swap them
there).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import nn

from .values import Args, Kwargs, _flatten, _map_tensors


def _fwd_bwd(module: nn.Module, args: Args, kwargs: Kwargs, seed: int,
             input_grads: bool) -> Optional[Callable[[], Any]]:
    """A closure running forward + backward (autograd.grad: leaves .grad untouched), or None
    when nothing needs a gradient. Layers need input gradients (backprop goes through them);
    a whole model's inputs usually do not."""
    def prepare(t: torch.Tensor) -> torch.Tensor:
        return t.detach().requires_grad_(input_grads and t.is_floating_point())

    args, kwargs = _map_tensors(prepare, args), _map_tensors(prepare, kwargs)
    leaves = [t for _, t in _flatten((args, kwargs)) if isinstance(t, torch.Tensor)
              and t.requires_grad]
    leaves += [p for p in module.parameters() if p.requires_grad]
    if not leaves:
        return None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        sample = module(*args, **kwargs)
    outs = [t for _, t in _flatten(sample) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outs:
        return None
    gen = torch.Generator(device="cpu").manual_seed(seed)
    grads = [torch.randn(o.shape, generator=gen).to(o.device, o.dtype) for o in outs]
    del sample, outs

    def run() -> None:
        out = module(*args, **kwargs)
        tensors = [t for _, t in _flatten(out) if isinstance(t, torch.Tensor) and t.requires_grad]
        torch.autograd.grad(tensors, leaves, grads, allow_unused=True)

    return run


def _speed_skip_reason(device: torch.device) -> Optional[str]:
    if not torch.cuda.is_available():
        return "CUDA is not available here; accuracy only"
    if device.type != "cuda":
        return f"the models run on {device.type}; speed is measured on CUDA only"
    from ..kernels.extension import ExtensionUnavailableError, load_core

    try:
        load_core()
    except ExtensionUnavailableError as exc:
        return f"the deconv_patch CUDA kernels are unavailable ({exc}); accuracy only"
    return None


def _no_grad(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with torch.no_grad():
            return fn()
    return run
