"""`torch.ops.deconv_patch.conv_transpose2d` (the op every patched layer calls) and
`torch.ops.deconv_patch.conv_transpose2d_fused` (the same with a fused epilogue).

Same argument order, defaults and semantics as `torch.nn.functional.conv_transpose2d`; the fused
op adds `scale, shift, activation, negative_slope`:
    activation((conv_transpose2d(input, weight, bias, ...) * scale + shift)),
with the epilogue applied to the fp32 accumulator before one rounding (deconv_patch/epilogue.py).
  * CUDA: the planner picks one of our kernels (or ATen, with a warning saying why), once per
    call geometry; once the core is loaded, a C++ kernel (cuda/binding/op_kernel.cpp) runs the
    planned geometries without Python;
  * every other device / dtype: ATen (CompositeExplicitAutograd kernel);
  * Meta / fake tensors: ATen's own shape and stride rules, so torch.compile and torch.export
    see exactly what eager produces;
  * autograd: ATen's convolution_backward (input, weight and bias gradients);
  * CUDA autocast: floating-point CUDA tensors cast to the autocast dtype first, exactly as
    ATen's autocast casts conv_transpose2d's arguments (scale/shift stay fp32).
Invalid calls are handed to ATen so users get PyTorch's own error messages.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import torch

from .arguments import ConvTransposeArgs
from .epilogue import DEFAULT_NEGATIVE_SLOPE, Epilogue, check_activation
from .kernels.extension import loaded_extension
from .layout import cuda_output_channels_last, empty_batch_output

QUALNAME = "deconv_patch::conv_transpose2d"
SCHEMA = (
    "(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, "
    "int[2] output_padding=0, int groups=1, int[2] dilation=1) -> Tensor"
)


FUSED_QUALNAME = "deconv_patch::conv_transpose2d_fused"
FUSED_SCHEMA = SCHEMA.replace(
    ") -> Tensor",
    f", Tensor? scale=None, Tensor? shift=None, str activation=\"none\", "
    f"float negative_slope={DEFAULT_NEGATIVE_SLOPE}) -> Tensor")


# The op's kernels run through kernel_calls; its names are re-exported here, where callers
# (modules.py, autotune, tests, benchmarks) have always found them.
from .kernel_calls import (  # noqa: E402,F401
    FallbackWarning, KernelRefusal, OpPlan, OpPlanCache, _aten, _aten_with, _candidate_runner,
    _cuda, _OP_PLANS, _run_entry, first_run, install_op_kernel, kernel_call, op_call_key,
    op_plans, planned_op_call, run_variant)

# flexible_layout: the kernels take any input strides, so Inductor may hand the op the layout it
# chose for its own kernels (channels_last around convolutions) rather than copy to the traced
# one; the fake kernel gives the output strides the CUDA kernel returns for that layout. (A
# torch without the tag keeps its default.)
_LAYOUT_TAGS = (torch.Tag.flexible_layout,) if hasattr(torch.Tag, "flexible_layout") else ()
torch.library.define(QUALNAME, SCHEMA, tags=_LAYOUT_TAGS)
torch.library.define(FUSED_QUALNAME, FUSED_SCHEMA)


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
    if x.shape[0] == 0:  # (an unbatched input always has one sample)
        return empty_batch_output(x, weight, batched.shape)
    channels_last = cuda_output_channels_last(x, weight, args, math.prod(batched.shape[1:]))
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    restrided = torch.empty(batched.shape, dtype=out.dtype, device=out.device, memory_format=fmt)
    return restrided if out.dim() == 4 else restrided.squeeze(0)


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
    """The op's first CUDA calls: once they have loaded the core, its C++ kernel
    (cuda/binding/op_kernel.cpp) takes the CUDA key over this one and comes back to Python
    only for calls it has no plan for (kernel_calls.op_kernel_miss)."""
    out = planned_op_call(input, weight, bias, stride, padding, output_padding, groups,
                          dilation)[0]
    install_op_kernel()
    return out


torch.library.register_kernel(QUALNAME, "cuda", _conv_transpose2d_cuda)


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


# ---------------------------------------------------------------------------------------------
# The fused op. Kernels repeat the schema defaults (see above).


def _epilogue(scale, shift, activation, negative_slope) -> Epilogue:
    check_activation(activation)
    return Epilogue(scale, shift, activation, float(negative_slope))


def _check_channels(weight: torch.Tensor, groups: int, scale, shift) -> None:
    channels = weight.shape[1] * groups if weight.dim() == 4 else None
    for name, t in (("scale", scale), ("shift", shift)):
        if t is not None and (t.dim() != 1 or (channels is not None and t.numel() != channels)):
            raise RuntimeError(f"deconv_patch.conv_transpose2d_fused: {name} must have shape "
                               f"[{channels}] (one value per output channel), got "
                               f"{list(t.shape)}")


@torch.library.register_kernel(FUSED_QUALNAME, None)
def _fused_default(input, weight, bias=None, stride=(1, 1), padding=(0, 0),
                   output_padding=(0, 0), groups=1, dilation=(1, 1), scale=None, shift=None,
                   activation="none", negative_slope=DEFAULT_NEGATIVE_SLOPE):
    """Every device without a kernel of ours: PyTorch's conv, then the reference epilogue."""
    _check_channels(weight, groups, scale, shift)
    epilogue = _epilogue(scale, shift, activation, negative_slope)
    return epilogue.apply(_aten(input, weight, bias, stride, padding, output_padding, groups,
                                dilation))


@torch.library.register_fake(FUSED_QUALNAME)
def _fused_fake(input, weight, bias=None, stride=(1, 1), padding=(0, 0), output_padding=(0, 0),
                groups=1, dilation=(1, 1), scale=None, shift=None, activation="none",
                negative_slope=DEFAULT_NEGATIVE_SLOPE):
    _check_channels(weight, groups, scale, shift)
    check_activation(activation)
    return _conv_transpose2d_fake(input, weight, bias, stride, padding, output_padding, groups,
                                  dilation)


@torch.library.register_kernel(FUSED_QUALNAME, "cuda")
def _fused_cuda(input, weight, bias=None, stride=(1, 1), padding=(0, 0), output_padding=(0, 0),
                groups=1, dilation=(1, 1), scale=None, shift=None, activation="none",
                negative_slope=DEFAULT_NEGATIVE_SLOPE):
    _check_channels(weight, groups, scale, shift)
    args = ConvTransposeArgs.from_values(stride, padding, output_padding, groups, dilation)
    return _cuda(input, weight, bias, args, _epilogue(scale, shift, activation, negative_slope))


_FUSED_DEFAULTS = _DEFAULTS + (None, None, "none", DEFAULT_NEGATIVE_SLOPE)


def _fused_setup_context(ctx, inputs: Tuple, output: torch.Tensor) -> None:
    inputs = tuple(inputs) + _FUSED_DEFAULTS[len(inputs) - 2 :]
    input, weight, bias, stride, padding, output_padding, groups, dilation = inputs[:8]
    scale, shift, activation, negative_slope = inputs[8:]
    ctx.save_for_backward(input, weight, bias, scale, shift)
    ctx.hyper = (list(stride), list(padding), list(output_padding), groups, list(dilation))
    ctx.epilogue = (activation, negative_slope)


def _fused_backward(ctx, grad_output: torch.Tensor):
    """Recomputes the conv output with PyTorch and differentiates the epilogue on it (the fused
    kernel keeps no pre-activation tensor); the conv part then goes through ATen's backward."""
    input, weight, bias, scale, shift = ctx.saved_tensors
    stride, padding, output_padding, groups, dilation = ctx.hyper
    activation, negative_slope = ctx.epilogue
    needs = ctx.needs_input_grad
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(bool(n)) if t is not None else None
                  for t, n in zip((input, weight, bias, scale, shift),
                                  (needs[0], needs[1], needs[2], needs[8], needs[9]))]
        x, w, b, s, t = leaves
        y = Epilogue(s, t, activation, negative_slope).apply(
            _aten(x, w, b, stride, padding, output_padding, groups, dilation))
        wanted = [v for v in leaves if v is not None and v.requires_grad]
        grads = iter(torch.autograd.grad(y, wanted, grad_output, allow_unused=True)
                     if wanted else ())
    gi, gw, gb, gs, gt = (next(grads) if v is not None and v.requires_grad else None
                          for v in leaves)
    return gi, gw, gb, None, None, None, None, None, gs, gt, None, None


torch.library.register_autograd(FUSED_QUALNAME, _fused_backward,
                                setup_context=_fused_setup_context)


# ---------------------------------------------------------------------------------------------
# CUDA autocast: conv_transpose2d is on ATen's lower-precision list, so under torch.autocast its
# floating-point CUDA arguments arrive cast to the autocast dtype. Custom ops get no such rule by
# default (they would run, and return, fp32), and torch.library.register_autocast casts to one
# fixed dtype, so both ops get this kernel: cast, then run the op with autocast excluded.


def autocast_cast(t: Optional[torch.Tensor], dtype: torch.dtype) -> Optional[torch.Tensor]:
    """`t` as CUDA autocast would pass it to conv_transpose2d: floating-point CUDA tensors other
    than float64 cast to `dtype`. Plain tensors go through ATen's autocast cast cache (the
    extension's autocast_cast), so a weight is cast once per autocast region, not per call."""
    if t is None or not t.is_cuda or not t.is_floating_point() or t.dtype in (dtype,
                                                                             torch.float64):
        return t
    ext = loaded_extension()
    if ext is not None and type(t) in (torch.Tensor, torch.nn.Parameter):
        return ext.autocast_cast(t, dtype)
    return t.to(dtype)  # fake / functional tensors (tracing), or no extension loaded yet


def autocast_args(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]
                  ) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """(input, weight, bias) as CUDA autocast hands them to conv_transpose2d."""
    dtype = torch.get_autocast_dtype("cuda")
    return autocast_cast(input, dtype), autocast_cast(weight, dtype), autocast_cast(bias, dtype)


_AUTOCAST_LIB = torch.library.Library("deconv_patch", "IMPL")
_NO_AUTOCAST = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)


def _autocast_rule(op):
    """op's AutocastCUDA kernel: cast input, weight and bias, then run op without autocast."""
    def kernel(keyset, input, weight, bias=None, *rest):
        input, weight, bias = autocast_args(input, weight, bias)
        with torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST):
            return op(input, weight, bias, *rest)
    return kernel


for _name in ("conv_transpose2d", "conv_transpose2d_fused"):
    _AUTOCAST_LIB.impl(_name, _autocast_rule(getattr(torch.ops.deconv_patch, _name)),
                       "AutocastCUDA", with_keyset=True)


def conv_transpose2d_fused(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    stride=1,
    padding=0,
    output_padding=0,
    groups: int = 1,
    dilation=1,
    scale: Optional[torch.Tensor] = None,
    shift: Optional[torch.Tensor] = None,
    activation: str = "none",
    negative_slope: float = DEFAULT_NEGATIVE_SLOPE,
) -> torch.Tensor:
    """activation(conv_transpose2d(input, weight, bias, ...) * scale + shift) in one kernel.

    `scale`/`shift`: per output channel (e.g. a folded eval BatchNorm), or None. `activation`:
    one of deconv_patch.epilogue.ACTIVATIONS (relu, leaky_relu, silu, gelu, gelu_tanh, tanh,
    sigmoid, hardswish, none)."""
    return torch.ops.deconv_patch.conv_transpose2d_fused(
        input, weight, bias, stride, padding, output_padding, groups, dilation, scale, shift,
        activation, negative_slope)


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


__all__ = ["FUSED_QUALNAME", "FallbackWarning", "KernelRefusal", "OpPlan", "OpPlanCache",
           "QUALNAME", "autocast_args", "autocast_cast", "conv_transpose2d",
           "conv_transpose2d_fused", "first_run", "kernel_call", "op_call_key", "op_plans",
           "run_variant", "_aten", "_aten_with", "_candidate_runner", "_cuda", "_OP_PLANS",
           "_run_entry"]
