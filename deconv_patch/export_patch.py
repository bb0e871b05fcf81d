"""Patch a `torch.export` program: transposed convolutions become our op, in place in the graph.

An ExportedProgram's graph holds ATen ops, not modules, so the fx pass and module swap do not
apply; instead each 2-D transposed `aten.conv_transpose2d.input` or `aten.convolution.default`
(transposed=True) node is retargeted to `torch.ops.deconv_patch.conv_transpose2d`, whose
argument order matches F.conv_transpose2d. The result saves with `torch.export.save` and loads
with `torch.export.load` once deconv_patch is imported (which registers the op).

As under torch.compile, only layers a kernel of ours may run are retargeted by default
(planner.may_use_kernel): the op's dispatch costs host time on every call, so routing a layer
that will run cuDNN anyway through it only slows the program down (DCGAN: 0.65x end to end when
every layer was retargeted). `all_layers=True` retargets every one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Tuple

import torch

from . import ops  # noqa: F401  (registers torch.ops.deconv_patch.conv_transpose2d)
from .kernels import planner
from .arguments import ConvTransposeArgs


@dataclass(frozen=True)
class ExportedLayer:
    """One transposed convolution found in an exported graph (weights are graph inputs)."""

    node: str
    source: str  # the ATen op it was
    weight_shape: Tuple[int, ...]
    stride: Tuple[int, ...]
    padding: Tuple[int, ...]
    output_padding: Tuple[int, ...]
    dilation: Tuple[int, ...]
    groups: int
    bias: bool


def _shape(node: Any) -> Tuple[int, ...]:
    val = getattr(node, "meta", {}).get("val")
    return tuple(int(s) for s in val.shape) if isinstance(val, torch.Tensor) else ()


def _pair(v: Any) -> Tuple[int, ...]:
    if isinstance(v, int):
        return (v, v)
    values = tuple(int(x) for x in v)
    return values * 2 if len(values) == 1 else values


def _op_args(node: torch.fx.Node) -> Tuple[Any, ...]:
    """(input, weight, bias, stride, padding, output_padding, groups, dilation) of a transposed
    2-D convolution node, or () when the node is not one."""
    args = list(node.args) + [None] * 9
    if node.target is torch.ops.aten.conv_transpose2d.input:
        kw = dict(node.kwargs)
        names = ("input", "weight", "bias", "stride", "padding", "output_padding", "groups",
                 "dilation")
        defaults = (None, None, None, 1, 0, 0, 1, 1)
        vals = [node.args[i] if i < len(node.args) else kw.get(n, d)
                for i, (n, d) in enumerate(zip(names, defaults))]
        return (vals[0], vals[1], vals[2], _pair(vals[3]), _pair(vals[4]), _pair(vals[5]),
                int(vals[6]), _pair(vals[7]))
    if node.target is torch.ops.aten.convolution.default and args[6] is True \
            and len(args[3]) == 2:
        x, w, b, stride, padding, dilation, _, output_padding, groups = args[:9]
        return (x, w, b, _pair(stride), _pair(padding), _pair(output_padding), int(groups),
                _pair(dilation))
    return ()


def find_layers(program: torch.export.ExportedProgram) -> List[ExportedLayer]:
    """Every transposed 2-D convolution node of `program` (nothing is changed)."""
    found = []
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        a = _op_args(node)
        if a:
            found.append(ExportedLayer(node.name, str(node.target), _shape(a[1]), a[3], a[4],
                                       a[5], a[7], a[6], a[2] is not None))
    return found


def may_use_kernel(program: torch.export.ExportedProgram, layer: ExportedLayer) -> bool:
    """Whether a kernel of ours could run `layer` on a CUDA device (its weight's dtype; unknown
    dtypes count as yes): the planner's graph-time rule, as under torch.compile."""
    node = next((n for n in program.graph.nodes if n.name == layer.node), None)
    weight = _op_args(node)[1] if node is not None else None
    val = getattr(weight, "meta", {}).get("val") if weight is not None else None
    if not isinstance(val, torch.Tensor) or len(layer.weight_shape) != 4:
        return True
    args = ConvTransposeArgs(layer.stride, layer.padding, layer.output_padding,  # type: ignore[arg-type]
                             layer.dilation, layer.groups)  # type: ignore[arg-type]
    channels = (layer.weight_shape[0] // layer.groups, layer.weight_shape[1])
    return planner.may_use_kernel(torch.device("cuda"), val.dtype, layer.weight_shape[2:], args,
                                  channels)


def patch_program(program: torch.export.ExportedProgram, all_layers: bool = False
                  ) -> List[ExportedLayer]:
    """Retargets the transposed convolutions of `program` that a kernel of ours may run (every
    one with `all_layers`) to our op, in place; returns the retargeted ones."""
    target = torch.ops.deconv_patch.conv_transpose2d.default
    patched = []
    graph = program.graph_module.graph
    chosen = [layer for layer in find_layers(program)
              if all_layers or may_use_kernel(program, layer)]
    for layer, node in [(layer, n) for layer in chosen
                        for n in graph.nodes if n.name == layer.node]:
        x, w, b, stride, padding, output_padding, groups, dilation = _op_args(node)
        node.target = target
        node.args = (x, w, b, list(stride), list(padding), list(output_padding), groups,
                     list(dilation))
        node.kwargs = {}
        patched.append(layer)
    graph.lint()
    program.graph_module.recompile()
    return patched


def count_patched(program: torch.export.ExportedProgram) -> int:
    """How many nodes of `program` already call our op."""
    target = torch.ops.deconv_patch.conv_transpose2d.default
    return sum(1 for n in program.graph.nodes if n.op == "call_function" and n.target is target)


__all__ = ["ExportedLayer", "count_patched", "find_layers", "patch_program"]
