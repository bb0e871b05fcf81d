// The element type a build unit holds kernels for. A family's folder can be built for one
// element type (-DDECONV_PATCH_UNIT_KIND=<ScalarKind code>): a first use compiles only the
// types its layers run, the whole build every type. Plain C++ (kernels and the binding).
#pragma once

#ifndef DECONV_PATCH_UNIT_KIND
#define DECONV_PATCH_UNIT_KIND -1
#endif

// For #if around what names another element type's kernels (a launcher's switch on the type).
#define DECONV_PATCH_UNIT_HAS_KIND(code) \
  (DECONV_PATCH_UNIT_KIND < 0 || DECONV_PATCH_UNIT_KIND == (code))

namespace deconv_patch {

// -1: every element type.
constexpr int kUnitKind = DECONV_PATCH_UNIT_KIND;

}  // namespace deconv_patch
