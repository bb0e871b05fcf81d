// col2im (see gemm_col2im/col2im.h). Each output element sums its taps in fp32 in (kh, kw) order.
// The taps of output (oh, ow) (axis_taps on each axis) are the same for every image and channel, so
// a thread finds them once for its (oh, ow) and then loops over images (and channels): per output
// element it is left with the loads, the sum, the epilogue and the store. (Finding the taps per
// element, a dozen integer divisions, bound the first version: Keypoint R-CNN 42-47 us for 21 MB
// read, docs/performance/col2im.md.)
//   * channels_last output (channel stride 1): thread = (ow, co), channels fastest, so a warp
//     reads consecutive channels of one tap of a cols row and writes consecutive channels;
//   * any other output (NCHW): thread = ow (lanes along the row: coalesced stores), 8 channels
//     each, the block's 8 warps taking neighbouring channels, so the sectors each warp reads
//     serve the others from L1.
// Grid: x = pixels / channels of a row, y = output rows oh (strided), z = blocks of images, as
// many as make ~8 blocks per SM.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/axis_taps.cuh"
#include "gemm_col2im/col2im.h"
#include "common/unit_kind.h"
#include "common/device_cache.h"
#include "common/epilogue.cuh"
#include "common/scalar_convert.cuh"

namespace deconv_patch {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTaps = 8;    // taps held as offsets; more take sum_taps_walk's loop
constexpr int kRowPixels = 32;  // NCHW path: output columns per block (one per lane)
constexpr int kChannelWarps = kThreads / kRowPixels;  // 8 warps, channels co0 + warp + 8i
constexpr int kBlockChannels = 8 * kChannelWarps;     // 64 channels per NCHW block

// Tap (a, b) = (kh, kw) = (rh.first_k + a*step_h, rw.first_k + b*step_w) of output (oh, ow) reads
// cols row (ih, iw) = (rh.first_i - a*in_step_h, rw.first_i - b*in_step_w) of its image, column
// (kh*KW + kw)*Cout + co. Offsets below are for co = 0, in floats from the image's first row;
// the next b moves by d_b, the next a (from b = 0) by d_a.
struct TapWalk {
  int64_t first, d_a, d_b;
  int count_b;
  int taps;  // rh.count * rw.count
};

// cols row length KH*KW*Cout.
__device__ __forceinline__ int64_t cols_row(const ConvTranspose2dParams& p) {
  return (int64_t)p.ph_h.kernel * p.ph_w.kernel * p.out_channels;
}

// The taps of output (oh, ow), given ow's column taps rw.
__device__ __forceinline__ TapWalk tap_walk(const ConvTranspose2dParams& p, int64_t oh,
                                            const TapRange& rw) {
  const TapRange rh = axis_taps(p.ph_h, (int)oh, (int)p.in_h);
  const int64_t cout = p.out_channels, ncol = cols_row(p);
  TapWalk w;
  w.taps = rh.count * rw.count;
  w.first = ((int64_t)rh.first_i * p.in_w + rw.first_i) * ncol +
            ((int64_t)rh.first_k * p.ph_w.kernel + rw.first_k) * cout;
  w.d_b = (int64_t)p.ph_w.step * cout - (int64_t)p.ph_w.in_step * ncol;
  w.d_a = (int64_t)p.ph_h.step * p.ph_w.kernel * cout - (int64_t)p.ph_h.in_step * p.in_w * ncol;
  w.count_b = rw.count;
  return w;
}

// The taps of a TapWalk in tap order: `at` is the current tap's offset, next() moves on.
struct TapCursor {
  int64_t row, at;
  int b;
  __device__ explicit TapCursor(const TapWalk& w) : row(w.first), at(w.first), b(0) {}
  __device__ void next(const TapWalk& w) {
    if (++b == w.count_b) {
      b = 0;
      row += w.d_a;
      at = row;
    } else {
      at += w.d_b;
    }
  }
};

// The first kMaxTaps tap offsets of `w` in tap order (entries past the tap count are unused).
__device__ __forceinline__ void tap_offsets(const TapWalk& w, int64_t (&off)[kMaxTaps]) {
  TapCursor c(w);
#pragma unroll
  for (int u = 0; u < kMaxTaps; ++u) {
    off[u] = c.at;
    c.next(w);
  }
}

// K sums of `taps` (<= kMaxTaps) taps at base + k*delta: all K*taps loads go out before the
// additions (in tap order), so a thread keeps several in flight.
template <int K>
__device__ __forceinline__ void sum_taps(const float* __restrict__ base, int64_t delta,
                                         const int64_t (&off)[kMaxTaps], int taps,
                                         float (&acc)[K]) {
  float v[K][kMaxTaps];
#pragma unroll
  for (int k = 0; k < K; ++k) {
#pragma unroll
    for (int u = 0; u < kMaxTaps; ++u) {
      if (u < taps) v[k][u] = __ldg(base + k * delta + off[u]);
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    acc[k] = 0.f;
#pragma unroll
    for (int u = 0; u < kMaxTaps; ++u) {
      if (u < taps) acc[k] += v[k][u];
    }
  }
}

// More than kMaxTaps taps (e.g. k9 s3 d1 has 9): the same sum, one tap at a time.
__device__ __forceinline__ float sum_taps_walk(const float* __restrict__ base, const TapWalk& w,
                                               int taps) {
  TapCursor c(w);
  float acc = 0.f;
  for (int t = 0; t < taps; ++t, c.next(w)) acc += __ldg(base + c.at);
  return acc;
}

// Images [n_begin, n_end) of block z.
struct ImageRange {
  int64_t begin, end;
};
__device__ __forceinline__ ImageRange block_images(const ConvTranspose2dParams& p,
                                                   int64_t per_block) {
  const int64_t begin = (int64_t)blockIdx.z * per_block;
  const int64_t end = begin + per_block < p.batch ? begin + per_block : p.batch;
  return {begin, end};
}

// channels_last output: x = ow * Cout + co within a row.
template <typename T>
__global__ void __launch_bounds__(kThreads, 3) col2im_nhwc_kernel(const ConvTranspose2dParams p,
                                                               const float* __restrict__ cols,
                                                               int64_t images_per_block) {
  const int cout = (int)p.out_channels;
  const int x = blockIdx.x * kThreads + threadIdx.x;
  if (x >= (int)p.out_w * cout) return;  // (no block-wide synchronisation in this kernel)
  const int ow = x / cout;
  const int co = x - ow * cout;
  const int64_t img_stride = p.in_h * p.in_w * cols_row(p);
  const T* bias = static_cast<const T*>(p.bias);
  T* out = static_cast<T*>(p.output);
  const ChannelAffine aff = channel_affine(p.epi, bias != nullptr ? to_float(bias[co]) : 0.f, co);
  const TapRange rw = axis_taps(p.ph_w, ow, (int)p.in_w);
  const ImageRange imgs = block_images(p, images_per_block);
  for (int64_t oh = blockIdx.y; oh < p.out_h; oh += gridDim.y) {
    const TapWalk walk = tap_walk(p, oh, rw);
    const int taps = walk.taps;
    T* o = out + (int64_t)co * p.out_stride[1] + oh * p.out_stride[2] +
           (int64_t)ow * p.out_stride[3];
    auto store = [&](int64_t n, float acc) {
      o[n * p.out_stride[0]] = from_float<T>(apply_epilogue(acc, aff, p.epi));
    };
    int64_t n = imgs.begin;
    if (taps <= kMaxTaps) {
      int64_t off[kMaxTaps];
      tap_offsets(walk, off);
      for (; n + 1 < imgs.end; n += 2) {
        float acc[2];
        sum_taps<2>(cols + n * img_stride + co, img_stride, off, taps, acc);
        store(n, acc[0]);
        store(n + 1, acc[1]);
      }
      if (n < imgs.end) {
        float acc[1];
        sum_taps<1>(cols + n * img_stride + co, 0, off, taps, acc);
        store(n, acc[0]);
      }
    } else {
      for (; n < imgs.end; ++n) store(n, sum_taps_walk(cols + n * img_stride + co, walk, taps));
    }
  }
}

// Any other output: block x = (column tile, channel block); lane = output column, warp w takes
// channels co0 + w + 8i.
template <typename T>
__global__ void __launch_bounds__(kThreads, 3) col2im_rows_kernel(const ConvTranspose2dParams p,
                                                               const float* __restrict__ cols,
                                                               int64_t images_per_block) {
  const int cout = (int)p.out_channels;
  const int ow_tiles = (int)((p.out_w + kRowPixels - 1) / kRowPixels);
  const int ow = (int)(blockIdx.x % ow_tiles) * kRowPixels + (int)(threadIdx.x % kRowPixels);
  const int c_first = (int)(blockIdx.x / ow_tiles) * kBlockChannels +
                      (int)(threadIdx.x / kRowPixels);
  if (ow >= p.out_w || c_first >= cout) return;  // (no block-wide synchronisation)
  const int c_end = c_first + kBlockChannels - kChannelWarps + 1 < cout
                        ? c_first + kBlockChannels - kChannelWarps + 1
                        : cout;  // this thread's channels: c_first, +8, ... below c_end
  const int64_t img_stride = p.in_h * p.in_w * cols_row(p);
  const T* bias = static_cast<const T*>(p.bias);
  T* out = static_cast<T*>(p.output);
  const TapRange rw = axis_taps(p.ph_w, ow, (int)p.in_w);
  const ImageRange imgs = block_images(p, images_per_block);
  for (int64_t oh = blockIdx.y; oh < p.out_h; oh += gridDim.y) {
    const TapWalk walk = tap_walk(p, oh, rw);
    const int taps = walk.taps;
    int64_t off[kMaxTaps];
    tap_offsets(walk, off);
    auto store = [&](int64_t n, int co, float acc) {
      const ChannelAffine aff =
          channel_affine(p.epi, bias != nullptr ? to_float(bias[co]) : 0.f, co);
      out[n * p.out_stride[0] + (int64_t)co * p.out_stride[1] + oh * p.out_stride[2] +
          (int64_t)ow * p.out_stride[3]] = from_float<T>(apply_epilogue(acc, aff, p.epi));
    };
    for (int64_t n = imgs.begin; n < imgs.end; ++n) {
      const float* img = cols + n * img_stride;
      int co = c_first;
      if (taps <= kMaxTaps) {
        for (; co + kChannelWarps < c_end; co += 2 * kChannelWarps) {
          float acc[2];
          sum_taps<2>(img + co, kChannelWarps, off, taps, acc);
          store(n, co, acc[0]);
          store(n, co + kChannelWarps, acc[1]);
        }
        if (co < c_end) {
          float acc[1];
          sum_taps<1>(img + co, 0, off, taps, acc);
          store(n, co, acc[0]);
        }
      } else {
        for (; co < c_end; co += kChannelWarps) store(n, co, sum_taps_walk(img + co, walk, taps));
      }
    }
  }
}

template <typename T>
cudaError_t launch_typed(const ConvTranspose2dParams& p, const float* cols, cudaStream_t stream) {
  if (p.batch * p.out_h * p.out_w * p.out_channels == 0) return cudaSuccess;
  const bool nhwc = p.out_stride[1] == 1;
  int64_t blocks_x;
  if (nhwc) {
    const int64_t per_row = p.out_w * p.out_channels;
    if (per_row >= ((int64_t)1 << 31) - kThreads) return cudaErrorInvalidValue;
    blocks_x = (per_row + kThreads - 1) / kThreads;
  } else {
    if (p.out_w >= ((int64_t)1 << 31) - kRowPixels || p.out_channels >= ((int64_t)1 << 31))
      return cudaErrorInvalidValue;
    blocks_x = ((p.out_w + kRowPixels - 1) / kRowPixels) *
               ((p.out_channels + kBlockChannels - 1) / kBlockChannels);
  }
  if (blocks_x >= ((int64_t)1 << 31)) return cudaErrorInvalidValue;
  const int64_t blocks_y = p.out_h < 65535 ? p.out_h : 65535;
  // Blocks of images: enough blocks for ~8 per SM, each image block as large as that allows.
  const int sms = device_sm_count(current_device());
  const int64_t want = 8 * (int64_t)(sms > 0 ? sms : 132);
  int64_t z = (want + blocks_x * blocks_y - 1) / (blocks_x * blocks_y);
  z = z < 1 ? 1 : z > p.batch ? p.batch : z > 65535 ? 65535 : z;
  const int64_t per_block = (p.batch + z - 1) / z;
  z = (p.batch + per_block - 1) / per_block;
  const dim3 grid((unsigned)blocks_x, (unsigned)blocks_y, (unsigned)z);
  if (nhwc) {
    col2im_nhwc_kernel<T><<<grid, kThreads, 0, stream>>>(p, cols, per_block);
  } else {
    col2im_rows_kernel<T><<<grid, kThreads, 0, stream>>>(p, cols, per_block);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_col2im(const ConvTranspose2dParams& p, const float* cols, ScalarKind kind,
                          cudaStream_t stream) {
  if (p.groups != 1) return cudaErrorInvalidValue;
  switch (kind) {
#if DECONV_PATCH_UNIT_HAS_KIND(0)
    case ScalarKind::kFloat32: return launch_typed<float>(p, cols, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(1)
    case ScalarKind::kFloat16: return launch_typed<__half>(p, cols, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(2)
    case ScalarKind::kBFloat16: return launch_typed<__nv_bfloat16>(p, cols, stream);
#endif
  }
  return cudaErrorInvalidValue;
}

}  // namespace deconv_patch
