"""`validate(original, patched, example_inputs)`: side-by-side accuracy and speed.

Accuracy is measured on the final outputs (any nesting) and per patched layer, where the patched
layer runs on exactly the input the original layer saw, so a layer's row shows that layer's own
error and not what flowed in from upstream. Both models are also compared against a float64 run
of the original: the proof that the patched model is as accurate as PyTorch.

Speed (CUDA only) times both models and each layer alone in the same process, interleaving the
two sides so clock and thermal drift hit both equally.

This module runs validate(): the accuracy pass (outputs, then each layer on its captured
input), the timing, and the verdict. Its pieces live beside it: values (nested inputs and
outputs), capture and layers (what each layer saw and is compared with), compare (the figures
for one tensor pair), runs (seeded and float64 runs), speed, environment and progress; the
report's records, text and HTML in report*.py. Every name validate() uses is still
importable from here. The timer (`time_interleaved`) and `_speed_skip_reason` are looked up in
this module, so tests can swap them here.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn

from ..modules import FastConvTranspose2d
from ..patching import copy_model
from ..kernels.planner import ATEN, conv_tf32, tf32_allowed
from ..timing import capture_graph, time_interleaved
from .report import LayerResult, SpeedComparison, TimingStats, Tolerances, ValidationReport
from .capture import _Capture, _capturing
from .compare import _amax, _bits, _differs, compare_outputs, compare_tensors
from .environment import _environment, _fusion, _input_label, _main_dtype
from .layers import (
    _Chained, _chain_runs_fused, _counterpart, _epilogue_activation, _follow_fusion,
    _fused_chains, _FusedActivation, _FusedLayer, _is_patched_layer, _LayerPair,
    declared_fusion, find_layers,
)
from .progress import _Progress
from .runs import (
    _buffers_restored, _call, _devices, _model_device, _reference_call, _tf32_reference,
)
from .speed import _fwd_bwd, _no_grad, _speed_skip_reason
from .values import (
    Args, Kwargs, _cast_floats, _clone, _flatten, _map_tensors, _random_like, _split_inputs,
)

# every name this module held before it was split, private helpers included (tests and callers
# import them from here)
__all__ = [
    "Args", "Kwargs", "_map_tensors", "_flatten", "_clone", "_split_inputs", "_cast_floats",
    "_LayerPair", "_Chained", "_FusedActivation", "_counterpart", "_epilogue_activation",
    "declared_fusion", "_fused_chains", "_chain_runs_fused", "_FusedLayer", "_follow_fusion",
    "_is_patched_layer", "find_layers", "_Capture", "_capturing", "_devices", "_model_device",
    "_call", "_buffers_restored", "_random_like", "_bits", "_amax", "compare_tensors",
    "compare_outputs", "_differs", "_compare_speed", "_fwd_bwd", "_speed_skip_reason",
    "_environment", "_input_label", "_main_dtype", "_fusion", "_Progress", "_Models", "validate",
    "_accuracy", "_tf32_reference", "_reference_call", "_layer_accuracy", "_no_grad",
    "_fwd_bwd_speed", "_end_to_end_speed", "_judge",
]


def _may_run_tf32(module: nn.Module) -> bool:
    """Whether a reported layer's float32 calls may round operands to TF32, as PyTorch's own
    would (its bar then allows TF32's error): a patched transposed convolution follows the
    setting of the kernels PyTorch runs it on (kernels.precision.tf32_allowed: cuBLAS's where
    PyTorch runs its native kernels); other layers, the convolution setting."""
    if isinstance(module, FastConvTranspose2d):
        return tf32_allowed(module._args(module.output_padding))
    return conv_tf32()


# ---------------------------------------------------------------------------- validate


@dataclass
class _Models:
    original: nn.Module
    patched: nn.Module
    reference: Optional[nn.Module]  # float64 copy of the original
    device: torch.device
    args: Args
    kwargs: Kwargs
    ref_args: Args = ()
    ref_kwargs: Kwargs = field(default_factory=dict)
    # float32 CUDA with TF32 allowed: the float64 copy whose patched layers see TF32-rounded
    # inputs and weights (see _tf32_reference)
    tf32_reference: Optional[nn.Module] = None


def validate(
    original: nn.Module,
    patched: nn.Module,
    example_inputs: Any,
    *,
    example_kwargs: Optional[Mapping[str, Any]] = None,
    dtype: Optional[torch.dtype] = None,
    tolerances: Optional[Tolerances] = None,
    fp64: bool = True,
    random_inputs: int = 0,
    layers: Sequence[str] = (),
    speed: bool = True,
    warmup: int = 10,
    reps: int = 50,
    backward: bool = False,
    cuda_graphs: bool = False,
    seed: int = 0,
    progress: Optional[bool] = None,
) -> ValidationReport:
    """Side-by-side accuracy and speed of `patched` against `original` on the same inputs.

    example_inputs: a tuple is the positional arguments, a dict the keyword arguments, anything
    else (a tensor, a list of images) the single argument; example_kwargs adds keywords.
    dtype: validate copies of both models, and the floating inputs, cast to this dtype.
    fp64: also run a float64 copy of the original (the accuracy proof; costs memory and time).
    random_inputs: compare outputs on this many extra random draws shaped like the inputs.
    layers: extra qualified module names to report besides the patched ones.
    speed: time both models end to end and each patched layer alone on its captured input
    (CUDA only; elsewhere `speed_skipped_reason` says why): `warmup` untimed calls, then `reps`
    CUDA-event-timed calls per side, interleaved; `backward` adds forward+backward timings;
    `cuda_graphs` replays each side from a CUDA graph (falls back to eager, with a note).
    tolerances: PASS/FAIL thresholds (None fields take the dtype's defaults).
    seed: RNG seed set before every forward (dropout draws the same masks on both sides) and
    for the random inputs. progress: tqdm bar (None: only for long runs on a terminal).
    The user's models are left as they were (hooks removed, buffers restored, no .grad).
    """
    tol = (tolerances or Tolerances())
    args, kwargs = _split_inputs(example_inputs, example_kwargs)
    if dtype is not None:
        original = copy_model(original).to(dtype)
        patched = copy_model(patched).to(dtype)
        args, kwargs = _cast_floats(args, dtype), _cast_floats(kwargs, dtype)
    device = _model_device(original, args, kwargs)
    pairs = find_layers(original, patched, layers)
    env = _environment(device, dtype, args, kwargs, original, pairs, patched)
    tol = tol.resolved(env.dtype)
    report = ValidationReport(
        environment=env, tolerances=tol,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        settings={"warmup": warmup, "reps": reps, "backward": backward,
                  "cuda_graphs": cuda_graphs, "fp64": fp64, "random_inputs": random_inputs,
                  "seed": seed, "extra_layers": list(layers)},
    )
    if device.type == "cuda" and env.dtype == "float32" and (env.tf32_cudnn or env.tf32_matmul):
        report.notes.append("TF32 is enabled (see environment): PyTorch's float32 convolutions/"
                            "matmuls may round to TF32; the accuracy limit allows the error "
                            "TF32-rounded operands bring (tf32_err_fp64), since PyTorch allows "
                            "it whether or not cuDNN used it on a given shape")
    skip = _speed_skip_reason(device) if speed else "speed measurement was switched off"
    report.speed_skipped_reason = skip
    steps = 3 + random_inputs + len(pairs) + (0 if skip else 1 + len(pairs))
    bar = _Progress(steps, progress)
    reference = None
    if fp64:
        reference = copy_model(original).to(device=device, dtype=torch.float64)
    models = _Models(original, patched, reference, device, args, kwargs,
                     _cast_floats(args, torch.float64), _cast_floats(kwargs, torch.float64))
    tf32_layers = [p.name for p in pairs if _may_run_tf32(p.patched)]
    if reference is not None and device.type == "cuda" and env.dtype == "float32" \
            and tf32_layers:
        models.tf32_reference = _tf32_reference(reference, tf32_layers)
    try:
        with _buffers_restored(original, patched):
            _accuracy(report, models, pairs, tol, seed, random_inputs, bar,
                      timing=None if skip else (warmup, reps, backward, cuda_graphs))
            models.reference = reference = None  # free its memory before end-to-end timing
            models.tf32_reference = None
            if not skip:
                _end_to_end_speed(report, models, seed, warmup, reps, backward, cuda_graphs)
                bar.step("end-to-end timing")
    finally:
        bar.close()
    _judge(report, tol)
    return report


def _accuracy(report: ValidationReport, m: _Models, pairs: Sequence[_LayerPair],
              tol: Tolerances, seed: int, random_inputs: int, bar: _Progress,
              timing: Optional[Tuple[int, int, bool, bool]]) -> None:
    names = [p.name for p in pairs]
    fused = declared_fusion(m.patched)
    chains = _fused_chains(m.patched)
    patched_names = {n for n, _ in m.patched.named_modules()}
    # modules folded away (absent from the patched model), and the BatchNorms / activations a
    # patched layer runs in its own call: captured so that a layer whose output fed them is
    # compared with the original's layer + those modules
    removed = [n for n, _ in m.original.named_modules() if n and n not in patched_names]
    followers = removed + sorted({n for chain in chains.values() for n in chain} - set(removed))
    with _capturing(m.original, names, followers=followers) as cap_o:
        out_o = _call(m.original, m.args, m.kwargs, seed, m.device)
    bar.step("original")
    # (fused chains look through the capture's hooks: this is the model as its user runs it)
    with _capturing(m.patched, names, followers=followers) as cap_p:
        out_p = _call(m.patched, m.args, m.kwargs, seed, m.device)
    bar.step("patched")
    out_r = out_t = None
    if m.reference is not None:
        out_r = _reference_call(m.reference, m.ref_args, m.ref_kwargs, seed, m.device,
                                report.notes)
    if m.tf32_reference is not None:
        out_t = _reference_call(m.tf32_reference, m.ref_args, m.ref_kwargs, seed, m.device,
                                report.notes)
    bar.step("float64 reference")
    report.outputs.append(compare_outputs("inputs", out_o, out_p, out_r, tol, out_t))
    del out_o, out_p, out_r, out_t

    ref_modules = dict(m.reference.named_modules()) if m.reference is not None else {}
    tf32_modules = (dict(m.tf32_reference.named_modules()) if m.tf32_reference is not None
                    else {})
    orig_modules = dict(m.original.named_modules())
    removed_caps = {n: cap_o.pop(n) for n in followers if n in cap_o}
    patched_follower_caps = {n: cap_p.pop(n) for n in followers if n in cap_p}
    for pair in pairs:
        capture, ref_module = cap_o.pop(pair.name, None), ref_modules.get(pair.name)
        tf32_module = tf32_modules.get(pair.name)
        patched_capture = cap_p.pop(pair.name, None)
        chain = _follow_fusion(pair.name, removed_caps) if removed_caps else []
        if pair.name in chains and capture is not None and pair.original is not None and \
                set(chains[pair.name]) <= set(chain) and _chain_runs_fused(pair.patched):
            # the layer as the model runs it here: its fused chain in one call (re-run alone on
            # the captured input; in the model's forward its output is the chain's last one)
            chain = [n for n in chain if n in chains[pair.name] or n in removed]
            pair = _LayerPair(pair.name, pair.original, _FusedLayer(pair.patched))
            if patched_capture is not None:
                tail = _follow_fusion(pair.name, patched_follower_caps)
                if tail:
                    last = patched_follower_caps[tail[-1]]
                    patched_capture = _Capture(patched_capture.args, patched_capture.kwargs,
                                               last.output, patched_capture.calls)
        else:
            chain = [n for n in chain if n in removed]
        if capture is not None and pair.original is not None:
            absorbed = [orig_modules[n] for n in chain]
            act = _epilogue_activation(pair.patched, absorbed)
            if chain or act is not None:
                # compare (and time) the fused layer against the original's layer + folded ones
                # (+ the activation its epilogue applies, where that was no lost module)
                extra = [act] if act is not None else []
                pair = _LayerPair(pair.name, _counterpart(pair.original, orig_modules, chain, extra),
                                  pair.patched, chain + [f"{a.name}()" for a in extra])
                output = removed_caps[chain[-1]].output if chain else capture.output
                if act is not None:
                    output = act(output)
                capture = _Capture(capture.args, capture.kwargs, output, capture.calls)
                ref_module = _counterpart(ref_module, ref_modules, chain, extra)
                tf32_module = _counterpart(tf32_module, tf32_modules, chain, extra)
        layer = _layer_accuracy(pair, capture, patched_capture, ref_module, tol,
                                seed, m.device, timing, tf32_module)
        if pair.fused_with:
            how = f"declared {fused[pair.name]}" if pair.name in fused else "inferred"
            layer.notes.append(f"fused ({how}): compared with the original's "
                               f"{' + '.join([pair.name, *pair.fused_with])}, which the patched "
                               "layer computes in one call")
        elif pair.name in fused:
            layer.notes.append(f"declared fused ({fused[pair.name]}) but no module absent from "
                               "the patched model takes its output: compared with the original "
                               "layer alone")
        report.layers.append(layer)
        bar.step(pair.name)
    del removed_caps

    generator = torch.Generator().manual_seed(seed + 1)
    for i in range(random_inputs):
        args, kwargs = _random_like(m.args, m.kwargs, generator)
        out_o = _call(m.original, args, kwargs, seed, m.device)
        out_p = _call(m.patched, args, kwargs, seed, m.device)
        out_r = out_t = None
        ref_args, ref_kwargs = _cast_floats(args, torch.float64), _cast_floats(kwargs, torch.float64)
        if m.reference is not None:
            out_r = _reference_call(m.reference, ref_args, ref_kwargs, seed, m.device,
                                    report.notes)
        if m.tf32_reference is not None:
            out_t = _reference_call(m.tf32_reference, ref_args, ref_kwargs, seed, m.device,
                                    report.notes)
        report.outputs.append(compare_outputs(f"random {i + 1}", out_o, out_p, out_r, tol,
                                              out_t))
        bar.step(f"random input {i + 1}")


def _layer_accuracy(pair: _LayerPair, cap_o: Optional[_Capture], cap_p: Optional[_Capture],
                    ref_module: Optional[nn.Module], tol: Tolerances, seed: int,
                    device: torch.device, timing: Optional[Tuple[int, int, bool, bool]],
                    tf32_module: Optional[nn.Module] = None) -> LayerResult:
    """The patched layer re-run on the original layer's captured input, vs the original's
    output and vs the float64 layer on the same input (float64-converted)."""
    layer = LayerResult(
        name=pair.name,
        original_type=(pair.original.type_name() if isinstance(pair.original, _Chained)
                       else type(pair.original).__name__ if pair.original is not None else None),
        fused_with=list(pair.fused_with),
        patched_type=type(pair.patched).__name__,
        variant=getattr(pair.patched, "backend", None) if isinstance(
            getattr(pair.patched, "backend", None), str) else None,
        calls=cap_p.calls if cap_p is not None else 0,
    )
    if pair.original is None:
        layer.notes.append("no module of this name in the original model (renamed or new): "
                           "reported on the patched side only")
    if cap_p is None:
        layer.notes.append("did not run in the patched model's forward")
    elif cap_p.calls > 1:
        layer.notes.append(f"ran {cap_p.calls} times per forward; the first call is compared")
    source = cap_o if cap_o is not None else cap_p
    if source is None:
        return layer
    layer.input_shapes = [list(t.shape) for _, t in _flatten((source.args, source.kwargs))
                          if isinstance(t, torch.Tensor)]
    plan_for = getattr(pair.patched, "plan_for", None)
    first = next((t for _, t in _flatten((source.args, source.kwargs))
                  if isinstance(t, torch.Tensor)), None)
    if callable(plan_for) and first is not None:  # the variant for this very input
        layer.variant = plan_for(first).variant
    if cap_o is not None:
        out_p = _call(pair.patched, cap_o.args, cap_o.kwargs, seed, device)
        out_r = out_t = None
        ref_args = _cast_floats(cap_o.args, torch.float64)
        ref_kwargs = _cast_floats(cap_o.kwargs, torch.float64)
        if ref_module is not None:
            out_r = _reference_call(ref_module, ref_args, ref_kwargs, seed, device, layer.notes)
        if tf32_module is not None:
            out_t = _reference_call(tf32_module, ref_args, ref_kwargs, seed, device, layer.notes)
        result = compare_outputs("layer", cap_o.output, out_p, out_r, tol, out_t)
        layer.comparisons = result.comparisons
        layer.notes += result.problems
        if cap_p is not None:
            leaves_o = [t for _, t in _flatten(cap_o.output) if isinstance(t, torch.Tensor)]
            leaves_p = [t for _, t in _flatten(cap_p.output) if isinstance(t, torch.Tensor)]
            diffs = [_amax((a.double() - b.double().to(a.device)).abs()[
                         torch.isfinite(a) & torch.isfinite(b).to(a.device)])
                     for a, b in zip(leaves_o, leaves_p) if a.shape == b.shape]
            finite = [d for d in diffs if d is not None]
            layer.in_model_max_abs_diff = max(finite) if finite else None
        del out_p, out_r, out_t
    elif pair.original is not None:
        layer.notes.append("did not run in the original model's forward")
    if timing is not None:
        warmup, reps, backward, graphs = timing
        fn_o = None
        if cap_o is not None and pair.original is not None:
            orig_mod = pair.original
            fn_o = _no_grad(lambda: orig_mod(*source.args, **source.kwargs))
        fn_p = _no_grad(lambda: pair.patched(*source.args, **source.kwargs))
        layer.forward = _compare_speed(fn_o, fn_p, warmup, reps, graphs)
        if backward:
            layer.forward_backward = _fwd_bwd_speed(
                pair.original if fn_o is not None else None, pair.patched, source.args,
                source.kwargs, seed, warmup, reps, graphs)
    return layer


# ---------------------------------------------------------------------------- timing


def _compare_speed(fn_o: Optional[Callable[[], Any]], fn_p: Callable[[], Any], warmup: int,
                   reps: int, cuda_graphs: bool) -> SpeedComparison:
    fns = [f for f in (fn_o, fn_p) if f is not None]
    mode, note, keep = "eager", "", []
    if cuda_graphs:
        try:
            graphed = [capture_graph(f) for f in fns]
            keep = [g for _, g in graphed]
            fns = [replay for replay, _ in graphed]
            mode = "cuda_graph"
        except Exception as exc:  # not capturable (host syncs, dynamic shapes, ...)
            torch.cuda.synchronize()
            note = f"CUDA graph capture failed ({type(exc).__name__}: {exc}); timed eagerly"
    samples = time_interleaved(fns, warmup, reps)
    del keep
    stats = [TimingStats.from_samples(s) for s in samples]
    original = stats[0] if fn_o is not None else None
    return SpeedComparison(original, stats[-1], mode, note)


def _fwd_bwd_speed(original: Optional[nn.Module], patched: nn.Module, args: Args,
                   kwargs: Kwargs, seed: int, warmup: int, reps: int, graphs: bool,
                   input_grads: bool = True) -> Optional[SpeedComparison]:
    fn_p = _fwd_bwd(patched, args, kwargs, seed, input_grads)
    if fn_p is None:
        return None
    fn_o = (_fwd_bwd(original, args, kwargs, seed, input_grads) if original is not None
            else None)
    return _compare_speed(fn_o, fn_p, warmup, reps, graphs)


def _end_to_end_speed(report: ValidationReport, m: _Models, seed: int, warmup: int,
                      reps: int, backward: bool, graphs: bool) -> None:
    report.forward = _compare_speed(
        _no_grad(lambda: m.original(*m.args, **m.kwargs)),
        _no_grad(lambda: m.patched(*m.args, **m.kwargs)), warmup, reps, graphs)
    if backward:
        report.forward_backward = _fwd_bwd_speed(m.original, m.patched, m.args, m.kwargs, seed,
                                                 warmup, reps, graphs, input_grads=False)
        if report.forward_backward is None:
            report.notes.append("forward+backward not timed: nothing requires a gradient")
    on_pytorch = [layer.name for layer in report.layers if layer.variant == ATEN]
    if on_pytorch:
        report.notes.append("layers running PyTorch's implementation (faster there, or no "
                            f"deconv_patch kernel covers them; see the planner): "
                            f"{', '.join(on_pytorch)}")


# ---------------------------------------------------------------------------- verdict


def _judge(report: ValidationReport, tol: Tolerances) -> None:
    """Collects every failed check into report.failures (empty list = PASS)."""
    # layers first: the first failure, shown in the verdict, then points at the cause
    for layer in report.layers:
        for c in layer.comparisons:
            for problem in c.problems:
                report.failures.append(f"layer {layer.name}{c.path}: {problem}")
    for out in report.outputs:
        for problem in out.problems:
            report.failures.append(f"[{out.label}] {problem}")
        for c in out.comparisons:
            for problem in c.problems:
                report.failures.append(f"output{c.path} [{out.label}]: {problem}")
    if tol.min_speedup is not None:
        speedup = report.forward.speedup if report.forward is not None else None
        if speedup is None:
            report.notes.append("min_speedup not checked: speed was not measured")
        elif speedup < tol.min_speedup:
            report.failures.append(f"end-to-end forward speedup {speedup:.2f}x is below the "
                                   f"required {tol.min_speedup:g}x")
