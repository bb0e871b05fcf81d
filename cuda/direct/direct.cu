// Direct (gather) transposed convolution: every thread owns one output pixel and a tile of
// OC_TILE output channels of one group, and sums over exactly the taps that hit an input pixel
// (stride-phase aware, see AxisPhase in common/params.h). Accumulates in fp32.
//
// This is the reference-grade CUDA path: it handles every stride, padding, output_padding,
// dilation and group count, any input/weight/output strides, and 64-bit offsets. The faster
// tensor-core variants cover subsets of this space; the planner falls back here.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "direct/direct.h"
#include "common/axis_taps.cuh"
#include "common/params.h"
#include "common/epilogue.cuh"
#include "common/scalar_convert.cuh"

namespace deconv_patch {
namespace {

constexpr int kChunk = 16;

template <typename T, int OC_TILE, typename Index>
__global__ void __launch_bounds__(256)
conv_transpose2d_direct_kernel(const ConvTranspose2dParams p) {
  const T* __restrict__ in = static_cast<const T*>(p.input);
  const T* __restrict__ wt = static_cast<const T*>(p.weight);
  const T* __restrict__ bias = static_cast<const T*>(p.bias);
  T* __restrict__ out = static_cast<T*>(p.output);

  const Index oc_blocks_per_group = (Index)((p.out_per_group + OC_TILE - 1) / OC_TILE);
  const Index oc_blocks = oc_blocks_per_group * (Index)p.groups;
  const Index OW = (Index)p.out_w, OH = (Index)p.out_h;
  const Index total = (Index)p.batch * OH * OW * oc_blocks;

  for (Index idx = (Index)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (Index)gridDim.x * blockDim.x) {
    // Thread order [n][oc_block][oh][ow]: a warp shares one channel tile, so weight loads are
    // warp-wide broadcasts, and neighbouring threads write neighbouring pixels (NCHW) or
    // full OC_TILE-wide channel runs (channels_last).
    Index rest = idx;
    const Index ow = rest % OW; rest /= OW;
    const Index oh = rest % OH; rest /= OH;
    const Index ocb = rest % oc_blocks;
    const Index n = rest / oc_blocks;
    const Index g = ocb / oc_blocks_per_group;
    const int oc_local0 = (int)(ocb - g * oc_blocks_per_group) * OC_TILE;
    const int oc_valid = min(OC_TILE, (int)p.out_per_group - oc_local0);

    float acc[OC_TILE];
#pragma unroll
    for (int j = 0; j < OC_TILE; ++j) acc[j] = 0.f;

    const TapRange rh = axis_taps(p.ph_h, (int)oh, (int)p.in_h);
    const TapRange rw = axis_taps(p.ph_w, (int)ow, (int)p.in_w);

    if (rh.count > 0 && rw.count > 0) {
      const int64_t cin0 = (int64_t)g * p.in_per_group;
      const T* in_n = in + (int64_t)n * p.in_stride[0] + cin0 * p.in_stride[1];
      const T* w_g = wt + cin0 * p.w_stride[0] + (int64_t)oc_local0 * p.w_stride[1];
      for (int a = 0; a < rh.count; ++a) {
        const int kh = rh.first_k + a * p.ph_h.step;
        const int ih = rh.first_i - a * p.ph_h.in_step;
        for (int b = 0; b < rw.count; ++b) {
          const int kw = rw.first_k + b * p.ph_w.step;
          const int iw = rw.first_i - b * p.ph_w.in_step;
          const T* x_ptr = in_n + (int64_t)ih * p.in_stride[2] + (int64_t)iw * p.in_stride[3];
          const T* w_ptr = w_g + (int64_t)kh * p.w_stride[2] + (int64_t)kw * p.w_stride[3];
          // Two-level sum: chunks of kChunk channels are summed into `part`, then added to
          // `acc`. Error grows like sqrt(kChunk) + sqrt(K / kChunk) instead of sqrt(K).
          const int cin_g = (int)p.in_per_group;
          for (int ic0 = 0; ic0 < cin_g; ic0 += kChunk) {
            const int ic_end = min(ic0 + kChunk, cin_g);
            float part[OC_TILE];
#pragma unroll
            for (int j = 0; j < OC_TILE; ++j) part[j] = 0.f;
            for (int ic = ic0; ic < ic_end; ++ic) {
              const float x = to_float(x_ptr[(int64_t)ic * p.in_stride[1]]);
              const T* w_ic = w_ptr + (int64_t)ic * p.w_stride[0];
              if (oc_valid == OC_TILE) {
#pragma unroll
                for (int j = 0; j < OC_TILE; ++j) part[j] += x * to_float(w_ic[j * p.w_stride[1]]);
              } else {
#pragma unroll
                for (int j = 0; j < OC_TILE; ++j)
                  if (j < oc_valid) part[j] += x * to_float(w_ic[j * p.w_stride[1]]);
              }
            }
#pragma unroll
            for (int j = 0; j < OC_TILE; ++j) acc[j] += part[j];
          }
        }
      }
    }

    const int64_t oc0 = (int64_t)g * p.out_per_group + oc_local0;
    T* o_ptr = out + (int64_t)n * p.out_stride[0] + oc0 * p.out_stride[1] +
               (int64_t)oh * p.out_stride[2] + (int64_t)ow * p.out_stride[3];
    // Epilogue (common/epilogue.cuh): y = act((acc + bias) * scale + shift), rounded once to T.
    if (p.epi.activation == Activation::kNone) {
      // Affine part only: unrolled over the tile (with no scale/shift, acc + bias as before).
      EpilogueParams e = p.epi;
      e.activation = Activation::kNone;
#pragma unroll
      for (int j = 0; j < OC_TILE; ++j) {
        if (j < oc_valid) {
          const float b = bias != nullptr ? to_float(bias[oc0 + j]) : 0.f;
          const ChannelAffine af = channel_affine(e, b, oc0 + j);
          o_ptr[j * p.out_stride[1]] = from_float<T>(apply_epilogue(acc[j], af, e));
        }
      }
    } else {
      // With an activation, a rolled loop keeps one copy of its code; acc[j] is picked with
      // selects (a dynamic index would move acc to local memory).
#pragma unroll 1
      for (int j = 0; j < oc_valid; ++j) {
        float v = acc[0];
#pragma unroll
        for (int k = 1; k < OC_TILE; ++k) v = j == k ? acc[k] : v;
        const float b = bias != nullptr ? to_float(bias[oc0 + j]) : 0.f;
        const ChannelAffine af = channel_affine(p.epi, b, oc0 + j);
        o_ptr[j * p.out_stride[1]] = from_float<T>(apply_epilogue(v, af, p.epi));
      }
    }
  }
}

template <typename T, int OC_TILE>
cudaError_t launch_typed(const ConvTranspose2dParams& p, cudaStream_t stream) {
  const int64_t oc_blocks = ((p.out_per_group + OC_TILE - 1) / OC_TILE) * p.groups;
  const int64_t total = p.batch * p.out_h * p.out_w * oc_blocks;
  if (total == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  const unsigned grid = (unsigned)(blocks < (int64_t)(1 << 22) ? blocks : (int64_t)(1 << 22));

  // 32-bit index arithmetic is worth having (64-bit division is slow); it is safe when the
  // thread count and every element offset stay below 2^31.
  auto extent = [](const int64_t* stride, int64_t n, int64_t c, int64_t h, int64_t w) {
    return (n - 1) * stride[0] + (c - 1) * stride[1] + (h - 1) * stride[2] + (w - 1) * stride[3];
  };
  const int64_t kLimit = (int64_t)1 << 31;
  const int64_t span = total + (int64_t)grid * kThreads;
  const bool small = span < kLimit &&
                     extent(p.in_stride, p.batch, p.in_channels, p.in_h, p.in_w) < kLimit &&
                     extent(p.out_stride, p.batch, p.out_channels, p.out_h, p.out_w) < kLimit;
  if (small) {
    conv_transpose2d_direct_kernel<T, OC_TILE, int32_t><<<grid, kThreads, 0, stream>>>(p);
  } else {
    conv_transpose2d_direct_kernel<T, OC_TILE, int64_t><<<grid, kThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_tiles(const ConvTranspose2dParams& p, cudaStream_t stream) {
  // Channel tiles reuse each input value OC_TILE times; small groups get small tiles so no
  // thread idles on channels that do not exist.
  if (p.out_per_group >= 8) return launch_typed<T, 8>(p, stream);
  if (p.out_per_group >= 4) return launch_typed<T, 4>(p, stream);
  return launch_typed<T, 1>(p, stream);
}

}  // namespace

cudaError_t launch_conv_transpose2d_direct(const ConvTranspose2dParams& p, ScalarKind kind,
                                           cudaStream_t stream) {
  switch (kind) {
    case ScalarKind::kFloat32: return launch_tiles<float>(p, stream);
    case ScalarKind::kFloat16: return launch_tiles<__half>(p, stream);
    case ScalarKind::kBFloat16: return launch_tiles<__nv_bfloat16>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace deconv_patch
