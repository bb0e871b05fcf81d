// Hopper (sm_90a) twin of gemm_phase: the same stride-phase implicit GEMM (same phases, same
// GEMM rows/columns/reduction order, same fused epilogue), with the MMAs on warpgroup tensor-core
// instructions (wgmma.mma_async, both operands read from 128-byte-swizzled shared memory) instead
// of mma.sync. See gemm_phase_sm90/gemm_phase_sm90.cu for the tile, pipeline and packed layout.
//
// Built for real only when the translation unit is compiled for sm_90a with -DDECONV_PATCH_SM90A;
// everywhere else it compiles to empty kernels and gemm_phase_sm90_supports() returns false, so
// callers fall back to gemm_phase.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "common/params.h"

namespace deconv_patch {

// Host-side predicate: true when launch_conv_transpose2d_gemm_phase_sm90 handles `p` exactly.
//   * built with DECONV_PATCH_SM90A and the current device has compute capability 9.0
//   * kind float16 / bfloat16 (float32 / TF32: false)
//   * stride 1..16, dilation >= 1, padding >= 0, kernel >= 1 per axis (any output_padding)
//   * groups <= 65535, consistent channel/group counts, Cin/groups a multiple of 8, Cout/groups >= 1
//   * input with unit channel stride (channels_last), 16-byte aligned, its n/h/w strides
//     multiples of 8 elements (any output strides)
//   * every element offset of input, weight, output and packed weight below 2^31
bool gemm_phase_sm90_supports(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32);

// Number of tile configurations; launch_conv_transpose2d_gemm_phase_sm90 takes 0..num-1 (or -1).
int gemm_phase_sm90_num_configs();

// Bytes of the packed weight buffer (the caller allocates it, 16-byte aligned). Depends on kind,
// groups, channel counts and kernel size only (not on the batch or the image size). Its own
// layout (K-major, see the .cu), not gemm_phase's: the two buffers are not interchangeable.
int64_t gemm_phase_sm90_packed_weight_bytes(const ConvTranspose2dParams& p, ScalarKind kind);

// Packs p.weight (read through p.w_stride) into `packed` on `stream`. Needs only the weight-side
// fields of p (weight, w_stride, channel counts, groups, ph_h/ph_w). Returns cudaGetLastError()
// (cudaErrorInvalidValue when the weight side of gemm_phase_sm90_supports fails).
cudaError_t launch_gemm_phase_sm90_pack_weight(const ConvTranspose2dParams& p, ScalarKind kind,
                                               bool allow_tf32, void* packed,
                                               cudaStream_t stream);

// Runs the convolution on `stream` without synchronising. Reads the weight only from `packed`
// (p.weight is ignored). config -1 picks by heuristic, else 0..gemm_phase_sm90_num_configs()-1.
// Returns cudaGetLastError() (cudaSuccess when the output is empty, cudaErrorInvalidValue when
// gemm_phase_sm90_supports is false or config is out of range).
cudaError_t launch_conv_transpose2d_gemm_phase_sm90(const ConvTranspose2dParams& p,
                                                    ScalarKind kind, bool allow_tf32,
                                                    const void* packed, cudaStream_t stream,
                                                    int config = -1);

}  // namespace deconv_patch
