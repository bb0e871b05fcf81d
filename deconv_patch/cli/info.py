"""The `deconv-patch info` command: every ConvTranspose2d of IN (eager model or exported
program) and the variant the planner would give it, without patching.
"""

from __future__ import annotations

import argparse
from typing import Any, List, Sequence

from .loading import _load, _target
from ..exit_codes import ExitCode


def _cmd_info(args: argparse.Namespace) -> int:
    from torch import nn

    from ..arguments import ConvTransposeArgs
    from ..kernels.planner import plan_layer

    target = _target(args)
    source = _load(args.input, args)
    rows: List[List[str]] = []
    if source.program is not None:
        from ..export_patch import count_patched, find_layers

        for layer in find_layers(source.program):
            k = layer.weight_shape[2:] or ("?", "?")
            cargs = ConvTransposeArgs(layer.stride, layer.padding, layer.output_padding,  # type: ignore[arg-type]
                                      layer.dilation, layer.groups)  # type: ignore[arg-type]
            per_group = ((layer.weight_shape[0] // layer.groups, layer.weight_shape[1])
                         if layer.weight_shape else None)
            plan = plan_layer(target.device, target.dtype, k, cargs, per_group)  # type: ignore[arg-type]
            cin = layer.weight_shape[0] if layer.weight_shape else "?"
            cout = layer.weight_shape[1] * layer.groups if layer.weight_shape else "?"
            rows.append([layer.node, str(cin), str(cout), _p(k), _p(layer.stride),
                         _p(layer.padding), _p(layer.output_padding), _p(layer.dilation),
                         str(layer.groups), str(layer.bias), plan.variant, plan.reason])
        done = count_patched(source.program)
        if done:
            print(f"{done} node(s) already call torch.ops.deconv_patch.conv_transpose2d")
    else:
        for name, m in source.model.named_modules():
            if isinstance(m, nn.ConvTranspose2d):
                cargs = ConvTransposeArgs(m.stride, m.padding, m.output_padding,  # type: ignore[arg-type]
                                          m.dilation, m.groups)  # type: ignore[arg-type]
                plan = plan_layer(target.device, target.dtype, m.kernel_size, cargs,
                                  (m.in_channels // m.groups, m.out_channels // m.groups))
                rows.append([name, str(m.in_channels), str(m.out_channels), _p(m.kernel_size),
                             _p(m.stride), _p(m.padding), _p(m.output_padding), _p(m.dilation),
                             str(m.groups), str(m.bias is not None), plan.variant, plan.reason])
    if not rows:
        print(f"nothing to patch: {args.input} has no ConvTranspose2d")
        return ExitCode.OK
    from ..validation.report import format_table

    print(f"{len(rows)} ConvTranspose2d layer(s) in {args.input} ({source.kind}); variant on "
          f"{target.device} {str(target.dtype).replace('torch.', '')}:")
    print(format_table(["layer", "in", "out", "k", "s", "p", "op", "d", "g", "bias", "variant",
                        "why"], rows))
    return ExitCode.OK


def _p(v: Sequence[Any]) -> str:
    a, b = tuple(v)
    return str(a) if a == b else f"{a}x{b}"
