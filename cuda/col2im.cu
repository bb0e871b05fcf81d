// col2im (see col2im.h): one thread per output element, channels fastest, so that a warp reads
// consecutive channels of one tap of a cols row (contiguous) and writes channels_last output
// contiguously. Each output element sums its taps in fp32 in (kh, kw) order: a tap kh of
// output row oh exists when oh + PH - kh*DH is a non-negative multiple of SH below H*SH.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "col2im.h"
#include "epilogue.cuh"
#include "scalar_convert.cuh"

namespace deconv_patch {
namespace {

// Input row (or column) index of tap k of output index o along one axis, or -1.
__device__ __forceinline__ int64_t col2im_source(int64_t o, int k, const AxisPhase& a,
                                                 int64_t in_size) {
  const int64_t t = o + a.pad - (int64_t)k * a.dil;
  if (t < 0 || t % a.stride != 0) return -1;
  const int64_t i = t / a.stride;
  return i < in_size ? i : -1;
}

template <typename T>
__global__ void __launch_bounds__(256) col2im_kernel(const ConvTranspose2dParams p,
                                                     const float* __restrict__ cols) {
  const int64_t c_out = p.out_channels;
  const int64_t total = p.batch * p.out_h * p.out_w * c_out;
  const int kh_n = p.ph_h.kernel, kw_n = p.ph_w.kernel;
  const int64_t ncol = (int64_t)kh_n * kw_n * c_out;  // cols row length
  const T* bias = static_cast<const T*>(p.bias);
  T* out = static_cast<T*>(p.output);
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int64_t co = idx % c_out;
    int64_t r = idx / c_out;
    const int64_t ow = r % p.out_w;
    r /= p.out_w;
    const int64_t oh = r % p.out_h;
    const int64_t n = r / p.out_h;
    float acc = 0.f;
    for (int kh = 0; kh < kh_n; ++kh) {
      const int64_t ih = col2im_source(oh, kh, p.ph_h, p.in_h);
      if (ih < 0) continue;
      const float* row = cols + (n * p.in_h + ih) * p.in_w * ncol + kh * kw_n * c_out + co;
      for (int kw = 0; kw < kw_n; ++kw) {
        const int64_t iw = col2im_source(ow, kw, p.ph_w, p.in_w);
        if (iw >= 0) acc += row[iw * ncol + kw * c_out];
      }
    }
    const ChannelAffine a = channel_affine(p.epi, bias != nullptr ? to_float(bias[co]) : 0.f, co);
    out[n * p.out_stride[0] + co * p.out_stride[1] + oh * p.out_stride[2] +
        ow * p.out_stride[3]] = from_float<T>(apply_epilogue(acc, a, p.epi));
  }
}

template <typename T>
cudaError_t launch_typed(const ConvTranspose2dParams& p, const float* cols, cudaStream_t stream) {
  const int64_t total = p.batch * p.out_h * p.out_w * p.out_channels;
  if (total == 0) return cudaSuccess;
  const int64_t blocks = (total + 255) / 256;
  col2im_kernel<T><<<(unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16), 256, 0, stream>>>(
      p, cols);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_col2im(const ConvTranspose2dParams& p, const float* cols, ScalarKind kind,
                          cudaStream_t stream) {
  if (p.groups != 1) return cudaErrorInvalidValue;
  switch (kind) {
    case ScalarKind::kFloat32: return launch_typed<float>(p, cols, stream);
    case ScalarKind::kFloat16: return launch_typed<__half>(p, cols, stream);
    case ScalarKind::kBFloat16: return launch_typed<__nv_bfloat16>(p, cols, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace deconv_patch
