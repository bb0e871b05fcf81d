"""`deconv_patch.optimize(model)`: the one call users make.

Tries the torch.fx pass first (every transposed convolution, modules and functional calls, plus
BatchNorm folding); models fx cannot trace (data-dependent control flow, e.g. torchvision
detection models) fall back to swapping nn.ConvTranspose2d submodules by name. Either way the
summary attached to the result says which path was taken and why.

Fusion (fx path, eval mode): a following BatchNorm2d is folded into the conv's weights/bias and a
following activation moves into the conv's fused epilogue.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import nn

from .fx_pass import FilterFn, UntraceableError, fx_patch, one_line
from .modules import FastConvTranspose2d
from .summary import (
    FUSION_NOTE, PATH_FX, PATH_NONE, PATH_SWAP, LayerPatch, PatchSummary, attach, get_summary,
    layer_from_module, with_notes,
)
from .swap import swap_conv_transpose2d


def _as_args(example_inputs: Any) -> Optional[Tuple[Any, ...]]:
    """A tuple is the positional arguments; anything else (a tensor, a list) is the only one."""
    if example_inputs is None:
        return None
    if isinstance(example_inputs, tuple):
        return example_inputs
    return (example_inputs,)


def _run_restoring_state(module: nn.Module, args: Tuple[Any, ...]) -> None:
    """One forward on `args` with gradients off, putting buffers (BN statistics) and the random
    number generators (dropout) back after, so the check leaves no trace."""
    saved = {name: buf.detach().clone() for name, buf in module.named_buffers()}
    cuda_devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=cuda_devices):
            module(*args)
    finally:
        with torch.no_grad():
            for name, buf in module.named_buffers():
                if name in saved:
                    buf.copy_(saved[name])


def _swap_path(model: nn.Module, filter_fn: Optional[FilterFn], why: str,
               previous: Optional[PatchSummary]) -> Tuple[nn.Module, PatchSummary]:
    """Plain swap by name (no fusion); `why` is the one-line reason fx was not used."""
    previous_fused = {layer.name: layer.fused for layer in (previous.layers if previous else ())}
    candidates = [name for name, m in model.named_modules(remove_duplicate=False)
                  if name and isinstance(m, nn.ConvTranspose2d)]
    already = {name for name in candidates
               if isinstance(model.get_submodule(name), FastConvTranspose2d)}
    patched_names = already | set(swap_conv_transpose2d(model, filter_fn))
    skipped = tuple(name for name in candidates if name not in patched_names)
    layers = tuple(
        layer_from_module(name, model.get_submodule(name),  # type: ignore[arg-type]
                          previous_fused.get(name, "-"))
        for name in candidates if name in patched_names)
    if not layers:
        what = (f"filter_fn skipped all {len(candidates)} layers" if candidates
                else "no ConvTranspose2d submodules to swap")
        return model, PatchSummary(
            path=PATH_NONE, reason=f"fx tracing not used ({why}); {what}; model returned unchanged",
            skipped=skipped)
    summary = PatchSummary(
        path=PATH_SWAP, reason=f"fx pass not usable ({why}); swapped submodules by name",
        layers=layers, skipped=skipped,
        notes=("swap path: nothing fused (BatchNorm folding needs the fx graph); functional "
               "F.conv_transpose2d calls stay on PyTorch",),
    )
    return model, summary


def optimize(
    model: nn.Module,
    example_inputs: Any = None,
    *,
    inplace: bool = False,
    filter_fn: Optional[Callable[[str, Optional[nn.Module]], bool]] = None,
    fuse: bool = True,
    validate: bool = False,
    progress: Optional[bool] = None,
    validate_kwargs: Optional[Dict[str, Any]] = None,
) -> nn.Module:
    """Returns `model` with every transposed convolution running on deconv_patch.

    Args:
        model: any nn.Module. Its training/eval mode, device, dtype and parameter values are kept.
        example_inputs: optional; a tuple is the forward's positional arguments, anything else
            its single argument. When given, the traced graph is run once on them (buffers put
            back) and, if it fails, the plain swap is used instead.
        inplace: False (default) works on a deepcopy. True skips the copy: the result then reuses
            `model`'s submodules and parameters (the swap path patches `model` itself), so use the
            result instead of `model` afterwards.
        filter_fn: `filter_fn(name, module) -> bool`; False leaves that layer on PyTorch. For
            functional F.conv_transpose2d calls it receives the fx node name and None.
        fuse: fold a BatchNorm2d that directly follows a ConvTranspose2d module (and is the
            conv output's only user) into the conv's weights/bias, in eval mode only. This
            replaces parameter values, so state_dict keys change for folded layers (the BN's keys
            go, the conv gains a bias), and the folded model is for inference: calling .train()
            on it does not bring batch statistics back (use fuse=False to fine-tune). An
            activation that is the conv's (or folded BN's) only user then moves into the conv's
            epilogue (FastConvTranspose2d.activation); its module node leaves the graph.
        validate: compare the result with the original on `example_inputs` using
            `deconv_patch.validation.validate`; the report lands in the summary.
        progress: show a tqdm bar (None: only when more than 20 layers).
        validate_kwargs: extra keyword arguments for `validate`.

    Idempotent: optimizing an optimized model changes nothing more. The fx path returns a
    torch.fx.GraphModule (the model's own Python attributes and methods other than forward are
    not carried over; `if self.training` branches are baked in at trace time). See
    `deconv_patch.summary(result)` for what was done.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"optimize expects an nn.Module, got {type(model).__name__}")
    args = _as_args(example_inputs)
    if validate and args is None:
        raise ValueError("optimize(validate=True) needs example_inputs to run both models on")
    previous = get_summary(model)
    reference = copy.deepcopy(model) if (validate and inplace) else model
    work = model if inplace else copy.deepcopy(model)

    patched: nn.Module
    try:
        result = fx_patch(work, filter_fn=filter_fn, fuse=fuse, progress=progress,
                          previous=previous)
        if args is not None and result.summary.layers:
            try:
                _run_restoring_state(result.module, args)
            except Exception as exc:
                raise UntraceableError(
                    f"traced graph failed on example_inputs: {one_line(exc)}") from exc
        summary = result.summary
        if not summary.layers:
            reason = ("no ConvTranspose2d modules or conv_transpose2d calls found"
                      if result.found == 0 else
                      f"filter_fn skipped all {result.found} transposed convolutions")
            patched, summary = work, PatchSummary(
                path=PATH_NONE, reason=f"{reason}; model returned unchanged",
                skipped=summary.skipped)
        else:
            patched = result.module
    except Exception as exc:  # never fail where a plain swap works
        why = str(exc) if isinstance(exc, UntraceableError) else f"fx pass error: {one_line(exc)}"
        patched, summary = _swap_path(work, filter_fn, why, previous)

    if summary.path == PATH_NONE:
        warnings.warn(f"deconv_patch.optimize: {summary.reason}", UserWarning, stacklevel=2)
    if summary.path == PATH_FX:
        summary = with_notes(summary, FUSION_NOTE if fuse else "fuse=False: nothing folded")
    attach(patched, summary)  # before validating: validate reads the "fused" column from it
    if validate:
        from .validation import validate as run_validation  # imported lazily: optional layer

        report = run_validation(reference, patched, args, **(validate_kwargs or {}))
        attach(patched, dataclasses.replace(summary, validation=report))
    return patched


__all__ = ["LayerPatch", "PatchSummary", "optimize"]
