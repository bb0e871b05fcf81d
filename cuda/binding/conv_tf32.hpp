// Whether ATen's float32 convolutions may use TF32: the setting our kernels follow, as the
// Python side's planner.conv_tf32 reads it.
//
// torch 2.9 and later set TF32 per backend and operator (torch.backends.cudnn.conv.fp32_precision);
// ATen's convolutions read the conv setting, and asking without an operator raises once conv and
// RNN are set apart. torch 2.11 (the oldest with this signature checked here) and later are asked
// for the conv setting; earlier ones for the one flag they have.
#pragma once

#include <ATen/Context.h>
#include <torch/version.h>

namespace deconv_patch {

inline bool conv_allows_tf32(const at::Context& ctx) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11)
  return ctx.allowTF32CuDNN(at::Float32Op::CONV);
#else
  return ctx.allowTF32CuDNN();
#endif
}

}  // namespace deconv_patch
