// A training step's forward on a kernel of ours, with the backward nn.ConvTranspose2d records.
// The node is a C++ autograd Function, so a recorded call adds no Python to the step (a Python
// autograd node cost tens of microseconds per layer, more than a small layer's forward).
#include <array>
#include <tuple>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/convolution_backward.h>
#include <torch/csrc/autograd/custom_function.h>

#include "binding/recorded_call.hpp"

namespace deconv_patch {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ConvTransposeFunction : public torch::autograd::Function<ConvTransposeFunction> {
  // (The forward's arguments: the kernel call, input, weight, bias, hyperparameters; the
  // backward returns one gradient per argument, undefined for the non-tensors.)
  static at::Tensor forward(AutogradContext* ctx, const ConvForward* run,
                            const at::Tensor& input, const at::Tensor& weight,
                            const c10::optional<at::Tensor>& bias,
                            const ConvTransposeHyper* hyper) {
    const bool has_bias = bias.has_value() && bias->defined();
    ctx->save_for_backward({input, weight});
    ctx->saved_data["stride"] = hyper->stride;
    ctx->saved_data["padding"] = hyper->padding;
    ctx->saved_data["output_padding"] = hyper->output_padding;
    ctx->saved_data["dilation"] = hyper->dilation;
    ctx->saved_data["groups"] = hyper->groups;
    ctx->saved_data["has_bias"] = has_bias;
    // (Function pointers into this library, which outlives the node: kept as integers.)
    ctx->saved_data["grad_input"] = reinterpret_cast<int64_t>(hyper->grad_input);
    ctx->saved_data["weight_grad"] = reinterpret_cast<int64_t>(hyper->weight_grad);
    return (*run)(input, weight, bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    at::Tensor input = saved[0];
    const at::Tensor& weight = saved[1];
    at::Tensor grad_output = grads[0];
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const int64_t groups = ctx->saved_data["groups"].toInt();
    // Edges are the tensor arguments present: input 0, weight 1, bias 2.
    const std::array<bool, 3> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                      has_bias && ctx->needs_input_grad(2)};
    const bool unbatched = input.dim() == 3;
    if (unbatched) {
      input = input.unsqueeze(0);
      grad_output = grad_output.unsqueeze(0);
    }
    const std::vector<int64_t> stride = ctx->saved_data["stride"].toIntVector();
    const std::vector<int64_t> padding = ctx->saved_data["padding"].toIntVector();
    const std::vector<int64_t> dilation = ctx->saved_data["dilation"].toIntVector();
    // Our gradient kernels are not differentiable: a backward autograd records (create_graph,
    // a double backward) keeps ATen's for every gradient. Where a kernel refuses the call (an
    // undefined result), ATen's below computes that gradient.
    const bool ours = !at::GradMode::is_enabled();
    const auto kernel = [&](const char* key) {
      return reinterpret_cast<KernelGradient>(ctx->saved_data[key].toInt());
    };
    at::Tensor grad_input, grad_weight, grad_bias;
    if (const KernelGradient fn = kernel("grad_input"); ours && mask[0] && fn != nullptr)
      grad_input = fn(input, grad_output, weight, stride, padding, dilation, groups);
    if (const KernelGradient fn = kernel("weight_grad"); ours && mask[1] && fn != nullptr)
      grad_weight = fn(input, grad_output, weight, stride, padding, dilation, groups);
    const std::array<bool, 3> aten_mask = {mask[0] && !grad_input.defined(),
                                           mask[1] && !grad_weight.defined(), mask[2]};
    if (aten_mask[0] || aten_mask[1] || aten_mask[2]) {
      const std::vector<int64_t> bias_sizes = {weight.size(1) * groups};
      at::Tensor aten_input, aten_weight;
      std::tie(aten_input, aten_weight, grad_bias) = at::convolution_backward(
          grad_output, input, weight,
          has_bias ? at::OptionalIntArrayRef(bias_sizes) : at::OptionalIntArrayRef(), stride,
          padding, dilation, /*transposed=*/true,
          ctx->saved_data["output_padding"].toIntVector(), groups, aten_mask);
      if (aten_mask[0]) grad_input = aten_input;
      if (aten_mask[1]) grad_weight = aten_weight;
    }
    if (unbatched && grad_input.defined()) grad_input = grad_input.squeeze(0);
    return {at::Tensor(), grad_input, grad_weight, has_bias ? grad_bias : at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

bool records_grad(const at::Tensor& input, const at::Tensor& weight,
                  const c10::optional<at::Tensor>& bias) {
  return at::GradMode::is_enabled() &&
         (input.requires_grad() || weight.requires_grad() ||
          (bias.has_value() && bias->defined() && bias->requires_grad()));
}

at::Tensor recorded_conv_transpose2d(const ConvForward& forward, const at::Tensor& input,
                                     const at::Tensor& weight,
                                     const c10::optional<at::Tensor>& bias,
                                     const ConvTransposeHyper& hyper) {
  return ConvTransposeFunction::apply(&forward, input, weight, bias, &hyper);
}

}  // namespace deconv_patch
