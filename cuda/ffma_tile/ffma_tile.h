// FFMA register-tiled transposed convolution for layers with few output channels per group and
// kernel == taps x stride (FSRCNN's 56 > 1 k9 s3, DCGAN's 64 > 3 k4 s2): tensor-core tiles are
// mostly padding there, and cuDNN runs them 5-20x above the roofline floor. Each thread owns a
// few input-aligned positions and computes every stride phase of them, so each input value it
// loads feeds every tap that reads it. Plain fp32 FFMA for every input type, so fp32 without
// TF32 stays exact. See ffma_tile/ffma_tile.cu for the index math,
// docs/performance/ffma-kernels.md
// for what it measures.
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"

namespace deconv_patch {

// Tile configs, in order ("s<stride>q<rows>x<cols>o<channels>": per thread, q-rows x q-columns
// of input-aligned positions, each with all stride x stride phases, for that many output
// channels). The planner's FFMA_TILE_CONFIGS mirror these names.
int ffma_tile_num_configs();
const char* ffma_tile_config_name(int config);

// Host-side predicate: true when launch_conv_transpose2d_ffma_tile runs `p` with `config`
// (-1: the heuristic's config for the layer).
//   * kind float32, float16 or bfloat16 (fp32 accumulation)
//   * the config's stride on both axes, dilation 1, kernel == taps x stride on both axes, any
//     padding, any output_padding (from out_h / out_w)
//   * any channel and group count; groups x ceil(Cout/g / channels per thread) <= 65535
//   * in_h, in_w, out_h, out_w < 2^30; fewer than 2^31 blocks
//   * any tensor strides (fast staging for NCHW-like and channels_last input); 64-bit offsets
//   * a known p.epi.activation (bias, scale, shift and activation are fused, see
//     common/epilogue.cuh)
// Input pixels outside the image are read as zeros (as the tensor-core kernels do).
bool ffma_tile_supports(const ConvTranspose2dParams& p, ScalarKind kind, int config);

// Launches on `stream` without synchronising; returns cudaGetLastError() (cudaSuccess when the
// output is empty, cudaErrorInvalidValue when ffma_tile_supports(p, kind, config) is false).
// tap_sums (fp32 only; pass it for fp32 without TF32): each channel's taps of an output are
// summed apart before joining the accumulator, which keeps the error at PyTorch's on deep sums.
cudaError_t launch_conv_transpose2d_ffma_tile(const ConvTranspose2dParams& p, ScalarKind kind,
                                              int config, bool tap_sums, cudaStream_t stream);

}  // namespace deconv_patch
