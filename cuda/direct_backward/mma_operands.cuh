// What the tensor-core gradient kernels (grad_input_mma.cu, weight_grad_mma.cu) share: walking
// the columns k = (co, kh, kw) of a group's weight and the input's pixels (n, ih, iw) one at a
// time, keeping the element offsets they read up to date by additions (index arithmetic, not
// the tensor cores, bounds these kernels: a division or 64-bit product per element made them
// several times slower), and the operands moved as raw bits (the loads copy values; only the
// mma and the output conversion know the type). fp32 operands run as 3xTF32 (three TF32
// products a pair, about fp32's accuracy): the kernels are bound by their gathers, not the
// tensor cores. Offsets within one image are 32-bit: mma_offsets_fit says where they are.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/tensor_core_ptx.cuh"
#include "direct_backward/direct_backward.h"
#include "direct_backward/weight_column.cuh"

namespace deconv_patch {
namespace mma_backward {

// A step covers 64 bytes of k (input gradient) or pixels (weight gradient) per tile row: 32
// 16-bit or 16 fp32 values. Shared rows are addressed in 16-bit units whatever the type.
constexpr int kStepBytes = 64;
constexpr int kPitch = 40;   // 16-bit units per shared row: 80 bytes, so the 8 rows an
                             // ldmatrix reads fall on distinct banks
constexpr int kChunk = 16;   // 16-bit units of k one mma covers: 32 bytes (m16n8k16 in 16-bit,
                             // m16n8k8 in TF32)
constexpr int kThreads = 256;

template <typename T>
constexpr int kStepOf = kStepBytes / (int)sizeof(T);  // k or pixels a step
template <typename T>
constexpr int kUnitsOf = (int)sizeof(T) / 2;  // 16-bit units a value
// The bits a load copies: 16 or 32 of them.
template <typename T>
using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;

// Whether every offset within one image of x, dx and grad_output, within the weight, and the
// walks' steps and wraps fit in 31 bits.
inline bool mma_offsets_fit(const ConvTranspose2dGradParams& p) {
  auto span = [](const int64_t (&s)[4], int64_t c, int64_t h, int64_t w) {
    auto mag = [](int64_t v) { return v < 0 ? -v : v; };
    return mag(s[1]) * (c + 1) + mag(s[2]) * (h + 1) + mag(s[3]) * (w + 1);
  };
  const int64_t reach_h = p.out_h + p.in_h * p.stride_h + p.pad_h + p.kernel_h * p.dil_h;
  const int64_t reach_w = p.out_w + p.in_w * p.stride_w + p.pad_w + p.kernel_w * p.dil_w;
  const int64_t limit = (int64_t)1 << 31;
  return span(p.grad_output_stride, p.out_channels, reach_h, reach_w) < limit &&
         span(p.input_stride, p.in_channels, p.in_h, p.in_w) < limit &&
         span(p.grad_input_stride, p.in_channels, p.in_h, p.in_w) < limit &&
         span(p.weight_stride, p.out_per_group, p.kernel_h, p.kernel_w) < limit &&
         p.in_h * p.in_w < limit;
}

// How a tensor's offset moves along the input gradient's k: per co, per kw and per kh
// (dilation included for grad_output).
struct TapStrides {
  int out_per_group, kernel_w, dil_h, dil_w;
  int co, h, w;
};

__device__ __forceinline__ TapStrides grad_output_taps(const ConvTranspose2dGradParams& p) {
  return {(int)p.out_per_group, p.kernel_w, p.dil_h, p.dil_w, (int)p.grad_output_stride[1],
          (int)p.grad_output_stride[2] * p.dil_h, (int)p.grad_output_stride[3] * p.dil_w};
}
__device__ __forceinline__ TapStrides weight_taps(const ConvTranspose2dGradParams& p) {
  return {(int)p.out_per_group, p.kernel_w, p.dil_h, p.dil_w, (int)p.weight_stride[1],
          (int)p.weight_stride[2], (int)p.weight_stride[3]};
}

// The input gradient's k in tap-major order, k = (kh * KW + kw) * Cout/g + co (any order of
// the sum serves, as long as both operands use it): consecutive k of one tap share its bounds
// check and move by one channel stride. Holds the tap's output-pixel shift (dh, dw) =
// (kh*dil_h, kw*dil_w) and the offset co*s.co + kh*s.h + kw*s.w.
struct TapWalk {
  int co = 0, kw = 0, dh = 0, dw = 0, off = 0;

  __device__ __forceinline__ void start(int k, const TapStrides& s) {
    const int tap = k / s.out_per_group;
    co = k - tap * s.out_per_group;
    const int kh = tap / s.kernel_w;
    kw = tap - kh * s.kernel_w;
    dh = kh * s.dil_h;
    dw = kw * s.dil_w;
    off = co * s.co + kh * s.h + kw * s.w;
  }
  // Returns whether the tap changed.
  __device__ __forceinline__ bool next(const TapStrides& s) {
    off += s.co;
    if (++co < s.out_per_group) return false;
    co = 0;
    off += s.w - s.out_per_group * s.co;
    dw += s.dil_w;
    if (++kw == s.kernel_w) {
      kw = 0;
      dw = 0;
      off += s.h - s.kernel_w * s.w;
      dh += s.dil_h;
    }
    return true;
  }
};

// Input pixel (n, ih, iw) of a flat index over n * H * W.
struct Pixel {
  int64_t n = 0;
  int ih = 0, iw = 0;
};

__device__ __forceinline__ Pixel pixel_at(int64_t pixel, const ConvTranspose2dGradParams& p) {
  const int64_t hw = p.in_h * p.in_w;
  Pixel at;
  int64_t rest;
  if (pixel < ((int64_t)1 << 32)) {  // 32-bit division where it is enough
    at.n = (uint32_t)pixel / (uint32_t)hw;
    rest = (uint32_t)pixel - (uint32_t)at.n * (uint32_t)hw;
  } else {
    at.n = pixel / hw;
    rest = pixel - at.n * hw;
  }
  at.ih = (int)((uint32_t)rest / (uint32_t)p.in_w);
  at.iw = (int)rest - at.ih * (int)p.in_w;
  return at;
}

// Two 16-bit values in one register, the first in the low half (the order of a shared row).
__device__ __forceinline__ uint32_t pair_bits(uint16_t first, uint16_t second) {
  return (uint32_t)first | ((uint32_t)second << 16);
}

// Loaded values as the 32-bit words of a shared row.
template <int N>
__device__ __forceinline__ void pack_words(const uint16_t (&v)[2 * N], uint32_t (&w)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) w[j] = pair_bits(v[2 * j], v[2 * j + 1]);
}
template <int N>
__device__ __forceinline__ void pack_words(const uint32_t (&v)[N], uint32_t (&w)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) w[j] = v[j];
}

// The fragments below are read with ldmatrix, whose 8 x 8 16-bit matrices are 8 x 4 fp32 values
// too: the same addresses give m16n8k16's 16-bit fragments and m16n8k8's TF32 ones. `col0` in
// 16-bit units.

// A warp's [16 x 16] A fragment of a row-major shared tile (rows `row0`.., columns `col0`..).
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* tile, int row0,
                                       int col0, int lane) {
  tc::ldsm_x4(tc::smem_u32(tile + (row0 + lane % 16) * kPitch + col0 + (lane / 16) * 8), a[0],
              a[1], a[2], a[3]);
}

// Two [16 x 8] B fragments (n rows `row0`..+16, k columns `col0`..+16) of a tile stored [n][k].
__device__ __forceinline__ void load_b_pair(uint32_t (&b0)[2], uint32_t (&b1)[2],
                                            const uint16_t* tile, int row0, int col0, int lane) {
  tc::ldsm_x4(tc::smem_u32(tile + (row0 + lane % 8 + (lane / 16) * 8) * kPitch + col0 +
                           ((lane / 8) % 2) * 8),
              b0[0], b0[1], b1[0], b1[1]);
}

// d += a * b over one chunk: m16n8k16 for 16-bit operands; for fp32 three m16n8k8 TF32
// products (the small parts' first), from fragments split once per chunk (split_tf32). The
// three go into a sum of their own, added to d in fp32: the tensor cores round what they add
// into their accumulator more coarsely than an fp32 add, and over a long sum (a weight
// gradient's thousands of pixels) one accumulator measured several times past fp32's error;
// a chunk's own sum stays small.
template <typename T>
__device__ __forceinline__ void mma_chunk(float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&a_lo)[4], const uint32_t (&b)[2],
                                          const uint32_t (&b_lo)[2]) {
  if constexpr (std::is_same_v<T, float>) {
    float part[4] = {0.f, 0.f, 0.f, 0.f};
    tc::mma_1688_tf32(part, a_lo, b);
    tc::mma_1688_tf32(part, a, b_lo);
    tc::mma_1688_tf32(part, a, b);
#pragma unroll
    for (int r = 0; r < 4; ++r) d[r] += part[r];
  } else {
    tc::mma_16816<T>(d, a, b);
  }
}

// fp32 fragments as TF32 big (in place) and small parts; nothing for 16-bit ones.
template <typename T, int N>
__device__ __forceinline__ void split_tf32(uint32_t (&x)[N], uint32_t (&lo)[N]) {
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int j = 0; j < N; ++j) tc::tf32_hi_lo(__uint_as_float(x[j]), x[j], lo[j]);
  }
}

}  // namespace mma_backward
}  // namespace deconv_patch
