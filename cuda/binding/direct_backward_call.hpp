// The gradients of conv_transpose2d on the direct backward kernels (cuda/direct_backward), for
// the backward of a recorded call where the planner chose them, and for tests and benchmarks.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "binding/recorded_call.hpp"

namespace deconv_patch {

// Which gradient: the input's (dx, in input's dtype and layout) or the weight's (dW, in
// weight's; deterministic).
enum class Gradient { kInput, kWeight };

// On which kernel, numbered as the planner's codes (0 is ATen's): one thread per element / 16
// columns (direct), a GEMM per group on CUDA cores (tiled: direct_backward/grad_input_tiled.cu,
// weight_grad_tiled.cu), on tensor cores (mma: grad_input_mma.cu, weight_grad_mma.cu; float16
// and bfloat16 only), or the input gradient alone on gemm_phase_tma's TMA + wgmma kernel
// (phase_tma: binding/phase_tma_grad_input.hpp; the weight's refuses).
enum class GradientKernel { kDirect = 1, kTiled = 2, kMma = 3, kPhaseTma = 4 };

// That gradient of conv_transpose2d(input, weight, stride, padding, output_padding, groups,
// dilation) producing grad_output's sizes. 4-D CUDA tensors of one dtype (float32, float16,
// bfloat16); throws KernelRefused otherwise. (Instantiated for each pair.)
template <Gradient G, GradientKernel K>
at::Tensor gradient(const at::Tensor& input, const at::Tensor& grad_output,
                    const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding,
                    at::IntArrayRef dilation, int64_t groups);

// A recorded call's gradient kernel for the planner's code (kernels/direct_backward.py's, via
// PreparedCall): 0 ATen's (null), 1 direct, 2 tiled, 3 mma, 4 phase_tma. It returns an
// undefined tensor where its kernel refuses the call, so that ATen's computes that gradient.
KernelGradient gradient_kernel(bool of_input, int64_t code);

}  // namespace deconv_patch
