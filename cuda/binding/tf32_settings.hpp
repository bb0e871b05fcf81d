// The TF32 settings a plan depends on, read as the Python side reads them
// (deconv_patch/kernels/precision.py: conv_tf32, matmul_tf32).
//
// torch 2.9 and later set TF32 per backend and operator (torch.backends.cudnn.conv.fp32_precision);
// ATen's convolutions read the conv setting, and asking without an operator raises once conv and
// RNN are set apart. torch 2.11 (the oldest with this signature checked here) and later are asked
// per operator; earlier ones for the one flag each backend has.
#pragma once

#include <ATen/Context.h>
#include <torch/version.h>

namespace deconv_patch {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11)
#define DECONV_PATCH_TF32_PER_OPERATOR 1
#endif

// Whether ATen's float32 convolutions may use TF32: the setting our kernels follow.
inline bool conv_allows_tf32(const at::Context& ctx) {
#ifdef DECONV_PATCH_TF32_PER_OPERATOR
  return ctx.allowTF32CuDNN(at::Float32Op::CONV);
#else
  return ctx.allowTF32CuDNN();
#endif
}

// Whether ATen's float32 matmuls (cuBLAS) may use TF32. ATen's native transposed convolution,
// which runs where cuDNN has no kernel, makes its GEMMs there, so the planner's input gradient
// of such a layer in TF32 follows this setting as well.
inline bool matmul_allows_tf32(const at::Context& ctx) {
#ifdef DECONV_PATCH_TF32_PER_OPERATOR
  // (as ATen's cuBLAS calls read it; allowTF32CuBLAS raises where the legacy and the new API
  // were mixed)
  return ctx.float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL) ==
         at::Float32Precision::TF32;
#else
  return ctx.allowTF32CuBLAS();
#endif
}

}  // namespace deconv_patch
