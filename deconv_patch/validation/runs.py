"""Running the models for validate(): the device they are on, a call with the RNG seeded and
no autograd, buffers put back afterwards, and the float64 reference runs (the plain float64
copy, and the copy whose patched layers see TF32-rounded operands).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Iterator, List, Sequence

import torch
from torch import nn

from ..ops import FallbackWarning
from ..patching import copy_model
from ..reference import tf32_round
from .values import Args, Kwargs, _flatten


def _devices(args: Args, kwargs: Kwargs, model: nn.Module) -> List[torch.device]:
    found = [leaf.device for _, leaf in _flatten((args, kwargs)) if isinstance(leaf, torch.Tensor)]
    found += [p.device for p in model.parameters()][:1]
    return found


def _model_device(model: nn.Module, args: Args, kwargs: Kwargs) -> torch.device:
    devices = _devices(args, kwargs, model)
    return devices[0] if devices else torch.device("cpu")


def _call(model: Callable, args: Args, kwargs: Kwargs, seed: int, device: torch.device) -> Any:
    """Runs `model` with the RNG reset to `seed`, so dropout & co. draw the same on both sides."""
    cuda = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        with torch.no_grad():
            return model(*args, **kwargs)


@contextlib.contextmanager
def _buffers_restored(*models: nn.Module) -> Iterator[None]:
    """Puts every buffer back afterwards (training-mode BatchNorm updates running stats)."""
    saved = [[(b, b.detach().clone()) for b in m.buffers()] for m in models]
    try:
        yield
    finally:
        with torch.no_grad():
            for pairs in saved:
                for buf, value in pairs:
                    buf.copy_(value)


def _tf32_reference(reference: nn.Module, names: Sequence[str]) -> nn.Module:
    """A copy of the float64 reference in which the named (patched) layers compute on
    TF32-rounded operands: weights rounded once, floating inputs rounded by a pre-hook. Its
    distance from the reference is the error TF32 itself brings, which PyTorch allows for
    float32 convolutions (torch.backends.cudnn.allow_tf32) and cuDNN uses on some shapes only;
    a patched layer running TF32 kernels is held to that, not to a cuDNN run that happened to
    use full float32."""
    rounded = copy_model(reference)
    modules = dict(rounded.named_modules())

    def round_inputs(module: nn.Module, args: Args) -> Args:
        return tuple(tf32_round(a) if isinstance(a, torch.Tensor) and a.is_floating_point()
                     else a for a in args)

    for name in names:
        module = modules.get(name)
        if module is None:
            continue
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.Tensor):
            with torch.no_grad():
                weight.copy_(tf32_round(weight))
        module.register_forward_pre_hook(round_inputs)
    return rounded


def _reference_call(model: nn.Module, args: Args, kwargs: Kwargs, seed: int,
                    device: torch.device, notes: List[str]) -> Any:
    """The float64 run, or None (with a note) where the model cannot run in float64: the
    comparison then goes on without the float64 columns instead of aborting."""
    try:
        with warnings.catch_warnings():
            # float64 has no deconv_patch kernel: the fallback to PyTorch is the point here
            warnings.simplefilter("ignore", FallbackWarning)
            return _call(model, args, kwargs, seed, device)
    except Exception as exc:  # an op without a float64 kernel on this device, ...
        note = f"float64 reference failed ({type(exc).__name__}: {exc}); no float64 columns"
        if note not in notes:
            notes.append(note)
        return None
