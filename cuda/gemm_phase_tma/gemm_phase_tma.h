// Hopper (sm_90a) gemm_phase_tma: any transposed convolution as stride-phase implicit GEMMs in one
// persistent, warp-specialised kernel. A producer warp issues TMA loads into a shared-memory ring
// (the A operand of one tap is a single 4-D TMA box of channels_last input, zero-filled out of
// bounds, so there is no gather code), two consumer warpgroups run wgmma.mma_async and the fused
// epilogue (common/epilogue.cuh). The successor of gemm_phase_sm90 (cp.async, not persistent);
// modelled on gemm_kxs_sm90. See gemm_phase_tma/gemm_phase_tma.cu for the index math, the packed
// weight layout, the ring protocol and the store paths.
//
// The GEMM kernel is built for real only when the translation unit is compiled for sm_90a with
// -DDECONV_PATCH_SM90A; everywhere else its body compiles to nothing and
// gemm_phase_tma_supports() returns false. The weight packing kernel is plain CUDA.
//
// fp32 has two modes:
//   * allow_tf32 true (TF32): both operands are rounded to TF32 (round to nearest, ties away,
//     as cvt.rna) and multiplied on the tensor cores with fp32 accumulation.
//   * allow_tf32 false (strict, 3xTF32): each operand x = hi + lo, hi = tf32_rna(x),
//     lo = tf32_rna(x - hi); every product is a_lo*b_hi + a_hi*b_lo + a_hi*b_hi on the TF32
//     tensor cores, each 32-deep k block summed into a fresh partial accumulator that is added to
//     the running sum with fp32 adds (tensor-core sums truncate; see the .cu). About fp32
//     accuracy; an infinite input or weight element (or one within half a TF32 ulp of
//     overflow) gives NaN outputs where it contributes. The packed weight holds both blocks
//     (twice the bytes), so it must be packed with the same allow_tf32 as the launch uses (a
//     strict launch on a TF32 packing would read past the buffer).
//
// Configs (the `config` argument; -1 picks one, see pick_config in the .cu), the same tile
// shapes for every dtype and mode (a stage holds 128-byte rows: 64 k of 16-bit or 32 k of fp32);
// fp32 strict stages are [A | A_lo | B_hi | B_lo], so fewer fit (second count):
//   0  "128x128s6pp": 128x128 tiles, ping-pong (each consumer warpgroup owns every other tile of
//                     its CTA, so one's epilogue overlaps the other's MMAs), 6 stages (strict 3;
//                     strict keeps one partial accumulator, so its wgmma groups do not overlap)
//   1  "128x128s6":   128x128 tile, cooperative (both consumers on one tile, 64 rows each),
//                     6 stages (strict 3)
//   2  "128x256s4":   128x256 tile, cooperative, 4 stages (strict 2)
//   3  "128x64s8pp":  128x64 tiles, ping-pong, 8 stages (strict 4) (Cout/groups <= 64)
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "common/params.h"

namespace deconv_patch {

// Host-side predicate: true exactly when launch_conv_transpose2d_gemm_phase_tma computes `p`.
//   * built with DECONV_PATCH_SM90A, current device of compute capability 9.0, and the driver
//     provides cuTensorMapEncodeTiled (looked up at run time)
//   * kind float16 / bfloat16 (allow_tf32 ignored), or float32 (TF32 with allow_tf32 true,
//     strict 3xTF32 with it false)
//   * per axis: stride 1..16 with stride_h*stride_w <= 64, dilation >= 1, padding >= 0,
//     kernel >= 1, dilation*kernel + padding < 2^24; any output size (output_padding)
//   * groups == 1 (any Cin >= 1; the channel tail of a 128-byte k block is zero-filled by TMA),
//     or groups > 1 with Cin/groups a multiple of 64 (16-bit) / 32 (fp32); Cout/groups >= 1;
//     consistent channel/group counts; non-negative weight strides; known activation
//   * input: channel stride 1 (or Cin == 1), 16-byte aligned, n/h/w strides positive multiples of
//     16 bytes below 2^40 bytes (size-1 dims excepted); any such layout, dense or not
//   * batch, H, W, OH, OW < 2^30 (int32 TMA coordinates), H, W >= 1 when the output is not empty
//   * packed rows groups*stride_h*stride_w*round_up(Cout/groups, 32) (twice that for fp32
//     strict: both weight blocks in one tensor map) < 2^31 - 512 and the
//     largest phase reduction below 2^31 elements; tiles below 2^30 and their k blocks, summed,
//     below 2^31 (int32 tile indices and ring counters)
//   * any non-negative output strides (64-bit offsets)
//   * a strided correlation (p.gather_h / gather_w set, common/params.h: a transposed
//     convolution's input gradient): on both axes, scale 1..8 (TMA's element strides), ph_h /
//     ph_w of stride 1, padding 0 and dilation 1 (the weight side: one phase of every tap),
//     output size * scale + dil * kernel + |offset| below 2^31; the rest as above, the input being
//     the correlation's (grad_output) and the output its result
bool gemm_phase_tma_supports(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32);

// Number of configs; launch_conv_transpose2d_gemm_phase_tma takes 0..num-1 (or -1).
int gemm_phase_tma_num_configs();

// Name of config `config` (e.g. "128x128s6pp"); "" when out of range.
const char* gemm_phase_tma_config_name(int config);

// Bytes of the packed weight buffer:
//     blocks * groups * stride_h*stride_w * round_up(Cout/groups, 32) * Kmax * element size,
//     Kmax = (most taps of any phase) * round_up(Cin/groups, 128 / element size),
//     blocks = 2 for float32 without allow_tf32 (strict: hi and lo blocks), else 1.
// Depends only on the weight shape, stride/padding/dilation, groups, kind and (float32 only)
// allow_tf32 (not on the batch, the image size or output_padding). The caller allocates it
// 16-byte aligned. Returns 0 where packing is refused.
int64_t gemm_phase_tma_packed_weight_bytes(const ConvTranspose2dParams& p, ScalarKind kind,
                                           bool allow_tf32);

// Packs p.weight ([Cin, Cout/groups, KH, KW], read through p.w_stride, any strides) into
// `packed` on `stream` (layout in the .cu; fp32 values are stored rounded to TF32, and for
// float32 without allow_tf32 followed by a second block of the same layout holding
// tf32_rna(w - hi)). Needs only the weight-side fields of p (weight, w_stride, channel counts,
// groups, ph_h, ph_w). Runs on any architecture. Returns cudaGetLastError()
// (cudaErrorInvalidValue when the weight side of supports fails or for null pointers).
cudaError_t launch_gemm_phase_tma_pack_weight(const ConvTranspose2dParams& p, ScalarKind kind,
                                              bool allow_tf32, void* packed,
                                              cudaStream_t stream);

// Bytes of the workspace a launch with these arguments needs: 0, or for a call run in k slices
// (a strided correlation without bias or epilogue whose GEMM tiles fill at most half of the
// current device's SMs: each tile's sums split into up to 16 slices, fp32 partial outputs
// added in slice order afterwards) slices * N*Cout*OH*OW * 4.
int64_t gemm_phase_tma_workspace_bytes(const ConvTranspose2dParams& p, ScalarKind kind,
                                       bool allow_tf32, int config = -1);

// Runs the convolution on `stream` without synchronising. Reads the weight only from `packed`
// (16-byte aligned; p.weight is ignored; packed with the same kind and, for float32, the same
// allow_tf32). config -1 picks by heuristic, else
// 0..gemm_phase_tma_num_configs()-1. `workspace`: gemm_phase_tma_workspace_bytes() bytes,
// 16-byte aligned, where that is not 0. Returns cudaGetLastError() (cudaSuccess without
// launching when the output is empty; cudaErrorInvalidValue when supports is false, config is
// out of range, `packed` is null / misaligned or a needed workspace is missing;
// cudaErrorInvalidConfiguration when the device lacks the shared memory).
cudaError_t launch_conv_transpose2d_gemm_phase_tma(const ConvTranspose2dParams& p,
                                                   ScalarKind kind, bool allow_tf32,
                                                   const void* packed, cudaStream_t stream,
                                                   int config = -1, void* workspace = nullptr);

}  // namespace deconv_patch
