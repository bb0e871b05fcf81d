// Autocast's cast, in a file of its own: ATen's autocast header costs a file about 7 s of
// compile time, which here compiles beside the other binding files instead of after them.
#include <ATen/autocast_mode.h>

#include "binding/torch_binding.hpp"

namespace deconv_patch {

// `t` as ATen's CUDA autocast hands it to a lower-precision op, through ATen's per-region cast
// cache: a weight is cast once per autocast region, not once per call (and so stays one tensor,
// whose packed copy is then reused).
at::Tensor autocast_cast(const at::Tensor& t, at::ScalarType dtype) {
  return at::autocast::cached_cast(dtype, t, at::kCUDA);
}

}  // namespace deconv_patch
