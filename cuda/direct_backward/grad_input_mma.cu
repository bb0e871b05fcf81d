// The input gradient of a transposed convolution on tensor cores, fp32 sums:
//     dx[p, c] = sum over k of G[p, k] * W[c, k],
// p an input pixel (n, ih, iw), c an input channel of the group, k = (kh, kw, co) (tap-major:
// see TapWalk) and G[p, k] = dy[n, g*Cout/g + co, ih*stride - pad + kh*dil, iw*stride - pad +
// kw*dil] (0 outside dy): an implicit GEMM. A block computes 128 pixels x 64 channels, 32 k a
// step in 16-bit (16 in fp32, as 3xTF32): each thread gathers the next step's 16 (8) values of
// G (one pixel, consecutive k) and 8 (4) of the weight into registers while the warps (4 x 2,
// 32 x 32 outputs each) multiply the current step's shared tiles with mma.sync. For layers with
// few output channels per group, where cuDNN's input gradient runs far from its floor, and
// layers without a cuDNN kernel. Any strides.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/element_type.cuh"
#include "common/scalar_convert.cuh"
#include "direct_backward/direct_backward.h"
#include "direct_backward/mma_operands.cuh"

namespace deconv_patch {
namespace {

using namespace mma_backward;

// Two fp32 values rounded and stored as one pair (dst aligned to the pair).
__device__ __forceinline__ void store_pair(float* dst, float lo, float hi) {
  *reinterpret_cast<float2*>(dst) = make_float2(lo, hi);
}
__device__ __forceinline__ void store_pair(__half* dst, float lo, float hi) {
  *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(lo, hi);
}
__device__ __forceinline__ void store_pair(__nv_bfloat16* dst, float lo, float hi) {
  *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(lo, hi);
}

constexpr int kBM = 128;  // pixels per block
constexpr int kBN = 64;   // channels per block

template <typename T>
__global__ void __launch_bounds__(kThreads)
mma_grad_input_kernel(const ConvTranspose2dGradParams p) {
  using B = Bits<T>;
  constexpr int kStep = kStepOf<T>, kUnits = kUnitsOf<T>;
  constexpr int kAPerThread = kBM * kStep / kThreads;  // consecutive k of one pixel
  constexpr int kBPerThread = kBN * kStep / kThreads;  // consecutive k of one channel
  static_assert(kAPerThread * sizeof(T) == 32 && kBPerThread * sizeof(T) == 16,
                "two and one 16-byte stores a thread");
  __shared__ __align__(16) uint16_t a_tile[2][kBM * kPitch];  // G, [pixel][k]
  __shared__ __align__(16) uint16_t b_tile[2][kBN * kPitch];  // W, [channel][k]
  const B* __restrict__ dy = static_cast<const B*>(p.grad_output);
  const B* __restrict__ wt = static_cast<const B*>(p.weight);
  T* __restrict__ dx = static_cast<T*>(p.grad_input);
  const int64_t pixels = p.batch * p.in_h * p.in_w;
  const int64_t g = blockIdx.z;
  const int64_t p0 = (int64_t)blockIdx.x * kBM, c0 = (int64_t)blockIdx.y * kBN;
  const int K = (int)weight_grad_columns(p);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  // Gathers of G: pixel tid % 128, k (tid / 128) * 16 .. +16 of each step.
  const int a_m = tid % kBM, a_k = (tid / kBM) * kAPerThread;
  const bool a_ok = p0 + a_m < pixels;
  const Pixel a_pix = a_ok ? pixel_at(p0 + a_m, p) : Pixel{};
  const int oh0 = a_pix.ih * p.stride_h - p.pad_h, ow0 = a_pix.iw * p.stride_w - p.pad_w;
  const B* dy_img =
      dy + a_pix.n * p.grad_output_stride[0] + g * p.out_per_group * p.grad_output_stride[1];
  const int pix_off = (int)p.grad_output_stride[2] * oh0 + (int)p.grad_output_stride[3] * ow0;
  const int OH = (int)p.out_h, OW = (int)p.out_w;
  const TapStrides dy_taps = grad_output_taps(p);
  // Loads of the weight: channel tid % 64, k (tid / 64) * 8 .. +8.
  const int b_n = tid % kBN, b_k = (tid / kBN) * kBPerThread;
  const bool b_ok = c0 + b_n < p.in_per_group;
  const B* w_c = wt + (g * p.in_per_group + (b_ok ? c0 + b_n : 0)) * p.weight_stride[0];
  const TapStrides w_taps = weight_taps(p);

  // Every load is issued, from element 0 where the value is zero, so that none waits on a
  // branch.
  uint32_t a_bits[kAPerThread * kUnits / 2], b_bits[kBPerThread * kUnits / 2];
  auto gather = [&](int k0) {
    TapWalk t;
    int k = k0 + a_k;
    t.start(k, dy_taps);
    auto inside = [&] {
      return a_ok && (unsigned)(oh0 + t.dh) < (unsigned)OH &&
             (unsigned)(ow0 + t.dw) < (unsigned)OW;
    };
    bool tap_in = inside();
    B v[kAPerThread];
#pragma unroll
    for (int j = 0; j < kAPerThread; ++j, ++k) {
      const bool ok = tap_in && k < K;
      const B raw = dy_img[ok ? pix_off + t.off : 0];
      v[j] = ok ? raw : 0;
      if (t.next(dy_taps)) tap_in = inside();
    }
    pack_words(v, a_bits);
    k = k0 + b_k;
    t.start(k, w_taps);
    B w[kBPerThread];
#pragma unroll
    for (int j = 0; j < kBPerThread; ++j, ++k) {
      const bool ok = b_ok && k < K;
      const B raw = w_c[ok ? t.off : 0];
      w[j] = ok ? raw : 0;
      t.next(w_taps);
    }
    pack_words(w, b_bits);
  };
  auto store = [&](int buf) {
    uint4* a_dst = reinterpret_cast<uint4*>(a_tile[buf] + a_m * kPitch + a_k * kUnits);
    a_dst[0] = make_uint4(a_bits[0], a_bits[1], a_bits[2], a_bits[3]);
    a_dst[1] = make_uint4(a_bits[4], a_bits[5], a_bits[6], a_bits[7]);
    *reinterpret_cast<uint4*>(b_tile[buf] + b_n * kPitch + b_k * kUnits) =
        make_uint4(b_bits[0], b_bits[1], b_bits[2], b_bits[3]);
  };

  const int wm = warp % 4, wn = warp / 4;  // this warp's 32 pixels and 32 channels
  float acc[2][4][4] = {};
  gather(0);
  store(0);
  __syncthreads();
  for (int k0 = 0, buf = 0; k0 < K; k0 += kStep, buf ^= 1) {
    const bool more = k0 + kStep < K;
    if (more) gather(k0 + kStep);
#pragma unroll
    for (int kk = 0; kk < kStep * kUnits; kk += kChunk) {
      uint32_t a[2][4], b[4][2], a_lo[2][4], b_lo[4][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        load_a(a[mi], a_tile[buf], wm * 32 + mi * 16, kk, lane);
        split_tf32<T>(a[mi], a_lo[mi]);
      }
#pragma unroll
      for (int nj = 0; nj < 4; nj += 2)
        load_b_pair(b[nj], b[nj + 1], b_tile[buf], wn * 32 + nj * 8, kk, lane);
#pragma unroll
      for (int nj = 0; nj < 4; ++nj) split_tf32<T>(b[nj], b_lo[nj]);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int nj = 0; nj < 4; ++nj)
          mma_chunk<T>(acc[mi][nj], a[mi], a_lo[mi], b[nj], b_lo[nj]);
    }
    if (more) store(buf ^ 1);
    __syncthreads();
  }

  // acc[mi][nj][r]: pixel wm*32 + mi*16 + lane/4 (+8 for r >= 2), channel wn*32 + nj*8 +
  // (lane%4)*2 (+1 for odd r).
  if (p.grad_input_stride[1] == 1) {  // channels innermost: each lane stores its channel pair
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t pix = p0 + wm * 32 + mi * 16 + lane / 4 + half * 8;
        if (pix >= pixels) continue;
        const Pixel at = pixel_at(pix, p);
        T* dx_p = dx + at.n * p.grad_input_stride[0] + (int64_t)at.ih * p.grad_input_stride[2] +
                  (int64_t)at.iw * p.grad_input_stride[3] + g * p.in_per_group;
#pragma unroll
        for (int nj = 0; nj < 4; ++nj) {
          const int64_t c = c0 + wn * 32 + nj * 8 + (lane % 4) * 2;
          const float lo = acc[mi][nj][half * 2], hi = acc[mi][nj][half * 2 + 1];
          if (c + 1 < p.in_per_group &&
              reinterpret_cast<uintptr_t>(dx_p + c) % (2 * sizeof(T)) == 0) {
            store_pair(dx_p + c, lo, hi);
          } else {
            if (c < p.in_per_group) dx_p[c] = from_float<T>(lo);
            if (c + 1 < p.in_per_group) dx_p[c + 1] = from_float<T>(hi);
          }
        }
      }
    return;
  }
  // Otherwise through shared memory ([pixel][channel], the A tiles being free), so that a warp
  // stores 32 neighbouring pixels of one channel: all 64 channels at once in 16-bit, 32 (one
  // warp column's) at a time in fp32.
  constexpr int kStaged = sizeof(T) == 2 ? kBN : 32;      // channels a pass
  constexpr int kStagePitch = kStaged + 4 / sizeof(T);  // 33 words: 32 pixels on distinct banks
  static_assert(kBM * kStagePitch * sizeof(T) <= sizeof(a_tile), "the stage fits");
  T* stage = reinterpret_cast<T*>(&a_tile[0][0]);
  const int m = tid % kBM;
  const bool m_ok = p0 + m < pixels;
  const Pixel at = pixel_at(m_ok ? p0 + m : 0, p);
  T* dx_p = dx + at.n * p.grad_input_stride[0] + (int64_t)at.ih * p.grad_input_stride[2] +
            (int64_t)at.iw * p.grad_input_stride[3];
#pragma unroll
  for (int pass = 0; pass < kBN / kStaged; ++pass) {
    if (pass > 0) __syncthreads();  // the last pass's reads are done
    if (wn * 32 / kStaged == pass) {
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int nj = 0; nj < 4; ++nj) {
            T* cell = stage + (wm * 32 + mi * 16 + lane / 4 + half * 8) * kStagePitch +
                      wn * 32 - pass * kStaged + nj * 8 + (lane % 4) * 2;
            cell[0] = from_float<T>(acc[mi][nj][half * 2]);
            cell[1] = from_float<T>(acc[mi][nj][half * 2 + 1]);
          }
    }
    __syncthreads();
    const int64_t c_pass = c0 + pass * kStaged;
    if (m_ok)
      for (int c = tid / kBM; c < kStaged && c_pass + c < p.in_per_group; c += kThreads / kBM)
        dx_p[(g * p.in_per_group + c_pass + c) * p.grad_input_stride[1]] =
            stage[m * kStagePitch + c];
  }
}

template <typename T>
cudaError_t launch_typed(const ConvTranspose2dGradParams& p, cudaStream_t stream) {
  const int64_t pixels = p.batch * p.in_h * p.in_w;
  if (pixels == 0 || p.in_channels == 0) return cudaSuccess;
  const dim3 grid((unsigned)((pixels + kBM - 1) / kBM),
                  (unsigned)((p.in_per_group + kBN - 1) / kBN), (unsigned)p.groups);
  mma_grad_input_kernel<T><<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

bool mma_grad_input_fits(const ConvTranspose2dGradParams& p) {
  const int64_t pixels = p.batch * p.in_h * p.in_w;
  return (pixels + kBM - 1) / kBM < ((int64_t)1 << 31) &&
         (p.in_per_group + kBN - 1) / kBN <= 65535 && p.groups <= 65535 &&
         weight_grad_columns(p) < ((int64_t)1 << 30) && mma_offsets_fit(p);
}

cudaError_t launch_mma_grad_input(const ConvTranspose2dGradParams& p, ScalarKind kind,
                                  cudaStream_t stream) {
  if (!mma_grad_input_fits(p)) return cudaErrorInvalidValue;
  return with_element_type(kind, [&](auto zero) { return launch_typed<decltype(zero)>(p, stream); });
}

}  // namespace deconv_patch
