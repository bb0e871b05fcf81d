// The tiled weight pack the families with a packed weight share. For a weight whose kernel
// positions (kh, kw) are contiguous, output channels any stride apart (a contiguous weight, or
// the view with its two channel dims swapped that an input gradient reads), or whose inner
// elements are contiguous as (kh, kw, output channel) (a channels_last weight), a block moves a
// 32 x 32 tile of (weight row: group and input channel) x (inner element) through shared memory:
// read along the weight's rows, written along the packed layout's lines of input channels. A family supplies the layout (Layout):
//   __host__ __device__ int64_t line(int oc, int kh, int kw) const  packed offset of the line
//                                                                   of that inner element;
//   __host__ __device__ int64_t row(int r) const   offset of weight row r within a line;
//   template <typename T> __device__ void store(void* packed, int64_t at, T v) const.
// One warp works out the tile's 32 lines once: an index computed per element (64-bit divisions)
// cost more than the memory. A weight the shape does not cover takes the family's per-element
// pack.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

#include "common/params.h"

namespace deconv_patch {

// The weight as the tiled pack reads it.
struct TiledPackShape {
  const void* w = nullptr;
  int64_t row_stride = 0;  // elements between weight rows (w_stride[0])
  int rows = 0;            // groups * Cin / groups
  int inner = 0;           // Cout / groups * KH * KW
  int cout_g = 0, kw = 0, khkw = 0;
  int64_t oc_stride = 0;   // elements between output channels (w_stride[1]; not oc_inner)
  bool oc_inner = false;   // (kh, kw, output channel) order: a channels_last weight
};

// p's weight as the tiled pack reads it, or false where it cannot: kernel positions not
// contiguous and inner elements not in channels_last order, more row tiles than a grid's y
// extent, inner elements past int32.
inline bool tiled_pack_shape(const ConvTranspose2dParams& p, TiledPackShape& s) {
  const int64_t kh = p.ph_h.kernel, kw = p.ph_w.kernel, cout_g = p.out_per_group;
  const int64_t* st = p.w_stride;
  const bool plain = st[3] == 1 && st[2] == kw && st[1] >= 0;
  const bool oc_inner = st[1] == 1 && st[3] == cout_g && st[2] == kw * cout_g;
  const int64_t rows = p.groups * p.in_per_group, inner = cout_g * kh * kw;
  if (!(plain || oc_inner) || rows < 1 || inner < 1 || (rows + 31) / 32 > 65535 ||
      inner >= ((int64_t)1 << 31) - 32)
    return false;
  s.w = p.weight;
  s.row_stride = st[0];
  s.rows = (int)rows;
  s.inner = (int)inner;
  s.cout_g = (int)cout_g;
  s.kw = (int)kw;
  s.khkw = (int)(kh * kw);
  s.oc_stride = st[1];
  // (1 x 1 kernels with unit output channel stride: both orders are the same)
  s.oc_inner = oc_inner && !(plain && st[1] == kh * kw);
  return true;
}

// Output channel and kernel position of inner element j.
__host__ __device__ __forceinline__ void tiled_pack_inner(const TiledPackShape& s, int j,
                                                          int& oc, int& kh, int& kw) {
  int kk;
  if (s.oc_inner) {
    kk = j / s.cout_g;
    oc = j - kk * s.cout_g;
  } else {
    oc = j / s.khkw;
    kk = j - oc * s.khkw;
  }
  kh = kk / s.kw;
  kw = kk - kh * s.kw;
}

// Weight offset of inner element j within its row.
__host__ __device__ __forceinline__ int64_t tiled_pack_offset(const TiledPackShape& s, int j) {
  if (s.oc_inner) return j;
  const int oc = j / s.khkw;
  return (int64_t)oc * s.oc_stride + (j - oc * s.khkw);
}

template <typename T, class Layout>
__global__ void __launch_bounds__(256)
    tiled_pack_kernel(const __grid_constant__ TiledPackShape s,
                      const __grid_constant__ Layout layout, void* packed) {
  __shared__ T tile[32][33];
  __shared__ int64_t line[32], source[32];
  const T* __restrict__ w = static_cast<const T*>(s.w);
  const int r0 = blockIdx.y * 32, j0 = blockIdx.x * 32;
  const int n = min(32, s.inner - j0);
  if (threadIdx.y == 0 && (int)threadIdx.x < n) {
    int oc, kh, kw;
    tiled_pack_inner(s, j0 + threadIdx.x, oc, kh, kw);
    line[threadIdx.x] = layout.line(oc, kh, kw);
    source[threadIdx.x] = tiled_pack_offset(s, j0 + threadIdx.x);
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8)
    if (r0 + i < s.rows && (int)threadIdx.x < n)
      tile[i][threadIdx.x] = w[(int64_t)(r0 + i) * s.row_stride + source[threadIdx.x]];
  __syncthreads();
  const int r = r0 + threadIdx.x;
  if (r >= s.rows) return;
  const int64_t row = layout.row(r);
  for (int i = threadIdx.y; i < n; i += 8) layout.store(packed, line[i] + row, tile[threadIdx.x][i]);
}

// The tiled pack into `packed`, zeroing its first `zero_bytes` first (where the layout pads).
template <typename T, class Layout>
cudaError_t launch_tiled_pack(const TiledPackShape& s, const Layout& layout, void* packed,
                              size_t zero_bytes, cudaStream_t stream) {
  if (zero_bytes > 0) {
    const cudaError_t err = cudaMemsetAsync(packed, 0, zero_bytes, stream);
    if (err != cudaSuccess) return err;
  }
  const dim3 grid((unsigned)((s.inner + 31) / 32), (unsigned)((s.rows + 31) / 32));
  tiled_pack_kernel<T, Layout><<<grid, dim3(32, 8), 0, stream>>>(s, layout, packed);
  return cudaGetLastError();
}

}  // namespace deconv_patch
