// Tensor-core path for any transposed convolution: the output is split into its stride phases
// (oh mod stride_h, ow mod stride_w); each phase is a dense stride-1 correlation over only the
// taps that land on it, run as an implicit GEMM. All phases and groups go in one launch.
// See gemm_phase/gemm_phase.cu for the index math and the packed weight layout.
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"

namespace deconv_patch {

// Host-side predicate: true when launch_conv_transpose2d_gemm_phase handles `p` exactly.
//   * kind float16 / bfloat16, or float32: with allow_tf32 TF32 tensor cores (one TF32 MMA per
//     product), without it 3xTF32 (each operand split into TF32 hi + lo, three MMAs per product,
//     only lo*lo dropped: products to about fp32 precision on tensor cores, for callers that
//     turned TF32 off to get fp32 results); fp32 accumulate always. Every tile config runs both.
//   * stride 1..16, dilation >= 1, padding >= 0, kernel >= 1 per axis (any output_padding)
//   * groups <= 65535, consistent channel/group counts, non-negative strides
//   * every element offset of input, weight, output and packed weight below 2^31
// Any input / weight / output strides are accepted (fast paths for NCHW and channels_last).
bool gemm_phase_supports(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32);

// Number of tile configurations; launch_conv_transpose2d_gemm_phase takes 0..num-1 (or -1).
int gemm_phase_num_configs();

// Bytes of the packed weight buffer for p (the caller allocates it, 16-byte aligned). It depends
// on kind, groups, channel counts, kernel size, stride, padding and dilation, not on the batch or
// the image size, so one buffer serves every input shape of a module.
int64_t gemm_phase_packed_weight_bytes(const ConvTranspose2dParams& p, ScalarKind kind);

// Packs p.weight (read through p.w_stride) into `packed` on `stream`. With kind float32 and
// allow_tf32 the values are rounded to TF32 here, once; without allow_tf32 they are kept at full
// fp32 (the 3xTF32 kernel splits them itself). A packed weight is only valid for launches with
// the allow_tf32 it was packed with (same size either way). Returns cudaGetLastError()
// (cudaErrorInvalidValue when gemm_phase_supports is false).
cudaError_t launch_gemm_phase_pack_weight(const ConvTranspose2dParams& p, ScalarKind kind,
                                          bool allow_tf32, void* packed, cudaStream_t stream);

// Runs the convolution on `stream` without synchronising. Reads the weight only from `packed`
// (p.weight is ignored), packed with the same kind and allow_tf32. config -1 picks by
// heuristic, else 0..gemm_phase_num_configs()-1 (in both float32 modes).
// Returns cudaGetLastError() (cudaSuccess when the output is empty, cudaErrorInvalidValue when
// gemm_phase_supports is false or config is out of range).
cudaError_t launch_conv_transpose2d_gemm_phase(const ConvTranspose2dParams& p, ScalarKind kind,
                                               bool allow_tf32, const void* packed, int config,
                                               cudaStream_t stream);

}  // namespace deconv_patch
