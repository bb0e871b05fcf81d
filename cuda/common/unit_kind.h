// The element type a build unit holds kernels for. A family's folder can be built for one
// element type (-DDECONV_PATCH_UNIT_KIND=<ScalarKind code>): a first use compiles only the
// types its layers run, the whole build every type. Plain C++ (kernels and the binding).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/params.h"

#ifndef DECONV_PATCH_UNIT_KIND
#define DECONV_PATCH_UNIT_KIND -1
#endif

// For #if around what names another element type's kernels (generated per-type launchers).
#define DECONV_PATCH_UNIT_HAS_KIND(code) \
  (DECONV_PATCH_UNIT_KIND < 0 || DECONV_PATCH_UNIT_KIND == (code))

namespace deconv_patch {

// -1: every element type.
constexpr int kUnitKind = DECONV_PATCH_UNIT_KIND;

constexpr bool unit_has_kind(ScalarKind kind) {
  return kUnitKind < 0 || kUnitKind == static_cast<int>(kind);
}

// Calls f(T{}) with the element type of `kind` where this unit holds its kernels, else returns
// `none` (the type's kernels are not instantiated: a discarded `if constexpr` branch of a
// template).
template <typename R, typename F>
R visit_unit_kind(ScalarKind kind, R none, F&& f) {
  switch (kind) {
    case ScalarKind::kFloat32:
      if constexpr (unit_has_kind(ScalarKind::kFloat32)) return f(float{});
      break;
    case ScalarKind::kFloat16:
      if constexpr (unit_has_kind(ScalarKind::kFloat16)) return f(__half{});
      break;
    case ScalarKind::kBFloat16:
      if constexpr (unit_has_kind(ScalarKind::kBFloat16)) return f(__nv_bfloat16{});
      break;
  }
  return none;
}

}  // namespace deconv_patch
