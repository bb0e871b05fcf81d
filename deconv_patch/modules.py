"""`FastConvTranspose2d`: an `nn.ConvTranspose2d` whose forward runs the deconv_patch op.

It *is* an nn.ConvTranspose2d (subclass): same parameters, names, shapes, state_dict keys,
`output_size=` contract and repr, so checkpoints load both ways and code that type-checks for
ConvTranspose2d keeps working.
"""

from __future__ import annotations

import warnings
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from . import autotune, planner
from .arguments import ConvTransposeArgs, find_problem
from .ops import FallbackWarning, conv_transpose2d


_PLAN_CACHE_SIZE = 256


class FastConvTranspose2d(nn.ConvTranspose2d):
    """nn.ConvTranspose2d backed by deconv_patch's CUDA kernels (ATen on other devices)."""

    @classmethod
    def from_module(cls, module: nn.ConvTranspose2d) -> "FastConvTranspose2d":
        """A FastConvTranspose2d sharing `module`'s parameters (no copy) and hyperparameters.

        Passing a FastConvTranspose2d returns it unchanged, so patching is idempotent.
        """
        if isinstance(module, FastConvTranspose2d):
            return module
        if not isinstance(module, nn.ConvTranspose2d):
            raise TypeError(
                f"FastConvTranspose2d.from_module expects nn.ConvTranspose2d, got "
                f"{type(module).__name__}"
            )
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
        return fast

    def forward(self, input: torch.Tensor, output_size: Optional[List[int]] = None) -> torch.Tensor:
        if self.padding_mode != "zeros":
            raise ValueError("Only `zeros` padding mode is supported for ConvTranspose2d")
        output_padding = self._output_padding(
            input, output_size, self.stride, self.padding, self.kernel_size,  # type: ignore[arg-type]
            2, self.dilation,  # type: ignore[arg-type]
        )
        if torch.compiler.is_compiling():
            # Graph time: layers no kernel of ours covers stay aten convolutions, which Inductor
            # schedules itself; the rest become our op (which still plans per call).
            args = ConvTransposeArgs(self.stride, self.padding, tuple(output_padding),  # type: ignore[arg-type]
                                     self.dilation, self.groups)  # type: ignore[arg-type]
            use_op = planner.may_use_kernel(input.device, input.dtype, self.kernel_size, args)
        else:
            use_op = self.plan_for(input, output_padding).uses_kernel
        if not use_op:
            # Where the planner runs PyTorch anyway, call it directly and skip the custom op's
            # dispatch overhead (tens of microseconds per call).
            return F.conv_transpose2d(
                input, self.weight, self.bias, self.stride, self.padding, output_padding,
                self.groups, self.dilation,
            )
        return conv_transpose2d(
            input, self.weight, self.bias, self.stride, self.padding, output_padding,
            self.groups, self.dilation,
        )

    def plan_for(self, input: torch.Tensor,
                 output_padding: Optional[Sequence[int]] = None) -> planner.Plan:
        """Which implementation runs for this input (and the output_padding an `output_size=`
        implies) and why. Cached per input geometry, device, dtype and backend flags: this runs
        on every call, so a hit is one dict lookup."""
        out_pad = tuple(output_padding) if output_padding is not None else self.output_padding
        key = (tuple(input.shape), input.stride(), input.device, input.dtype,
               self.weight.stride(), torch.backends.cudnn.enabled,
               torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark,
               planner.forced_variant(), self.stride, self.padding, out_pad,
               self.dilation, self.groups)
        cache = self.__dict__.setdefault("_plan_cache", {})
        found = cache.get(key)
        if found is not None:
            return found
        if len(cache) >= _PLAN_CACHE_SIZE:  # e.g. detection models with varying input sizes
            cache.clear()
        args = ConvTransposeArgs(self.stride, self.padding, out_pad,  # type: ignore[arg-type]
                                 self.dilation, self.groups)  # type: ignore[arg-type]
        bias = self.bias
        if find_problem(input, self.weight, bias, args) is not None:
            return planner.Plan(planner.ATEN, "invalid call: PyTorch raises its error")
        found = planner.plan(input, self.weight, args)
        if found.fallback and input.is_cuda:  # our kernels cannot run here: say so, once
            warnings.warn(f"deconv_patch: {found.reason}", FallbackWarning, stacklevel=3)
        if len(found.candidates) > 1 and autotune.enabled():
            key_t = autotune.call_key(input, self.weight, bias is not None, args)
            known = autotune.cache().choices.get(key_t)
            if known is None:
                return found  # not timed yet: the op autotunes this call; re-plan next time
            found = planner.Plan(known, "autotuned", candidates=found.candidates)
        cache[key] = found
        return found

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, backend={self.backend}"

    @property
    def backend(self) -> str:
        """Which implementation runs for this module's current device and dtype."""
        args = ConvTransposeArgs(self.stride, self.padding, self.output_padding,  # type: ignore[arg-type]
                                 self.dilation, self.groups)  # type: ignore[arg-type]
        return planner.describe(self.weight.device, self.weight.dtype, self.kernel_size, args)
