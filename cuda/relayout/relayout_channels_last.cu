// NCHW -> NHWC re-layout (see relayout/relayout_channels_last.h).
#include "relayout/relayout_channels_last.h"

namespace deconv_patch {
namespace {

constexpr int kWords = 32;  // tile words per row; threads per tile row (blockDim.x)
constexpr int kRows = 8;    // blockDim.y

// E: the element's bits (uint16_t / uint32_t); W: the word moved per access, P = sizeof(W) /
// sizeof(E) elements (1, or 2 for 16-bit pairs when C and H*W are even: with 2-byte accesses a
// warp moved 64 bytes per request and the copy ran at 1.4 TB/s, H100).
// A block
// moves a tile of 32P channels x 32P pixels (blocks: x pixel tile, y channel tile, z images z,
// z + gridDim.z, ...). Index math, per image `img`: src element (ch, px) sits at
// (img * C + ch) * HW + px, dst element at (img * HW + px) * C + ch. The block reads the tile's
// channel rows along px, P pixels per word (coalesced), into shared memory (rows of 32 words
// plus one of padding: the row-wise writes are conflict-free), then writes its pixel rows along
// ch, each word gathering P channels from P tile rows (coalesced; at most 2-way bank conflicts
// for P = 2).
template <typename E, typename W>
__global__ void __launch_bounds__(kWords * kRows, 4)
    relayout_nchw_to_nhwc_kernel(const E* __restrict__ src, E* __restrict__ dst, int64_t n,
                                 int64_t c, int64_t hw) {
  constexpr int P = sizeof(W) / sizeof(E);
  static_assert(P == 1 || (P == 2 && sizeof(E) == 2), "words of one element or a 16-bit pair");
  constexpr int kTile = kWords * P;
  constexpr int kRowElems = (kWords + 1) * P;  // a tile row in elements (with its padding)
  __shared__ W tile[kTile][kWords + 1];
  const E* tile_e = reinterpret_cast<const E*>(&tile[0][0]);
  const int64_t px0 = (int64_t)blockIdx.x * kTile;
  const int64_t ch0 = (int64_t)blockIdx.y * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const E* s = src + img * c * hw;
    E* d = dst + img * c * hw;
#pragma unroll
    for (int i = 0; i < kTile / kRows; ++i) {
      const int r = ty + i * kRows;  // channel within the tile; pixels P*tx ..
      const int64_t ch = ch0 + r, px = px0 + P * tx;
      if (ch < c && px < hw) tile[r][tx] = *reinterpret_cast<const W*>(s + ch * hw + px);
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTile / kRows; ++i) {
      const int r = ty + i * kRows;  // pixel within the tile; channels P*tx ..
      const int64_t px = px0 + r, ch = ch0 + P * tx;
      if (ch < c && px < hw) {
        W word = 0;
#pragma unroll
        for (int k = 0; k < P; ++k) {
          word |= (W)tile_e[(P * tx + k) * kRowElems + r] << (8 * sizeof(E) * k);
        }
        *reinterpret_cast<W*>(d + px * c + ch) = word;
      }
    }
    __syncthreads();  // the tile is refilled for the next image
  }
}

template <typename E, typename W>
cudaError_t launch_typed(const void* src, void* dst, int64_t n, int64_t c, int64_t hw,
                         cudaStream_t stream) {
  constexpr int64_t kTile = kWords * (sizeof(W) / sizeof(E));
  const int64_t px_tiles = (hw + kTile - 1) / kTile, ch_tiles = (c + kTile - 1) / kTile;
  if (px_tiles > 0x7FFFFFFF || ch_tiles > 65535) return cudaErrorInvalidValue;
  const dim3 grid((unsigned)px_tiles, (unsigned)ch_tiles, (unsigned)(n < 65535 ? n : 65535));
  relayout_nchw_to_nhwc_kernel<E, W><<<grid, dim3(kWords, kRows), 0, stream>>>(
      static_cast<const E*>(src), static_cast<E*>(dst), n, c, hw);
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
      // Pairs where every one is 4-byte aligned: C and H*W even, both bases 4-byte aligned.
      if (c % 2 == 0 && hw % 2 == 0 && ((uintptr_t)src | (uintptr_t)dst) % 4 == 0)
        return launch_typed<uint16_t, uint32_t>(src, dst, n, c, hw, stream);
      return launch_typed<uint16_t, uint16_t>(src, dst, n, c, hw, stream);
    case 4: return launch_typed<uint32_t, uint32_t>(src, dst, n, c, hw, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace deconv_patch
