// Hopper (sm_90a) gemm_kxs for 16-bit and TF32-allowed fp32 layers: transposed convolution with
// kernel == stride (padding 0, dilation 1, output_padding 0, groups 1) as one persistent,
// warp-specialised GEMM: TMA loads into a shared-memory ring, warpgroup MMA (wgmma.mma_async), the
// fused epilogue (common/epilogue.cuh) storing into the output. Input channels_last (any dtype) or,
// for 16-bit, NCHW read in place (MN-major A operand); output of any strides: channels_last
// straight from registers, otherwise (NCHW) through a shared-memory staging buffer so that warps
// write runs along output rows (for KW 2 / 4 and Cout % 32 == 0 each tile then holds all KW taps of
// one kernel row, so the runs are contiguous). See gemm_kxs_sm90/gemm_kxs_sm90.cu for the GEMM, the
// packed weight layout (independent of the layouts) and the pipeline.
//
// The GEMM kernel is built for real only when the translation unit is compiled for sm_90a with
// -DDECONV_PATCH_SM90A; everywhere else its body compiles to nothing and
// gemm_kxs_sm90_supports() returns false. The weight packing kernel is plain CUDA.
//
// fp32 runs only with TF32 allowed (torch.backends.cudnn.allow_tf32): both operands are rounded
// to TF32 (round to nearest, ties away, as cvt.rna) and multiplied on the tensor cores with fp32
// accumulation; the output is fp32.
//
// Configs (the `config` argument; -1 picks 0 or 1 by a wave-count heuristic, not yet measured),
// the same for every dtype and layout (a stage is 128-byte rows: 64 k of 16-bit, 32 k of fp32;
// the staged store adds 16 KB of shared memory, which every config has room for):
//   0  "128x256s4":   128x256 tile, both consumer warpgroups on one tile (64 rows each), 4 stages
//   1  "128x128s6":   128x128 tile, both consumer warpgroups on one tile, 6 stages
//   2  "128x128s6pp": 128x128 tiles, "ping-pong": each consumer warpgroup owns every other
//                     tile, so one warpgroup's epilogue overlaps the other's MMAs; 6 stages
//   3  "128x256s4area", 4 "128x128s6area", 5 "128x128s6pparea": configs 0, 1, 2 with "kernel-area"
//                     tiles for the staged (NCHW-output or NCHW-input) store: a tile holds all
//                     KH*KW taps of BN / (KH*KW) channels, so one warp writes the KH adjacent
//                     output rows of its pixels back to back (KW 2 / 4, KH 2 / 4, KH*KW <= 8,
//                     Cout % 32 == 0, unit output column stride, BN / (KH*KW) >= 32; fp32 k2s2
//                     only). Elsewhere exactly configs 0, 1, 2. Forced only: -1 never picks them.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "common/params.h"

namespace deconv_patch {

// Host-side predicate: true exactly when launch_conv_transpose2d_gemm_kxs_sm90 computes `p`.
//   * built with DECONV_PATCH_SM90A, current device of compute capability 9.0, and the driver
//     provides cuTensorMapEncodeTiled
//   * kind float16 / bfloat16 (allow_tf32 ignored), or float32 with allow_tf32 true
//   * per axis: kernel == stride in 1..16, padding 0, dilation 1, out == in * kernel
//     (output_padding 0); groups 1; Cin % 8 == 0 (8 <= Cin < 2^24) for 16-bit, Cin % 4 == 0
//     (4 <= Cin < 2^24) for fp32 (16-byte TMA rows); Cout >= 1; known activation
//   * input 16-byte aligned and either dense channels_last: strides (H*W*Cin, 1, W*Cin, Cin), or
//     (float16 / bfloat16 only) dense NCHW: strides (Cin*H*W, H*W, W, 1) with H*W % 8 == 0
//     (16-byte TMA strides) and Cin*H*W < 2^39; size-1 dims excepted in both
//   * N*H*W < 2^31 and the tile count below 2^30 (TMA coordinates and tile indices are int32;
//     NCHW input: tiles never straddle images, N*ceil(H*W/128) m tiles); any non-negative
//     weight and output strides (64-bit offsets)
bool gemm_kxs_sm90_supports(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32);

// Number of configs; launch_conv_transpose2d_gemm_kxs_sm90 takes 0..num-1 (or -1).
int gemm_kxs_sm90_num_configs();

// Bytes of the packed weight buffer: round_up(KH*KW*Cout, 32) * Cin * element size (2 for
// 16-bit, 4 for fp32). Depends on the weight shape and kind only (not on allow_tf32). The caller
// allocates it 16-byte aligned. Returns 0 where packing is refused.
int64_t gemm_kxs_sm90_packed_weight_bytes(const ConvTranspose2dParams& p, ScalarKind kind);

// Packs p.weight ([Cin, Cout, KH, KW], read through p.w_stride, any strides) into `packed` on
// `stream` (the layout is in the .cu; fp32 values are stored rounded to TF32). Needs only the
// weight-side fields of p (weight, w_stride, in/out channels, groups, ph_h/ph_w kernel). Runs on
// any architecture. Returns cudaGetLastError() (cudaErrorInvalidValue when the weight side of
// supports fails, or for float32 without allow_tf32).
cudaError_t launch_gemm_kxs_sm90_pack_weight(const ConvTranspose2dParams& p, ScalarKind kind,
                                             bool allow_tf32, void* packed, cudaStream_t stream);

// Runs the convolution on `stream` without synchronising. Reads the weight only from `packed`
// (16-byte aligned; p.weight is ignored). config -1 picks by heuristic, else
// 0..gemm_kxs_sm90_num_configs()-1. Returns cudaGetLastError() (cudaSuccess when the output is
// empty; cudaErrorInvalidValue when supports is false, config is out of range or `packed` is
// null / misaligned; cudaErrorInvalidConfiguration when the device lacks the shared memory).
cudaError_t launch_conv_transpose2d_gemm_kxs_sm90(const ConvTranspose2dParams& p,
                                                  ScalarKind kind, bool allow_tf32,
                                                  const void* packed, cudaStream_t stream,
                                                  int config = -1);

// gemm_col2im's GEMM for 16-bit layers: as launch_conv_transpose2d_gemm_kxs_sm90 for kind
// float16 / bfloat16, but p.output is fp32 (the epilogue's values are stored unrounded), configs
// -1..kGemmKxsSm90F32OutConfigs-1 only (0..2 as above), channels_last input and output (channel
// stride 1) only. cudaErrorInvalidValue otherwise.
constexpr int kGemmKxsSm90F32OutConfigs = 3;
cudaError_t launch_conv_transpose2d_gemm_kxs_sm90_f32_out(const ConvTranspose2dParams& p,
                                                          ScalarKind kind, const void* packed,
                                                          cudaStream_t stream, int config = -1);

}  // namespace deconv_patch
