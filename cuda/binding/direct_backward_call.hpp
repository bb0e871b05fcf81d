// The gradients of conv_transpose2d on the direct backward kernels (cuda/direct_backward), for
// the backward of a recorded call where the planner chose them, and for tests and benchmarks.
#pragma once

#include <ATen/core/Tensor.h>

namespace deconv_patch {

// dx for conv_transpose2d(input, weight, stride, padding, output_padding, groups, dilation)
// producing grad_output's sizes, in input's dtype and layout. 4-D CUDA tensors of one dtype
// (float32, float16, bfloat16); throws KernelRefused otherwise.
at::Tensor direct_grad_input(const at::Tensor& input, const at::Tensor& grad_output,
                             const at::Tensor& weight, at::IntArrayRef stride,
                             at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups);

// The same dx on the tiled kernel (a GEMM per group; direct_backward/grad_input_tiled.cu).
at::Tensor tiled_grad_input(const at::Tensor& input, const at::Tensor& grad_output,
                            const at::Tensor& weight, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups);

// dW for the same call, in weight's dtype and layout; deterministic.
at::Tensor direct_weight_grad(const at::Tensor& input, const at::Tensor& grad_output,
                              const at::Tensor& weight, at::IntArrayRef stride,
                              at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups);

// The same dW on the tiled kernel (a GEMM per group over pixel ranges; deterministic).
at::Tensor tiled_weight_grad(const at::Tensor& input, const at::Tensor& grad_output,
                             const at::Tensor& weight, at::IntArrayRef stride,
                             at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups);

// The same four, returning an undefined tensor where the kernels refuse the call instead of
// throwing: a recorded call's KernelGradient (binding/recorded_call.hpp).
at::Tensor direct_grad_input_or_undefined(const at::Tensor& input, const at::Tensor& grad_output,
                                          const at::Tensor& weight, at::IntArrayRef stride,
                                          at::IntArrayRef padding, at::IntArrayRef dilation,
                                          int64_t groups);
at::Tensor direct_weight_grad_or_undefined(const at::Tensor& input,
                                           const at::Tensor& grad_output,
                                           const at::Tensor& weight, at::IntArrayRef stride,
                                           at::IntArrayRef padding, at::IntArrayRef dilation,
                                           int64_t groups);
at::Tensor tiled_grad_input_or_undefined(const at::Tensor& input, const at::Tensor& grad_output,
                                         const at::Tensor& weight, at::IntArrayRef stride,
                                         at::IntArrayRef padding, at::IntArrayRef dilation,
                                         int64_t groups);
at::Tensor tiled_weight_grad_or_undefined(const at::Tensor& input, const at::Tensor& grad_output,
                                          const at::Tensor& weight, at::IntArrayRef stride,
                                          at::IntArrayRef padding, at::IntArrayRef dilation,
                                          int64_t groups);

}  // namespace deconv_patch
