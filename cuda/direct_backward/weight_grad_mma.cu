// The weight gradient of a transposed convolution on tensor cores, fp32 sums:
//     dW[c, k] = sum over pixels p of x[c, p] * G[k, p],
// c an input channel of the group, k = (co, kh, kw) and G as in grad_input_mma.cu. A block takes
// 64 channels x 64 columns and one range of pixels, 32 pixels a step in 16-bit (16 in fp32, as
// 3xTF32): each thread loads the next step's 8 (4) pixels of one channel of x and of one column
// of G into registers while the
// warps (2 x 4, 32 x 16 sums each) multiply the current step's shared tiles with mma.sync.
// Blocks write fp32 sums per range into p.partial and launch_weight_grad_reduce adds the ranges
// in order: deterministic, no atomics. Any strides.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/element_type.cuh"
#include "direct_backward/direct_backward.h"
#include "direct_backward/mma_operands.cuh"

namespace deconv_patch {
namespace {

using namespace mma_backward;

constexpr int kBM = 64;  // channels per block
constexpr int kBN = 64;  // columns per block
constexpr int kMostSplits = 512;
constexpr int kLeastPixels = 256;  // per range

int64_t tile_blocks(const ConvTranspose2dGradParams& p) {
  return (weight_grad_columns(p) + kBN - 1) / kBN * ((p.in_per_group + kBM - 1) / kBM);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
mma_weight_grad_partial_kernel(const ConvTranspose2dGradParams p) {
  using B = Bits<T>;
  constexpr int kStep = kStepOf<T>, kUnits = kUnitsOf<T>;
  constexpr int kRun = kStep * kBM / kThreads;  // pixels a thread loads per step and operand
  static_assert(kRun * sizeof(T) == 16 && kBM == kBN, "one row of each tile, 16 bytes, a thread");
  __shared__ __align__(16) uint16_t x_tile[2][kBM * kPitch];  // x, [channel][pixel]
  __shared__ __align__(16) uint16_t g_tile[2][kBN * kPitch];  // G, [column][pixel]
  const B* __restrict__ x = static_cast<const B*>(p.input);
  const B* __restrict__ dy = static_cast<const B*>(p.grad_output);
  const int K = (int)weight_grad_columns(p);
  const int col_blocks = (K + kBN - 1) / kBN;
  const int64_t g = blockIdx.y;
  const int64_t c0 = (int64_t)(blockIdx.x / col_blocks) * kBM;
  const int k0 = (int)(blockIdx.x % col_blocks) * kBN;
  const int64_t pixels = p.batch * p.in_h * p.in_w;
  const int64_t begin = pixels * blockIdx.z / p.splits;
  const int64_t end = pixels * (blockIdx.z + 1) / p.splits;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  // Loads: row tid / 4 of both tiles (a channel of x, a column of G), pixels (tid % 4) * kRun ..
  const int row = tid / 4, run = (tid % 4) * kRun;
  const bool c_ok = c0 + row < p.in_per_group;
  const bool k_ok = k0 + row < K;
  const Tap tap = tap_of(k_ok ? k0 + row : 0, p.kernel_h, p.kernel_w);
  const int tap_dh = tap.kh * p.dil_h, tap_dw = tap.kw * p.dil_w;  // the tap's output shift
  const B* x_c = x + (g * p.in_per_group + (c_ok ? c0 + row : 0)) * p.input_stride[1];
  const B* dy_k = dy + (g * p.out_per_group + tap.co) * p.grad_output_stride[1] +
                         (int64_t)tap_dh * p.grad_output_stride[2] +
                         (int64_t)tap_dw * p.grad_output_stride[3];
  const int OH = (int)p.out_h, OW = (int)p.out_w;
  const int xs2 = (int)p.input_stride[2], xs3 = (int)p.input_stride[3];
  const int gs2 = (int)p.grad_output_stride[2], gs3 = (int)p.grad_output_stride[3];

  // Every load is issued, from element 0 of its tensor where the value is zero, so that none
  // waits on a branch; the pixel's offsets move by additions (a new row or image recomputes
  // them).
  uint32_t x_bits[kRun * kUnits / 2], g_bits[kRun * kUnits / 2];
  auto load = [&](int64_t s0) {
    int64_t pix = s0 + run;
    Pixel at = pix < end ? pixel_at(pix, p) : Pixel{};
    const B* x_n = x_c + at.n * p.input_stride[0];
    const B* dy_n = dy_k + at.n * p.grad_output_stride[0];
    int oh = at.ih * p.stride_h - p.pad_h + tap_dh, ow = at.iw * p.stride_w - p.pad_w + tap_dw;
    int x_off = at.ih * xs2 + at.iw * xs3;
    int dy_off = (oh - tap_dh) * gs2 + (ow - tap_dw) * gs3;
    B xv[kRun], gv[kRun];
#pragma unroll
    for (int j = 0; j < kRun; ++j, ++pix) {
      const bool ok = pix < end;
      const bool x_in = ok && c_ok;
      const bool g_in = ok && k_ok && (unsigned)oh < (unsigned)OH && (unsigned)ow < (unsigned)OW;
      const B x_raw = *(x_in ? x_n + x_off : x);
      const B g_raw = *(g_in ? dy_n + dy_off : dy);
      xv[j] = x_in ? x_raw : 0;
      gv[j] = g_in ? g_raw : 0;
      // the next pixel
      x_off += xs3;
      ow += p.stride_w;
      dy_off += p.stride_w * gs3;
      if (++at.iw == p.in_w) {
        at.iw = 0;
        if (++at.ih == p.in_h) {
          at.ih = 0;
          x_n += p.input_stride[0];
          dy_n += p.grad_output_stride[0];
        }
        x_off = at.ih * xs2;
        oh = at.ih * p.stride_h - p.pad_h + tap_dh;
        ow = -p.pad_w + tap_dw;
        dy_off = (oh - tap_dh) * gs2 + (ow - tap_dw) * gs3;
      }
    }
    pack_words(xv, x_bits);
    pack_words(gv, g_bits);
  };
  auto store = [&](int buf) {
    *reinterpret_cast<uint4*>(x_tile[buf] + row * kPitch + run * kUnits) =
        make_uint4(x_bits[0], x_bits[1], x_bits[2], x_bits[3]);
    *reinterpret_cast<uint4*>(g_tile[buf] + row * kPitch + run * kUnits) =
        make_uint4(g_bits[0], g_bits[1], g_bits[2], g_bits[3]);
  };

  const int wm = warp % 2, wn = warp / 2;  // this warp's 32 channels and 16 columns
  float acc[2][2][4] = {};
  if (begin < end) {
    load(begin);
    store(0);
  }
  __syncthreads();
  for (int64_t s0 = begin, buf = 0; s0 < end; s0 += kStep, buf ^= 1) {
    const bool more = s0 + kStep < end;
    if (more) load(s0 + kStep);
#pragma unroll
    for (int kk = 0; kk < kStep * kUnits; kk += kChunk) {
      uint32_t a[2][4], b[2][2], a_lo[2][4], b_lo[2][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        load_a(a[mi], x_tile[buf], wm * 32 + mi * 16, kk, lane);
        split_tf32<T>(a[mi], a_lo[mi]);
      }
      load_b_pair(b[0], b[1], g_tile[buf], wn * 16, kk, lane);
      split_tf32<T>(b[0], b_lo[0]);
      split_tf32<T>(b[1], b_lo[1]);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int nj = 0; nj < 2; ++nj)
          mma_chunk<T>(acc[mi][nj], a[mi], a_lo[mi], b[nj], b_lo[nj]);
    }
    if (more) store(buf ^ 1);
    __syncthreads();
  }

  // acc[mi][nj][r]: channel wm*32 + mi*16 + lane/4 (+8 for r >= 2), column wn*16 + nj*8 +
  // (lane%4)*2 (+1 for odd r).
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t c = c0 + wm * 32 + mi * 16 + lane / 4 + half * 8;
      if (c >= p.in_per_group) continue;
      float* out =
          p.partial + ((int64_t)blockIdx.z * p.in_channels + g * p.in_per_group + c) * K;
#pragma unroll
      for (int nj = 0; nj < 2; ++nj)
#pragma unroll
        for (int odd = 0; odd < 2; ++odd) {
          const int k = k0 + wn * 16 + nj * 8 + (lane % 4) * 2 + odd;
          if (k < K) out[k] = acc[mi][nj][half * 2 + odd];
        }
    }
}

template <typename T>
cudaError_t launch_typed(const ConvTranspose2dGradParams& p, cudaStream_t stream) {
  const dim3 grid((unsigned)tile_blocks(p), (unsigned)p.groups, (unsigned)p.splits);
  mma_weight_grad_partial_kernel<T><<<grid, kThreads, 0, stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return launch_weight_grad_reduce(p, element_kind<T>(), stream);
}

}  // namespace

int mma_weight_grad_splits(const ConvTranspose2dGradParams& p, int sm_count) {
  return pixel_ranges(tile_blocks(p) * p.groups, p, sm_count, kLeastPixels, kMostSplits);
}

bool mma_weight_grad_fits(const ConvTranspose2dGradParams& p) {
  return tile_blocks(p) < ((int64_t)1 << 31) && p.groups <= 65535 &&
         p.in_channels * weight_grad_columns(p) < ((int64_t)1 << 31) && mma_offsets_fit(p);
}

cudaError_t launch_mma_weight_grad(const ConvTranspose2dGradParams& p, ScalarKind kind,
                                   cudaStream_t stream) {
  if (!mma_weight_grad_fits(p) || p.splits < 1 || p.splits > kMostSplits)
    return cudaErrorInvalidValue;
  return with_element_type(kind, [&](auto zero) { return launch_typed<decltype(zero)>(p, stream); });
}

}  // namespace deconv_patch
