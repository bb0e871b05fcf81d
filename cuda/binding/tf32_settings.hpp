// The settings a plan's precision depends on, read as the Python side reads them
// (deconv_patch/kernels/precision.py: conv_tf32, matmul_tf32, runs_native_kernels).
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

// Whether ATen's convolutions run in deterministic mode (torch.use_deterministic_algorithms or
// cudnn.deterministic): it then skips cuDNN for dilated layers in NCHW.
inline bool deterministic_convolutions(const at::Context& ctx) {
  return ctx.deterministicCuDNN() || ctx.deterministicAlgorithms();
}

// Whether PyTorch's own float32 computation of a call may use TF32: cuDNN's convolutions follow
// the conv setting; where PyTorch runs its native kernels instead (cuDNN disabled, no cuDNN
// kernel for output_padding >= stride, a dilated layer in deterministic mode) their cuBLAS GEMMs
// follow the matmul setting. The deterministic case is taken for every layout, as in Python.
inline bool call_allows_tf32(const at::Context& ctx, bool output_padding_reaches_stride,
                             bool dilated) {
  const bool native = !ctx.userEnabledCuDNN() || output_padding_reaches_stride ||
                      (dilated && deterministic_convolutions(ctx));
  return native ? matmul_allows_tf32(ctx) : conv_allows_tf32(ctx);
}

}  // namespace deconv_patch
