// The weight [Cin, Cout/g, KH, KW] (any strides) copied tap-major: a dense [Cin, KH*KW, Cout/g]
// buffer, packed[ci][tap][co] = weight[ci, co, tap / KW, tap % KW]. gemm_kxs's tap-major config
// reads it; gemm_col2im's GEMM packs it as the weight of a 1 x 1 kernel with KH*KW*Cout outputs.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "common/params.h"

namespace deconv_patch {

template <typename Bits>
__global__ void tap_major_copy_kernel(const Bits* __restrict__ weight, Bits* __restrict__ packed,
                                      int64_t cin, int64_t cout, int kh, int kw, int64_t s0,
                                      int64_t s1, int64_t s2, int64_t s3) {
  const int64_t taps = int64_t{kh} * kw;
  const int64_t total = cin * taps * cout;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t co = i % cout;
    const int64_t tap = (i / cout) % taps;
    const int64_t ci = i / (cout * taps);
    packed[i] = weight[ci * s0 + co * s1 + (tap / kw) * s2 + (tap % kw) * s3];
  }
}

// Bytes of the copy of p's weight (its weight-side fields) for element type `kind`.
inline int64_t tap_major_copy_bytes(const ConvTranspose2dParams& p, ScalarKind kind) {
  return p.in_channels * p.out_per_group * p.ph_h.kernel * p.ph_w.kernel *
         (kind == ScalarKind::kFloat32 ? 4 : 2);
}

// Writes the copy of p.weight into `packed` on `stream`; elements move as bits.
inline cudaError_t launch_tap_major_copy(const ConvTranspose2dParams& p, ScalarKind kind,
                                         void* packed, cudaStream_t stream) {
  const int64_t total = p.in_channels * p.out_per_group * p.ph_h.kernel * p.ph_w.kernel;
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t needed = (total + threads - 1) / threads;
  const int blocks = (int)(needed < 4096 ? needed : 4096);  // grid-stride beyond
  const int64_t* s = p.w_stride;
  if (kind == ScalarKind::kFloat32)
    tap_major_copy_kernel<<<blocks, threads, 0, stream>>>(
        static_cast<const uint32_t*>(p.weight), static_cast<uint32_t*>(packed), p.in_channels,
        p.out_per_group, p.ph_h.kernel, p.ph_w.kernel, s[0], s[1], s[2], s[3]);
  else
    tap_major_copy_kernel<<<blocks, threads, 0, stream>>>(
        static_cast<const uint16_t*>(p.weight), static_cast<uint16_t*>(packed), p.in_channels,
        p.out_per_group, p.ph_h.kernel, p.ph_w.kernel, s[0], s[1], s[2], s[3]);
  return cudaGetLastError();
}

}  // namespace deconv_patch
