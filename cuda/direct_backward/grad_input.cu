// The input gradient of a transposed convolution: dx = conv2d(dy, W) with the forward's stride,
// padding, dilation and groups. One thread per element of dx sums, for each output channel of
// its group, the taps whose output pixel lies inside dy (per channel first, then across
// channels: the error grows like sqrt(taps) + sqrt(channels), not with their product).
// Threads run in dx's own memory order, so writes are coalesced in either layout, and in
// channels_last a depthwise layer's dy reads are too.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/element_type.cuh"
#include "common/scalar_convert.cuh"
#include "direct_backward/direct_backward.h"

namespace deconv_patch {
namespace {

// Taps k in [lo, hi) with 0 <= first + k * dil < size.
__device__ __forceinline__ void taps_inside(int first, int dil, int taps, int size, int& lo,
                                            int& hi) {
  lo = first >= 0 ? 0 : (-first + dil - 1) / dil;
  const int room = size - 1 - first;  // k * dil <= room
  hi = room < 0 ? 0 : min(taps, room / dil + 1);
}

template <typename T, typename Index>
__global__ void __launch_bounds__(256)
direct_grad_input_kernel(const ConvTranspose2dGradParams p, bool channels_last) {
  const T* __restrict__ dy = static_cast<const T*>(p.grad_output);
  const T* __restrict__ wt = static_cast<const T*>(p.weight);
  T* __restrict__ dx = static_cast<T*>(p.grad_input);
  const Index C = (Index)p.in_channels, H = (Index)p.in_h, W = (Index)p.in_w;
  const Index total = (Index)p.batch * C * H * W;
  const int OH = (int)p.out_h, OW = (int)p.out_w;
  for (Index idx = (Index)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (Index)gridDim.x * blockDim.x) {
    Index rest = idx, c, ih, iw;
    if (channels_last) {
      c = rest % C; rest /= C;
      iw = rest % W; rest /= W;
      ih = rest % H; rest /= H;
    } else {
      iw = rest % W; rest /= W;
      ih = rest % H; rest /= H;
      c = rest % C; rest /= C;
    }
    const Index n = rest;
    const int64_t g = (int64_t)c / p.in_per_group;
    const T* dy_n = dy + (int64_t)n * p.grad_output_stride[0] +
                    g * p.out_per_group * p.grad_output_stride[1];
    const T* w_c = wt + (int64_t)c * p.weight_stride[0];
    const int oh0 = (int)ih * p.stride_h - p.pad_h, ow0 = (int)iw * p.stride_w - p.pad_w;
    // The taps whose output pixel lies inside dy, worked out once: the loops below then carry
    // no bounds checks, and the inner one is unrolled so its loads are in flight together.
    int kh_lo, kh_hi, kw_lo, kw_hi;
    taps_inside(oh0, p.dil_h, p.kernel_h, OH, kh_lo, kh_hi);
    taps_inside(ow0, p.dil_w, p.kernel_w, OW, kw_lo, kw_hi);
    float acc = 0.f;
    for (int co = 0; co < (int)p.out_per_group; ++co) {
      const T* dy_c = dy_n + (int64_t)co * p.grad_output_stride[1];
      const T* w_co = w_c + (int64_t)co * p.weight_stride[1];
      float part = 0.f;
      for (int kh = kh_lo; kh < kh_hi; ++kh) {
        const T* dy_row = dy_c + (int64_t)(oh0 + kh * p.dil_h) * p.grad_output_stride[2];
        const T* w_row = w_co + (int64_t)kh * p.weight_stride[2];
#pragma unroll 4
        for (int kw = kw_lo; kw < kw_hi; ++kw) {
          part += to_float(dy_row[(int64_t)(ow0 + kw * p.dil_w) * p.grad_output_stride[3]]) *
                  to_float(w_row[(int64_t)kw * p.weight_stride[3]]);
        }
      }
      acc += part;
    }
    dx[(int64_t)n * p.grad_input_stride[0] + (int64_t)c * p.grad_input_stride[1] +
       (int64_t)ih * p.grad_input_stride[2] + (int64_t)iw * p.grad_input_stride[3]] =
        from_float<T>(acc);
  }
}

template <typename T>
cudaError_t launch_typed(const ConvTranspose2dGradParams& p, cudaStream_t stream) {
  const int64_t total = p.batch * p.in_channels * p.in_h * p.in_w;
  if (total == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  const unsigned grid = (unsigned)(blocks < (int64_t)(1 << 22) ? blocks : (int64_t)(1 << 22));
  // dx's own order: channels innermost where its channel stride is 1.
  const bool channels_last = p.grad_input_stride[1] == 1 && p.in_channels > 1;
  // 32-bit thread indices where the thread count stays below 2^31 (64-bit division is slow);
  // element offsets are 64-bit either way.
  if (total + (int64_t)grid * kThreads < ((int64_t)1 << 31)) {
    direct_grad_input_kernel<T, int32_t><<<grid, kThreads, 0, stream>>>(p, channels_last);
  } else {
    direct_grad_input_kernel<T, int64_t><<<grid, kThreads, 0, stream>>>(p, channels_last);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_direct_grad_input(const ConvTranspose2dGradParams& p, ScalarKind kind,
                                     cudaStream_t stream) {
  return with_element_type(
      kind, [&](auto zero) { return launch_typed<decltype(zero)>(p, stream); });
}

}  // namespace deconv_patch
