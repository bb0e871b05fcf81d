// Direct FFMA path for transposed convolutions with few channels per group: depthwise
// (Cin/g = Cout/g = 1) and small grouped layers, where tensor-core GEMM tiles would be mostly
// padding. Output-stationary: a block stages the input rows/columns its output tile needs and
// its groups' weights (as fp32) in shared memory once, then every thread accumulates a register
// tile (TR output rows of one stride phase x up to 16 output channels) over exactly the taps that
// land on an input pixel. See grouped/grouped.cu for the index math.
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"

namespace deconv_patch {

// Host-side predicate: true when launch_conv_transpose2d_grouped handles `p` exactly.
//   * kind float32, float16 or bfloat16 (always plain fp32 FFMA accumulation)
//   * Cin/groups <= 64 and Cout/groups <= 64 (up to 16 output channels per thread; wider groups
//     are split over blocks), consistent channel/group counts
//   * per axis: 1 <= stride <= 4096, dilation >= 1, padding >= 0, kernel >= 1,
//     dilation*kernel + padding < 2^24; any output_padding (taken from out_h / out_w)
//   * in_h, in_w, out_h, out_w < 2^30 and fewer than 2^31 thread blocks
//   * the block's shared memory (input halo tile and weights as fp32, 16 bytes per stride phase,
//     8 bytes per output channel) fits in 64 KiB for some tile shape; large Cin/g x kernel area
//     or huge strides are refused. Above 48 KiB the launcher sets the opt-in attribute.
//   * non-negative tensor strides (any layout; fast paths for NCHW and channels_last input and
//     output); input / output offsets are 64-bit (tensors may exceed 2^31 elements), the weight
//     is read with 32-bit offsets (its largest element offset must be below 2^31)
//   * a known p.epi.activation (bias, scale, shift and activation are fused, see
//     common/epilogue.cuh)
// Results are exact in PyTorch's sense: taps outside the input are never multiplied, even with
// non-finite weights.
bool grouped_supports(const ConvTranspose2dParams& p, ScalarKind kind);

// Launches on `stream` without synchronising; returns cudaGetLastError() (cudaSuccess when the
// output is empty, cudaErrorInvalidValue when grouped_supports(p, kind) is false).
cudaError_t launch_conv_transpose2d_grouped(const ConvTranspose2dParams& p, ScalarKind kind,
                                            cudaStream_t stream);

}  // namespace deconv_patch
