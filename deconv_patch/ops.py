"""`torch.ops.deconv_patch.conv_transpose2d` (the op every patched layer calls) and
`torch.ops.deconv_patch.conv_transpose2d_fused` (the same with a fused epilogue).

Same argument order, defaults and semantics as `torch.nn.functional.conv_transpose2d`; the fused
op adds `scale, shift, activation, negative_slope`:
    activation((conv_transpose2d(input, weight, bias, ...) * scale + shift)),
with the epilogue applied to the fp32 accumulator before one rounding (deconv_patch/epilogue.py).
  * CUDA: the planner picks one of our kernels (or ATen, with a warning saying why);
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
import warnings
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from . import autotune, kernels, planner
from .arguments import ConvTransposeArgs, find_problem
from .epilogue import DEFAULT_NEGATIVE_SLOPE, IDENTITY, Epilogue, check_activation
from .extension import load_extension, loaded_extension
from .layout import cuda_output_channels_last, empty_batch_output
from .packed_weights import LayoutKey, packed_weight

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


class KernelRefusal(RuntimeError):
    """A kernel family does not run this call (its own limits): the op runs PyTorch instead,
    unless the variant was forced. The binding's own refusals say "does not support" too."""


class FallbackWarning(UserWarning):
    """A CUDA call ran on PyTorch's implementation instead of a deconv_patch kernel."""


torch.library.define(QUALNAME, SCHEMA)
torch.library.define(FUSED_QUALNAME, FUSED_SCHEMA)


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


def _aten_with(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
               args: ConvTransposeArgs) -> torch.Tensor:
    return _aten(input, weight, bias, args.stride, args.padding, args.output_padding,
                 args.groups, args.dilation)


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
    key = op_call_key(input, weight, bias, (stride, padding, output_padding, groups, dilation),
                      IDENTITY)
    entry = _OP_PLANS.lookup(key, input, weight, bias, lambda: ConvTransposeArgs.from_values(
        stride, padding, output_padding, groups, dilation), IDENTITY)
    return _run_entry(entry, input, weight, bias, IDENTITY)


torch.library.register_kernel(QUALNAME, "cuda", _conv_transpose2d_cuda)


@dataclass
class OpPlan:
    """One call geometry of the op's CUDA kernel: the plan, its arguments and, once used, the
    prepared kernel call (kernel_call)."""

    plan: planner.Plan
    args: ConvTransposeArgs
    call: Optional[Callable[..., torch.Tensor]] = None


class OpPlanCache:
    """The op's plans per call geometry (see op_call_key): an explicit, bounded cache, so a
    repeated call (every layer of a compiled graph or an exported program, every step) skips
    argument checks, planning and call preparation - tens of microseconds of Python each."""

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self.entries: Dict[tuple, OpPlan] = {}
        self.misses = 0  # tests read it

    def lookup(self, key: Optional[tuple], input: torch.Tensor, weight: torch.Tensor,
               bias: Optional[torch.Tensor], make_args: Callable[[], ConvTransposeArgs],
               epilogue: Epilogue = IDENTITY) -> OpPlan:
        """The cached plan for `key`, else a new one (see plan). `make_args` builds the call's
        ConvTransposeArgs, only on a miss: a hit needs none."""
        found = self.entries.get(key) if key is not None else None
        return found if found is not None else \
            self.plan(key, input, weight, bias, make_args(), epilogue)

    def plan(self, key: Optional[tuple], input: torch.Tensor, weight: torch.Tensor,
             bias: Optional[torch.Tensor], args: ConvTransposeArgs,
             epilogue: Epilogue = IDENTITY) -> OpPlan:
        """Plans (and autotunes, with the call's epilogue) a call; remembers it under `key`
        unless key is None or a CUDA graph is being captured (autotune cannot time then, so the
        plan may not be final)."""
        self.misses += 1
        entry = OpPlan(_plan_call(input, weight, bias, args, epilogue), args)
        if key is not None and not (input.is_cuda and torch.cuda.is_current_stream_capturing()):
            if len(self.entries) >= self.limit:
                self.entries.clear()
            self.entries[key] = entry
        return entry

    def clear(self) -> None:
        self.entries.clear()
        self.misses = 0


_OP_PLANS = OpPlanCache()


def op_plans() -> OpPlanCache:
    """The process's OpPlanCache."""
    return _OP_PLANS


def _hashable(v):
    """A hyperparameter as passed (an int, or a list from the dispatcher) as a dict-key part."""
    return v if isinstance(v, int) else tuple(v)


def op_call_key(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                hyper: tuple, epilogue: Epilogue) -> Optional[tuple]:
    """Everything a plan and a prepared call depend on: shapes, strides, dtypes and devices of
    the tensors, the hyperparameters as passed, the backend flags (read through torch._C's
    getters, ~10x cheaper than torch.backends.cudnn's properties), a forced variant and the
    epilogue. None (not cacheable) when the epilogue carries scale/shift tensors: a prepared
    call holds their fp32 copies, which an in-place update would leave stale."""
    if epilogue.scale is not None or epilogue.shift is not None:
        return None
    return (input.shape, input.stride(), input.dtype, input.device, weight.shape,
            weight.stride(), weight.dtype, weight.device,
            None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.device),
            tuple(_hashable(v) for v in hyper), torch._C._get_cudnn_enabled(),
            torch._C._get_cudnn_allow_tf32(), torch._C._get_cudnn_benchmark(),
            planner.forced_variant(), epilogue.activation, epilogue.negative_slope)


def _plan_call(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
               args: ConvTransposeArgs, epilogue: Epilogue) -> planner.Plan:
    """The plan of one op call on CUDA (autotuned when cudnn.benchmark is on: each candidate
    timed with the call's epilogue, since a fused activation can change which one wins)."""
    if find_problem(input, weight, bias, args) is not None or (
            input.dim() == 4 and input.shape[0] == 0):
        # Invalid: PyTorch raises its own error (or, where it accepts the call, computes it).
        # Empty batch: nothing to compute; ATen allocates the result with its own strides.
        return planner.Plan(planner.ATEN, "invalid call or empty batch: PyTorch")
    choice = planner.plan(input, weight, args)
    if len(choice.candidates) > 1 and autotune.enabled():
        key = autotune.call_key(input, weight, bias is not None, args, epilogue)
        best = autotune.pick(key, choice.candidates,
                             _candidate_runner(input, weight, bias, args, epilogue))
        choice = planner.Plan(best, "autotuned", candidates=choice.candidates)
    return choice


def _run_entry(entry: OpPlan, input: torch.Tensor, weight: torch.Tensor,
               bias: Optional[torch.Tensor], epilogue: Epilogue) -> torch.Tensor:
    """Runs a planned call: PyTorch, or the prepared kernel call (made on first use)."""
    plan = entry.plan
    if plan.fallback:  # our kernels cannot run here (not a choice made for speed): every call
        warnings.warn(f"deconv_patch: {plan.reason}", FallbackWarning, stacklevel=4)
    if plan.variant == planner.ATEN:
        return epilogue.apply(_aten_with(input, weight, bias, entry.args))
    if entry.call is not None:
        return entry.call(input, weight, bias)
    out = first_run(entry, kernel_call(plan.variant, input, weight, entry.args, epilogue),
                    input, weight, bias)
    return out if out is not None else epilogue.apply(_aten_with(input, weight, bias, entry.args))


def first_run(entry, call: Callable[..., torch.Tensor], input: torch.Tensor,
              weight: torch.Tensor, bias: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """The first run of a cached entry's (OpPlan's, or the module's) freshly prepared kernel
    call: on success the entry keeps the call; when the kernel refuses, the entry's plan turns
    to PyTorch and this returns None (the caller then runs PyTorch). A kernel's binding checks
    limits the planner does not model (the grouped kernel's shared memory per tile, for one)
    and refuses with "does not support". Any other error, or a refusal of a variant forced by
    use_variant, propagates."""
    try:
        out = call(input, weight, bias)
    except RuntimeError as e:
        refused = isinstance(e, KernelRefusal) or "does not support" in str(e)
        if not refused or planner.forced_variant() is not None:
            raise
        entry.plan = planner.Plan(planner.ATEN, f"{entry.plan.variant} does not support this "
                                  "call; PyTorch", candidates=entry.plan.candidates)
        return None
    entry.call = call
    return out


def _cuda(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
          args: ConvTransposeArgs, epilogue: Epilogue) -> torch.Tensor:
    """Both ops on CUDA: plan (and autotune; cached per call geometry), then run a kernel of
    ours or PyTorch."""
    key = op_call_key(input, weight, bias, (args.stride, args.padding, args.output_padding,
                                            args.groups, args.dilation), epilogue)
    # (never cached for key None: its call is prepared for this call only)
    entry = _OP_PLANS.lookup(key, input, weight, bias, lambda: args, epilogue)
    return _run_entry(entry, input, weight, bias, epilogue)


def _candidate_runner(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                      args: ConvTransposeArgs, epilogue: Epilogue = IDENTITY):
    """run(variant): one call the way a patched model makes it, host overhead and the fused
    epilogue included, for autotune. F.conv_transpose2d (then the epilogue in PyTorch) for
    ``aten`` (exactly FastConvTranspose2d's PyTorch path; the torch.ops.aten overload costs more
    host time and would bias short layers towards our kernels), else the variant's kernel call,
    epilogue fused, prepared once (the module's inference path), so the timing measures the
    call, not its one-off preparation. Timing without the epilogue picked gemm_phase_tma for
    Tanh output layers where its fused Tanh made it 3.8x slower (H100,
    docs/performance/epilogue.md)."""
    prepared: dict = {}

    def run(variant: str) -> torch.Tensor:
        if variant == planner.ATEN:
            return epilogue.apply(F.conv_transpose2d(
                input, weight, bias, args.stride, args.padding, args.output_padding, args.groups,
                args.dilation))
        call = prepared.get(variant)
        if call is None:
            call = prepared[variant] = kernel_call(variant, input, weight, args, epilogue)
        return call(input, weight, bias)

    return run


def run_variant(
    variant: str,
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    args: ConvTransposeArgs,
    out: Optional[torch.Tensor] = None,
    epilogue: Epilogue = IDENTITY,
) -> torch.Tensor:
    """Runs one named kernel variant on validated CUDA arguments (tests force variants here).

    `out`, if given, is written in place (batched 4-D, in the layout PyTorch would return).
    """
    if variant == planner.ATEN:
        return epilogue.apply(_aten_with(input, weight, bias, args))
    return kernel_call(variant, input, weight, args, epilogue)(input, weight, bias, out)


def kernel_call(variant: str, input: torch.Tensor, weight: torch.Tensor,
                args: ConvTransposeArgs, epilogue: Epilogue = IDENTITY):
    """A callable (input, weight, bias, out=None) -> output that launches `variant` for calls
    shaped like this one, with everything that does not change between such calls (output
    layout, TF32 flag, epilogue tensors, hyperparameters) worked out once: a C++ PreparedCall,
    which also keeps the packed weight it last used (re-asked from packed_weights when the weight
    changes). FastConvTranspose2d and the op keep one per call geometry, so a repeated call is one
    Python -> C++ hop with three tensor arguments."""
    kernel, config = planner.split_variant(variant)
    if not planner.is_variant(variant) or kernel == planner.ATEN:
        raise ValueError(f"unknown deconv_patch kernel variant {variant!r}")
    args = args.kernel_view(input.shape[-2:], weight.shape[-2:])  # as planner.plan planned it
    x = input.unsqueeze(0) if input.dim() == 3 else input
    out_hw = args.output_hw(x.shape[-2:], weight.shape[-2:])
    channels_last = cuda_output_channels_last(
        x, weight, args, weight.shape[1] * args.groups * out_hw[0] * out_hw[1])
    allow_tf32 = bool(torch.backends.cudnn.allow_tf32)
    refused = kernels.refusal(variant, input.dtype, weight, args)  # the family's own limits
    if refused is not None:
        raise KernelRefusal(f"deconv_patch: {kernel} does not support {refused}")
    scale, shift, activation, slope = epilogue.kernel_args(input.device)
    repack: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
    if planner.reads_packed_weight(variant):
        layout_key = LayoutKey(kernel, args, allow_tf32)

        def repack_weight(weight: torch.Tensor) -> torch.Tensor:
            return packed_weight(kernel, weight, args, allow_tf32, layout_key)

        repack = repack_weight

    # C++ (cuda/prepared_call.cpp): everything above fixed, so a call converts three tensors.
    return load_extension().PreparedCall(
        kernel, config, list(args.stride), list(args.padding), list(args.output_padding),
        list(args.dilation), args.groups, channels_last, allow_tf32, scale, shift, activation,
        slope, repack)


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
