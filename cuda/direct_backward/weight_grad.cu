// The weight gradient of a transposed convolution on CUDA cores:
//     dW[ci, co, kh, kw] = sum over n, ih, iw of x[n, ci, ih, iw] * dy[n, g*Cout/g + co, oh, ow],
//     oh = ih*stride - pad + kh*dil (likewise ow), terms outside dy left out.
// A block takes CI_LANES input channels, 16 of a channel's Cout/g * KH * KW weight columns, and
// one range of input pixels; each thread sums its pixels' terms for its channel and columns, so
// an input value is read once for 16 columns. Blocks write fp32 partial sums per pixel range,
// and a second kernel adds the ranges in order: deterministic, no atomics.
// CI_LANES = 32 for channels_last inputs (a warp reads 32 neighbouring channels of a pixel),
// 1 otherwise (a warp reads 32 neighbouring pixels of a channel).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/element_type.cuh"
#include "common/scalar_convert.cuh"
#include "direct_backward/direct_backward.h"

namespace deconv_patch {
namespace {

constexpr int kCols = 16;  // weight columns (co, kh, kw) per thread
constexpr int kThreads = 256;
constexpr int kMostSplits = 64;
constexpr int kLeastPixels = 256;  // per range

template <typename T, int CI_LANES>
__global__ void __launch_bounds__(kThreads)
direct_weight_grad_partial_kernel(const ConvTranspose2dGradParams p) {
  constexpr int kPixLanes = kThreads / CI_LANES;
  const T* __restrict__ x = static_cast<const T*>(p.input);
  const T* __restrict__ dy = static_cast<const T*>(p.grad_output);
  const int cols = (int)weight_grad_columns(p);
  const int chunks = (cols + kCols - 1) / kCols;
  const int chunk = (int)(blockIdx.x % chunks);
  const int64_t ci = (int64_t)(blockIdx.x / chunks) * CI_LANES + threadIdx.x % CI_LANES;
  const int pix_lane = threadIdx.x / CI_LANES;
  const bool ci_ok = ci < p.in_channels;
  const int64_t g = ci_ok ? ci / p.in_per_group : 0;

  // This thread's columns: dy's channel offset and the tap's output-pixel offsets.
  int64_t chan[kCols];
  int dh[kCols], dw[kCols];
  bool col_ok[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    const int q = chunk * kCols + j;
    col_ok[j] = ci_ok && q < cols;
    const int qq = col_ok[j] ? q : 0;
    const int kw = qq % p.kernel_w, kh = (qq / p.kernel_w) % p.kernel_h;
    const int co = qq / (p.kernel_w * p.kernel_h);
    chan[j] = (g * p.out_per_group + co) * p.grad_output_stride[1];
    dh[j] = kh * p.dil_h - p.pad_h;
    dw[j] = kw * p.dil_w - p.pad_w;
  }

  float acc[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) acc[j] = 0.f;
  const int64_t HW = p.in_h * p.in_w;
  const int64_t pixels = p.batch * HW;
  const int64_t begin = pixels * blockIdx.y / p.splits;
  const int64_t end = pixels * (blockIdx.y + 1) / p.splits;
  const int OH = (int)p.out_h, OW = (int)p.out_w;
  if (ci_ok) {
    for (int64_t pix = begin + pix_lane; pix < end; pix += kPixLanes) {
      const int64_t n = pix / HW;
      const int64_t hw = pix - n * HW;
      const int ih = (int)(hw / p.in_w), iw = (int)(hw - (int64_t)ih * p.in_w);
      const float xv = to_float(x[n * p.input_stride[0] + ci * p.input_stride[1] +
                                  (int64_t)ih * p.input_stride[2] +
                                  (int64_t)iw * p.input_stride[3]]);
      const T* dy_n = dy + n * p.grad_output_stride[0];
      const int oh0 = ih * p.stride_h, ow0 = iw * p.stride_w;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const int oh = oh0 + dh[j], ow = ow0 + dw[j];
        if (col_ok[j] && oh >= 0 && oh < OH && ow >= 0 && ow < OW) {
          acc[j] += xv * to_float(dy_n[chan[j] + (int64_t)oh * p.grad_output_stride[2] +
                                       (int64_t)ow * p.grad_output_stride[3]]);
        }
      }
    }
  }

  // The block's sums per (channel lane, column), in a fixed order: with one channel lane a
  // warp's 32 pixel lanes by shuffles first; then the 8 rows left (warps, or pixel lanes).
  static_assert(kPixLanes == 8 || CI_LANES == 1, "8 rows to add after the shuffles");
  __shared__ float red[8][CI_LANES * (kCols + 1)];  // +1: no bank conflicts
  const int lane = threadIdx.x % CI_LANES;
  if constexpr (CI_LANES == 1) {
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      float v = acc[j];
      for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
      if (threadIdx.x % 32 == 0) red[threadIdx.x / 32][j] = v;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kCols; ++j) red[pix_lane][lane * (kCols + 1) + j] = acc[j];
  }
  __syncthreads();
  // CI_LANES * kCols sums: 512 with 32 channel lanes, so a thread may write two.
  for (int t = threadIdx.x; t < CI_LANES * kCols; t += kThreads) {
    const int out_lane = t % CI_LANES, j = t / CI_LANES;
    const int64_t out_ci = (int64_t)(blockIdx.x / chunks) * CI_LANES + out_lane;
    const int q = chunk * kCols + j;
    if (out_ci < p.in_channels && q < cols) {
      float sum = 0.f;
#pragma unroll
      for (int l = 0; l < 8; ++l) sum += red[l][out_lane * (kCols + 1) + j];
      p.partial[((int64_t)blockIdx.y * p.in_channels + out_ci) * cols + q] = sum;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
direct_weight_grad_reduce_kernel(const ConvTranspose2dGradParams p) {
  T* __restrict__ dw = static_cast<T*>(p.grad_weight);
  const int cols = (int)weight_grad_columns(p);
  const int64_t total = p.in_channels * cols;
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  float sum = 0.f;
#pragma unroll 8
  for (int s = 0; s < p.splits; ++s) sum += p.partial[(int64_t)s * total + idx];
  const int64_t ci = idx / cols;
  const int q = (int)(idx - ci * cols);
  const int kw = q % p.kernel_w, kh = (q / p.kernel_w) % p.kernel_h;
  const int co = q / (p.kernel_w * p.kernel_h);
  dw[ci * p.grad_weight_stride[0] + (int64_t)co * p.grad_weight_stride[1] +
     (int64_t)kh * p.grad_weight_stride[2] + (int64_t)kw * p.grad_weight_stride[3]] =
      from_float<T>(sum);
}

int channel_lanes(const ConvTranspose2dGradParams& p) {
  return p.input_stride[1] == 1 && p.in_channels >= 32 ? 32 : 1;
}

int64_t partial_blocks(const ConvTranspose2dGradParams& p) {
  const int lanes = channel_lanes(p);
  const int64_t chunks = (weight_grad_columns(p) + kCols - 1) / kCols;
  return (p.in_channels + lanes - 1) / lanes * chunks;
}

template <typename T>
cudaError_t launch_typed(const ConvTranspose2dGradParams& p, cudaStream_t stream) {
  const int64_t blocks = partial_blocks(p);
  if (blocks == 0) return cudaSuccess;
  const dim3 grid((unsigned)blocks, (unsigned)p.splits);
  if (channel_lanes(p) == 32) {
    direct_weight_grad_partial_kernel<T, 32><<<grid, kThreads, 0, stream>>>(p);
  } else {
    direct_weight_grad_partial_kernel<T, 1><<<grid, kThreads, 0, stream>>>(p);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return launch_weight_grad_reduce(p, element_kind<T>(), stream);
}

template <typename T>
cudaError_t launch_reduce_typed(const ConvTranspose2dGradParams& p, cudaStream_t stream) {
  const int64_t total = p.in_channels * weight_grad_columns(p);
  direct_weight_grad_reduce_kernel<T>
      <<<(unsigned)((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_weight_grad_reduce(const ConvTranspose2dGradParams& p, ScalarKind kind,
                                      cudaStream_t stream) {
  return with_element_type(
      kind, [&](auto zero) { return launch_reduce_typed<decltype(zero)>(p, stream); });
}

int pixel_ranges(int64_t blocks, const ConvTranspose2dGradParams& p, int sm_count,
                 int64_t least_pixels, int64_t most) {
  if (blocks == 0) return 1;
  const int64_t pixels = p.batch * p.in_h * p.in_w;
  int64_t splits = (4 * (int64_t)sm_count + blocks - 1) / blocks;
  const int64_t by_pixels = pixels / least_pixels > 1 ? pixels / least_pixels : 1;
  if (most > by_pixels) most = by_pixels;
  if (splits > most) splits = most;
  return splits < 1 ? 1 : (int)splits;
}

int direct_weight_grad_splits(const ConvTranspose2dGradParams& p, int sm_count) {
  return pixel_ranges(partial_blocks(p), p, sm_count, kLeastPixels, kMostSplits);
}

int64_t weight_grad_workspace_floats(const ConvTranspose2dGradParams& p) {
  return (int64_t)p.splits * p.in_channels * weight_grad_columns(p);
}

cudaError_t launch_direct_weight_grad(const ConvTranspose2dGradParams& p, ScalarKind kind,
                                      cudaStream_t stream) {
  if (p.in_channels * weight_grad_columns(p) >= ((int64_t)1 << 31) ||
      partial_blocks(p) >= ((int64_t)1 << 31) || p.splits < 1 || p.splits > kMostSplits)
    return cudaErrorInvalidValue;
  return with_element_type(
      kind, [&](auto zero) { return launch_typed<decltype(zero)>(p, stream); });
}

}  // namespace deconv_patch
