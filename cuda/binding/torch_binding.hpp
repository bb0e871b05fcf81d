// The torch-facing entry points of the extension, shared by binding/torch_binding.cpp (which
// defines them and the Python module) and binding/prepared_call.cpp (which calls them without
// Python in between).
#pragma once

#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>
#include <torch/extension.h>

namespace deconv_patch {

// A kernel family's limits exclude a call (the Python side runs PyTorch instead): raised as
// the extension's KernelRefused, a RuntimeError.
class KernelRefused : public std::runtime_error {
 public:
  explicit KernelRefused(const std::string& what);
};

// Runs one kernel family (its registry code, binding/family_units.hpp); see
// binding/torch_binding.cpp.
at::Tensor conv_transpose2d_forward(int64_t family_code, const at::Tensor& input,
                                    const at::Tensor& weight,
                                    const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                    at::IntArrayRef padding, at::IntArrayRef output_padding,
                                    at::IntArrayRef dilation, int64_t groups, bool channels_last,
                                    bool allow_tf32, const c10::optional<at::Tensor>& out,
                                    const c10::optional<at::Tensor>& scale,
                                    const c10::optional<at::Tensor>& shift, int64_t activation,
                                    double negative_slope,
                                    const c10::optional<at::Tensor>& packed, int64_t config);

// A channels_last copy of 4-D `input` on `stream` (the row-reading kernels' input re-layout).
at::Tensor channels_last_copy(const at::Tensor& input, cudaStream_t stream);

// Adds PreparedCall and ModuleFastPath (binding/prepared_call.cpp) to the Python module.
void bind_prepared_call(pybind11::module& m);

}  // namespace deconv_patch
