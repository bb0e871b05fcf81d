// Tensor-core path for transposed convolutions whose kernel equals the stride on both axes
// (padding 0, dilation 1): taps never overlap, so per group the layer is one GEMM whose
// epilogue scatters straight into the output. See gemm_kxs/gemm_kxs.cu for the mapping.
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"

namespace deconv_patch {

// Host-side predicate: true when launch_conv_transpose2d_gemm_kxs handles `p` exactly.
//   * kind float16 / bfloat16, or float32: TF32 tensor cores with allow_tf32, else 3xTF32
//     (each operand split into two TF32 parts, three MMAs: close to fp32 accuracy); fp32
//     accumulate always
//   * per axis: kernel == stride, pad == 0, dil == 1, and 0 <= out - in*kernel (output_padding)
//   * kernel_h * kernel_w <= 256
//   * weight contiguous [Cin, Cout/groups, KH, KW] (strides of size-1 dims are ignored), unless
//     tap_major: the launch then reads the tap-major copy instead (see below)
//   * non-negative tensor strides, consistent channel/group counts
//   * a known p.epi.activation (bias, scale, shift and activation are fused, see
//     common/epilogue.cuh)
// Any input / output strides are accepted (fast paths for NCHW and channels_last).
bool gemm_kxs_supports(const ConvTranspose2dParams& p, ScalarKind kind, bool tap_major);

// Launches on `stream` without synchronising; returns cudaGetLastError() (cudaSuccess when the
// output is empty, cudaErrorInvalidValue when gemm_kxs_supports is false).
// tap_major_weight: nullptr, or the weight re-laid-out tap-major, a contiguous 16-byte aligned
// [Cin, KH*KW, Cout/groups] buffer of the input's dtype (weight.flatten(2).transpose(1, 2)):
// GEMM columns then run over output channels within a tap, which channels_last output stores
// 16 bytes at a time.
cudaError_t launch_conv_transpose2d_gemm_kxs(const ConvTranspose2dParams& p, ScalarKind kind,
                                             bool allow_tf32, const void* tap_major_weight,
                                             cudaStream_t stream);

}  // namespace deconv_patch
