"""Autotune: time the candidate variants of a call once, remember the fastest.

Runs when `torch.backends.cudnn.benchmark` is True (the switch PyTorch users already flip to
let cuDNN time its own algorithms), never while a CUDA graph is being captured or torch.compile
traces. Choices live in one explicit cache, keyed by everything that changes the answer (GPU,
dtype, shapes, layouts, hyperparameters, TF32); it can be exported and imported as JSON so a
patched checkpoint can carry it, and is saved to $DECONV_PATCH_CACHE/autotune.json.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

import torch

from .arguments import ConvTransposeArgs
from .timing import time_cuda

_WARMUP = 2
_REPS = 7


@functools.lru_cache(maxsize=None)
def _device_name(index: int) -> str:
    """GPU name (cached: the key is built on every autotuned call)."""
    return torch.cuda.get_device_name(index)


def call_key(input: torch.Tensor, weight: torch.Tensor, has_bias: bool,
             args: ConvTransposeArgs) -> str:
    """The cache key of one call: every property that can change which variant is fastest."""
    device = _device_name(input.device.index if input.device.index is not None
                          else torch.cuda.current_device())
    return "|".join(str(v) for v in (
        device, input.dtype, tuple(input.shape), input.stride(), tuple(weight.shape),
        weight.stride(), has_bias, args.stride, args.padding, args.output_padding,
        args.dilation, args.groups, torch.backends.cudnn.allow_tf32,
    ))


class AutotuneCache:
    """variant chosen per call key; in memory, mirrored to a JSON file."""

    def __init__(self, path: Optional[Path] = None) -> None:
        self.path = path
        self.choices: Dict[str, str] = {}
        if path is not None and path.is_file():
            try:
                self.choices.update(json.loads(path.read_text()).get("choices", {}))
            except (OSError, ValueError):
                pass  # an unreadable cache is only a lost optimisation

    def export(self) -> Dict[str, object]:
        return {"version": 1, "choices": dict(self.choices)}

    def import_(self, data: Dict[str, object]) -> None:
        choices = data.get("choices", {})
        if not isinstance(choices, dict):
            raise ValueError("autotune data must hold a 'choices' mapping")
        self.choices.update({str(k): str(v) for k, v in choices.items()})
        self._save()

    def record(self, key: str, variant: str) -> None:
        self.choices[key] = variant
        self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.export(), indent=0))
            os.replace(tmp, self.path)
        except OSError:
            pass


def _default_path() -> Path:
    root = os.environ.get("DECONV_PATCH_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "deconv_patch"
    return base / "autotune.json"


_CACHE: Optional[AutotuneCache] = None


def cache() -> AutotuneCache:
    """The process's autotune cache (created, and loaded from disk, on first use)."""
    global _CACHE
    if _CACHE is None:
        _CACHE = AutotuneCache(_default_path())
    return _CACHE


def enabled() -> bool:
    return bool(torch.backends.cudnn.benchmark) and not torch.cuda.is_current_stream_capturing() \
        and not torch.compiler.is_compiling()


def _time_or_inf(variant: str, run: Callable[[str], object]) -> float:
    """Median ms of `run(variant)`; a variant that refuses the call (its binding's checks raise)
    simply loses."""
    try:
        return time_cuda(lambda: run(variant), _WARMUP, _REPS).median_ms
    except (RuntimeError, ValueError):
        return float("inf")


def pick(key: str, candidates: Sequence[str], run: Callable[[str], object]) -> str:
    """The fastest of `candidates` for `key`, timing each once (median of a few runs)."""
    known = cache().choices.get(key)
    if known in candidates:
        return known  # type: ignore[return-value]
    times = {v: _time_or_inf(v, run) for v in candidates}
    best = min(times, key=times.__getitem__)
    cache().record(key, best)
    return best
