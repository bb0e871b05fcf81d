"""The precision rules the tensor-core families share: TF32, and where 3xTF32 is accurate enough."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..arguments import ConvTransposeArgs
from ..layout import is_channels_last

# 3xTF32 carries each fp32 operand as two TF32 numbers (22 of fp32's 24 significant bits) and
# tensor-core sums truncate, so each product is a few fp32 ulps off where FFMA is half an ulp
# off. fp32's own rounding hides that once an output sums enough products; below this depth
# the result can exceed the GPU tests' bound (2x PyTorch's error + 1 ulp), so cuDNN keeps those
# calls. Measured on the H100 (benchmarks/strict_error_scan.py, worst error / bound over 400
# random gemm_kxs layers): depth 1: 1.84, 16-31: 1.13, 32-63: 0.81, >= 64: 0.58, falling about
# as 1/sqrt(depth); 64 keeps a 1.7x margin and every layer of the benchmark suite (>= 128).
MIN_3XTF32_DEPTH = 64

# torch 2.9 and later set TF32 per backend and operator (torch.backends.cudnn.conv.fp32_precision);
# ATen's convolutions read the "conv" setting, and the legacy flag's getter raises once conv and
# RNN are set apart. Where that API is missing the legacy flag is the setting.
_FP32_PRECISION = getattr(torch._C, "_get_fp32_precision_getter", None)


def conv_tf32() -> bool:
    """Whether PyTorch's float32 convolutions on CUDA may use TF32, the setting our kernels
    follow (read on every planned call: a C getter, no torch.backends property)."""
    if _FP32_PRECISION is None:
        return torch._C._get_cudnn_allow_tf32()
    return _FP32_PRECISION("cuda", "conv") == "tf32"


def matmul_tf32() -> bool:
    """Whether PyTorch's float32 matmuls on CUDA may use TF32 (cuBLAS; ATen's native
    convolution kernels run their GEMMs there), read as conv_tf32 reads the conv setting."""
    if _FP32_PRECISION is None:
        return torch._C._get_cublas_allow_tf32()
    return _FP32_PRECISION("cuda", "matmul") == "tf32"


def runs_native_kernels(args: ConvTransposeArgs) -> bool:
    """Whether PyTorch computes a call with these hyperparameters on CUDA in its native kernels
    (slow_conv_transpose2d: im2col / col2im around cuBLAS GEMMs) instead of cuDNN: where cuDNN is
    disabled, where it has no kernel (output_padding >= stride), and, in deterministic mode
    (torch.use_deterministic_algorithms or cudnn.deterministic), for a dilated layer, where
    ATen skips cuDNN unless the input or weight is channels_last. That last case is answered
    for every layout (the hyperparameters alone); planner.plan keeps a channels_last one on
    PyTorch's convolution where the two settings differ (cudnn_keeps_dilated_channels_last)."""
    # (args.without_cudnn written out: a recorded call's prefilter asks this on every call)
    output_padding, stride = args.output_padding, args.stride
    if output_padding[0] >= stride[0] or output_padding[1] >= stride[1] or \
            not torch._C._get_cudnn_enabled():
        return True
    return args.dilation != (1, 1) and (torch._C._get_deterministic_algorithms()
                                        or torch._C._get_cudnn_deterministic())


def cudnn_keeps_dilated_channels_last(args: ConvTransposeArgs, input: torch.Tensor,
                                      weight: torch.Tensor) -> bool:
    """The case runs_native_kernels answers for every layout: a dilated layer in deterministic
    mode whose input or weight is channels_last, which ATen still gives cuDNN (at the
    convolution setting's precision), cuDNN being enabled and having a kernel for it."""
    return (args.dilation != (1, 1) and not args.without_cudnn and torch._C._get_cudnn_enabled()
            and (torch._C._get_deterministic_algorithms() or torch._C._get_cudnn_deterministic())
            and (is_channels_last(input) or is_channels_last(weight)))


def tf32_allowed(args: ConvTransposeArgs) -> bool:
    """Whether PyTorch's own float32 computation of a call may use TF32, the setting our kernels
    follow: cuDNN's convolutions read the conv setting (conv_tf32); PyTorch's native kernels
    make their GEMMs in cuBLAS, which reads the matmul one (matmul_tf32; off by default)."""
    return matmul_tf32() if runs_native_kernels(args) else conv_tf32()


def fp32_strict(dtype: torch.dtype, args: ConvTransposeArgs) -> bool:
    """fp32 where PyTorch computes the call without TF32 (tf32_allowed False): the tensor-core
    variants run 3xTF32 there, and the others FFMA."""
    return dtype == torch.float32 and not tf32_allowed(args)


def reduction_depth(in_per_group: int, kernel_hw: Sequence[int], args: ConvTransposeArgs) -> int:
    """About how many products each output element sums: input channels per group x the taps
    of a stride phase (kernel area / stride area, at least 1)."""
    taps = (kernel_hw[0] * kernel_hw[1]) // (args.stride[0] * args.stride[1])
    return in_per_group * max(1, taps)


def tensor_core_problem(dtype: torch.dtype, args: ConvTransposeArgs,
                        depth: Optional[int] = None) -> Optional[str]:
    """Why the tensor-core variants cannot run a call of this dtype and these hyperparameters,
    or None when they can. fp32 without TF32 runs 3xTF32 when each output sums at least
    MIN_3XTF32_DEPTH products (`depth`, unknown = not)."""
    if fp32_strict(dtype, args) and (depth is None or depth < MIN_3XTF32_DEPTH):
        return ("fp32 without TF32 (PyTorch's convolution runs full fp32) in a sum of fewer "
                f"than {MIN_3XTF32_DEPTH} products")
    return None


def depth_of(weight: "torch.Tensor", args: ConvTransposeArgs) -> int:
    """reduction_depth of a call's weight ([Cin, Cout/g, KH, KW])."""
    return reduction_depth(weight.shape[0] // args.groups, weight.shape[-2:], args)


def strict_refusal(dtype: torch.dtype, args: ConvTransposeArgs, depth: int) -> Optional[str]:
    """A tensor-core family's refusal of fp32 without TF32 on a sum of `depth` products."""
    problem = tensor_core_problem(dtype, args, depth)
    if problem is None:
        return None
    return (f"{problem} (3xTF32 would exceed fp32's error bound; see "
            "kernels.precision.MIN_3XTF32_DEPTH)")


def shallow_sum_refusal(dtype: torch.dtype, weight: torch.Tensor, args: ConvTransposeArgs,
                        variant: str) -> Optional[str]:
    """The refusal rule of the tensor-core families whose sums run over the layer's depth
    (input channels x a stride phase's taps): gemm_kxs, gemm_phase, gemm_phase_tma."""
    return strict_refusal(dtype, args, depth_of(weight, args))
