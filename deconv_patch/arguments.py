"""Normalised ConvTranspose2d hyperparameters and the checks that decide whether a call is valid.

The op never invents its own error messages for invalid calls: when `find_problem` reports one,
the op hands the call to ATen, which raises exactly the error PyTorch users know (and if ATen
accepts what we flagged, its result is returned: an explicit fallback, never a wrong answer).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence, Tuple, Union

import torch

IntPair = Tuple[int, int]
IntOrPair = Union[int, Sequence[int]]

INT32_MAX = 2**31 - 1


def pair(value: IntOrPair, name: str = "argument") -> IntPair:
    """(a, b) from an int or a 1- or 2-element sequence, as ATen's int[2] arguments accept."""
    if isinstance(value, int):
        return (value, value)
    if isinstance(value, torch.Size) or isinstance(value, (list, tuple)):
        values = tuple(int(v) for v in value)
        if len(values) == 1:
            return (values[0], values[0])
        if len(values) == 2:
            return values  # type: ignore[return-value]
    raise RuntimeError(f"{name} must be an int or a sequence of 2 ints, got {value!r}")


def output_padding_reaches_stride(output_padding: Sequence[int], stride: Sequence[int]) -> bool:
    """output_padding >= stride on an axis (possible where the dilation exceeds the stride):
    PyTorch has no cuDNN kernel for such a call and runs its native slow_conv_transpose2d,
    forward and backward. (Written out rather than any() over a generator: training's prefilter
    asks it on every recorded call.)"""
    return output_padding[0] >= stride[0] or output_padding[1] >= stride[1]


@dataclass(frozen=True)
class ConvTransposeArgs:
    """The hyperparameters of one conv_transpose2d call, each as an (h, w) pair."""

    stride: IntPair = (1, 1)
    padding: IntPair = (0, 0)
    output_padding: IntPair = (0, 0)
    dilation: IntPair = (1, 1)
    groups: int = 1

    @classmethod
    def from_values(
        cls,
        stride: IntOrPair = 1,
        padding: IntOrPair = 0,
        output_padding: IntOrPair = 0,
        groups: int = 1,
        dilation: IntOrPair = 1,
    ) -> "ConvTransposeArgs":
        return cls(
            stride=pair(stride, "stride"),
            padding=pair(padding, "padding"),
            output_padding=pair(output_padding, "output_padding"),
            dilation=pair(dilation, "dilation"),
            groups=int(groups),
        )

    def output_hw(self, in_hw: Sequence[int], kernel_hw: Sequence[int]) -> IntPair:
        """Output height and width: (in - 1)*stride - 2*pad + dil*(k - 1) + output_padding + 1."""
        return tuple(  # type: ignore[return-value]
            (in_hw[i] - 1) * self.stride[i]
            - 2 * self.padding[i]
            + self.dilation[i] * (kernel_hw[i] - 1)
            + self.output_padding[i]
            + 1
            for i in range(2)
        )

    @property
    def without_cudnn(self) -> bool:
        """Whether PyTorch has no cuDNN kernel for this call (output_padding_reaches_stride)."""
        return output_padding_reaches_stride(self.output_padding, self.stride)

    def kernel_view(self, in_hw: Sequence[int], kernel_hw: Sequence[int]) -> "ConvTransposeArgs":
        """The hyperparameters our kernels are planned and launched with. A 1 x 1 input (DCGAN's
        first layer: a latent vector to a k x k map) never uses its stride: with padding 0,
        dilation 1 and output_padding 0 every stride gives the same k x k output, so the stride
        is taken to be the kernel size. The layer is then a k == stride one, a single GEMM
        [N x Cin] . [Cin x Cout*k*k] (gemm_kxs, gemm_kxs_sm90), instead of a stride-1 implicit
        GEMM in which all but one of the k*k taps of every output pixel fall outside the input
        (gemm_phase and cuDNN: 25-37 us on the H100 for DCGAN's 100 > 512 layer at batch 64,
        a 1 MB output). PyTorch's own path keeps the arguments as given."""
        if tuple(in_hw) != (1, 1) or any(self.padding) or any(self.output_padding) or \
                self.dilation != (1, 1):
            return self
        k = (int(kernel_hw[0]), int(kernel_hw[1]))
        return self if self.stride == k else replace(self, stride=k)


def find_problem(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    args: ConvTransposeArgs,
) -> Optional[str]:
    """A short description of why PyTorch would reject this call, or None when it is valid.

    Covers every check ATen's transposed convolution makes; tests assert that each config ATen
    rejects is flagged here, and that valid configs are not.
    """
    if input.dim() not in (3, 4):
        return f"input must be 3-D or 4-D, got {input.dim()}-D"
    if weight.dim() != 4:
        return f"weight must be 4-D, got {weight.dim()}-D"
    if any(s <= 0 for s in args.stride):
        return "non-positive stride"
    if any(p < 0 for p in args.padding):
        return "negative padding"
    if any(p < 0 for p in args.output_padding):
        return "negative output_padding"
    if any(d <= 0 for d in args.dilation):
        return "non-positive dilation"
    if args.groups <= 0:
        return "non-positive groups"
    channels = input.shape[-3]
    if weight.shape[0] != channels:
        return f"weight expects {weight.shape[0]} input channels, input has {channels}"
    if channels % args.groups != 0:
        return "groups does not divide the input channels"
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != weight.shape[1] * args.groups):
        return "bias shape does not match the output channels"
    for i in range(2):
        if not (
            args.output_padding[i] < args.stride[i] or args.output_padding[i] < args.dilation[i]
        ):
            return "output_padding must be smaller than stride or dilation"
    if any(s <= 0 for s in args.output_hw(input.shape[-2:], weight.shape[-2:])):
        return "output size is too small"
    if channels == 0 or any(s == 0 for s in input.shape[-2:]):
        return "input has an empty channel or spatial dimension"
    if any(s == 0 for s in weight.shape[1:]):
        return "weight has an empty output-channel or kernel dimension"
    for t, name in ((weight, "weight"), (bias, "bias")):
        if t is None:
            continue
        if t.device != input.device:
            return f"{name} is on {t.device}, input on {input.device}"
        if t.dtype != input.dtype:
            return f"{name} dtype {t.dtype} differs from input dtype {input.dtype}"
    return None


def fits_int32(input: torch.Tensor, weight: torch.Tensor, args: ConvTransposeArgs) -> bool:
    """Whether every hyperparameter and spatial size fits the kernels' 32-bit fields."""
    values = (
        *args.stride,
        *args.padding,
        *args.output_padding,
        *args.dilation,
        *input.shape[-2:],
        *weight.shape[-2:],
        *args.output_hw(input.shape[-2:], weight.shape[-2:]),
    )
    return all(abs(int(v)) + max(args.padding) <= INT32_MAX for v in values)
