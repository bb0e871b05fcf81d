// The weight gradient of a transposed convolution as a GEMM per group on CUDA cores:
//     dW[c, k] = sum over pixels p of x[c, p] * G[k, p],
// c an input channel of the group, k = (co, kh, kw) and G as in grad_input_tiled.cu. A block
// takes 64 channels x 64 columns and one range of pixels, stepping 16 pixels at a time through
// shared memory; each thread keeps 4 x 4 sums in registers. Blocks write fp32 sums per range
// into p.partial, and launch_weight_grad_reduce adds the ranges in order: deterministic, no
// atomics. For layers with more than a few channels per group.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/element_type.cuh"
#include "common/scalar_convert.cuh"
#include "direct_backward/direct_backward.h"
#include "direct_backward/register_tile.cuh"

namespace deconv_patch {
namespace {

constexpr int kBM = 64;   // channels per block
constexpr int kBN = 64;   // columns per block
constexpr int kBP = 16;   // pixels per step
constexpr int kTM = 4, kTN = 4;
constexpr int kThreads = 256;
constexpr int kMostSplits = 512;
constexpr int kLeastPixels = 128;  // per range
static_assert((kBM / kTM) * (kBN / kTN) == kThreads, "one thread per 4 x 4 sums");
static_assert(kBP * kBM == 4 * kThreads && kBP * kBN == 4 * kThreads, "four loads each");

int64_t tile_blocks(const ConvTranspose2dGradParams& p) {
  return (weight_grad_columns(p) + kBN - 1) / kBN * ((p.in_per_group + kBM - 1) / kBM);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
tiled_weight_grad_partial_kernel(const ConvTranspose2dGradParams p) {
  // [pixel][channel] and [pixel][column]; +4: a warp's 16 pixel lanes store to 8 banks rather
  // than 1, and rows stay 16-byte aligned for the float4 reads.
  __shared__ __align__(16) float x_tile[kBP][kBM + 4];
  __shared__ __align__(16) float g_tile[kBP][kBN + 4];
  const T* __restrict__ x = static_cast<const T*>(p.input);
  const T* __restrict__ dy = static_cast<const T*>(p.grad_output);
  const int K = (int)weight_grad_columns(p);
  const int col_blocks = (K + kBN - 1) / kBN;
  const int64_t g = blockIdx.y;
  const int64_t c0 = (int64_t)(blockIdx.x / col_blocks) * kBM;
  const int k0 = (int)(blockIdx.x % col_blocks) * kBN;
  const int64_t hw = p.in_h * p.in_w, pixels = p.batch * hw;
  const int64_t begin = pixels * blockIdx.z / p.splits;
  const int64_t end = pixels * (blockIdx.z + 1) / p.splits;
  const int OH = (int)p.out_h, OW = (int)p.out_w;
  const int tid = threadIdx.x;

  // Loads: this thread's pixel lane tid % 16 in each step, channels and columns tid / 16 + 16 i.
  const int lane = tid % kBP, row = tid / kBP;
  const T* x_c[4];
  bool c_ok[4];
  int64_t chan[4];
  int dh[4], dw[4];
  bool k_ok[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t c = c0 + row + 16 * i;
    c_ok[i] = c < p.in_per_group;
    x_c[i] = x + (g * p.in_per_group + (c_ok[i] ? c : 0)) * p.input_stride[1];
    const int k = k0 + row + 16 * i;
    k_ok[i] = k < K;
    const int kk = k_ok[i] ? k : 0;
    const int taps = p.kernel_h * p.kernel_w;
    const int co = kk / taps, rest = kk - co * taps;
    const int kh = rest / p.kernel_w, kw = rest - kh * p.kernel_w;
    chan[i] = (g * p.out_per_group + co) * p.grad_output_stride[1];
    dh[i] = kh * p.dil_h - p.pad_h;
    dw[i] = kw * p.dil_w - p.pad_w;
  }

  const int tm = tid / (kBN / kTN), tn = tid % (kBN / kTN);
  float acc[kTM][kTN] = {}, step[kTM][kTN] = {};

  for (int64_t s0 = begin; s0 < end; s0 += kBP) {
    const int64_t pix = s0 + lane;
    const bool ok = pix < end;
    const int64_t n = ok ? pix / hw : 0;
    const int64_t phw = ok ? pix - n * hw : 0;
    const int ih = (int)(phw / p.in_w), iw = (int)(phw - (int64_t)ih * p.in_w);
    const int64_t x_off = n * p.input_stride[0] + (int64_t)ih * p.input_stride[2] +
                          (int64_t)iw * p.input_stride[3];
    const T* dy_n = dy + n * p.grad_output_stride[0];
    const int oh0 = ih * p.stride_h, ow0 = iw * p.stride_w;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x_tile[lane][row + 16 * i] = ok && c_ok[i] ? to_float(x_c[i][x_off]) : 0.f;
      const int oh = oh0 + dh[i], ow = ow0 + dw[i];
      float v = 0.f;
      if (ok && k_ok[i] && oh >= 0 && oh < OH && ow >= 0 && ow < OW) {
        v = to_float(dy_n[chan[i] + (int64_t)oh * p.grad_output_stride[2] +
                          (int64_t)ow * p.grad_output_stride[3]]);
      }
      g_tile[lane][row + 16 * i] = v;
    }
    // Each step's 16 products are summed apart and then added, so a range's rounding error
    // grows with its steps rather than its pixels (one running sum over a few hundred pixels
    // measured above twice cuDNN's error in fp32).
    multiply_tiles<kBP, kBM + 4, kBN + 4>(step, &x_tile[0][tm * kTM], &g_tile[0][tn * kTN]);
    add_and_clear(acc, step);
  }

#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int64_t c = c0 + tm * kTM + i;
    if (c >= p.in_per_group) break;
    float* out = p.partial + ((int64_t)blockIdx.z * p.in_channels + g * p.in_per_group + c) * K;
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      const int k = k0 + tn * kTN + j;
      if (k < K) out[k] = acc[i][j];
    }
  }
}

template <typename T>
cudaError_t launch_typed(const ConvTranspose2dGradParams& p, cudaStream_t stream) {
  const dim3 grid((unsigned)tile_blocks(p), (unsigned)p.groups, (unsigned)p.splits);
  tiled_weight_grad_partial_kernel<T><<<grid, kThreads, 0, stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return launch_weight_grad_reduce(p, element_kind<T>(), stream);
}

}  // namespace

int tiled_weight_grad_splits(const ConvTranspose2dGradParams& p, int sm_count) {
  return pixel_ranges(tile_blocks(p) * p.groups, p, sm_count, kLeastPixels, kMostSplits);
}

bool tiled_weight_grad_fits(const ConvTranspose2dGradParams& p) {
  return tile_blocks(p) < ((int64_t)1 << 31) && p.groups <= 65535 &&
         p.in_channels * weight_grad_columns(p) < ((int64_t)1 << 31);
}

cudaError_t launch_tiled_weight_grad(const ConvTranspose2dGradParams& p, ScalarKind kind,
                                     cudaStream_t stream) {
  if (!tiled_weight_grad_fits(p) || p.splits < 1 || p.splits > kMostSplits)
    return cudaErrorInvalidValue;
  return with_element_type(
      kind, [&](auto zero) { return launch_typed<decltype(zero)>(p, stream); });
}

}  // namespace deconv_patch
