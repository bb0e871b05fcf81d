// The CUDA kernel of torch.ops.deconv_patch.conv_transpose2d in C++ (binding/op_kernel.cpp).
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace deconv_patch {

// Adds install_op_kernel, clear_op_kernel_cache and op_kernel_cache_size to the Python module.
void bind_op_kernel(pybind11::module& m);

}  // namespace deconv_patch
