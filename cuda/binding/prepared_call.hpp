// Adds PreparedCall and ModuleFastPath (binding/prepared_call.cpp) to the Python module.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace deconv_patch {

void bind_prepared_call(pybind11::module& m);

}  // namespace deconv_patch
