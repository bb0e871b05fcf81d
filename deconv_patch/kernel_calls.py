"""Kernel calls behind the op: the per-call plan cache (one entry per call geometry), the first
run of a prepared kernel call and what a refusal does, the prepared C++ call itself
(`kernel_call`), which FastConvTranspose2d also uses directly, and the op's C++ CUDA kernel's
link to them (`install_op_kernel`, `op_kernel_miss`)."""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from . import kernels
from .kernels import autotune, plan_context, planner
from .arguments import ConvTransposeArgs, find_problem
from .epilogue import IDENTITY, Epilogue
from .kernels.extension import ExtensionUnavailableError, load_units, loaded_extension
from .layout import cuda_output_channels_last
from .kernels.packed_weights import LayoutKey, packed_weight


class FallbackWarning(UserWarning):
    """A CUDA call ran on PyTorch's implementation instead of a deconv_patch kernel."""


class KernelRefusal(RuntimeError):
    """A kernel family does not run this call (its own limits): the op runs PyTorch instead,
    unless the variant was forced. The binding raises its own KernelRefused for the limits it
    checks (shared memory per tile, for one)."""


def _is_refusal(error: BaseException) -> bool:
    """Whether `error` is a kernel family's refusal (ours, or the binding's KernelRefused)."""
    if isinstance(error, KernelRefusal):
        return True
    ext = loaded_extension()
    return ext is not None and isinstance(error, ext.KernelRefused)


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
        """Forgets every plan, the op's C++ kernel's included."""
        self.entries.clear()
        self.misses = 0
        ext = loaded_extension()
        if ext is not None:
            ext.clear_op_kernel_cache()


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
    the tensors, the hyperparameters as passed, the backend flags (planner.backend_flags), a
    forced variant and the epilogue. None (not cacheable) when the epilogue carries scale/shift
    tensors: a prepared call holds their fp32 copies, which an in-place update would leave
    stale."""
    if epilogue.scale is not None or epilogue.shift is not None:
        return None
    return (input.shape, input.stride(), input.dtype, input.device, weight.shape,
            weight.stride(), weight.dtype, weight.device,
            None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.device),
            tuple(_hashable(v) for v in hyper), planner.backend_flags(),
            planner.forced_variant(), epilogue.activation, epilogue.negative_slope)


def compile_units(units: Sequence[str]) -> None:
    """Compiles the units of `units` that have no build yet, all at once (one step, a progress
    bar), and loads them, before the calls that need them: not one family at a time as each
    layer's first call meets it. Where the kernels cannot be built, those calls run PyTorch as
    before."""
    with contextlib.suppress(ExtensionUnavailableError):
        load_units(sorted(set(units)))


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
        if not autotune.known(key, choice.candidates):
            # Timing runs most families: compile the candidates' units without a build at once
            # (for this call's activation), not one family at a time as its first candidate
            # runs. A unit that cannot be built drops its candidates from the timing (pick).
            compile_units([u for v in choice.candidates
                           for u in variant_units(v, epilogue.activation, input.dtype)])
        best = autotune.pick(key, choice.candidates,
                             _candidate_runner(input, weight, bias, args, epilogue))
        choice = planner.Plan(best, "autotuned", candidates=choice.candidates)
    return choice


def variant_units(variant: str, activation: str, dtype: torch.dtype) -> Sequence[str]:
    """The build units a variant's calls fusing `activation` on `dtype` load: its family's (none
    for PyTorch's path)."""
    family = kernels.family_of(variant)
    return () if family is None else family.units_for(activation, dtype)


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
              weight: torch.Tensor, bias: Optional[torch.Tensor],
              recorded: bool = False) -> Optional[torch.Tensor]:
    """The first run of a cached entry's (OpPlan's, or the module's) freshly prepared kernel
    call (`recorded`: as autograd records it, grad_calls): on success the entry keeps the call;
    when the kernel refuses, the entry's plan turns to PyTorch and this returns None (the caller
    then runs PyTorch). A kernel's binding checks limits the planner does not model (the grouped
    kernel's shared memory per tile, for one) and raises its KernelRefused. Any other error, or
    a refusal of a variant forced by use_variant, propagates."""
    try:
        out = call.recorded(input, weight, bias) if recorded else call(input, weight, bias)
    except RuntimeError as e:
        if not _is_refusal(e) or planner.forced_variant() is not None:
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


def planned_op_call(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                    stride: Sequence[int], padding: Sequence[int], output_padding: Sequence[int],
                    groups: int, dilation: Sequence[int]
                    ) -> Tuple[torch.Tensor, Optional[tuple], OpPlan]:
    """The op's CUDA call planned (or its plan looked up) and run: (output, key, entry)."""
    key = op_call_key(input, weight, bias, (stride, padding, output_padding, groups, dilation),
                      IDENTITY)
    entry = _OP_PLANS.lookup(key, input, weight, bias, lambda: ConvTransposeArgs.from_values(
        stride, padding, output_padding, groups, dilation), IDENTITY)
    return _run_entry(entry, input, weight, bias, IDENTITY), key, entry


# What the op's C++ kernel may keep for a call geometry (cuda/binding/op_kernel.cpp).
KEEP_NOTHING, KEEP_ATEN, KEEP_CALL = 0, 1, 2


def op_kernel_miss(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                   stride: Sequence[int], padding: Sequence[int],
                   output_padding: Sequence[int], groups: int, dilation: Sequence[int]
                   ) -> Tuple[torch.Tensor, int, Optional[object]]:
    """A call the op's C++ kernel has no plan for, run here: (output, keep, prepared call).
    It may keep PyTorch's convolution (KEEP_ATEN) or the prepared call (KEEP_CALL) for the
    call's geometry only where this process's plan cache holds the entry under the call's key
    (not a plan made during a CUDA graph capture, whose autotune could not time, nor one for a
    forced variant) and the plan warns nothing per call (a fallback warns on every call)."""
    out, key, entry = planned_op_call(input, weight, bias, stride, padding, output_padding,
                                      groups, dilation)
    ext = loaded_extension()
    if (key is None or _OP_PLANS.entries.get(key) is not entry or entry.plan.fallback
            or planner.forced_variant() is not None or ext is None):
        return out, KEEP_NOTHING, None
    if entry.plan.variant == planner.ATEN:
        return out, KEEP_ATEN, None
    if isinstance(entry.call, ext.PreparedCall):
        return out, KEEP_CALL, entry.call
    return out, KEEP_NOTHING, None


# DECONV_PATCH_OP_KERNEL=python keeps the op's Python CUDA kernel (comparisons, diagnosis).
OP_KERNEL_ENV = "DECONV_PATCH_OP_KERNEL"


def install_op_kernel() -> None:
    """Once this process has loaded the core: the op's CUDA key goes to its C++ kernel, which
    runs the geometries op_kernel_miss let it keep without entering Python."""
    ext = loaded_extension()
    if ext is not None and os.environ.get(OP_KERNEL_ENV, "cpp") != "python":
        _install_op_kernel(ext)


@functools.lru_cache(maxsize=None)
def _install_op_kernel(ext: ModuleType) -> None:
    ext.install_op_kernel(op_kernel_miss, plan_context.forced_variant_var())


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


# A recorded call's gradient kernel as the binding names it (PreparedCall's grad_input_kernel
# and weight_grad_kernel; cuda/binding/direct_backward_call.cpp's gradient_kernel).
_BACKWARD_KERNEL_CODES = {planner.ATEN: 0, planner.DIRECT_BACKWARD: 1, planner.TILED_BACKWARD: 2,
                          planner.MMA_BACKWARD: 3, planner.PHASE_TMA_BACKWARD: 4}


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
    allow_tf32 = planner.tf32_allowed(args)  # (PyTorch's own call's setting: conv or matmul)
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

    # C++ (cuda/binding/prepared_call.cpp): everything above fixed, so a call converts three
    # tensors.
    family = kernels.BY_NAME[kernel]
    # A recorded call's gradients (kernels_in_training): the direct, tiled or mma backward
    # kernels, gemm_phase_tma's input gradient, or ATen's.
    backward = planner.backward_plan(
        input.device, input.dtype, weight.shape, args,
        channels_last and x.is_contiguous(memory_format=torch.channels_last))
    units = family.units_for(epilogue.activation, input.dtype)
    if backward.grad_input.variant == planner.PHASE_TMA_BACKWARD:  # its gradient's kernel
        units += kernels.BY_NAME[planner.GEMM_PHASE_TMA].units_for("none", input.dtype)
    return load_units(units).PreparedCall(
        family.code, config, list(args.stride), list(args.padding), list(args.output_padding),
        list(args.dilation), args.groups, channels_last, allow_tf32, scale, shift, activation,
        slope, repack, _BACKWARD_KERNEL_CODES[backward.grad_input.variant],
        _BACKWARD_KERNEL_CODES[backward.weight_grad.variant])
