"""Capturing a forward for validate(): hooks that save clones of what named modules were called
with and returned (the first call of each), and of the modules that took a captured module's
output as their input (the ones a fused layer absorbed).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Sequence, Tuple

import torch
from torch import nn

from ..fused_chain import hooks_seen_through
from .values import Args, Kwargs, _clone


@dataclass
class _Capture:
    args: Args
    kwargs: Kwargs
    output: Any = None
    calls: int = 0
    fed_by: str = ""  # followers: the captured module whose output was this one's input


@contextlib.contextmanager
def _capturing(model: nn.Module, names: Sequence[str], followers: Sequence[str] = ()
               ) -> Iterator[Dict[str, _Capture]]:
    """Hooks saving clones of each named module's first call: the input in a pre-hook (an
    in-place module such as ReLU(inplace=True) overwrites it during forward), the output in a
    forward hook (later in-place ops would overwrite it).

    `followers` are captured only when their first argument *is* (same tensor object) the output
    of a captured module or follower: the modules a fused layer absorbed, found without cloning
    every activation of the model.
    """
    store: Dict[str, _Capture] = {}
    live: Dict[int, Tuple[str, torch.Tensor]] = {}  # id(output) -> (producer, output)
    handles = []
    modules = dict(model.named_modules())

    def hooks_for(name: str, follower: bool) -> Tuple[Callable, Callable]:
        def pre_hook(module: nn.Module, args: Args, kwargs: Kwargs) -> None:
            if name in store:
                return
            fed_by = ""
            if follower:
                first = args[0] if len(args) == 1 and not kwargs else None
                producer = live.get(id(first)) if isinstance(first, torch.Tensor) else None
                if producer is None or producer[1] is not first:
                    return
                fed_by = producer[0]
            store[name] = _Capture(_clone(args), _clone(kwargs), fed_by=fed_by)

        def hook(module: nn.Module, args: Args, kwargs: Kwargs, output: Any) -> None:
            capture = store.get(name)
            if capture is None:
                return
            if capture.calls == 0:
                capture.output = _clone(output)
                if isinstance(output, torch.Tensor):
                    live[id(output)] = (name, output)
            capture.calls += 1

        return pre_hook, hook

    try:
        for names_, follower in ((names, False), (followers, True)):
            for name in names_:
                if name in modules:
                    pre_hook, hook = hooks_for(name, follower)
                    module = modules[name]
                    handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
                    handles.append(module.register_forward_hook(hook, with_kwargs=True))
        # Fused chains look through these hooks: the forward computes as its user runs it (a
        # fused conv's captured output is then its chain's output, which the chain's BatchNorm
        # and activation pass on and are captured with).
        with hooks_seen_through(handles):
            yield store
    finally:
        live.clear()
        for handle in handles:
            handle.remove()
