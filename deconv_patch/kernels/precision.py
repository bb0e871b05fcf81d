"""The precision rules the tensor-core families share: TF32, and where 3xTF32 is accurate enough."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..arguments import ConvTransposeArgs

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


def fp32_strict(dtype: torch.dtype) -> bool:
    """fp32 with TF32 not allowed for convolutions (conv_tf32 False): the tensor-core variants
    run 3xTF32 there."""
    return dtype == torch.float32 and not conv_tf32()


def reduction_depth(in_per_group: int, kernel_hw: Sequence[int], args: ConvTransposeArgs) -> int:
    """About how many products each output element sums: input channels per group x the taps
    of a stride phase (kernel area / stride area, at least 1)."""
    taps = (kernel_hw[0] * kernel_hw[1]) // (args.stride[0] * args.stride[1])
    return in_per_group * max(1, taps)


def tensor_core_problem(dtype: torch.dtype, depth: Optional[int] = None) -> Optional[str]:
    """Why the tensor-core variants cannot run a dtype, or None when they can. fp32 without TF32
    runs 3xTF32 when each output sums at least MIN_3XTF32_DEPTH products (`depth`, unknown =
    not)."""
    if fp32_strict(dtype) and (depth is None or depth < MIN_3XTF32_DEPTH):
        return ("fp32 without TF32 (PyTorch's convolutions run full fp32) in a sum of fewer "
                f"than {MIN_3XTF32_DEPTH} products")
    return None


def depth_of(weight: "torch.Tensor", args: ConvTransposeArgs) -> int:
    """reduction_depth of a call's weight ([Cin, Cout/g, KH, KW])."""
    return reduction_depth(weight.shape[0] // args.groups, weight.shape[-2:], args)


def strict_refusal(dtype: torch.dtype, depth: int) -> Optional[str]:
    """A tensor-core family's refusal of fp32 without TF32 on a sum of `depth` products."""
    problem = tensor_core_problem(dtype, depth)
    if problem is None:
        return None
    return (f"{problem} (3xTF32 would exceed fp32's error bound; see "
            "kernels.precision.MIN_3XTF32_DEPTH)")


def shallow_sum_refusal(dtype: torch.dtype, weight: torch.Tensor, args: ConvTransposeArgs,
                        variant: str) -> Optional[str]:
    """The refusal rule of the tensor-core families whose sums run over the layer's depth
    (input channels x a stride phase's taps): gemm_kxs, gemm_phase, gemm_phase_tma."""
    return strict_refusal(dtype, depth_of(weight, args))
