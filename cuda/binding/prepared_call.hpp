// Adds PreparedCall and ModuleFastPath (binding/prepared_call.cpp) to the Python module.
#pragma once

#include <torch/csrc/utils/pybind.h>

#include "binding/recorded_call.hpp"

namespace deconv_patch {

void bind_prepared_call(pybind11::module& m);

// The PreparedCall `call` (a Python object of that class) as a function of (input, weight,
// bias), callable without converting arguments through Python; the GIL must be held while it
// runs (a changed weight is re-packed through Python's cache).
ConvForward prepared_call_forward(const pybind11::handle& call);

}  // namespace deconv_patch
