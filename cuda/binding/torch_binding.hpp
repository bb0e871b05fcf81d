// The tensor-level entry points of the extension: defined in binding/torch_binding.cpp and
// binding/autocast_cast.cpp, bound to Python in binding/python_module.cpp, and called by
// binding/prepared_call.cpp without Python in between. ATen's tensor headers only: torch's
// full extension header costs a file about 15 s of compile time.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include "common/family_unit.h"
#include "common/params.h"

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

// The weight-side fields of `p` (everything packing depends on) from a weight tensor, read
// through its strides, and the hyperparameters.
void fill_weight_params(ConvTranspose2dParams& p, const at::Tensor& weight, at::IntArrayRef stride,
                        at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups);

// A call of one family: the element types, TF32 flag and config (-1: the family's choice), on
// the current stream.
UnitCall unit_call(ScalarKind kind, bool allow_tf32, int64_t config);

// The scratch memory `unit` asks for the call (bytes, on `options`' device), set as
// call.workspace; undefined where it asks for none. Keep it alive until the launch is queued.
at::Tensor unit_workspace(const FamilyUnit& unit, const ConvTranspose2dParams& p, UnitCall& call,
                          const at::TensorOptions& options);

// A channels_last copy of 4-D `input` on `stream` (the row-reading kernels' input re-layout).
at::Tensor channels_last_copy(const at::Tensor& input, cudaStream_t stream);

// The weight in family `family_code`'s packed layout.
at::Tensor pack_weight(int64_t family_code, const at::Tensor& weight, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef output_padding,
                       at::IntArrayRef dilation, int64_t groups, bool allow_tf32);

// Whether family `family_code` takes a layer's weight whatever the input.
bool weight_fits(int64_t family_code, int64_t device_index, const std::string& dtype,
                 at::IntArrayRef weight_sizes, at::IntArrayRef stride, at::IntArrayRef padding,
                 at::IntArrayRef dilation, int64_t groups, bool allow_tf32);

// A family's tile config names, in config order (nullopt: unnamed).
std::vector<c10::optional<std::string>> config_names(int64_t family_code);

// `t` as ATen's CUDA autocast casts it (binding/autocast_cast.cpp).
at::Tensor autocast_cast(const at::Tensor& t, at::ScalarType dtype);

}  // namespace deconv_patch
