// The element type a ScalarKind names, for launchers templated on it:
//     return with_element_type(kind, [&](auto zero) {
//       return launch_typed<decltype(zero)>(p, stream);
//     });
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/params.h"

namespace deconv_patch {

template <typename Launch>
cudaError_t with_element_type(ScalarKind kind, Launch&& launch) {
  switch (kind) {
    case ScalarKind::kFloat32: return launch(float{});
    case ScalarKind::kFloat16: return launch(__half{});
    case ScalarKind::kBFloat16: return launch(__nv_bfloat16{});
  }
  return cudaErrorInvalidValue;
}

// The ScalarKind of an element type (with_element_type's inverse).
template <typename T>
constexpr ScalarKind element_kind();
template <>
constexpr ScalarKind element_kind<float>() { return ScalarKind::kFloat32; }
template <>
constexpr ScalarKind element_kind<__half>() { return ScalarKind::kFloat16; }
template <>
constexpr ScalarKind element_kind<__nv_bfloat16>() { return ScalarKind::kBFloat16; }

}  // namespace deconv_patch
