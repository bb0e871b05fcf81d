"""`torch.ops.deconv_patch.conv_transpose2d`: the op every patched layer calls.

Same argument order, defaults and semantics as `torch.nn.functional.conv_transpose2d`.
  * CUDA: the planner picks one of our kernels (or ATen, with a warning saying why);
  * every other device / dtype: ATen (CompositeExplicitAutograd kernel);
  * Meta / fake tensors: ATen's own shape and stride rules, so torch.compile and torch.export
    see exactly what eager produces;
  * autograd: ATen's convolution_backward (input, weight and bias gradients).
Invalid calls are handed to ATen so users get PyTorch's own error messages.
"""

from __future__ import annotations

import math
import warnings
from typing import Optional, Sequence, Tuple

import torch

from . import autotune, planner
from .arguments import ConvTransposeArgs, find_problem
from .extension import load_extension
from .layout import cuda_output_channels_last

QUALNAME = "deconv_patch::conv_transpose2d"
SCHEMA = (
    "(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, "
    "int[2] output_padding=0, int groups=1, int[2] dilation=1) -> Tensor"
)


class FallbackWarning(UserWarning):
    """A CUDA call ran on PyTorch's implementation instead of a deconv_patch kernel."""


torch.library.define(QUALNAME, SCHEMA)


def _aten(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    stride: Sequence[int],
    padding: Sequence[int],
    output_padding: Sequence[int],
    groups: int,
    dilation: Sequence[int],
) -> torch.Tensor:
    return torch.ops.aten.conv_transpose2d.input(
        input, weight, bias, stride, padding, output_padding, groups, dilation
    )


# The dispatcher drops trailing arguments equal to the schema's defaults before calling a Python
# kernel, so every kernel below repeats those defaults.


@torch.library.register_kernel(QUALNAME, None)
def _conv_transpose2d_default(input, weight, bias=None, stride=(1, 1), padding=(0, 0),
                              output_padding=(0, 0), groups=1, dilation=(1, 1)):
    """Every device without a kernel of ours: PyTorch's implementation."""
    return _aten(input, weight, bias, stride, padding, output_padding, groups, dilation)


@torch.library.register_fake(QUALNAME)
def _conv_transpose2d_fake(input, weight, bias=None, stride=(1, 1), padding=(0, 0),
                           output_padding=(0, 0), groups=1, dilation=(1, 1)):
    # ATen's meta kernel gives the shape and raises PyTorch's errors; on CUDA the strides then
    # follow what eager CUDA returns (see layout.py), which ATen's meta kernel does not always.
    out = _aten(input, weight, bias, stride, padding, output_padding, groups, dilation)
    if input.device.type != "cuda":
        return out
    args = ConvTransposeArgs.from_values(stride, padding, output_padding, groups, dilation)
    batched = out if out.dim() == 4 else out.unsqueeze(0)
    x = input if input.dim() == 4 else input.unsqueeze(0)
    channels_last = cuda_output_channels_last(x, weight, args, math.prod(batched.shape[1:]))
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    restrided = torch.empty(batched.shape, dtype=out.dtype, device=out.device, memory_format=fmt)
    return restrided if out.dim() == 4 else restrided.squeeze(0)


@torch.library.register_kernel(QUALNAME, "cuda")
def _conv_transpose2d_cuda(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    stride: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0),
    output_padding: Sequence[int] = (0, 0),
    groups: int = 1,
    dilation: Sequence[int] = (1, 1),
) -> torch.Tensor:
    args = ConvTransposeArgs.from_values(stride, padding, output_padding, groups, dilation)
    if find_problem(input, weight, bias, args) is not None:
        # PyTorch raises its own error here (or, where it accepts the call, computes it).
        return _aten(input, weight, bias, stride, padding, output_padding, groups, dilation)
    if input.dim() == 4 and input.shape[0] == 0:
        # Nothing to compute: ATen allocates the empty result with its own strides.
        return _aten(input, weight, bias, stride, padding, output_padding, groups, dilation)
    choice = planner.plan(input, weight, args)
    if len(choice.candidates) > 1 and autotune.enabled():
        key = autotune.call_key(input, weight, bias is not None, args)
        best = autotune.pick(key, choice.candidates,
                             lambda v: _call_as_users_do(v, input, weight, bias, args))
        choice = planner.Plan(best, "autotuned", candidates=choice.candidates)
    if not choice.uses_kernel:
        if choice.fallback:  # our kernels cannot run here (not a choice made for speed)
            warnings.warn(f"deconv_patch: {choice.reason}", FallbackWarning, stacklevel=2)
        return _aten(input, weight, bias, stride, padding, output_padding, groups, dilation)
    return run_variant(choice.variant, input, weight, bias, args)


def _call_as_users_do(variant: str, input: torch.Tensor, weight: torch.Tensor,
                      bias: Optional[torch.Tensor], args: ConvTransposeArgs) -> torch.Tensor:
    """One call the way a patched model makes it, host overhead included, for autotune:
    PyTorch directly for ``aten`` (FastConvTranspose2d's fast path), else through this op."""
    if variant == planner.ATEN:
        return _aten(input, weight, bias, args.stride, args.padding, args.output_padding,
                     args.groups, args.dilation)
    with planner.use_variant(variant):
        return torch.ops.deconv_patch.conv_transpose2d(
            input, weight, bias, args.stride, args.padding, args.output_padding, args.groups,
            args.dilation)


def run_variant(
    variant: str,
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    args: ConvTransposeArgs,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Runs one named kernel variant on validated CUDA arguments (tests force variants here).

    `out`, if given, is written in place (batched 4-D, in the layout PyTorch would return).
    """
    if variant == planner.ATEN:
        return _aten(input, weight, bias, args.stride, args.padding, args.output_padding,
                     args.groups, args.dilation)
    if variant not in planner.VARIANTS:
        raise ValueError(f"unknown deconv_patch variant {variant!r}")
    unbatched = input.dim() == 3
    x = input.unsqueeze(0) if unbatched else input
    out_hw = args.output_hw(x.shape[-2:], weight.shape[-2:])
    channels_last = cuda_output_channels_last(
        x, weight, args, weight.shape[1] * args.groups * out_hw[0] * out_hw[1])
    result = load_extension().conv_transpose2d_forward(
        variant, x, weight, bias, args.stride, args.padding, args.output_padding, args.dilation,
        args.groups, channels_last, torch.backends.cudnn.allow_tf32,
        None if out is None else (out.unsqueeze(0) if unbatched else out),
    )
    return result.squeeze(0) if unbatched else result


# ---------------------------------------------------------------------------------------------
# Autograd: gradients through ATen's convolution_backward (itself differentiable, so double
# backward works too).


_DEFAULTS = (None, (1, 1), (0, 0), (0, 0), 1, (1, 1))


def _setup_context(ctx, inputs: Tuple, output: torch.Tensor) -> None:
    inputs = tuple(inputs) + _DEFAULTS[len(inputs) - 2 :]
    input, weight, bias, stride, padding, output_padding, groups, dilation = inputs
    ctx.save_for_backward(input, weight)
    ctx.hyper = (list(stride), list(padding), list(output_padding), groups, list(dilation))
    ctx.has_bias = bias is not None


def _backward(ctx, grad_output: torch.Tensor):
    input, weight = ctx.saved_tensors
    stride, padding, output_padding, groups, dilation = ctx.hyper
    unbatched = input.dim() == 3
    if unbatched:
        input, grad_output = input.unsqueeze(0), grad_output.unsqueeze(0)
    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1],
            ctx.has_bias and ctx.needs_input_grad[2]]
    bias_sizes = [weight.shape[1] * groups] if ctx.has_bias else None
    grad_input, grad_weight, grad_bias = torch.ops.aten.convolution_backward(
        grad_output, input, weight, bias_sizes, stride, padding, dilation, True,
        output_padding, groups, mask,
    )
    if unbatched and grad_input is not None:
        grad_input = grad_input.squeeze(0)
    return grad_input, grad_weight, grad_bias, None, None, None, None, None


torch.library.register_autograd(QUALNAME, _backward, setup_context=_setup_context)


def conv_transpose2d(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    stride=1,
    padding=0,
    output_padding=0,
    groups: int = 1,
    dilation=1,
) -> torch.Tensor:
    """Drop-in for `torch.nn.functional.conv_transpose2d`, backed by deconv_patch kernels."""
    return torch.ops.deconv_patch.conv_transpose2d(
        input, weight, bias, stride, padding, output_padding, groups, dilation
    )
