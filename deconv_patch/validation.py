"""`validate(original, patched, example_inputs)`: side-by-side accuracy and speed.

Accuracy is measured on the final outputs (any nesting) and per patched layer, where the patched
layer runs on exactly the input the original layer saw, so a layer's row shows that layer's own
error and not what flowed in from upstream. Both models are also compared against a float64 run
of the original: the proof that the patched model is as accurate as PyTorch.

Speed (CUDA only) times both models and each layer alone in the same process, interleaving the
two sides so clock and thermal drift hit both equally.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import platform
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn

from ._version import __version__
from .epilogue import activate, activation_of_module
from .reference import tf32_round
from .modules import FastConvTranspose2d
from .patching import copy_model
from .derived import original_class
from .ops import FallbackWarning
from .planner import ATEN
from .timing import capture_graph, time_interleaved
from .report import (
    Environment,
    LayerResult,
    OutputSet,
    SpeedComparison,
    TensorComparison,
    TimingStats,
    Tolerances,
    ValidationReport,
    dtype_name,
    ulp,
)

Args = Tuple[Any, ...]
Kwargs = Dict[str, Any]


# ---------------------------------------------------------------------------- nested values


def _map_tensors(fn: Callable[[torch.Tensor], Any], obj: Any) -> Any:
    """`obj` with every tensor inside (tuples, lists, dicts, namedtuples) replaced by fn(t)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_map_tensors(fn, x) for x in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(fn, x) for x in obj)
    if isinstance(obj, Mapping):
        return type(obj)((k, _map_tensors(fn, v)) for k, v in obj.items())  # type: ignore
    return obj


def _flatten(obj: Any, path: str = "") -> Iterator[Tuple[str, Any]]:
    """(path, leaf) pairs, paths like "[0]['boxes']" or ".logits"; "" for a lone leaf."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
        for name in obj._fields:  # type: ignore[attr-defined]
            yield from _flatten(getattr(obj, name), f"{path}.{name}")
    elif isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            yield from _flatten(x, f"{path}[{i}]")
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from _flatten(v, f"{path}[{k!r}]")
    elif hasattr(obj, "__dataclass_fields__"):
        for name in obj.__dataclass_fields__:
            yield from _flatten(getattr(obj, name), f"{path}.{name}")
    else:
        yield path, obj


def _clone(obj: Any) -> Any:
    return _map_tensors(lambda t: t.detach().clone(), obj)


def _split_inputs(example_inputs: Any, example_kwargs: Optional[Mapping[str, Any]]
                  ) -> Tuple[Args, Kwargs]:
    """A tuple is the positional arguments, a dict the keyword ones, anything else one argument."""
    kwargs = dict(example_kwargs or {})
    if isinstance(example_inputs, tuple) and not hasattr(example_inputs, "_fields"):
        return tuple(example_inputs), kwargs
    if isinstance(example_inputs, dict):
        return (), {**example_inputs, **kwargs}
    return (example_inputs,), kwargs


def _cast_floats(obj: Any, dtype: Optional[torch.dtype]) -> Any:
    if dtype is None:
        return obj
    return _map_tensors(lambda t: t.to(dtype) if t.is_floating_point() else t, obj)


# ---------------------------------------------------------------------------- layers


@dataclass
class _LayerPair:
    name: str
    original: Optional[nn.Module]
    patched: nn.Module
    fused_with: List[str] = field(default_factory=list)


class _Chained(nn.Module):
    """The original's counterpart of a fused layer: the layer, then the modules folded into it
    (e.g. ConvTranspose2d then BatchNorm2d). Holds references only; nothing is copied."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        super().__init__()
        self.chain = nn.ModuleList(modules)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = self.chain[0](*args, **kwargs)
        for module in self.chain[1:]:
            out = module(out)
        return out

    def type_name(self) -> str:
        return "+".join(type(m).__name__ for m in self.chain)


class _FusedActivation(nn.Module):
    """The activation a patched layer applies in its epilogue, as a module: appended to the
    original's counterpart when that activation is not a module the patched model lost (a
    function call such as torch.tanh, or an activation module shared with other layers)."""

    def __init__(self, name: str, negative_slope: float) -> None:
        super().__init__()
        self.name, self.negative_slope = name, negative_slope

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return activate(y, self.name, self.negative_slope)


def _counterpart(head: Optional[nn.Module], modules: Mapping[str, nn.Module],
                 chain: Sequence[str], extra: Sequence[nn.Module]) -> Optional[nn.Module]:
    """`head` (a layer of the original, or of a float64 copy) followed by the named modules
    it absorbed and `extra` (the epilogue's activation): the counterpart of a fused layer."""
    if head is None:
        return None
    return _Chained([head] + [modules[n] for n in chain] + list(extra))


def _epilogue_activation(patched: nn.Module, chain: Sequence[nn.Module]
                         ) -> Optional[_FusedActivation]:
    """The fused activation of `patched` that `chain` (the original's absorbed modules) does not
    already compute, or None."""
    name = getattr(patched, "activation", "none")
    if name == "none" or any(activation_of_module(m) is not None for m in chain):
        return None
    return _FusedActivation(name, float(getattr(patched, "negative_slope", 0.01)))


def declared_fusion(patched: nn.Module) -> Dict[str, str]:
    """Layer name -> what it fused, from the optimize() summary attached to the model (its
    `fused` column) or a module's own `fused_ops` attribute."""
    found: Dict[str, str] = {}
    try:
        from .summary import get_summary

        summary = get_summary(patched)
    except Exception:  # no summary module, or none attached
        summary = None
    for layer in getattr(summary, "layers", None) or ():
        fused = getattr(layer, "fused", "-")
        if fused and fused != "-":
            found[str(layer.name)] = str(fused)
    for name, module in patched.named_modules():
        ops = getattr(module, "fused_ops", None)
        if ops and name:
            found.setdefault(name, ", ".join(map(str, ops)))
    return found


def _fused_chains(patched: nn.Module) -> Dict[str, List[str]]:
    """Patched layer name -> the names of the BatchNorm / activation its fused chain runs."""
    names: Dict[int, str] = {}
    for name, module in patched.named_modules():
        names.setdefault(id(module), name)
    found: Dict[str, List[str]] = {}
    for name, module in patched.named_modules():
        chain = module.__dict__.get("_fused_chain")
        if chain is not None and name:
            found[name] = [names[id(x)] for x in (chain.bn, chain.act)
                           if x is not None and id(x) in names]
    return found


def _chain_runs_fused(layer: nn.Module) -> bool:
    """Whether the layer's fused chain runs fused in the model as it is now (eval BatchNorm,
    chain not switched off)."""
    chain = layer.__dict__.get("_fused_chain")
    return chain is not None and chain.disabled is None and (
        chain.bn is None or not chain.bn.training)


class _FusedLayer(nn.Module):
    """A patched layer running its fused chain (FastConvTranspose2d.forward_fused): what the
    model computes in eval mode in that layer's one call."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer
        chain = layer.__dict__["_fused_chain"]
        self.activation, self.negative_slope = chain.activation, chain.negative_slope

    @property
    def backend(self) -> str:
        return self.layer.backend

    def plan_for(self, input: torch.Tensor) -> Any:
        return self.layer.plan_for(input)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.layer.forward_fused(input)


def _follow_fusion(name: str, followers: Mapping[str, "_Capture"]) -> List[str]:
    """The folded-away original modules that took `name`'s output, then each other's, in order."""
    chain: List[str] = []
    producer = name
    while True:
        nxt = next((n for n, c in followers.items() if c.fed_by == producer and n not in chain),
                   None)
        if nxt is None:
            return chain
        chain.append(nxt)
        producer = nxt


def _is_patched_layer(module: nn.Module) -> bool:
    return isinstance(module, FastConvTranspose2d) or hasattr(module, "backend")


def find_layers(original: nn.Module, patched: nn.Module,
                extra: Sequence[str] = ()) -> List[_LayerPair]:
    """The layers to report: every module of `patched` with a `backend` (FastConvTranspose2d),
    every non-root module whose type differs from the same-named one in `original`, and the
    names in `extra`. Matched by qualified name; a name absent from `original` is patched-only.
    """
    orig_modules = dict(original.named_modules())
    pairs: List[_LayerPair] = []
    for name, module in patched.named_modules():
        if not name:
            continue
        counterpart = orig_modules.get(name)
        # a type change counts only for modules that compute something: hierarchy
        # placeholders (plain nn.Module, no forward) stand in for the original's containers
        differs = (counterpart is not None
                   and original_class(counterpart) is not original_class(module)
                   and type(module).forward is not nn.Module.forward)
        if _is_patched_layer(module) or differs or name in extra:
            pairs.append(_LayerPair(name, counterpart, module))
    missing = [n for n in extra if n not in {p.name for p in pairs}]
    if missing:
        raise KeyError(f"validate(layers=...): no module named {missing} in the patched model")
    return pairs


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
        yield store
    finally:
        live.clear()
        for handle in handles:
            handle.remove()


# ---------------------------------------------------------------------------- running


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


def _random_like(args: Args, kwargs: Kwargs, generator: torch.Generator) -> Tuple[Args, Kwargs]:
    """Fresh normal draws with each floating tensor's own mean and spread; others unchanged."""
    def draw(t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point():
            return t
        fresh = torch.randn(t.shape, generator=generator, dtype=torch.float64)
        ref = t.detach().double()
        std = ref.std().item() if t.numel() > 1 else 1.0
        std = std if math.isfinite(std) and std > 0 else 1.0
        mean = ref.mean().item() if t.numel() else 0.0
        mean = mean if math.isfinite(mean) else 0.0
        return (fresh * std + mean).to(device=t.device, dtype=t.dtype)

    return _map_tensors(draw, args), _map_tensors(draw, kwargs)


# ---------------------------------------------------------------------------- comparing


def _bits(t: torch.Tensor) -> torch.Tensor:
    """An integer view of a float tensor's bits (so NaN payloads and -0.0 count)."""
    ints = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}
    if t.is_floating_point() and t.element_size() in ints:
        return t.contiguous().view(ints[t.element_size()])
    return t


def _amax(t: torch.Tensor) -> Optional[float]:
    return float(t.max().item()) if t.numel() else None


def compare_tensors(path: str, original: torch.Tensor, patched: torch.Tensor,
                    reference: Optional[torch.Tensor], tol: Tolerances,
                    tf32_reference: Optional[torch.Tensor] = None) -> TensorComparison:
    """Every accuracy figure for one tensor pair; `tol` must be resolved (no None atol/rtol)."""
    assert tol.atol is not None and tol.rtol is not None and tol.rel_floor is not None
    comp = TensorComparison(path=path, shape=list(original.shape), dtype=dtype_name(original.dtype),
                            numel=original.numel(), rel_floor=tol.rel_floor)
    if original.shape != patched.shape:
        comp.problems.append(f"shape differs: original {list(original.shape)}, patched "
                             f"{list(patched.shape)}")
        return comp
    if original.dtype != patched.dtype:
        comp.problems.append(f"dtype differs: original {dtype_name(original.dtype)}, patched "
                             f"{dtype_name(patched.dtype)}")
    a = original.detach()
    b = patched.detach().to(a.device)
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    same_bits = (_bits(a) == _bits(b)) if a.dtype == b.dtype else (a.double() == b.double())
    comp.bit_identical = float(same_bits.double().mean().item()) if a.numel() else 1.0
    da, db = a.double(), b.double()
    fa, fb = torch.isfinite(da), torch.isfinite(db)
    comp.nan_original, comp.nan_patched = int(da.isnan().sum()), int(db.isnan().sum())
    comp.inf_original, comp.inf_patched = int(da.isinf().sum()), int(db.isinf().sum())
    both = fa & fb
    diff = (da - db).abs()[both]
    mag = da.abs()[both]
    comp.max_abs_diff = _amax(diff)
    comp.max_rel_diff = _amax(diff / mag.clamp_min(tol.rel_floor))
    outside = int((diff > tol.atol + tol.rtol * mag).sum())
    comp.mismatches = outside + int((~both).sum())
    del diff, mag, same_bits
    if comp.nonfinite:
        comp.problems.append(
            f"non-finite values: original {comp.nan_original} NaN / {comp.inf_original} Inf, "
            f"patched {comp.nan_patched} NaN / {comp.inf_patched} Inf")
    if reference is not None and reference.shape == original.shape:
        ref = reference.detach().to(device=a.device, dtype=torch.float64)
        if ref.is_complex():
            ref = torch.view_as_real(ref)
        fr = torch.isfinite(ref)
        comp.max_abs_fp64 = _amax(ref.abs()[fr]) or 0.0
        comp.original_err_fp64 = _amax((da - ref).abs()[fr & fa])
        comp.patched_err_fp64 = _amax((db - ref).abs()[fr & fb])
        if tf32_reference is not None and tf32_reference.shape == ref.shape:
            rt = tf32_reference.detach().to(device=a.device, dtype=torch.float64)
            comp.tf32_err_fp64 = _amax((rt - ref).abs()[fr & torch.isfinite(rt)])
        if comp.original_err_fp64 is not None and comp.patched_err_fp64 is not None:
            inherent = max(comp.original_err_fp64, comp.tf32_err_fp64 or 0.0)
            comp.fp64_limit = (tol.fp64_factor * inherent
                               + tol.fp64_ulps * ulp(original.dtype, comp.max_abs_fp64))
            if comp.patched_err_fp64 > comp.fp64_limit:
                comp.problems.append(
                    f"patched error vs float64 {comp.patched_err_fp64:.3e} exceeds "
                    f"{comp.fp64_limit:.3e} (original's {comp.original_err_fp64:.3e})")
    gate = tol.max_mismatch_fraction
    if gate is None and comp.fp64_limit is None:
        gate = 0.0
    if gate is not None and comp.mismatch_fraction > gate and not comp.nonfinite:
        comp.problems.append(f"{comp.mismatches} of {comp.numel} elements mismatch "
                             f"(atol {tol.atol:g}, rtol {tol.rtol:g}; allowed {gate:.3%})")
    return comp


def compare_outputs(label: str, original: Any, patched: Any, reference: Any,
                    tol: Tolerances, tf32_reference: Any = None) -> OutputSet:
    """Compares two (nested) outputs leaf by leaf, matched by path (see compare_tensors)."""
    result = OutputSet(label)
    leaves_o = dict(_flatten(original))
    leaves_p = dict(_flatten(patched))
    leaves_r = dict(_flatten(reference)) if reference is not None else {}
    leaves_t = dict(_flatten(tf32_reference)) if tf32_reference is not None else {}
    for path in leaves_o.keys() - leaves_p.keys():
        result.problems.append(f"output{path} is missing from the patched model's output")
    for path in leaves_p.keys() - leaves_o.keys():
        result.problems.append(f"output{path} exists only in the patched model's output")
    for path, leaf_o in leaves_o.items():
        if path not in leaves_p:
            continue
        leaf_p = leaves_p[path]
        if isinstance(leaf_o, torch.Tensor) and isinstance(leaf_p, torch.Tensor):
            ref, ref_t = leaves_r.get(path), leaves_t.get(path)
            result.comparisons.append(compare_tensors(
                path, leaf_o, leaf_p, ref if isinstance(ref, torch.Tensor) else None, tol,
                ref_t if isinstance(ref_t, torch.Tensor) else None))
        elif isinstance(leaf_o, torch.Tensor) or isinstance(leaf_p, torch.Tensor):
            result.problems.append(f"output{path}: a tensor on one side only")
        elif _differs(leaf_o, leaf_p):
            result.problems.append(f"output{path}: {leaf_o!r} vs {leaf_p!r}")
    return result


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return not (a == b)  # NaN != NaN: reported, never equal
    try:
        return bool(a != b)
    except Exception:  # objects without a usable comparison
        return type(a) is not type(b)


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
    from .extension import ExtensionUnavailableError, load_extension

    try:
        load_extension()
    except ExtensionUnavailableError as exc:
        return f"the deconv_patch CUDA kernels are unavailable ({exc}); accuracy only"
    return None


# ---------------------------------------------------------------------------- environment


def _environment(device: torch.device, dtype: Optional[torch.dtype], args: Args,
                 kwargs: Kwargs, original: nn.Module, pairs: Sequence[_LayerPair],
                 patched: nn.Module) -> Environment:
    env = Environment(
        device=str(device),
        dtype=dtype_name(dtype) if dtype is not None else _main_dtype(original, args, kwargs),
        torch_version=torch.__version__,
        deconv_patch_version=__version__,
        python_version=platform.python_version(),
        platform=platform.platform(),
        cuda_version=torch.version.cuda,
        cudnn_version=torch.backends.cudnn.version() if torch.backends.cudnn.is_available()
        else None,
        tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32),
        tf32_cudnn=bool(torch.backends.cudnn.allow_tf32),
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
        deterministic_algorithms=torch.are_deterministic_algorithms_enabled(),
    )
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        env.gpu_name = torch.cuda.get_device_name(index)
        env.gpu_capability = "%d.%d" % torch.cuda.get_device_capability(index)
    from .extension import extension_available

    env.kernels_available = extension_available()
    for path, leaf in _flatten((args, kwargs)):
        if isinstance(leaf, torch.Tensor):
            key = _input_label(path)
            env.input_shapes[key] = list(leaf.shape)
            env.input_dtypes[key] = dtype_name(leaf.dtype)
    for pair in pairs:
        backend = getattr(pair.patched, "backend", None)
        if isinstance(backend, str):
            env.variants[pair.name] = backend
    env.fusion, env.fusion_details = _fusion(original, patched, pairs)
    return env


def _input_label(path: str) -> str:
    """'(args, kwargs)' paths to 'args[0]' / "kwargs['x']"."""
    if path.startswith("[0]"):
        return "args" + path[3:]
    if path.startswith("[1]"):
        return "kwargs" + path[3:]
    return path


def _main_dtype(model: nn.Module, args: Args, kwargs: Kwargs) -> str:
    for _, leaf in _flatten((args, kwargs)):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            return dtype_name(leaf.dtype)
    for p in model.parameters():
        return dtype_name(p.dtype)
    return "float32"


def _fusion(original: nn.Module, patched: nn.Module, pairs: Sequence[_LayerPair]
            ) -> Tuple[bool, List[str]]:
    """Whether the patched model fused anything: layers declaring it (see declared_fusion), or
    modules of the original that are gone from the patched one (folded away, or renamed)."""
    details = [f"{name}: {what}" for name, what in declared_fusion(patched).items()]
    patched_names = {n for n, _ in patched.named_modules()}
    gone = [n for n, _ in original.named_modules() if n and n not in patched_names]
    if gone:
        shown = ", ".join(gone[:5]) + (", ..." if len(gone) > 5 else "")
        details.append(f"{len(gone)} module(s) of the original absent from the patched model "
                       f"(fused or renamed): {shown}")
    return bool(details), details


# ---------------------------------------------------------------------------- progress


class _Progress:
    """tqdm when worth showing (enough steps, or asked for); silent otherwise."""

    def __init__(self, total: int, enabled: Optional[bool]) -> None:
        self.bar = None
        if enabled is False or (enabled is None and (total < 12 or not sys.stderr.isatty())):
            return
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc="deconv_patch validate", unit="step", leave=False)

    def step(self, what: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(what, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


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
    if reference is not None and device.type == "cuda" and env.dtype == "float32" \
            and torch.backends.cudnn.allow_tf32:
        models.tf32_reference = _tf32_reference(reference, [p.name for p in pairs])
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
            # the layer as the model runs it here: its fused chain in one call (hooks, like
            # these captures, switch fusion off inside the model's own forward)
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


def _no_grad(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with torch.no_grad():
            return fn()
    return run


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
