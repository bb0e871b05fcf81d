// A forward kernel of ours recorded by autograd as a transposed convolution (recorded_call.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

namespace deconv_patch {

using ConvForward = std::function<at::Tensor(const at::Tensor& input, const at::Tensor& weight,
                                             const c10::optional<at::Tensor>& bias)>;

// A gradient of conv_transpose2d(input, weight, stride, padding, ..., groups, dilation) on a
// kernel of ours, given (input, grad_output, weight, stride, padding, dilation, groups); an
// undefined tensor where the kernel refuses the call. A plain function pointer, so that a
// recorded call's autograd node can keep it (binding/direct_backward_call.hpp's functions).
using KernelGradient = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                      at::IntArrayRef, at::IntArrayRef, at::IntArrayRef,
                                      int64_t);

struct ConvTransposeHyper {
  std::vector<int64_t> stride, padding, output_padding, dilation;
  int64_t groups = 1;
  // Who computes the backward's input and weight gradients (the planner's choice per
  // direction, planner.backward_plan): these kernels, or ATen's where null.
  KernelGradient grad_input = nullptr, weight_grad = nullptr;
};

// Whether autograd records a call on these arguments: grad mode on and one of them requiring a
// gradient.
bool records_grad(const at::Tensor& input, const at::Tensor& weight,
                  const c10::optional<at::Tensor>& bias);

// forward(input, weight, bias), recorded as conv_transpose2d(input, weight, bias, hyper): its
// backward is ATen's convolution_backward, the one nn.ConvTranspose2d's call records, so the
// gradients are PyTorch's for this output, except those hyper gives a kernel of ours while the
// backward itself is not recorded (a double-backward keeps ATen's, which is differentiable).
// `forward` runs with autograd off; a 3-D input is one unbatched sample.
at::Tensor recorded_conv_transpose2d(const ConvForward& forward, const at::Tensor& input,
                                     const at::Tensor& weight,
                                     const c10::optional<at::Tensor>& bias,
                                     const ConvTransposeHyper& hyper);

}  // namespace deconv_patch
