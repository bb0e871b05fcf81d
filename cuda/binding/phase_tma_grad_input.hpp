// A transposed convolution's input gradient on gemm_phase_tma's kernel, as the strided
// correlation it is (common/params.h, InputGather): grad_input = conv2d(grad_output, weight)
// with the convolution's stride, padding and dilation.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "common/params.h"

namespace deconv_patch {

// grad_input of conv_transpose2d(input, weight, stride, padding, ..., groups, dilation) for
// grad_output, in input's dtype and layout, for tensors of element type `kind` as the backward
// binding checked them (binding/direct_backward_call.cpp: one CUDA device, 4-D, one dtype, the
// sizes of one convolution). One group; float32 (TF32 as ATen's convolutions allow it, else
// 3xTF32), float16, bfloat16; Hopper, with gemm_phase_tma's unit registered. Throws
// KernelRefused for any other call. grad_output in another layout than channels_last is read
// through a channels_last copy (the kernel's TMA loads read 16-byte channel rows).
at::Tensor phase_tma_grad_input(const at::Tensor& input, const at::Tensor& grad_output,
                                const at::Tensor& weight, at::IntArrayRef stride,
                                at::IntArrayRef padding, at::IntArrayRef dilation,
                                int64_t groups, ScalarKind kind);

}  // namespace deconv_patch
