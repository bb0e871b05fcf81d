"""`deconv_patch.optimize(model)`: the one call users make.

The result is the user's model (a deep copy unless `inplace=True`), patched where it stands:
* every nn.ConvTranspose2d module object becomes a FastConvTranspose2d (a change of class:
  patching.py), hooks, parametrizations and references kept;
* every module whose forward calls F.conv_transpose2d runs that same forward with the call routed
  to our op (functional_calls.py);
* in eval mode, conv -> BatchNorm2d -> activation chains run as one fused call, where a record of
  a real forward proves the data flow (dataflow.py, fuse_plan.py): on `example_inputs`, or on
  the model's first call when none were given.
Nothing else changes: class, methods, attributes, Python control flow and state_dict are the
model's own. The summary attached to the result lists what was patched and fused and, with the
reason, what was not; a PatchWarning says so in one line.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import sys
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

from .kernels import planner
from .dataflow import Record, record_forward, Recorder
from .functional_calls import FunctionalRouter, covers, routable_forward, route
from .fuse_plan import CHAIN_ATTR, ChainPlan, attach_chains, detach_chains, plan_chains, \
    verify_chains
from .modules import FastConvTranspose2d, prepare_kernels
from .patching import copy_model, patch_modules
from .summary import (
    FUSION_NOTE, PATH_NONE, PATH_PATCHED, TRAINING_DEFAULT_NOTE, TRAINING_KERNELS_NOTE,
    TRAINING_NOTE, LayerPatch, PatchSummary, PatchWarning, attach, get_summary,
    layer_from_module, with_notes,
)

PROGRESS_THRESHOLD = 20  # show a tqdm bar when more layers than this are patched
FIRST_CALL_NOTE = "no example_inputs: fusion is decided on the model's first call"


def _as_args(example_inputs: Any) -> Optional[Tuple[Any, ...]]:
    """A tuple is the positional arguments; anything else (a tensor, a list, a dict) is the
    only one."""
    if example_inputs is None:
        return None
    if isinstance(example_inputs, tuple):
        return example_inputs
    return (example_inputs,)


def _names(model: nn.Module) -> Dict[int, str]:
    """Each module's first name in `model`, by id."""
    names: Dict[int, str] = {}
    for n, m in model.named_modules(remove_duplicate=False):
        names.setdefault(id(m), n)
    return names


@contextlib.contextmanager
def _state_restored(model: nn.Module):
    """No gradients, PyTorch's kernels; buffers (BN statistics) and random state put back."""
    saved = [(b, b.detach().clone()) for b in model.buffers()]
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=devices), \
                planner.use_variant(planner.ATEN):
            yield
    finally:
        with torch.no_grad():
            for buf, value in saved:
                buf.copy_(value)


def _function_rows(routed: List[str]) -> List[LayerPatch]:
    rows = []
    for owner in routed:
        rows.append(LayerPatch(
            name=f"{owner}.forward" if owner else "forward", kind="function", in_channels=None,
            out_channels=None, kernel_size=None, stride=None, padding=None,
            output_padding=None, dilation=None, groups=None, bias=None, fused="-",
            backend="per call", training="aten"))
    return rows


def _unrouted_calls(record: Record, names: Dict[int, str]) -> List[Tuple[str, str]]:
    """Functional calls the record saw that routing does not reach."""
    left = []
    for call in record.functional:
        owner = call.owner
        routed = owner is not None and isinstance(owner.__dict__.get("forward"), FunctionalRouter)
        if routed and covers(type(owner).forward, call.caller):
            continue
        where = call.caller.co_name if call.caller is not None else "?"
        owner_name = names.get(id(owner), "") if owner is not None else "(outside any module)"
        row = (f"{owner_name or 'forward'}: conv_transpose2d in {where}()",
               "called outside the module's own forward code (a helper or decorator): stays on "
               "PyTorch")
        if row not in left:
            left.append(row)
    return left


class _Patcher:
    """State of one optimize() call, kept on the model until its fusion is decided."""

    def __init__(self, model: nn.Module, fuse: bool, summary: PatchSummary,
                 convs: List[Tuple[str, FastConvTranspose2d]]) -> None:
        self.model = model
        self.fuse = fuse
        self.summary = summary
        self.convs = convs
        self.handles: List[Any] = []
        self.recorder: Optional[Recorder] = None

    def chains(self, record: Record) -> ChainPlan:
        """The chains `record` proves (none without fuse)."""
        return plan_chains(record, self.convs, _names(self.model)) if self.fuse else ChainPlan()

    def decide(self, record: Record, args: Tuple[Any, ...], kwargs: Dict[str, Any],
               check_on_copy: bool = False, plan: Optional[ChainPlan] = None) -> None:
        """Fuses what `record` proves (`plan`, where chains() has made it already), checks it
        on (args, kwargs), updates the summary. `check_on_copy`: run the check on a copy (the
        user's own call is still in flight: its autograd graph must not see buffers restored
        under it)."""
        names = _names(self.model)
        left = list(self.summary.left) + [row for row in _unrouted_calls(record, names)
                                          if row not in self.summary.left]
        plan = self.chains(record) if plan is None else plan
        notes = [n for n in self.summary.notes if n != FIRST_CALL_NOTE]
        if plan.chains and check_on_copy:
            memo: Dict[int, Any] = {}
            model_copy = copy_model(self.model, memo)
            problem = verify_chains(model_copy, copy.deepcopy(plan, memo), args, kwargs)
            if problem is None:
                attach_chains(plan)
        elif plan.chains:
            attach_chains(plan)
            problem = verify_chains(self.model, plan, args, kwargs)
        if plan.chains:
            if problem is not None:
                detach_chains(self.model, plan)
                plan.declined.extend((name, f"fused check failed: {problem}")
                                     for name in plan.chains)
                plan.chains.clear()
        fused = {name: chain.what for name, (_, chain) in plan.chains.items()}
        calls = {name: len(record.conv_calls.get(id(conv), ())) for name, conv in self.convs}
        layers = tuple(dataclasses.replace(layer, fused=fused.get(layer.name, layer.fused),
                                           calls=calls.get(layer.name, layer.calls))
                       for layer in self.summary.layers)
        self.summary = dataclasses.replace(
            self.summary, layers=layers, notes=tuple(notes), left=tuple(left),
            declined=tuple(self.summary.declined) + tuple(plan.declined))
        attach(self.model, self.summary)
        _warn(self.summary, stacklevel=4)

    # -- the first call, when optimize() had no example inputs
    def arm_first_call(self) -> None:
        self.handles = [
            self.model.register_forward_pre_hook(self._first_pre, with_kwargs=True),
            self.model.register_forward_hook(self._first_post, with_kwargs=True,
                                             always_call=True)]

    def _first_pre(self, module: nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any]
                   ) -> None:
        if torch.compiler.is_compiling() or self.recorder is not None:
            return
        self.recorder = Recorder(module)
        self.recorder.start()
        self.recorder.pre_hook(module, args)  # (the root's own call started before the hooks)

    def _first_post(self, module: nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                    output: Any) -> None:
        recorder = self.recorder
        if recorder is None:
            return
        self.recorder = None
        record = recorder.stop(output)
        if sys.exc_info()[0] is not None:  # the call raised: decide on a later, whole one
            return
        for handle in self.handles:
            handle.remove()
        self.handles = []
        self.decide(record, args, kwargs, check_on_copy=True)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["recorder"] = None
        return state


def _warn(summary: PatchSummary, stacklevel: int) -> None:
    parts = []
    if summary.left:
        parts.append(f"{len(summary.left)} transposed convolution(s) left on PyTorch ("
                     + "; ".join(f"{n}: {why}" for n, why in summary.left) + ")")
    if summary.declined:
        parts.append(f"{len(summary.declined)} fusion(s) declined ("
                     + "; ".join(f"{n}: {why}" for n, why in summary.declined) + ")")
    if parts:
        warnings.warn("deconv_patch.optimize: " + "; ".join(parts)
                      + "; see deconv_patch.summary(model)", PatchWarning, stacklevel=stacklevel)


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
    example_kwargs: Optional[Dict[str, Any]] = None,
    kernels_in_training: Optional[bool] = None,
) -> nn.Module:
    """Returns `model` with every transposed convolution running on deconv_patch.

    Args:
        model: any nn.Module. It stays itself: class, methods, attributes, hooks,
            parametrizations, training/eval mode, device, dtype, parameters and state_dict.
        example_inputs: optional; a tuple is the forward's positional arguments, anything else
            its single argument (`example_kwargs`: its keyword arguments). The model runs once
            on them, recorded, to decide fusion; without them that happens on its first call.
        inplace: False (default) patches a deep copy; True patches `model` itself.
        filter_fn: `filter_fn(name, module) -> bool`; False leaves that layer on PyTorch. For
            modules whose forward calls F.conv_transpose2d it receives "<name>.forward" and None.
        fuse: run conv -> BatchNorm2d -> activation chains as one call where a real forward
            proves they are one (eval mode, no gradients; see deconv_patch/fuse_plan.py).
        validate: compare the result with the original on `example_inputs` using
            `deconv_patch.validation.validate`; the report lands in the summary.
        progress: show a tqdm bar (None: only when more than 20 layers).
        validate_kwargs: extra keyword arguments for `validate`.
        kernels_in_training: whether calls that autograd records (training steps) run our
            forward kernel, with the planned backward (PyTorch's, or ours where it measured
            faster). None (default): only where that measured faster: layers planned on the
            grouped kernel (depthwise and grouped layers), layers cuDNN has no kernel for
            (output_padding >= stride) unless cuBLAS may use TF32, layers with 1-4 output
            channels and no groups in 16-bit or under CUDA autocast (their gradients on our
            tensor-core kernels), on Hopper in fp32 without TF32 layers without groups whose
            input gradient runs on gemm_phase_tma's kernel (3xTF32; NCHW calls from about 10^9
            multiply-adds or sums of 4,096 products on), and in the other layers our forward
            with PyTorch's backward: TF32 calls from 2^33 (8.6 x 10^9) multiply-adds on in
            kernel == stride layers and from 1.5 x 2^33 in the others, 16-bit kernel == stride
            calls from 2^32 on (docs/performance/training.md). True: in every layer. False: in
            none.

    Idempotent: optimizing an optimized model changes nothing more. See
    `deconv_patch.summary(result)` for what was done, and what was not and why.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"optimize expects an nn.Module, got {type(model).__name__}")
    args = _as_args(example_inputs)
    if args is None and example_kwargs:
        args = ()
    kwargs = dict(example_kwargs or {})
    if validate and args is None:
        raise ValueError("optimize(validate=True) needs example_inputs to run both models on")
    previous = get_summary(model)
    reference = copy_model(model) if (validate and inplace) else model
    work = model if inplace else copy_model(model)

    with _progress(work, progress):
        patch = patch_modules(work, filter_fn)
    for _, conv in patch.patched:
        if conv.kernels_in_training != kernels_in_training:
            conv.kernels_in_training = kernels_in_training
    routed: List[str] = []
    skipped = list(patch.filtered)
    for name, module in work.named_modules():
        already = isinstance(module.__dict__.get("forward"), FunctionalRouter)
        if isinstance(module, nn.ConvTranspose2d) or not (already or routable_forward(module)):
            continue
        label = f"{name}.forward" if name else "forward"
        if filter_fn is not None and not filter_fn(label, None):
            skipped.append(label)
            continue
        if route(module):
            routed.append(name)

    previous_fused = {layer.name: layer.fused for layer in (previous.layers if previous else ())}
    layers = tuple(layer_from_module(name, conv, previous_fused.get(name, "-"))
                   for name, conv in patch.patched) + tuple(_function_rows(routed))
    notes: List[str] = []
    if layers:
        notes.append(FUSION_NOTE if fuse else "fuse=False: nothing fused")
        notes.append({None: TRAINING_DEFAULT_NOTE, True: TRAINING_KERNELS_NOTE,
                      False: TRAINING_NOTE}[kernels_in_training])
    summary = PatchSummary(
        path=PATH_PATCHED if layers else PATH_NONE,
        reason=("patched the model's own modules in place" if layers else
                "no ConvTranspose2d modules or conv_transpose2d calls to patch; model "
                "returned unchanged"),
        layers=layers, skipped=tuple(skipped), left=tuple(patch.left), notes=tuple(notes),
        declined=previous.declined if previous else ())
    patcher = _Patcher(work, fuse, summary, patch.patched)
    if not layers:
        warnings.warn(f"deconv_patch.optimize: {summary.reason}", UserWarning, stacklevel=2)
    if args is not None:
        with _state_restored(work):
            record, _ = record_forward(work, args, kwargs)
        # The families the layers' calls plan compile at once now (for the activation each
        # chain the record proves will fuse; the fused check may still decline it), not one
        # after another as the fused check and the first calls meet them.
        calls = [(conv, call.input) for _, conv in patch.patched
                 for call in record.conv_calls.get(id(conv), ()) if call.input is not None]
        chains = patcher.chains(record)
        prepare_kernels(calls, {id(conv): chain.activation for conv, chain in
                                chains.chains.values()} if fuse else None)
        patcher.decide(record, args, kwargs, plan=chains)
    else:
        fusable = fuse and any(CHAIN_ATTR not in conv.__dict__ for _, conv in patch.patched)
        if fusable and layers:
            summary = with_notes(summary, FIRST_CALL_NOTE)
            patcher.summary = summary
        attach(work, summary)
        _warn(summary, stacklevel=2)
        patcher.arm_first_call()
    if validate:
        from .validation import validate as run_validation  # imported lazily: optional layer

        report = run_validation(reference, work, args, **(validate_kwargs or {}))
        attach(work, dataclasses.replace(get_summary(work) or summary, validation=report))
    return work


@contextlib.contextmanager
def _progress(model: nn.Module, show: Optional[bool]):
    """A tqdm line while patching many layers (or when asked)."""
    total = sum(1 for m in model.modules() if isinstance(m, nn.ConvTranspose2d))
    enabled = show if show is not None else total > PROGRESS_THRESHOLD
    if not enabled:
        yield
        return
    from tqdm.auto import tqdm

    with tqdm(total=total, desc="deconv_patch", unit="layer", leave=False) as bar:
        yield
        bar.update(total)


__all__ = ["LayerPatch", "PatchSummary", "PatchWarning", "optimize"]
