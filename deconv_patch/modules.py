"""`FastConvTranspose2d`: an `nn.ConvTranspose2d` whose forward runs the deconv_patch op.

It *is* an nn.ConvTranspose2d (subclass): same parameters, names, shapes, state_dict keys,
`output_size=` contract and repr, so checkpoints load both ways and code that type-checks for
ConvTranspose2d keeps working.
"""

from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from . import planner
from .arguments import ConvTransposeArgs
from .ops import conv_transpose2d


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
        if not torch.compiler.is_compiling() and not self._plan(input).uses_kernel:
            # Eager fast path: where the planner runs PyTorch anyway, call it directly and skip
            # the custom op's dispatch overhead (tens of microseconds per call).
            return F.conv_transpose2d(
                input, self.weight, self.bias, self.stride, self.padding, output_padding,
                self.groups, self.dilation,
            )
        return conv_transpose2d(
            input, self.weight, self.bias, self.stride, self.padding, output_padding,
            self.groups, self.dilation,
        )

    def _plan(self, input: torch.Tensor) -> planner.Plan:
        """The layer's plan, cached per (device, dtype, backend flags): this runs every call."""
        key = (input.device, input.dtype, torch.backends.cudnn.enabled,
               torch.backends.cudnn.allow_tf32, planner.forced_variant(), self.stride,
               self.padding, self.output_padding, self.dilation, self.groups, self.kernel_size)
        cache = self.__dict__.setdefault("_plan_cache", {})
        found = cache.get(key)
        if found is None:
            args = ConvTransposeArgs(self.stride, self.padding, self.output_padding,  # type: ignore[arg-type]
                                     self.dilation, self.groups)  # type: ignore[arg-type]
            found = cache[key] = planner.plan_layer(input.device, input.dtype, self.kernel_size,
                                                    args)
        return found

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, backend={self.backend}"

    @property
    def backend(self) -> str:
        """Which implementation runs for this module's current device and dtype."""
        args = ConvTransposeArgs(self.stride, self.padding, self.output_padding,  # type: ignore[arg-type]
                                 self.dilation, self.groups)  # type: ignore[arg-type]
        return planner.describe(self.weight.device, self.weight.dtype, self.kernel_size, args)
