"""`FastConvTranspose2d`: an `nn.ConvTranspose2d` whose forward runs the deconv_patch op.

It *is* an nn.ConvTranspose2d (subclass): same parameters, names, shapes, state_dict keys,
`output_size=` contract and repr, so checkpoints load both ways and code that type-checks for
ConvTranspose2d keeps working. It may also carry an activation that optimize() fused into it
(`activation="relu"` etc.): the kernels apply it in their epilogue, PyTorch paths call the same
torch function the original activation module called.

Per input geometry the module caches its plan and, when a kernel of ours runs, a prepared call
(ops.kernel_call, a C++ PreparedCall): inference calls then go straight to the extension instead
of the dispatcher's round trip through a Python op kernel (tens of microseconds). The last
call's geometry is also armed in C++ (ModuleFastPath, cuda/binding/prepared_call.cpp): an identical
next call is checked and run there, PyTorch's convolution included where that is the plan, so a
repeated call costs about what nn.ConvTranspose2d's does or less (measured on the H100 host:
the Python plan lookup and closure cost 12-23 us per call before).
A call autograd records that runs PyTorch's convolution (the default for most layers: grad_calls)
arms a C++ path of its own from the second such call of a geometry in a row, which then skips
the module's Python and the training prefilter. Calls under torch.compile, a dispatch mode or a
functorch transform use the registered op, which those systems understand. Under CUDA autocast
the arguments are cast as ATen's autocast casts them.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import warnings
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .kernels import autotune, planner
from . import grad_calls
from .arguments import ConvTransposeArgs, find_problem
from .derived import set_class
from .jit_trace import in_jit_trace
from .layout import is_channels_last
from .scripting import refuse_scripting
from .epilogue import DEFAULT_NEGATIVE_SLOPE, Epilogue, activate, check_activation
from .kernels.extension import built_core
from .kernel_calls import compile_units, variant_units
from .ops import (FallbackWarning, autocast_args, conv_transpose2d, conv_transpose2d_fused,
                  first_run, kernel_call)


_PLAN_CACHE_SIZE = 256
# planner.use_variant's context variable, read in forward without a Python call.
_FORCED_VARIANT = planner.forced_variant_var()


@dataclass
class _Entry:
    """One cached input geometry: the plan and, once used, its prepared kernel call."""

    plan: planner.Plan
    call: Optional[Callable[..., torch.Tensor]] = None
    tune: bool = False  # autotune has not timed this call yet: the op times it, uncached
    trains: bool = False  # planner.trains_on_kernel for this call's plan


def _patched_clone(module: nn.ConvTranspose2d) -> "FastConvTranspose2d":
    """A new module object sharing `module`'s tensors, submodules and hooks, on our kernels."""
    clone = module.__class__.__new__(module.__class__)
    clone.__dict__.update({k: (copy.copy(v) if isinstance(v, (dict, set, list)) else v)
                           for k, v in module.__dict__.items()})
    set_class(clone, FastConvTranspose2d, FastConvTranspose2d)
    return clone  # type: ignore[return-value]


def _plain_cuda_tensor(t: torch.Tensor) -> bool:
    """True for an ordinary tensor outside any dispatch mode or functorch transform: the only
    case where calling the extension directly is equivalent to calling the op."""
    return (type(t) is torch.Tensor or type(t) is nn.Parameter) and \
        torch._C._len_torch_dispatch_stack() == 0 and \
        not torch._C._functorch.is_functorch_wrapped_tensor(t)


class FastConvTranspose2d(nn.ConvTranspose2d):
    """nn.ConvTranspose2d backed by deconv_patch's CUDA kernels (ATen on other devices)."""

    # A fused activation (see deconv_patch/epilogue.py); class attributes so pickles of modules
    # from before activation fusion still load.
    activation: str = "none"
    negative_slope: float = DEFAULT_NEGATIVE_SLOPE
    # Calls that autograd records run the plan's kernel (True), PyTorch's convolution (False),
    # or the plan's kernel where it measured faster in training, forward and backward together
    # (None, the default: planner.trains_on_kernel; grad_calls and
    # docs/performance/training.md). optimize(kernels_in_training=...) sets it.
    kernels_in_training: Optional[bool] = None
    # Per-process caches: never copied or pickled (the copy re-plans on its first call).
    TRANSIENT_STATE = ("_plan_cache", "_last_plan", "_kernel_planned", "_fast_path",
                       "_fast_path_fused", "_prefilter", "_fast_path_recorded", "_recorded_seen")

    @classmethod
    def from_module(cls, module: nn.ConvTranspose2d, activation: str = "none",
                    negative_slope: float = DEFAULT_NEGATIVE_SLOPE) -> "FastConvTranspose2d":
        """A FastConvTranspose2d sharing `module`'s parameters (no copy) and hyperparameters,
        optionally followed by a fused `activation` (one of deconv_patch.epilogue.ACTIVATIONS).

        Passing a FastConvTranspose2d without an activation returns it unchanged, so patching
        is idempotent.
        """
        check_activation(activation)
        if isinstance(module, FastConvTranspose2d) and activation == "none":
            return module
        if not isinstance(module, nn.ConvTranspose2d):
            raise TypeError(
                f"FastConvTranspose2d.from_module expects nn.ConvTranspose2d, got "
                f"{type(module).__name__}"
            )
        if "weight" not in module._parameters:
            # A parametrization or a norm hook (weight_norm, spectral_norm) computes the weight
            # on each call: a shallow clone keeps that machinery (and shares the tensors).
            if activation != "none":
                raise ValueError("deconv_patch: a fused activation needs a plain weight Parameter")
            return _patched_clone(module)
        fast = cls(
            module.in_channels,
            module.out_channels,
            module.kernel_size,  # type: ignore[arg-type]
            stride=module.stride,  # type: ignore[arg-type]
            padding=module.padding,  # type: ignore[arg-type]
            output_padding=module.output_padding,  # type: ignore[arg-type]
            groups=module.groups,
            bias=module.bias is not None,
            dilation=module.dilation,  # type: ignore[arg-type]
            padding_mode=module.padding_mode,
            device="meta",  # skip initialising weights that are replaced below
        )
        fast.weight = module.weight
        fast.bias = module.bias
        fast.train(module.training)
        if isinstance(module, FastConvTranspose2d) and module.activation != "none":
            raise ValueError("deconv_patch: this layer already has a fused activation "
                             f"({module.activation})")
        if activation != "none":
            fast.activation = activation
            fast.negative_slope = float(negative_slope)
        return fast

    def forward(self, input: torch.Tensor, output_size: Optional[List[int]] = None) -> torch.Tensor:
        # Hot path: runs on every call of every patched layer, so attribute lookups are kept
        # to plain dict reads (nn.Module.__getattr__ costs ~0.5 us per parameter).
        params = self._parameters  # (weight norm / parametrizations move "weight" out of it)
        weight = params["weight"] if "weight" in params else self.weight
        bias = params["bias"] if "bias" in params else self.bias
        if torch.compiler.is_compiling():
            # (Nothing below reads the forced-variant ContextVar while Dynamo traces: some torch
            # versions, 2.11 among them, cannot trace it. Fused chains step aside.)
            return self._conv(input, weight, bias, output_size, self.activation,
                              self.negative_slope, "_fast_path")
        # grad_calls.records_grad, written out: a training step makes this test on every call.
        recorded = torch.is_grad_enabled() and (
            input.requires_grad or weight.requires_grad or
            (bias is not None and bias.requires_grad))
        if recorded and _FORCED_VARIANT.get() is None:
            # A call autograd records: PyTorch's own convolution (and activation), straight
            # away, so a training step pays nothing more than nn.ConvTranspose2d's call
            # (grad_calls). Where kernels_in_training allows, a call without an activation of
            # the module's own runs its plan, recorded with the planned backward. A fused chain
            # never folds a recorded call.
            fast = self.__dict__.get("_fast_path_recorded")
            if fast is not None and output_size is None:
                # (this geometry and context went to PyTorch's convolution on the last such
                # call: the same convolution from C++, without the Python below)
                out = fast(input, weight, bias)
                if out is not None:
                    return out
            may_train = self.activation == "none" and self.kernels_in_training
            if may_train is None:  # (the hyperparameters, dtype and size, before planning)
                prefilter = self.__dict__.get("_prefilter") or self._training_prefilter()
                may_train = prefilter.may_train(input)
            if not may_train:
                return self._pytorch_recorded(input, weight, bias, output_size)
        if in_jit_trace():
            # torch.jit.trace (and the ONNX export built on it) records dispatcher calls: our
            # kernel launches, invisible to it, would leave its graph an allocation or a constant
            # where the output is. A trace gets what the original traces to: PyTorch's
            # convolution, the chain unfused (and so does the run its check compares it to).
            return self._pytorch(input, weight, bias, output_size)
        chain = self.__dict__.get("_fused_chain")
        if chain is not None:
            folded = chain.folded(self, input, weight, bias, recorded)
            if folded is not None:  # the following BatchNorm / activation run in this call
                out = self._conv(input, folded[0], folded[1], output_size, chain.activation,
                                 chain.negative_slope, "_fast_path_fused")
                chain.hand_over(out)
                return out
        return self._conv(input, weight, bias, output_size, self.activation,
                          self.negative_slope, "_fast_path")

    def __prepare_scriptable__(self) -> nn.Module:
        refuse_scripting(self)
        return self

    def _training_prefilter(self) -> planner.TrainingPrefilter:
        found = self.__dict__.get("_prefilter")  # (dropped by __setattr__)
        if found is None:
            found = self.__dict__["_prefilter"] = planner.TrainingPrefilter.for_layer(
                self.in_channels, self.out_channels, self.kernel_size,  # type: ignore[arg-type]
                self._args(self.output_padding))
        return found

    def _records_on(self, entry: "_Entry") -> bool:
        """Whether a call autograd records runs `entry`'s kernel: kernels_in_training, with
        None answered by the plan (planner.trains_on_kernel). With None, a call autotune has yet
        to time runs PyTorch's: the op would time it on the recorded call and return the
        fastest candidate's output, which may carry TF32's error where the grouped kernel and
        cuDNN have fp32's. A call without gradients times it; later calls follow its choice."""
        chosen = self.kernels_in_training
        if chosen is None:
            return not entry.tune and entry.trains and entry.plan.uses_kernel
        return chosen

    def _pytorch(self, input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                 output_size: Optional[List[int]]) -> torch.Tensor:
        """nn.ConvTranspose2d's computation (then the fused activation) on `weight` and `bias`
        as this call read them (a parametrized weight is computed once per call)."""
        if self.padding_mode != "zeros":
            raise ValueError("Only `zeros` padding mode is supported for ConvTranspose2d")
        output_padding = self.output_padding if output_size is None else self._output_padding(
            input, output_size, self.stride, self.padding, self.kernel_size,  # type: ignore[arg-type]
            2, self.dilation)  # type: ignore[arg-type]
        y = F.conv_transpose2d(input, weight, bias, self.stride, self.padding, output_padding,
                               self.groups, self.dilation)
        return y if self.activation == "none" else activate(y, self.activation,
                                                             self.negative_slope)

    def _pytorch_recorded(self, input: torch.Tensor, weight: torch.Tensor,
                          bias: Optional[torch.Tensor],
                          output_size: Optional[List[int]]) -> torch.Tensor:
        """_pytorch for a call autograd records that does not train on a kernel of ours. The
        second such call in a row with the same input sizes, strides, dtype and autocast state
        (CUDA, no activation or output_size=, the extension's core built) arms
        _fast_path_recorded: a C++ ModuleFastPath whose plan is PyTorch's convolution. It
        answers a next call only where the input's and parameters' sizes, strides, dtypes and
        device, the cuDNN, TF32, deterministic and autocast settings are as armed, which is
        everything the training prefilter's answer reads but the layer's attributes, whose
        changes disarm it. (Alternating geometries or memory formats never arm it: each arming
        costs more than the call saves.)"""
        if output_size is not None or self.activation != "none" or not input.is_cuda:
            return self._pytorch(input, weight, bias, output_size)
        autocast = torch.is_autocast_enabled("cuda")
        seen = (input.shape, input.stride(), input.dtype,
                torch.get_autocast_dtype("cuda") if autocast else None)
        if self.__dict__.get("_recorded_seen") != seen:
            self.__dict__["_recorded_seen"] = seen
            return self._pytorch(input, weight, bias, None)
        ext = built_core()  # (never a reason to build it)
        if ext is None:
            return self._pytorch(input, weight, bias, None)
        if autocast:  # ATen's autocast casts (its cast cache included), made here: the path
            input, weight, bias = autocast_args(input, weight, bias)  # compares cast tensors
        out = self._pytorch(input, weight, bias, None)
        self.__dict__["_fast_path_recorded"] = self._module_fast_path(
            ext, None, input, weight, bias, record=False, planned_kernel=False)
        return out

    def forward_fused(self, input: torch.Tensor) -> torch.Tensor:
        """This layer's fused chain (conv, folded eval BatchNorm, activation) on `input`, whoever
        calls: what the model computes in this layer's call in eval mode. For validation and
        benchmarks; a layer without a chain computes its plain forward."""
        chain = self.__dict__.get("_fused_chain")
        if chain is None:
            return self(input)
        weight, bias = chain.fold_for(self, self.weight, self.bias)
        return self._conv(input, weight, bias, None, chain.activation, chain.negative_slope,
                          "_fast_path_fused")

    def _conv(self, input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
              output_size: Optional[List[int]], activation: str, negative_slope: float,
              fast_slot: str) -> torch.Tensor:
        """The convolution (and `activation`) on our kernel or PyTorch's. `fast_slot` names the
        armed C++ fast path of this epilogue (a fused chain's calls have their own)."""
        compiling = torch.compiler.is_compiling()
        if not compiling:  # (graph capture never sees the C++ object)
            fast = self.__dict__.get(fast_slot)
            if fast is not None and output_size is None and planner.forced_variant() is None:
                # The last call's geometry, checked and run in C++ (cuda/binding/prepared_call.cpp);
                # None when this call differs in any way the plan depends on.
                out = fast(input, weight, bias)
                if out is not None:
                    return out
        if self.padding_mode != "zeros":
            raise ValueError("Only `zeros` padding mode is supported for ConvTranspose2d")
        if output_size is None:
            output_padding: Sequence[int] = self.output_padding
        else:
            output_padding = self._output_padding(
                input, output_size, self.stride, self.padding, self.kernel_size,  # type: ignore[arg-type]
                2, self.dilation,  # type: ignore[arg-type]
            )
        fused = activation != "none"
        if not compiling and not input.is_cuda:
            # Off CUDA every plan is PyTorch's convolution: run it without planning, so that
            # the call costs what nn.ConvTranspose2d's does.
            y = F.conv_transpose2d(input, weight, bias, self.stride, self.padding,
                                   output_padding, self.groups, self.dilation)
            return activate(y, activation, negative_slope) if fused else y
        entry: Optional[_Entry] = None
        if input.is_cuda and not compiling and torch.is_autocast_enabled("cuda"):
            # What ATen's autocast does to conv_transpose2d's arguments (our kernel path below
            # bypasses the dispatcher, so it would otherwise run, and return, fp32).
            input, weight, bias = autocast_args(input, weight, bias)
        recorded = grad_calls.records_grad(input, weight, bias)
        if compiling:
            # Graph time: a layer whose eager calls were planned on a kernel of ours, or that
            # the untimed rule may give one, becomes our op (which still plans per call); the
            # rest stay aten convolutions, which Inductor schedules itself. In training graphs
            # (grad_calls) the op, with ATen's backward, only where recorded eager calls train
            # on the grouped kernel whatever their size (planner.trains_in_compiled_graphs);
            # elsewhere Inductor compiles forward and backward as it does for
            # nn.ConvTranspose2d.
            if recorded:
                use_op = not fused and self.kernels_in_training is not False and \
                    planner.trains_in_compiled_graphs(
                        input.device, _call_dtype(input.dtype), self._args(output_padding),
                        self.in_channels, self.out_channels)
            else:
                use_op = self._kernel_planned_eagerly(input) or planner.may_use_kernel(
                    input.device, input.dtype, self.kernel_size, self._args(output_padding),
                    (self.in_channels // self.groups, self.out_channels // self.groups))
        else:
            entry = self._entry_for(input, output_padding, weight, bias, activation,
                                    negative_slope)
            use_op = entry.plan.uses_kernel or entry.tune
            if recorded and not fused and planner.forced_variant() is None and \
                    not self._records_on(entry):
                use_op = False  # (kernels_in_training keeps this recorded call PyTorch's)
            if use_op and not entry.tune and _plain_cuda_tensor(input) and not (
                    recorded and fused):
                # (a recorded call is a node with the planned backward: grad_calls)
                if entry.call is not None:
                    out = entry.call.recorded(input, weight, bias) if recorded else \
                        entry.call(input, weight, bias)
                else:
                    out = first_run(entry, kernel_call(entry.plan.variant, input, weight,
                                                       self._args(output_padding),
                                                       Epilogue(activation=activation,
                                                                negative_slope=negative_slope)),
                                    input, weight, bias, recorded)
                if out is not None:
                    self._arm_fast_path(entry, input, weight, bias, output_size, fast_slot)
                    return out
                use_op = False  # the kernel refused: its plan is PyTorch from now on
        if not use_op:
            # Where the planner runs PyTorch anyway, call it directly and skip the custom op's
            # dispatch overhead (tens of microseconds per call).
            y = F.conv_transpose2d(input, weight, bias, self.stride, self.padding,
                                   output_padding, self.groups, self.dilation)
            if fused:
                return activate(y, activation, negative_slope)
            if entry is not None and (not entry.plan.uses_kernel or recorded):
                # (after PyTorch accepted it; a recorded call that does not train on the
                # planned kernel arms the path for such calls)
                self._arm_fast_path(entry, input, weight, bias, output_size, fast_slot)
            return y
        if fused:
            return conv_transpose2d_fused(
                input, weight, bias, self.stride, self.padding, output_padding, self.groups,
                self.dilation, None, None, activation, negative_slope)
        return conv_transpose2d(input, weight, bias, self.stride, self.padding, output_padding,
                                self.groups, self.dilation)

    def _arm_fast_path(self, entry: _Entry, input: torch.Tensor, weight: torch.Tensor,
                       bias: Optional[torch.Tensor], output_size: Optional[List[int]],
                       fast_slot: str) -> None:
        """Lets the next call with this geometry skip the Python above: a C++ ModuleFastPath for
        the entry's prepared kernel call, or for PyTorch's convolution when that is the plan
        (CUDA inputs only, and only where the extension's core is loaded or built: never a
        reason to build it). Not for output_size= calls, forced variants or plans autotune has
        yet to time."""
        record = self._records_on(entry)
        if output_size is not None or entry.tune or planner.forced_variant() is not None or \
                not input.is_cuda or (entry.plan.uses_kernel and entry.call is None and record):
            return
        ext = built_core()
        if ext is None:
            return
        # (a kernel plan without a prepared call yet is armed for the recorded calls that do
        # not train on it: they run PyTorch's convolution in C++ too)
        self.__dict__[fast_slot] = self._module_fast_path(
            ext, entry.call if entry.plan.uses_kernel else None, input, weight, bias, record,
            entry.plan.uses_kernel)

    def _module_fast_path(self, ext: object, call: Optional[object], input: torch.Tensor,
                          weight: torch.Tensor, bias: Optional[torch.Tensor], record: bool,
                          planned_kernel: bool) -> object:
        """A C++ ModuleFastPath for this call's geometry and this layer's hyperparameters:
        `call` (a PreparedCall) where the plan is a kernel of ours, else None (PyTorch's
        convolution)."""
        return ext.ModuleFastPath(  # type: ignore[attr-defined]
            call, input, weight, bias, list(self.stride), list(self.padding),
            list(self.output_padding), list(self.dilation), self.groups, record, planned_kernel)

    def train(self, mode: bool = True) -> "FastConvTranspose2d":
        super().train(mode)
        chain = self.__dict__.get("_fused_chain")
        if chain is not None:  # (its BatchNorm and activation gate only in eval mode)
            chain.follow_mode(mode)
        return self

    def __setattr__(self, name: str, value: object) -> None:
        # Any attribute change (hyperparameters, activation, parameters, device moves) disarms
        # the fast path; the next call re-plans through Python and re-arms it.
        self.__dict__.pop("_fast_path", None)
        self.__dict__.pop("_fast_path_fused", None)
        self.__dict__.pop("_prefilter", None)
        self.__dict__.pop("_fast_path_recorded", None)
        super().__setattr__(name, value)

    def _args(self, output_padding: Sequence[int]) -> ConvTransposeArgs:
        return ConvTransposeArgs(self.stride, self.padding, tuple(output_padding),  # type: ignore[arg-type]
                                 self.dilation, self.groups)  # type: ignore[arg-type]

    def plan_for(self, input: torch.Tensor,
                 output_padding: Optional[Sequence[int]] = None) -> planner.Plan:
        """Which implementation runs for this input (and the output_padding an `output_size=`
        implies) and why; under CUDA autocast, for the arguments as autocast casts them."""
        weight, bias = self.weight, self.bias
        if input.is_cuda and torch.is_autocast_enabled("cuda"):
            input, weight, bias = autocast_args(input, weight, bias)
        return self._entry_for(input, output_padding, weight, bias, self.activation,
                               self.negative_slope).plan

    def _entry_for(self, input: torch.Tensor, output_padding: Optional[Sequence[int]],
                   weight: torch.Tensor, bias: Optional[torch.Tensor], activation: str,
                   negative_slope: float) -> _Entry:
        """The plan (and prepared call) for this input geometry. Cached per geometry, device,
        dtype, weight/bias, epilogue and backend flags (planner.backend_flags): this runs on
        every call, so a hit is one dict lookup."""
        out_pad = tuple(output_padding) if output_padding is not None else self.output_padding
        forced = planner.forced_variant()  # (a check's or a benchmark's choice)
        key = (input.shape, input.stride(), input.device, input.dtype,
               weight.stride(), weight.dtype, weight.device, bias is None,
               planner.backend_flags(), forced, self.stride,
               self.padding, out_pad, self.dilation, self.groups, activation, negative_slope)
        cache = self.__dict__.setdefault("_plan_cache", {})
        found = cache.get(key)
        if found is not None:
            if forced is None:
                self.__dict__["_last_plan"] = (input.device, input.dtype, found.plan)
            return found
        if len(cache) >= _PLAN_CACHE_SIZE:  # e.g. detection models with varying input sizes
            cache.clear()
        if forced is None and grad_calls.records_grad(input, weight, bias):
            # (a recorded call planned from now on: newer than _pytorch_recorded's record,
            # which _recorded_call_dtype would otherwise read)
            self.__dict__.pop("_recorded_seen", None)
        args = self._args(out_pad)
        if find_problem(input, weight, bias, args) is not None:
            return _Entry(planner.Plan(planner.ATEN, "invalid call: PyTorch raises its error"))
        chosen = planner.plan(input, weight, args)
        if chosen.fallback and input.is_cuda:  # our kernels cannot run here: say so, once
            warnings.warn(f"deconv_patch: {chosen.reason}", FallbackWarning, stacklevel=4)
        if len(chosen.candidates) > 1 and autotune.enabled():
            key_t = autotune.call_key(input, weight, bias is not None, args,
                                      Epilogue(activation=activation,
                                               negative_slope=negative_slope))
            known = autotune.cache().choices.get(key_t)
            if known is None:  # not timed yet: the op autotunes this call; re-plan next time
                return _Entry(chosen, tune=True)
            chosen = planner.Plan(known, "autotuned", candidates=chosen.candidates)
        found = cache[key] = _Entry(chosen, trains=planner.trains_on_kernel(
            chosen.variant, input.dtype, args, weight.shape,
            hopper=planner.hopper_device(input.device),
            # (the layout cuDNN runs the call in: a 1 x 1 input's strides fit both formats)
            call=(input.shape, is_channels_last(input) or is_channels_last(weight))))
        if forced is None:
            self.__dict__["_last_plan"] = (input.device, input.dtype, chosen)
            if chosen.uses_kernel:
                self._record_kernel_plan(input.device, input.dtype)
        return found

    def _record_kernel_plan(self, device: torch.device, dtype: torch.dtype) -> None:
        """Notes that a call on `device` running in `dtype` was planned on a kernel of ours
        (what _kernel_planned_eagerly reads). A new record only when it grows: torch.compile
        guards on it."""
        planned = self.__dict__.get("_kernel_planned", frozenset())
        key = _device_dtype(device, dtype)
        if key not in planned:
            self.__dict__["_kernel_planned"] = planned | {key}

    def _kernel_planned_eagerly(self, input: torch.Tensor) -> bool:
        """Whether an eager call of this module on input's device, in the dtype this call runs
        in, was planned on a kernel of ours (untimed or autotuned: the stride-phase layers the
        graph-time rule leaves to aten among them), or optimize()'s example inputs were. Read
        at torch.compile's graph time; the record only grows, so a compiled graph recompiles at
        most once per device and dtype.
        Not under torch.export, whose programs keep the graph-time rule so that they do not
        depend on what the exporting process ran."""
        if _exporting():
            return False
        planned = self.__dict__.get("_kernel_planned")
        return planned is not None and \
            _device_dtype(input.device, _call_dtype(input.dtype)) in planned

    def __getstate__(self) -> dict:
        # The plan cache holds prepared kernel calls (closures): a cache, never pickled or
        # deep-copied; the copy re-plans on its first call.
        return {k: v for k, v in self.__dict__.items() if k not in self.TRANSIENT_STATE}

    def extra_repr(self) -> str:
        fused = ""
        if self.activation != "none":
            slope = f"({self.negative_slope})" if self.activation == "leaky_relu" else ""
            fused = f", activation={self.activation}{slope}"
        return f"{super().extra_repr()}{fused}, backend={self.backend}"

    def _stored_weight(self) -> torch.Tensor:
        """The weight as stored, for its device and dtype: reading `self.weight` of a
        parametrized or spectral-normed module would compute it (a power iteration step in
        training mode, which changes the module's state)."""
        stored = self._parameters.get("weight")
        if stored is not None:
            return stored
        parametrizations = self._modules.get("parametrizations")
        if parametrizations is not None and "weight" in parametrizations:
            return parametrizations["weight"].original
        for name in ("weight_orig", "weight_v", "weight"):  # legacy spectral / weight norm
            found = self._parameters.get(name, self.__dict__.get(name))
            if isinstance(found, torch.Tensor):
                return found
        return self.weight

    @property
    def training_backend(self) -> str:
        """What a call autograd records runs, by `backend`'s plan: that kernel where
        kernels_in_training gives it our kernel (by default planner.trains_on_kernel, for the
        dtype the calls run in: _recorded_call_dtype; for the last call's size and layout
        where that call's plan is `backend`'s; PyTorch's where the size decides and no call
        was planned), else PyTorch's convolution ("aten")."""
        if self.activation != "none":
            return planner.ATEN
        chosen = self.kernels_in_training
        if chosen is not None:
            return self.backend if chosen else planner.ATEN
        stored = self._stored_weight()
        dtype = self._recorded_call_dtype(stored)
        least = self._training_prefilter().least_macs(dtype)
        if least is None:
            return planner.ATEN
        backend = self.backend
        last = self.__dict__.get("_last_plan")
        last_plan = last[2] if last is not None and last[2].variant == backend else None
        trains = next((entry.trains for entry in self.__dict__.get("_plan_cache", {}).values()
                       if entry.plan is last_plan), None)
        if trains is None and least:
            # (the call's size decides, and no call of this layer has been planned: its
            # recorded calls below that size, all of them so far, ran PyTorch's)
            trains = False
        if trains is None:
            trains = planner.trains_on_kernel(
                backend, dtype, self._args(self.output_padding), stored.shape,
                hopper=planner.hopper_device(stored.device))
        return backend if trains else planner.ATEN

    def _recorded_call_dtype(self, stored: torch.Tensor) -> torch.dtype:
        """The dtype this module's recorded calls run in: autocast's 16-bit dtype where the
        last recorded geometry sent to PyTorch's convolution before planning ran an fp32 weight
        under CUDA autocast (such calls plan nothing, so _call_dtype cannot see them; a
        recorded call planned for a new geometry since drops that record), else _call_dtype."""
        seen = self.__dict__.get("_recorded_seen")
        if seen is not None and stored.is_cuda and stored.dtype == torch.float32 \
                and seen[3] in (torch.float16, torch.bfloat16):
            return seen[3]
        return self._call_dtype(stored)

    def _call_dtype(self, stored: torch.Tensor) -> torch.dtype:
        """The dtype this module's calls run in: the stored weight's, or the 16-bit dtype of the
        last call where that ran an fp32 weight in 16-bit on its device (CUDA autocast: a
        bf16-autocast step trains where its 16-bit plan says, not where fp32's would)."""
        last = self.__dict__.get("_last_plan")
        if last is not None and last[0] == stored.device and stored.dtype == torch.float32 \
                and last[1] in (torch.float16, torch.bfloat16):
            return last[1]
        return stored.dtype

    @property
    def backend(self) -> str:
        """Which implementation runs for this module's current device and dtype: the plan of its
        last call when that ran on them (a plan can depend on the input's size: a 1 x 1 input
        runs as a kernel == stride layer, ConvTransposeArgs.kernel_view; calls under
        planner.use_variant, such as optimize()'s fused check, do not count; an fp32 module's
        calls under CUDA autocast count in autocast's dtype: _call_dtype), or of optimize()'s
        example call before any ran, else the input-size independent rule (planner.describe)."""
        stored = self._stored_weight()
        dtype = self._call_dtype(stored)
        last = self.__dict__.get("_last_plan")
        if last is not None and last[0] == stored.device and last[1] == dtype:
            return last[2].variant
        args = ConvTransposeArgs(self.stride, self.padding, self.output_padding,  # type: ignore[arg-type]
                                 self.dilation, self.groups)  # type: ignore[arg-type]
        return planner.describe(stored.device, dtype, self.kernel_size, args,
                                (self.in_channels // self.groups, self.out_channels // self.groups))


def _exporting() -> bool:
    """Whether torch.export is tracing. Read from the flag torch.export sets, not through
    torch.compiler.is_exporting(): torch 2.11's Dynamo folds that call to True under every
    torch.compile."""
    flag = getattr(torch.compiler, "_is_exporting_flag", None)
    return torch.compiler.is_exporting() if flag is None else bool(flag)


def _device_dtype(device: torch.device, dtype: torch.dtype) -> Tuple[str, str]:
    """A device and dtype as strings: a record torch.compile guards on as a plain constant."""
    return str(device), str(dtype)


def _call_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a CUDA call on an input of `dtype` runs in: under CUDA autocast, autocast's
    (the op's autocast rule casts float32 and 16-bit inputs, as ATen's convolutions do), else
    the input's."""
    if dtype in (torch.float32, torch.float16, torch.bfloat16) and \
            torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    return dtype


def example_plan(module: "FastConvTranspose2d", shape: Sequence[int], stride: Sequence[int],
                 dtype: torch.dtype, device: torch.device, activations: Sequence[str] = ()
                 ) -> Tuple[Optional[planner.Plan], Tuple[str, ...]]:
    """The plan a call of `module` on an input of this geometry gets without autotune, and the
    build units it would load: for `activations` (a fused chain's, which its calls will run
    with), else the module's own activation, in the dtype the call runs in (autocast's, inside
    CUDA autocast). Planned on fake tensors of the geometry (planning reads no tensor data).
    No plan and no units for CPU calls and invalid calls. With autotune on, no plan (it times
    the call first) and its candidates' units, which the timing runs. Whether a weight fits
    gemm_out_tile is its binding's answer, and asking would compile its unit on its own first:
    for such a plan the units of both answers are listed (to compile in one step), and the
    plan is None."""
    if device.type != "cuda":
        return None, ()
    from torch._subclasses.fake_tensor import FakeTensorMode

    dtype = _call_dtype(dtype)
    stored = module._stored_weight()
    with FakeTensorMode():
        x = torch.empty_strided(tuple(shape), tuple(stride), dtype=dtype, device=device)
        w = torch.empty_strided(tuple(stored.shape), tuple(stored.stride()), dtype=dtype,
                                device=device)
    args = module._args(module.output_padding)
    if find_problem(x, w, None, args) is not None:
        return None, ()
    fused = tuple(dict.fromkeys(activations)) or (module.activation,)
    with planner.out_tile_fit_assumed(True):
        chosen = planner.plan(x, w, args)
    plans = [chosen]
    if chosen.variant == planner.GEMM_OUT_TILE:
        with planner.out_tile_fit_assumed(False):
            plans.append(planner.plan(x, w, args))
    timed = autotune.enabled() and len(chosen.candidates) > 1
    variants = chosen.candidates if timed else [p.variant for p in plans]
    units = tuple(dict.fromkeys(u for v in variants for a in fused
                                for u in variant_units(v, a, dtype)))
    return (chosen if len(plans) == 1 and not timed else None), units


def prepare_kernels(calls: Iterable[Tuple["FastConvTranspose2d", Tuple]],
                    fused: Optional[Dict[int, str]] = None) -> Tuple[str, ...]:
    """Compiles at once the build units these calls (module, input geometry: shape, stride,
    dtype, device) will load, before the first of them runs (with autotune on, the units its
    timing runs); returns them. `fused`: the activation a fused chain will give a module's
    calls (by id), listed instead of the module's own (validate() runs such a layer fused
    too; a chain the fused check declines compiles its unfused units on its first call).
    Inside compile_together() the units are gathered for its end instead. Never raises:
    whatever cannot be planned or built here is met by the calls themselves, as without it."""
    units: Set[str] = set()
    try:
        for module, geometry in calls:
            extra = (fused[id(module)],) if fused and id(module) in fused else ()
            chosen, needed = example_plan(module, *geometry, activations=extra)
            units.update(needed)
            if chosen is not None:  # what `backend` (and so summary()) shows until a call runs
                module.__dict__["_last_plan"] = (geometry[3], geometry[2], chosen)
                if chosen.uses_kernel and planner.forced_variant() is None:
                    # (so that torch.compile(optimize(model, example_inputs)) follows it too)
                    module._record_kernel_plan(geometry[3], _call_dtype(geometry[2]))
        gathered = _gathered_units.get()
        if gathered is not None:  # compile_together() compiles them at its end
            gathered.update(units)
        elif units:
            compile_units(sorted(units))
    except Exception as exc:  # a help for the first call, never a new way to fail
        warnings.warn(f"deconv_patch: could not compile the model's kernels ahead of its "
                      f"first call ({type(exc).__name__}: {exc}); they compile on first use",
                      RuntimeWarning, stacklevel=2)
        return ()
    return tuple(sorted(units))


# The units prepare_kernels listed inside a compile_together() block (None outside one).
_gathered_units: contextvars.ContextVar[Optional[Set[str]]] = contextvars.ContextVar(
    "deconv_patch_gathered_units", default=None)


@contextlib.contextmanager
def compile_together() -> Iterator[None]:
    """Compiles the kernels of every optimize(model, example_inputs) call inside the block in
    one step at its end, instead of one step per call: for several models, or one model in
    several dtypes, whose kernels then build side by side on all cores. A patched model run
    inside the block compiles what its calls meet on their own, as without example inputs.

        with deconv_patch.compile_together():
            fast = deconv_patch.optimize(model, (x,))
            fast_bf16 = deconv_patch.optimize(model_bf16, (x.bfloat16(),))
    """
    outer = _gathered_units.get()
    units: Set[str] = set() if outer is None else outer
    token = _gathered_units.set(units)
    try:
        yield
    finally:
        _gathered_units.reset(token)
    if outer is None and units:
        try:
            compile_units(sorted(units))
        except Exception as exc:  # as in prepare_kernels: the first calls compile instead
            warnings.warn(f"deconv_patch: could not compile the models' kernels at once "
                          f"({type(exc).__name__}: {exc}); they compile on first use",
                          RuntimeWarning, stacklevel=3)
