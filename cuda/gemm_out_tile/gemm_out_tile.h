// Output-tiled stride-phase GEMM for layers with few output channels per group (<= 32): FCN's
// x8 up-sampling (21 channels, k16 s8), DCGAN's 64 > 3 and FSRCNN's 56 > 1 output layers.
//
// Why a separate kernel: the phase GEMMs (gemm_phase, gemm_phase_tma) give each block one stride
// phase, so a block writes every sw-th output column: isolated 2-byte elements in NCHW, isolated
// Cout-wide pixels in channels_last. On fcn8s.up8 that is 12x (NCHW) / 3x (NHWC) the output in L2
// write sectors (docs/performance/out-tile.md). Here one block owns a contiguous output tile
// (every column phase, and one or every row phase), runs each phase's small GEMM on tensor cores
// out of shared memory, stages the finished tile in shared memory and stores whole rows.
// See gemm_out_tile/gemm_out_tile.cu for the index math and the packed weight layout.
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"

namespace deconv_patch {

// Host-side predicate: true when launch_conv_transpose2d_gemm_out_tile handles `p` exactly with
// some tile config (a forced config shrinks its tile until it fits shared memory, so every config
// runs every supported call).
//   * kind float16 / bfloat16, or float32: with allow_tf32 TF32 tensor cores (A and B rounded to
//     TF32 with cvt.rna), without it 3xTF32 (hi/lo split operands, three MMAs a product; the
//     caller decides whether a sum is deep enough for its error, see planner.MIN_3XTF32_DEPTH);
//     fp32 accumulate always
//   * Cout/groups <= 32, stride 1..16, dilation >= 1, padding >= 0, any output_padding
//   * the smallest tile's shared memory (input footprint + the phases' weights, of one channel
//     block where the weights of all channels do not fit: the kernel then loops over channel
//     blocks) fits the device
//   * every element offset of input and output below 2^31
// Any input / output strides are accepted (16-byte paths for channels_last input and for dense
// NCHW / channels_last output).
bool gemm_out_tile_supports(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32);

// Whether the weights of all input channels fit the smallest tile's shared memory at once (one
// channel block), besides the weight side of gemm_out_tile_supports (dtype mode, channel and
// group counts, kernel, stride, padding, dilation): what the planner asks before it makes
// gemm_out_tile a layer's untimed default (its K loop over channel blocks measured slower than
// the phase GEMMs on Keypoint R-CNN's 512 > 17). Only the weight-side fields of p are read
// (weight strides included; no pointers).
bool gemm_out_tile_weight_fits(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32);

// Tile configurations; launch_conv_transpose2d_gemm_out_tile takes 0..num-1, or -1 (heuristic).
int gemm_out_tile_num_configs();
// "4x32" (one row phase per block, 4 phase rows x 32 phase columns per phase) or "4x32all"
// (every row phase: 4*stride_h contiguous output rows), in config order.
const char* gemm_out_tile_config_name(int config);

// Bytes of the packed weight for p (16-byte aligned buffer allocated by the caller). Depends on
// kind (and for float32 on allow_tf32: 3xTF32 packs hi and lo), groups, channel counts, kernel
// size, stride, padding and dilation only.
int64_t gemm_out_tile_packed_weight_bytes(const ConvTranspose2dParams& p, ScalarKind kind,
                                          bool allow_tf32);

// Packs p.weight (read through p.w_stride) into mma fragment order on `stream`; float32 is
// rounded to TF32 (cvt.rna), or without allow_tf32 split into TF32 hi and lo. Returns
// cudaGetLastError() (cudaErrorInvalidValue when unsupported).
cudaError_t launch_gemm_out_tile_pack_weight(const ConvTranspose2dParams& p, ScalarKind kind,
                                             bool allow_tf32, void* packed, cudaStream_t stream);

// Runs the convolution on `stream` without synchronising, reading the weight only from `packed`.
// Returns cudaGetLastError() (cudaSuccess when the output is empty, cudaErrorInvalidValue when
// unsupported or config is out of range).
cudaError_t launch_conv_transpose2d_gemm_out_tile(const ConvTranspose2dParams& p, ScalarKind kind,
                                                  bool allow_tf32, const void* packed, int config,
                                                  cudaStream_t stream);

}  // namespace deconv_patch
