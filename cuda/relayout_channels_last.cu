// NCHW -> NHWC re-layout (see relayout_channels_last.h).
#include "relayout_channels_last.h"

namespace deconv_patch {
namespace {

constexpr int kTile = 32;  // tile of 32 channels x 32 pixels
constexpr int kRows = 8;   // threads per tile column: each thread moves kTile / kRows elements

// Block (x: pixel tile, y: channel tile, z: images z, z + gridDim.z, ...). Index math, per image
// `img`: src element (ch, px) sits at (img * C + ch) * HW + px, dst element at
// (img * HW + px) * C + ch. The block reads its tile row by row along px (coalesced), stores it
// transposed in shared memory (one padding column: no bank conflicts), and writes it row by row
// along ch (coalesced).
template <typename T>
__global__ void __launch_bounds__(kTile * kRows, 4)
    relayout_nchw_to_nhwc_kernel(const T* __restrict__ src, T* __restrict__ dst, int64_t n,
                                 int64_t c, int64_t hw) {
  __shared__ T tile[kTile][kTile + 1];
  const int64_t px0 = (int64_t)blockIdx.x * kTile;
  const int64_t ch0 = (int64_t)blockIdx.y * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const T* s = src + img * c * hw;
    T* d = dst + img * c * hw;
#pragma unroll
    for (int i = 0; i < kTile / kRows; ++i) {
      const int r = ty + i * kRows;  // channel within the tile
      const int64_t ch = ch0 + r, px = px0 + tx;
      if (ch < c && px < hw) tile[r][tx] = s[ch * hw + px];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTile / kRows; ++i) {
      const int r = ty + i * kRows;  // pixel within the tile
      const int64_t px = px0 + r, ch = ch0 + tx;
      if (ch < c && px < hw) d[px * c + ch] = tile[tx][r];
    }
    __syncthreads();  // the tile is refilled for the next image
  }
}

// 16-bit elements moved in pairs (32-bit accesses; C and H*W even, so every pair is 4-byte
// aligned): with 2-byte accesses a warp moved 64 bytes per request and the copy ran at 1.4 TB/s
// (Keypoint R-CNN's 100 x 512 x 14 x 14 bf16 input, H100; perf-notes version 21). A block moves a
// tile of 64 channels x 64 pixels: it reads pixel pairs along each channel row, and writes
// channel pairs along each pixel row, each pair gathered from two rows of the tile. Index math
// as in the kernel above, in units of elements.
constexpr int kPairTile = 64;
__global__ void __launch_bounds__(kTile * kRows, 4)
    relayout_pairs_kernel(const uint16_t* __restrict__ src, uint16_t* __restrict__ dst,
                          int64_t n, int64_t c, int64_t hw) {
  // Rows of 64 elements + 2 of padding (33 words): the row-wise 32-bit writes are conflict-free;
  // the column-wise 16-bit reads meet at most 2-way conflicts.
  __shared__ uint32_t tile[kPairTile][kPairTile / 2 + 1];
  const int64_t px0 = (int64_t)blockIdx.x * kPairTile;
  const int64_t ch0 = (int64_t)blockIdx.y * kPairTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const uint16_t* s = src + img * c * hw;
    uint16_t* d = dst + img * c * hw;
#pragma unroll
    for (int i = 0; i < kPairTile / kRows; ++i) {
      const int r = ty + i * kRows;  // channel within the tile; pixels 2tx, 2tx + 1
      const int64_t ch = ch0 + r, px = px0 + 2 * tx;
      if (ch < c && px < hw) tile[r][tx] = *reinterpret_cast<const uint32_t*>(s + ch * hw + px);
    }
    __syncthreads();
    const uint16_t* t16 = reinterpret_cast<const uint16_t*>(&tile[0][0]);
    constexpr int kRow16 = 2 * (kPairTile / 2 + 1);  // a tile row in 16-bit elements
#pragma unroll
    for (int i = 0; i < kPairTile / kRows; ++i) {
      const int r = ty + i * kRows;  // pixel within the tile; channels 2tx, 2tx + 1
      const int64_t px = px0 + r, ch = ch0 + 2 * tx;
      if (ch < c && px < hw) {
        const uint32_t lo = t16[(2 * tx) * kRow16 + r], hi = t16[(2 * tx + 1) * kRow16 + r];
        *reinterpret_cast<uint32_t*>(d + px * c + ch) = lo | (hi << 16);
      }
    }
    __syncthreads();  // the tile is refilled for the next image
  }
}

template <typename T>
cudaError_t launch_typed(const void* src, void* dst, int64_t n, int64_t c, int64_t hw,
                         cudaStream_t stream) {
  const int64_t px_tiles = (hw + kTile - 1) / kTile, ch_tiles = (c + kTile - 1) / kTile;
  if (px_tiles > 0x7FFFFFFF || ch_tiles > 65535) return cudaErrorInvalidValue;
  const dim3 grid((unsigned)px_tiles, (unsigned)ch_tiles, (unsigned)(n < 65535 ? n : 65535));
  relayout_nchw_to_nhwc_kernel<T><<<grid, dim3(kTile, kRows), 0, stream>>>(
      static_cast<const T*>(src), static_cast<T*>(dst), n, c, hw);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_relayout_nchw_to_nhwc(const void* src, void* dst, int64_t n, int64_t c,
                                         int64_t hw, int elem_bytes, cudaStream_t stream) {
  if (n < 0 || c < 0 || hw < 0) return cudaErrorInvalidValue;
  if (n == 0 || c == 0 || hw == 0) return cudaSuccess;
  if (src == nullptr || dst == nullptr) return cudaErrorInvalidValue;
  switch (elem_bytes) {
    case 2:
      if (c % 2 == 0 && hw % 2 == 0 && ((uintptr_t)src | (uintptr_t)dst) % 4 == 0) {
        const int64_t px_tiles = (hw + kPairTile - 1) / kPairTile;
        const int64_t ch_tiles = (c + kPairTile - 1) / kPairTile;
        if (px_tiles > 0x7FFFFFFF || ch_tiles > 65535) return cudaErrorInvalidValue;
        const dim3 grid((unsigned)px_tiles, (unsigned)ch_tiles, (unsigned)(n < 65535 ? n : 65535));
        relayout_pairs_kernel<<<grid, dim3(kTile, kRows), 0, stream>>>(
            static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), n, c, hw);
        return cudaGetLastError();
      }
      return launch_typed<uint16_t>(src, dst, n, c, hw, stream);
    case 4: return launch_typed<uint32_t>(src, dst, n, c, hw, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace deconv_patch
