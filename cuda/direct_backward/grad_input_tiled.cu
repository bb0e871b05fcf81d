// The input gradient of a transposed convolution as a GEMM per group on CUDA cores:
//     dx[c, p] = sum over k of W[c, k] * G[k, p],
// c an input channel of the group, p an input pixel (n, ih, iw), k = (co, kh, kw) and
// G[k, p] = dy[n, g*Cout/g + co, ih*stride - pad + kh*dil, iw*stride - pad + kw*dil] (0 outside
// dy). A block computes 64 channels x 128 pixels, stepping k by 8 through shared memory (the
// weight and the gathered grad_output, as fp32); each thread keeps 4 channels x 8 pixels in
// registers, so one shared-memory read feeds 4 or 8 multiply-adds where direct_grad_input's
// one thread per element reads two values per multiply-add. For layers with more than a few
// channels per group; any strides, fp32 sums in k order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/element_type.cuh"
#include "common/scalar_convert.cuh"
#include "direct_backward/direct_backward.h"
#include "direct_backward/register_tile.cuh"
#include "direct_backward/weight_column.cuh"

namespace deconv_patch {
namespace {

constexpr int kBM = 64;    // channels per block
constexpr int kBN = 128;   // pixels per block
constexpr int kBK = 8;     // k per step
constexpr int kTM = 4;     // channels per thread
constexpr int kTN = 8;     // pixels per thread
constexpr int kThreads = 256;
constexpr int kStepsPerPart = 4;
static_assert((kBM / kTM) * (kBN / kTN) == kThreads, "one thread per 4 x 8 outputs");
static_assert(kBM * kBK == 2 * kThreads && kBN * kBK == 4 * kThreads, "loads per thread");

template <typename T>
__global__ void __launch_bounds__(kThreads)
tiled_grad_input_kernel(const ConvTranspose2dGradParams p) {
  __shared__ __align__(16) float a_tile[kBK][kBM];  // weight, [k][channel]
  __shared__ __align__(16) float b_tile[kBK][kBN];  // gathered grad_output, [k][pixel]
  const T* __restrict__ dy = static_cast<const T*>(p.grad_output);
  const T* __restrict__ wt = static_cast<const T*>(p.weight);
  T* __restrict__ dx = static_cast<T*>(p.grad_input);
  const int64_t hw = p.in_h * p.in_w, pixels = p.batch * hw;
  const int64_t g = blockIdx.z;
  const int64_t c0 = (int64_t)blockIdx.y * kBM, p0 = (int64_t)blockIdx.x * kBN;
  const int K = (int)p.out_per_group * p.kernel_h * p.kernel_w;
  const int OH = (int)p.out_h, OW = (int)p.out_w;
  const int tid = threadIdx.x;

  // Loads of the weight: channel tid % 64, rows tid / 64 and tid / 64 + 4.
  const int a_m = tid % kBM, a_row = tid / kBM;
  const int64_t a_c = c0 + a_m;
  const bool a_ok = a_c < p.in_per_group;
  const T* w_c = wt + (g * p.in_per_group + (a_ok ? a_c : 0)) * p.weight_stride[0];
  // Loads of grad_output: pixel tid % 128 (fixed, so its position is worked out once), rows
  // tid / 128 + 0, 2, 4, 6.
  const int b_n = tid % kBN, b_row = tid / kBN;
  const int64_t b_pix = p0 + b_n;
  const bool b_ok = b_pix < pixels;
  const int64_t n = b_ok ? b_pix / hw : 0;
  const int64_t b_hw = b_ok ? b_pix - n * hw : 0;
  const int ih = (int)(b_hw / p.in_w), iw = (int)(b_hw - (int64_t)ih * p.in_w);
  const int oh0 = ih * p.stride_h - p.pad_h, ow0 = iw * p.stride_w - p.pad_w;
  const T* dy_n = dy + n * p.grad_output_stride[0] +
                  g * p.out_per_group * p.grad_output_stride[1];

  // This thread's outputs: channels tm * 4 .. +4, pixels tn * 8 .. +8 of the block.
  const int tm = tid / (kBN / kTN), tn = tid % (kBN / kTN);
  // Sums of 32 products (four steps) are kept apart and then added: one running sum over all
  // of k measured above twice ATen's error in fp32 (216 products).
  float acc[kTM][kTN] = {}, part[kTM][kTN] = {};

  for (int k0 = 0; k0 < K; k0 += kBK) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = a_row + 4 * i, k = k0 + r;
      float v = 0.f;
      if (a_ok && k < K) {
        const Tap t = tap_of(k, p.kernel_h, p.kernel_w);
        v = to_float(w_c[(int64_t)t.co * p.weight_stride[1] +
                         (int64_t)t.kh * p.weight_stride[2] +
                         (int64_t)t.kw * p.weight_stride[3]]);
      }
      a_tile[r][a_m] = v;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = b_row + 2 * i, k = k0 + r;
      float v = 0.f;
      if (b_ok && k < K) {
        const Tap t = tap_of(k, p.kernel_h, p.kernel_w);
        const int oh = oh0 + t.kh * p.dil_h, ow = ow0 + t.kw * p.dil_w;
        if (oh >= 0 && oh < OH && ow >= 0 && ow < OW) {
          v = to_float(dy_n[(int64_t)t.co * p.grad_output_stride[1] +
                            (int64_t)oh * p.grad_output_stride[2] +
                            (int64_t)ow * p.grad_output_stride[3]]);
        }
      }
      b_tile[r][b_n] = v;
    }
    multiply_tiles<kBK, kBM, kBN>(part, &a_tile[0][tm * kTM], &b_tile[0][tn * kTN]);
    if ((k0 / kBK) % kStepsPerPart == kStepsPerPart - 1) add_and_clear(acc, part);
  }
  add_and_clear(acc, part);

#pragma unroll
  for (int j = 0; j < kTN; ++j) {
    const int64_t pix = p0 + tn * kTN + j;
    if (pix >= pixels) break;
    const int64_t pn = pix / hw, phw = pix - pn * hw;
    const int64_t ph = phw / p.in_w, pw = phw - ph * p.in_w;
    T* dx_p = dx + pn * p.grad_input_stride[0] + ph * p.grad_input_stride[2] +
              pw * p.grad_input_stride[3];
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
      const int64_t c = c0 + tm * kTM + i;
      if (c < p.in_per_group)
        dx_p[(g * p.in_per_group + c) * p.grad_input_stride[1]] = from_float<T>(acc[i][j]);
    }
  }
}

template <typename T>
cudaError_t launch_typed(const ConvTranspose2dGradParams& p, cudaStream_t stream) {
  const int64_t pixels = p.batch * p.in_h * p.in_w;
  if (pixels == 0 || p.in_channels == 0) return cudaSuccess;
  const dim3 grid((unsigned)((pixels + kBN - 1) / kBN),
                  (unsigned)((p.in_per_group + kBM - 1) / kBM), (unsigned)p.groups);
  tiled_grad_input_kernel<T><<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

bool tiled_grad_input_fits(const ConvTranspose2dGradParams& p) {
  const int64_t pixels = p.batch * p.in_h * p.in_w;
  return (pixels + kBN - 1) / kBN < ((int64_t)1 << 31) &&
         (p.in_per_group + kBM - 1) / kBM <= 65535 && p.groups <= 65535 &&
         p.out_per_group * p.kernel_h * p.kernel_w < ((int64_t)1 << 31);
}

cudaError_t launch_tiled_grad_input(const ConvTranspose2dGradParams& p, ScalarKind kind,
                                    cudaStream_t stream) {
  if (!tiled_grad_input_fits(p)) return cudaErrorInvalidValue;
  return with_element_type(
      kind, [&](auto zero) { return launch_typed<decltype(zero)>(p, stream); });
}

}  // namespace deconv_patch
