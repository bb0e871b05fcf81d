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
import statistics
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

import torch

from ..arguments import ConvTransposeArgs
from ..epilogue import IDENTITY, Epilogue
from .planner import ATEN
from .precision import tf32_allowed
from ..timing import time_interleaved

_WARMUP = 3
_REPS = 15
_MARGIN = 1.03  # a kernel must be 3% faster than PyTorch's path to replace it
_CONFIRM_REPS = 40  # the winner re-timed against PyTorch's path alone, before it replaces it
# Calls per timed sample, back to back: a layer inside a model is launched while the GPU is
# still busy with the previous one, so what matters there is throughput (the larger of host and
# GPU time per call), not the latency of a lone call that starts on an idle GPU (host + GPU).
_BURST = 4


@functools.lru_cache(maxsize=None)
def _device_name(index: int) -> str:
    """GPU name (cached: the key is built on every autotuned call)."""
    return torch.cuda.get_device_name(index)


def call_key(input: torch.Tensor, weight: torch.Tensor, has_bias: bool,
             args: ConvTransposeArgs, epilogue: Epilogue = IDENTITY) -> str:
    """The cache key of one call: every property that can change which variant is fastest,
    the fused epilogue included (a fused activation can cost one kernel far more than another;
    a plain call's key has no epilogue part, as before)."""
    device = _device_name(input.device.index if input.device.index is not None
                          else torch.cuda.current_device())
    fields = [device, input.dtype, tuple(input.shape), input.stride(), tuple(weight.shape),
              weight.stride(), has_bias, args.stride, args.padding, args.output_padding,
              args.dilation, args.groups, tf32_allowed(args)]
    if not epilogue.is_identity:
        fields.append(epilogue_tag(epilogue))
    return "|".join(str(v) for v in fields)


def epilogue_tag(epilogue: Epilogue) -> str:
    """The part of an epilogue that changes timings: the activation (with LeakyReLU's slope) and
    whether a per-channel scale / shift is applied (their values do not matter)."""
    slope = f"({epilogue.negative_slope})" if epilogue.activation == "leaky_relu" else ""
    affine = "+".join(n for n, t in (("scale", epilogue.scale), ("shift", epilogue.shift))
                      if t is not None)
    return f"epilogue={epilogue.activation}{slope}{'+' + affine if affine else ''}"


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


def _burst(run: Callable[[str], object], variant: str) -> Callable[[], None]:
    def calls() -> None:
        for _ in range(_BURST):
            run(variant)
    return calls


def known(key: str, candidates: Sequence[str]) -> bool:
    """Whether pick(key, candidates) has its answer without timing."""
    return cache().choices.get(key) in candidates


def pick(key: str, candidates: Sequence[str], run: Callable[[str], object]) -> str:
    """The fastest of `candidates` for `key`, timed once: each is warmed up (a candidate whose
    binding refuses the call drops out), then all take turns sample by sample
    (time_interleaved; a sample is _BURST back-to-back calls) so clock and host drift hit them
    alike; median per candidate. PyTorch's own path ("aten")
    keeps the call unless a kernel beats it by _MARGIN, first among all candidates and then
    head to head (_confirmed): on host-bound layers the timings of equal candidates differ by
    noise, and a tie must not switch implementations."""
    known = cache().choices.get(key)
    if known in candidates:
        return known  # type: ignore[return-value]
    usable = []
    for variant in candidates:
        try:
            for _ in range(_WARMUP):
                run(variant)
            usable.append(variant)
        except (RuntimeError, ValueError):
            continue
    times = time_interleaved([_burst(run, v) for v in usable], 0, _REPS)
    medians = {v: statistics.median(t) for v, t in zip(usable, times)}
    best = min(medians, key=medians.__getitem__)
    if ATEN in medians and medians[best] * _MARGIN > medians[ATEN]:
        best = ATEN
    if best != ATEN and ATEN in medians and not _confirmed(run, best):
        best = ATEN
    cache().record(key, best)
    return best


def _confirmed(run: Callable[[str], object], kernel: str) -> bool:
    """Whether `kernel` still beats PyTorch's path head to head, alone against it: by _MARGIN
    in bursts (throughput), and by _MARGIN one call at a time (latency: a call's host + GPU
    time, what the layer benchmark measures). With many candidates each gets few samples,
    and on host-bound layers one lucky median picked kernels that then measured 1-11% slower
    (H100 layer benchmark); a burst win alone still let a kernel 8% slower per call replace
    cuDNN (dcgan.g1 bf16 NCHW), and a latency tie let one measure 11% slower (dcgan.g1 fp16
    NHWC: the same GPU time, host noise), so a tie keeps cuDNN."""
    mine, theirs = time_interleaved([_burst(run, kernel), _burst(run, ATEN)], 0, _CONFIRM_REPS)
    if statistics.median(mine) * _MARGIN > statistics.median(theirs):
        return False
    mine, theirs = time_interleaved([lambda: run(kernel), lambda: run(ATEN)], 0, _CONFIRM_REPS)
    return statistics.median(mine) * _MARGIN <= statistics.median(theirs)
