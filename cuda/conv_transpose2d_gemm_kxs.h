// Tensor-core path for transposed convolutions whose kernel equals the stride on both axes
// (padding 0, dilation 1): taps never overlap, so per group the layer is one GEMM whose
// epilogue scatters straight into the output. See conv_transpose2d_gemm_kxs.cu for the mapping.
#pragma once

#include <cuda_runtime.h>

#include "conv_transpose2d_params.h"

namespace deconv_patch {

// Host-side predicate: true when launch_conv_transpose2d_gemm_kxs handles `p` exactly.
//   * kind float16 / bfloat16, or float32 with allow_tf32 (TF32 tensor cores, fp32 accumulate)
//   * per axis: kernel == stride, pad == 0, dil == 1, and 0 <= out - in*kernel (output_padding)
//   * kernel_h * kernel_w <= 256
//   * weight contiguous [Cin, Cout/groups, KH, KW] (strides of size-1 dims are ignored)
//   * non-negative tensor strides, consistent channel/group counts
//   * a known p.epi.activation (bias, scale, shift and activation are fused, see epilogue.cuh)
// Any input / output strides are accepted (fast paths for NCHW and channels_last).
bool gemm_kxs_supports(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32);

// Launches on `stream` without synchronising; returns cudaGetLastError() (cudaSuccess when the
// output is empty, cudaErrorInvalidValue when gemm_kxs_supports(p, kind, allow_tf32) is false).
cudaError_t launch_conv_transpose2d_gemm_kxs(const ConvTranspose2dParams& p, ScalarKind kind,
                                             bool allow_tf32, cudaStream_t stream);

}  // namespace deconv_patch
