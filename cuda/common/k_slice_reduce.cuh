// The reduce of a GEMM run in k slices: `slices` fp32 partial outputs, each dense channels_last
// [N, OH, OW, C] and `slice_stride` elements apart, added in slice order (the same sum on every
// run: deterministic) and rounded once to T into an output of any strides. Tiles of 32 pixels x
// 32 channels: the partials are read along channels; a channels_last output is written from
// registers, any other through a shared-memory transpose (writes along pixels). Plain CUDA;
// no torch.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "common/scalar_convert.cuh"

namespace deconv_patch {

struct KSliceReduceArgs {
  const float* partial;   // slice s, pixel m (n*OH*OW + oh*OW + ow), channel c:
                          // partial[s * slice_stride + m * channels + c]
  void* out;              // element type T
  int64_t slice_stride;
  int64_t pixels;         // N * OH * OW
  int64_t hw;             // OH * OW
  int64_t out_w;          // OW
  int64_t os[4];          // output strides (n, c, h, w), elements
  int channels;
  int slices;
};

template <typename T>
__global__ void __launch_bounds__(256)
    k_slice_reduce_kernel(const __grid_constant__ KSliceReduceArgs a) {
  __shared__ float tile[32][33];
  T* __restrict__ out = static_cast<T*>(a.out);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t pixel_tiles = (a.pixels + 31) / 32;
  const int channel_tiles = (a.channels + 31) / 32;
  auto out_offset = [&](int64_t m, int c) {
    const int64_t n = m / a.hw, r = m - n * a.hw, oh = r / a.out_w, ow = r - oh * a.out_w;
    return n * a.os[0] + (int64_t)c * a.os[1] + oh * a.os[2] + ow * a.os[3];
  };
  for (int64_t pt = blockIdx.x; pt < pixel_tiles; pt += gridDim.x) {
    for (int ctl = blockIdx.y; ctl < channel_tiles; ctl += gridDim.y) {
      const int64_t m0 = pt * 32;
      const int c0 = ctl * 32;
      const int c = c0 + tx;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t m = m0 + ty + 8 * j;
        float sum = 0.f;
        if (m < a.pixels && c < a.channels) {
          const float* src = a.partial + m * a.channels + c;
          for (int s = 0; s < a.slices; ++s) sum += src[s * a.slice_stride];
          if (a.os[1] == 1) out[out_offset(m, c)] = from_float<T>(sum);
        }
        tile[ty + 8 * j][tx] = sum;
      }
      if (a.os[1] == 1) continue;  // (uniform: every thread takes the same branch)
      __syncthreads();
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t m = m0 + tx;
        const int cc = c0 + ty + 8 * j;
        if (m < a.pixels && cc < a.channels) {
          out[out_offset(m, cc)] = from_float<T>(tile[tx][ty + 8 * j]);
        }
      }
      __syncthreads();
    }
  }
}

// Launches the reduce on `stream`; returns cudaGetLastError().
template <typename T>
cudaError_t launch_k_slice_reduce(const KSliceReduceArgs& a, cudaStream_t stream) {
  if (a.pixels == 0 || a.channels == 0) return cudaSuccess;
  const int64_t pixel_tiles = (a.pixels + 31) / 32;
  const int channel_tiles = (a.channels + 31) / 32;
  const dim3 grid((unsigned)(pixel_tiles < 65535 * 32 ? pixel_tiles : 65535 * 32),
                  (unsigned)(channel_tiles < 65535 ? channel_tiles : 65535));
  k_slice_reduce_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace deconv_patch
