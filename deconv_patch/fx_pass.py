"""The torch.fx pass: trace a model, route every transposed convolution to deconv_patch, fold BN.

* `call_module` nodes on nn.ConvTranspose2d become FastConvTranspose2d (sharing the parameters);
* `call_function` nodes on F.conv_transpose2d / torch.conv_transpose2d call
  `torch.ops.deconv_patch.conv_transpose2d` with the same arguments;
* with `fuse=True` and an eval-mode model, a BatchNorm2d that directly follows a conv module, and
  is that conv output's only user, is folded into a copy of the conv's weight and bias;
* then (same conditions) an activation that is the only user of the conv (or folded BN) output -
  nn.ReLU / LeakyReLU / SiLU / GELU / Tanh / Sigmoid / Hardswish or the matching functions and
  tensor methods - moves into the conv's fused epilogue (FastConvTranspose2d.activation).
  Training-mode models are not fused: the fused op's backward recomputes the conv.

The pass never mutates the model it is given: the GraphModule it returns reuses the model's leaf
submodules and parameters, replaced convs share their Parameters, and folded convs get new ones.
So if anything fails, the caller can still fall back to a plain swap on the same model.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import torch
import torch.nn.functional as F
from torch import fx, nn

from .epilogue import FusedActivation, activation_of_call, activation_of_module
from .fusion import bn_fold_problem, fold_bn_into_conv_transpose
from .modules import FastConvTranspose2d
from .summary import LayerPatch, PatchSummary, layer_from_module
from .swap import swap_conv_transpose2d

FilterFn = Callable[[str, Optional[nn.Module]], bool]

# torch.conv_transpose2d and F.conv_transpose2d are one builtin today; keep both in case that changes.
CONV_TRANSPOSE_FUNCTIONS = frozenset({torch.conv_transpose2d, F.conv_transpose2d})
# The overload packet, not `.default`: re-tracing records the packet, so node names stay the same
# and a second pass is a no-op.
OUR_OP = torch.ops.deconv_patch.conv_transpose2d
OUR_OP_TARGETS = frozenset({OUR_OP, torch.ops.deconv_patch.conv_transpose2d.default})

_FN_PARAMS = ("input", "weight", "bias", "stride", "padding", "output_padding", "groups",
              "dilation")
_FN_DEFAULTS: Dict[str, Any] = {"bias": None, "stride": 1, "padding": 0, "output_padding": 0,
                                "groups": 1, "dilation": 1}
_PAIR_PARAMS = ("stride", "padding", "output_padding", "dilation")

PROGRESS_THRESHOLD = 20  # show a tqdm bar when more layers than this are patched


class UntraceableError(RuntimeError):
    """The model cannot go through the fx pass; the message is the one-line reason."""


class DeconvTracer(fx.Tracer):
    """fx Tracer that also keeps FastConvTranspose2d as a leaf (torch.nn modules already are).

    Without this, a second `optimize` would trace *into* FastConvTranspose2d, so it is what
    makes the pass idempotent and keeps per-layer qualified names.
    """

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return isinstance(m, FastConvTranspose2d) or super().is_leaf_module(
            m, module_qualified_name)


@dataclass
class FxResult:
    """What the pass produced: the rewritten GraphModule and its summary (path "fx")."""

    module: fx.GraphModule
    summary: PatchSummary
    found: int  # transposed convolutions in the graph, patched or skipped


def one_line(exc: BaseException, limit: int = 120) -> str:
    """`Type: first line (first sentence if long) of the message`, for the summary's reason."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if len(text) > limit and ". " in text:
        text = text[: text.index(". ")]
    return f"{type(exc).__name__}: {text}".rstrip(": ")


def _hooks_lost_by_tracing(model: nn.Module, tracer: DeconvTracer) -> Optional[str]:
    """Name of a traced-through module with forward/backward hooks (tracing would drop them)."""
    for name, module in model.named_modules():
        if name and tracer.is_leaf_module(module, name):
            continue  # leaf modules are called as modules, so their hooks keep running
        if (module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or getattr(module, "_backward_pre_hooks", None)):
            return name or "<root>"
    return None


def trace(model: nn.Module) -> fx.GraphModule:
    """Symbolically traces `model` with DeconvTracer; raises UntraceableError with the reason."""
    tracer = DeconvTracer()
    hooked = _hooks_lost_by_tracing(model, tracer)
    if hooked is not None:
        raise UntraceableError(f"module {hooked!r} has hooks that fx tracing would drop")
    try:
        graph = tracer.trace(model)
    except Exception as exc:  # any failure means "use the plain swap instead"
        raise UntraceableError(one_line(exc)) from exc
    for node in graph.nodes:
        if isinstance(node.type, str):
            # A string annotation (`from __future__ import annotations` in the model's file)
            # becomes a str-valued global of the generated code, which torch < 2.13 cannot
            # pickle (GraphModule.__reduce__); the annotation changes nothing at run time.
            node.type = None
    class_name = type(model).__name__
    return fx.GraphModule(tracer.root, graph, class_name)


def _set_submodule(root: nn.Module, target: str, module: nn.Module) -> None:
    parent_name, _, child = target.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, child, module)


def _bind_function_args(node: fx.Node) -> Dict[str, Any]:
    """F.conv_transpose2d's arguments by name, defaults filled in (raises TypeError if unbindable)."""
    if len(node.args) > len(_FN_PARAMS):
        raise TypeError("too many positional arguments")
    values = dict(zip(_FN_PARAMS, node.args))
    for key, value in node.kwargs.items():
        if key not in _FN_PARAMS or key in values:
            raise TypeError(f"unexpected keyword argument {key!r}")
        values[key] = value
    if "input" not in values or "weight" not in values:
        raise TypeError("missing input or weight")
    for key, default in _FN_DEFAULTS.items():
        values.setdefault(key, default)
    for key in _PAIR_PARAMS:  # the op's int[2] wants two ints; F accepts an int or 1-2 ints
        value = values[key]
        if isinstance(value, int):
            values[key] = [value, value]
        elif isinstance(value, (list, tuple)) and len(value) == 1:
            values[key] = [value[0], value[0]]
        elif isinstance(value, (list, tuple)):
            values[key] = list(value)
    return values


def _attr_tensor(gm: fx.GraphModule, node: Any) -> Optional[torch.Tensor]:
    """The tensor behind a get_attr node (None for anything computed at run time)."""
    if not isinstance(node, fx.Node) or node.op != "get_attr":
        return None
    obj: Any = gm
    for part in str(node.target).split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, torch.Tensor) else None


def _const_pair(value: Any) -> Optional[Tuple[int, int]]:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, int) for v in value):
        return (int(value[0]), int(value[1]))
    return None


def _function_layer(gm: fx.GraphModule, node: fx.Node, values: Dict[str, Any]) -> LayerPatch:
    weight = _attr_tensor(gm, values["weight"])
    groups = values["groups"] if isinstance(values["groups"], int) else None
    in_ch = out_ch = kernel = None
    if weight is not None and weight.dim() == 4:
        in_ch = int(weight.shape[0])
        out_ch = int(weight.shape[1]) * groups if groups is not None else None
        kernel = (int(weight.shape[2]), int(weight.shape[3]))
    layer = LayerPatch(
        name=node.name, kind="function", in_channels=in_ch, out_channels=out_ch,
        kernel_size=kernel, stride=_const_pair(values["stride"]),
        padding=_const_pair(values["padding"]),
        output_padding=_const_pair(values["output_padding"]),
        dilation=_const_pair(values["dilation"]), groups=groups,
        bias=values["bias"] is not None, fused="-", backend="per call",
    )
    return dataclasses.replace(layer, backend=_function_backend(layer, weight))


def _function_backend(layer: LayerPatch, weight: Optional[torch.Tensor]) -> str:
    """The variant a functional call will use, asked of an equivalent FastConvTranspose2d (one
    source of truth for backend names); "per call" when the weight or a hyperparameter is only
    known at run time."""
    known = (layer.in_channels, layer.out_channels, layer.kernel_size, layer.stride,
             layer.padding, layer.output_padding, layer.dilation, layer.groups)
    if weight is None or any(v is None for v in known):
        return "per call"
    try:
        probe = FastConvTranspose2d(
            layer.in_channels, layer.out_channels, layer.kernel_size,  # type: ignore[arg-type]
            stride=layer.stride, padding=layer.padding,  # type: ignore[arg-type]
            output_padding=layer.output_padding, groups=layer.groups,  # type: ignore[arg-type]
            bias=False, dilation=layer.dilation, device="meta")  # type: ignore[arg-type]
        del probe.weight
        probe.weight = weight.detach()  # a plain attribute now: only device/dtype are read
        return str(probe.backend)
    except Exception:  # e.g. shapes that no module could have: the op decides per call
        return "per call"


def _progress(total: int, show: Optional[bool]):
    """A tqdm bar over `total` layers, shown when asked or when there are many layers."""
    enabled = show if show is not None else total > PROGRESS_THRESHOLD
    if not enabled:
        return contextlib.nullcontext(None)
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="deconv_patch", unit="layer", leave=False)


def _bn_user(gm: fx.GraphModule, node: fx.Node) -> Optional[Tuple[fx.Node, nn.Module]]:
    """The BatchNorm-like module call that is `node`'s only user, taking it as its only input."""
    users = list(node.users)
    if len(users) != 1:
        return None
    user = users[0]
    if user.op != "call_module" or user.args != (node,) or user.kwargs:
        return None
    module = gm.get_submodule(str(user.target))
    if not isinstance(module, nn.modules.batchnorm._BatchNorm):
        return None
    return user, module


def _activation_user(gm: fx.GraphModule, node: fx.Node
                     ) -> Optional[Tuple[fx.Node, FusedActivation]]:
    """The fusable activation that is `node`'s only user, taking it as its first input."""
    users = list(node.users)
    if len(users) != 1:
        return None
    user = users[0]
    if not user.args or user.args[0] is not node:
        return None
    rest = tuple(user.args[1:])
    if any(isinstance(a, fx.Node) for a in rest + tuple(user.kwargs.values())):
        return None  # e.g. a slope computed in the graph
    if user.op == "call_module":
        if rest or user.kwargs:
            return None
        found = activation_of_module(gm.get_submodule(str(user.target)))
    else:
        found = activation_of_call(user.op, user.target, rest, dict(user.kwargs))
    return (user, found) if found is not None else None


def _drop_if_unused(graph: fx.Graph, node: fx.Node, removed: Set[str]) -> None:
    """Erases `node`; if it called a submodule nothing else uses, marks that for removal."""
    target = str(node.target)
    is_module = node.op == "call_module"
    graph.erase_node(node)
    if is_module and not any(n.target == target or str(n.target).startswith(target + ".")
                             for n in graph.nodes if n.op in ("call_module", "get_attr")):
        removed.add(target)


def _complete_hierarchy(gm: fx.GraphModule, original: nn.Module, removed: Set[str],
                        replacements: Dict[int, nn.Module]) -> None:
    """Gives the GraphModule every submodule, parameter and buffer of `original`.

    fx only copies what forward touches; restoring the rest keeps state_dict keys, aliases
    and per-module training flags as they were (except folded BatchNorms, listed in `removed`).
    """
    for name, module in original.named_modules(remove_duplicate=False):
        if any(name == r or name.startswith(r + ".") for r in removed):
            continue
        try:
            counterpart = gm.get_submodule(name) if name else gm
        except AttributeError:
            gm.add_submodule(name, replacements.get(id(module), module))
            continue
        if counterpart is module or counterpart is replacements.get(id(module)):
            continue
        for pname, param in module._parameters.items():
            if pname not in counterpart._parameters and not hasattr(counterpart, pname):
                counterpart.register_parameter(pname, param)
        for bname, buf in module._buffers.items():
            persistent = bname not in module._non_persistent_buffers_set
            if bname not in counterpart._buffers and not hasattr(counterpart, bname):
                counterpart.register_buffer(bname, buf, persistent=persistent)
            elif not persistent:
                counterpart._non_persistent_buffers_set.add(bname)
        counterpart.training = module.training


_MODULE_STATE = ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set")


def _restore_container_types(gm: fx.GraphModule, original: nn.Module) -> None:
    """Replaces the plain nn.Module namespaces fx creates for containers with shallow clones of
    the original containers (Sequential, ModuleList, user classes).

    The patched model then has the original's module types at every name, so code that indexes
    `patched.decoder[0]` or compares module types name by name keeps working. A clone holds the
    GraphModule's children and tensors, and the original's other attributes; its own forward is
    never called by the graph.
    """
    for name, module in original.named_modules():
        if not name or type(module) is nn.Module:
            continue
        try:
            counterpart = gm.get_submodule(name)
        except AttributeError:
            continue
        if type(counterpart) is not nn.Module:
            continue
        clone = module.__class__.__new__(module.__class__)
        state = {k: (copy.copy(v) if isinstance(v, (dict, set, list)) else v)
                 for k, v in module.__dict__.items()}
        for key in _MODULE_STATE:
            state[key] = counterpart.__dict__[key]
        clone.__dict__.update(state)
        _set_submodule(gm, name, clone)


def _constants_not_persistent(gm: fx.GraphModule, original: nn.Module) -> None:
    """Tensors fx baked into the graph (`_tensor_constant0`, ...) stay out of state_dict.

    They are not state of the original model, so checkpoints keep loading both ways.
    """
    keys = set(original.state_dict().keys())
    for name, _ in list(gm.named_buffers()):
        if name not in keys:
            owner_name, _, local = name.rpartition(".")
            owner = gm.get_submodule(owner_name) if owner_name else gm
            owner._non_persistent_buffers_set.add(local)


def _swap_leftovers(gm: fx.GraphModule, filter_fn: Optional[FilterFn], layers: List[LayerPatch],
                    skipped: List[str], notes: List[str]) -> int:
    """Swaps, by name, ConvTranspose2d modules the graph does not call directly: inside torch.nn
    leaf modules (e.g. nn.DataParallel) or not used by forward. Returns how many it found.

    Without this a model wrapped in a leaf module would come back unpatched although a plain
    swap works.
    """
    leftovers = [name for name, m in gm.named_modules(remove_duplicate=False)
                 if isinstance(m, nn.ConvTranspose2d) and not isinstance(m, FastConvTranspose2d)
                 and name not in skipped]
    if not leftovers:
        return 0
    swapped = set(swap_conv_transpose2d(gm, filter_fn))
    for name in leftovers:
        if name in swapped:
            layers.append(layer_from_module(name, gm.get_submodule(name)))  # type: ignore[arg-type]
        else:
            skipped.append(name)
    if swapped:
        notes.append(f"{len(swapped)} ConvTranspose2d module(s) not called directly by the traced "
                     f"graph (inside a torch.nn leaf module, or unused) were swapped by name: "
                     f"{', '.join(sorted(swapped))}")
    return len(leftovers)


def _fold_into_copy(conv: nn.ConvTranspose2d, bn: nn.Module) -> FastConvTranspose2d:
    """A new FastConvTranspose2d computing bn(conv(x)), with its own weight and bias.

    New Parameters, never written into `conv`'s: the caller's model stays untouched.
    """
    weight, bias = fold_bn_into_conv_transpose(conv, bn)  # type: ignore[arg-type]
    fast = FastConvTranspose2d(
        conv.in_channels, conv.out_channels, conv.kernel_size,  # type: ignore[arg-type]
        stride=conv.stride, padding=conv.padding,  # type: ignore[arg-type]
        output_padding=conv.output_padding, groups=conv.groups,  # type: ignore[arg-type]
        bias=True, dilation=conv.dilation, padding_mode=conv.padding_mode,  # type: ignore[arg-type]
        device="meta",
    )
    grad = conv.weight.requires_grad
    fast.weight = nn.Parameter(weight, requires_grad=grad)
    fast.bias = nn.Parameter(bias, requires_grad=grad)
    fast.train(conv.training)
    return fast


def fx_patch(
    model: nn.Module,
    *,
    filter_fn: Optional[FilterFn] = None,
    fuse: bool = True,
    progress: Optional[bool] = None,
    previous: Optional[PatchSummary] = None,
) -> FxResult:
    """Traces `model` and rewrites its transposed convolutions (see the module docstring).

    `filter_fn(name, module)` returning False leaves a layer on PyTorch; for functional calls it
    gets the fx node name and None. `previous` (an earlier summary) keeps the "fused" column of
    layers that were already patched. Raises UntraceableError when the model cannot be traced.
    """
    gm = trace(model)
    graph = gm.graph
    model_training = model.training
    previous_fused = {layer.name: layer.fused for layer in (previous.layers if previous else ())}

    module_calls: Dict[str, List[fx.Node]] = {}
    function_nodes: List[fx.Node] = []
    for node in graph.nodes:
        if node.op == "call_module" and isinstance(gm.get_submodule(str(node.target)),
                                                   nn.ConvTranspose2d):
            module_calls.setdefault(str(node.target), []).append(node)
        elif node.op == "call_function" and (node.target in CONV_TRANSPOSE_FUNCTIONS
                                             or node.target in OUR_OP_TARGETS):
            function_nodes.append(node)

    layers: List[LayerPatch] = []
    skipped: List[str] = []
    notes: List[str] = []
    removed: Set[str] = set()
    replacements: Dict[int, nn.Module] = {}
    total = len(module_calls) + len(function_nodes)
    if fuse and model_training and module_calls:
        notes.append("model is in training mode: BatchNorm uses batch statistics, nothing folded")

    with _progress(total, progress) as bar:
        for target, nodes in module_calls.items():
            conv = gm.get_submodule(target)
            if bar is not None:
                bar.update(1)
            already = isinstance(conv, FastConvTranspose2d)
            if not already and filter_fn is not None and not filter_fn(target, conv):
                skipped.append(target)
                continue
            fused = previous_fused.get(target, "-") if already else "-"
            replacement: nn.Module = FastConvTranspose2d.from_module(conv)
            bn_calls = [c for c in (_bn_user(gm, n) for n in nodes) if c is not None]
            bn_call = bn_calls[0] if fuse and not model_training and bn_calls else None
            if bn_call is not None:
                bn_node, bn = bn_call
                problem = bn_fold_problem(conv, bn)
                if problem is None and len(nodes) > 1:
                    problem = f"the conv module is called {len(nodes)} times"
                if problem is None:
                    replacement = _fold_into_copy(conv, bn)
                    bn_node.replace_all_uses_with(nodes[0])
                    _drop_if_unused(graph, bn_node, removed)
                    fused = "bn(folded)"
                else:
                    notes.append(f"{target}: {bn_node.target} not folded ({problem})")
            act_call = _activation_user(gm, nodes[0]) if fuse and not model_training else None
            if act_call is not None and len(nodes) == 1 and replacement.activation == "none":
                act_node, act = act_call
                replacement = FastConvTranspose2d.from_module(
                    replacement, act.name, act.negative_slope)  # type: ignore[arg-type]
                act_node.replace_all_uses_with(nodes[0])
                _drop_if_unused(graph, act_node, removed)
                fused = act.name if fused == "-" else f"{fused}+{act.name}"
            _set_submodule(gm, target, replacement)
            replacements[id(conv)] = replacement
            layers.append(layer_from_module(target, replacement, fused,  # type: ignore[arg-type]
                                            calls=len(nodes)))

        for node in function_nodes:
            if bar is not None:
                bar.update(1)
            try:
                values = _bind_function_args(node)
            except TypeError as exc:
                notes.append(f"{node.name}: left on PyTorch (cannot read its arguments: {exc})")
                continue
            if node.target not in OUR_OP_TARGETS:
                if filter_fn is not None and not filter_fn(node.name, None):
                    skipped.append(node.name)
                    continue
                node.target = OUR_OP
                node.args = tuple(values[p] for p in _FN_PARAMS)
                node.kwargs = {}
            layers.append(_function_layer(gm, node, values))

    for target in removed:
        parent_name, _, child = target.rpartition(".")
        parent = gm.get_submodule(parent_name) if parent_name else gm
        delattr(parent, child)
    _complete_hierarchy(gm, model, removed, replacements)
    _restore_container_types(gm, model)
    _constants_not_persistent(gm, model)
    total += _swap_leftovers(gm, filter_fn, layers, skipped, notes)
    graph.lint()
    gm.recompile()
    if any(layer.fused != "-" for layer in layers):
        notes.append("folding replaced weight/bias values: state_dict keys of folded BatchNorms "
                     "are gone and folded convs gain a bias")
    summary = PatchSummary(path="fx", reason="traced with torch.fx", layers=tuple(layers),
                           skipped=tuple(skipped), notes=tuple(notes))
    return FxResult(module=gm, summary=summary, found=total)


__all__ = ["CONV_TRANSPOSE_FUNCTIONS", "DeconvTracer", "FxResult", "OUR_OP", "PROGRESS_THRESHOLD",
           "UntraceableError", "fx_patch", "one_line", "trace"]
