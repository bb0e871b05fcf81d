"""The fused epilogue: what a kernel does to each accumulator before its one rounding.

    y = activation((conv(x) + bias) * scale + shift)          scale, shift: per output channel

The CUDA kernels compute it in fp32 on the accumulator (cuda/common/epilogue.cuh); this file
checks the activation names (deconv_patch/kernels/activations.py), holds the PyTorch reference
used on every other path, and the mapping from the torch.nn activation modules that optimize()
fuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .derived import original_class
from .kernels.activations import ACTIVATIONS  # name -> code in the CUDA `Activation` enum

DEFAULT_NEGATIVE_SLOPE = 0.01


def check_activation(name: str) -> int:
    """The CUDA code of an activation name; a clear error for anything else."""
    code = ACTIVATIONS.get(name)
    if code is None:
        raise ValueError(f"deconv_patch: unknown activation {name!r}; choose from "
                         f"{', '.join(ACTIVATIONS)}")
    return code


def activate(y: torch.Tensor, name: str, negative_slope: float = DEFAULT_NEGATIVE_SLOPE
             ) -> torch.Tensor:
    """The activation with PyTorch's own functions (the same ones the fused modules call)."""
    if name == "none":
        return y
    if name == "relu":
        return F.relu(y)
    if name == "leaky_relu":
        return F.leaky_relu(y, negative_slope)
    if name == "silu":
        return F.silu(y)
    if name == "gelu":
        return F.gelu(y)
    if name == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    if name == "tanh":
        return torch.tanh(y)
    if name == "sigmoid":
        return torch.sigmoid(y)
    if name == "hardswish":
        return F.hardswish(y)
    check_activation(name)
    raise AssertionError(name)


def apply_epilogue(y: torch.Tensor, scale: Optional[torch.Tensor], shift: Optional[torch.Tensor],
                   activation: str, negative_slope: float) -> torch.Tensor:
    """Reference epilogue on a conv output `y` ([N, C, H, W] or [C, H, W]).

    Without scale/shift this is exactly what the unfused model computes (conv, then the
    activation module), so layers PyTorch runs stay bit-identical to the original.
    """
    if scale is not None or shift is not None:
        shape = (-1, 1, 1)
        dtype = y.dtype
        wide = torch.promote_types(dtype, torch.float32)  # fp32 like the kernels; fp64 stays
        z = y.to(wide)
        if scale is not None:
            z = z * scale.to(wide).reshape(shape)
        if shift is not None:
            z = z + shift.to(wide).reshape(shape)
        return activate(z, activation, negative_slope).to(dtype)
    return activate(y, activation, negative_slope)


@dataclass(frozen=True)
class FusedActivation:
    """An activation the epilogue can apply, read from a module or function call."""

    name: str
    negative_slope: float = DEFAULT_NEGATIVE_SLOPE


def _from_gelu(approximate: Any) -> Optional[FusedActivation]:
    if approximate == "none":
        return FusedActivation("gelu")
    if approximate == "tanh":
        return FusedActivation("gelu_tanh")
    return None


def activation_of_module(m: nn.Module) -> Optional[FusedActivation]:
    """The fusable activation `m` computes, or None (subclasses are not trusted: they may
    override forward; deconv_patch's own gate classes stand for the class they extend)."""
    kind = original_class(m)
    if kind is nn.ReLU:
        return FusedActivation("relu")
    if kind is nn.LeakyReLU:
        return FusedActivation("leaky_relu", float(m.negative_slope))  # type: ignore[arg-type]
    if kind is nn.SiLU:
        return FusedActivation("silu")
    if kind is nn.GELU:
        return _from_gelu(m.approximate)
    if kind is nn.Tanh:
        return FusedActivation("tanh")
    if kind is nn.Sigmoid:
        return FusedActivation("sigmoid")
    if kind is nn.Hardswish:
        return FusedActivation("hardswish")
    return None


@dataclass(frozen=True)
class Epilogue:
    """A fused epilogue for one call: per-channel scale/shift (any float dtype; kernels read
    them as fp32) and an activation."""

    scale: Optional[torch.Tensor] = None
    shift: Optional[torch.Tensor] = None
    activation: str = "none"
    negative_slope: float = DEFAULT_NEGATIVE_SLOPE

    @property
    def is_identity(self) -> bool:
        return self.scale is None and self.shift is None and self.activation == "none"

    def apply(self, y: torch.Tensor) -> torch.Tensor:
        """The reference: this epilogue applied to a finished conv output."""
        return apply_epilogue(y, self.scale, self.shift, self.activation, self.negative_slope)

    def kernel_args(self, device: torch.device) -> tuple:
        """(scale, shift, activation code, slope) as the binding takes them: fp32 contiguous."""
        def fp32(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
            return None if t is None else t.detach().to(device=device, dtype=torch.float32
                                                        ).contiguous()
        return (fp32(self.scale), fp32(self.shift), check_activation(self.activation),
                float(self.negative_slope))


IDENTITY = Epilogue()
