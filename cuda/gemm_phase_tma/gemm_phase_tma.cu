// gemm_phase_tma's public API (gemm_phase_tma/gemm_phase_tma.h): the checks, weight packing
// and the dispatch to the per-element-type GEMM launchers. The kernels, the index math and the
// pipeline are in gemm_phase_tma/gemm_phase_tma_kernel.cuh.
#include "gemm_phase_tma/gemm_phase_tma_kernel.cuh"
#include "common/unit_kind.h"

namespace deconv_patch {
namespace {

// fp32 strict: the hi block (exactly gemm_phase_tma_pack_weight_kernel's TF32 packing) at
// packed[0, total), the lo block (pt_split_tf32_bits) in the same layout at
// packed[total, 2 * total). Here, not in the kernel header, where every per-config file would
// compile it again.
__global__ void __launch_bounds__(256)
    gemm_phase_tma_pack_weight_split_kernel(const __grid_constant__ PtPackArgs a) {
  const float* __restrict__ w = static_cast<const float*>(a.w);
  uint32_t* __restrict__ packed = static_cast<uint32_t*>(a.packed);
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < a.total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int64_t src = pt_pack_source(a, idx);
    uint32_t hi, lo;
    pt_split_tf32_bits(src >= 0 ? pt_float_bits(w[src]) : 0u, hi, lo);
    packed[idx] = hi;
    packed[a.total + idx] = lo;
  }
}

// Weights whose (output channel, kh, kw) elements are contiguous, in that order or as
// (kh, kw, output channel) (a channels_last weight): the parameter, autocast's cast. The
// per-element kernels above read a packed row's input channels a whole weight row apart, one
// 32-byte sector per element, and spend more on 64-bit index divisions than on memory. Here a
// block moves a 32 x 32 tile of (weight row = group and input channel) x (inner element): read
// along the weight's rows, written along the packed rows' channels, through shared memory; one
// warp works out where each inner element's packed line starts, once per tile.
struct PtTilePackArgs {
  PtPackArgs a;
  int rows;              // groups * cin_g
  int inner;             // cout_g * KH * KW
  int64_t group_stride;  // packed elements per group: phases * cout_pad * kmax
  int kw, khkw;
  bool oc_inner;         // the output channel is the fastest inner index (channels_last)
  int pad_h, pad_w, dil_h, dil_w, stride_h;
};

template <typename T, bool SPLIT>
__global__ void __launch_bounds__(256)
    gemm_phase_tma_pack_weight_tile_kernel(const __grid_constant__ PtTilePackArgs t) {
  const PtPackArgs& a = t.a;
  __shared__ T tile[32][33];
  __shared__ int64_t line[32];  // packed offset of each inner element's line (group 0, channel 0)
  const T* __restrict__ w = static_cast<const T*>(a.w);
  const int r0 = blockIdx.y * 32, j0 = blockIdx.x * 32;
  const int n = min(32, t.inner - j0);
  if (threadIdx.y == 0 && (int)threadIdx.x < n) {
    const int j = j0 + threadIdx.x;
    int oc, kk;
    if (t.oc_inner) {
      kk = j / a.cout_g;
      oc = j - kk * a.cout_g;
    } else {
      oc = j / t.khkw;
      kk = j - oc * t.khkw;
    }
    const int kh = kk / t.kw, kw = kk - kh * t.kw;
    const int rh = phase_of(kh, t.dil_h, t.pad_h, t.stride_h);
    const int rw = phase_of(kw, t.dil_w, t.pad_w, a.sw);
    const int tap = (kh - a.kh0_h[rh]) / a.step_h * a.taps_w[rw] + (kw - a.kh0_w[rw]) / a.step_w;
    line[threadIdx.x] = ((int64_t)(rh * a.sw + rw) * a.cout_pad + pt_logical_col(oc)) * a.kmax +
                        (int64_t)tap * a.cin_pad;
  }
  for (int i = threadIdx.y; i < 32; i += 8)
    if (r0 + i < t.rows && (int)threadIdx.x < n)
      tile[i][threadIdx.x] = w[(int64_t)(r0 + i) * a.ws[0] + j0 + threadIdx.x];
  __syncthreads();
  const int r = r0 + threadIdx.x;
  if (r >= t.rows) return;
  const int g = r / a.cin_g;
  const int64_t row = (int64_t)g * t.group_stride + (r - g * a.cin_g);
  for (int i = threadIdx.y; i < n; i += 8) {
    const int64_t dest = line[i] + row;
    const T v = tile[threadIdx.x][i];
    if constexpr (SPLIT) {
      uint32_t hi, lo;
      pt_split_tf32_bits(pt_float_bits(v), hi, lo);
      static_cast<uint32_t*>(a.packed)[dest] = hi;
      static_cast<uint32_t*>(a.packed)[a.total + dest] = lo;
    } else if constexpr (std::is_same<T, float>::value) {
      static_cast<float*>(a.packed)[dest] = __uint_as_float(round_tf32_bits(__float_as_uint(v)));
    } else {
      static_cast<T*>(a.packed)[dest] = v;
    }
  }
}

// The tiled pack's arguments, or false where it does not apply (the weight's inner elements
// are not contiguous, or more weight rows than a grid's y extent holds).
bool pt_tile_pack_args(const ConvTranspose2dParams& p, const PtPackArgs& a, PtTilePackArgs& t) {
  const int64_t kh = p.ph_h.kernel, kw = p.ph_w.kernel, cout_g = p.out_per_group;
  const int64_t* s = p.w_stride;
  const bool plain = s[3] == 1 && s[2] == kw && s[1] == kh * kw;
  const bool oc_inner = s[1] == 1 && s[3] == cout_g && s[2] == kw * cout_g;
  const int64_t rows = p.groups * p.in_per_group, inner = cout_g * kh * kw;
  if (!(plain || oc_inner) || (rows + 31) / 32 > 65535 || inner >= kPtInt32Limit - 32)
    return false;
  t.a = a;
  t.rows = (int)rows;  // < kPtSizeLimit (pt_weight_side_ok)
  t.inner = (int)inner;
  t.group_stride = (int64_t)a.phases * a.cout_pad * a.kmax;
  t.kw = (int)kw;
  t.khkw = (int)(kh * kw);
  t.oc_inner = oc_inner && !plain;  // (1 x 1 kernels: both orders are the same)
  t.pad_h = p.ph_h.pad;
  t.pad_w = p.ph_w.pad;
  t.dil_h = p.ph_h.dil;
  t.dil_w = p.ph_w.dil;
  t.stride_h = p.ph_h.stride;
  return true;
}

// Whether some packed element copies no weight element (channel or column padding, a phase
// with fewer taps than the longest): the tiled pack then zeroes the buffer first.
bool pt_pack_has_padding(const PtPackArgs& a) {
  if (a.cin_pad != a.cin_g || a.cout_pad != a.cout_g) return true;
  const int phases_h = a.phases / a.sw;
  for (int rh = 0; rh < phases_h; ++rh)
    for (int rw = 0; rw < a.sw; ++rw)
      if ((int64_t)a.taps_h[rh] * a.taps_w[rw] * a.cin_pad != a.kmax) return true;
  return false;
}

// The tiled pack (SPLIT: fp32 strict's two blocks), or the per-element kernel's launch
// (`fallback`) where it does not apply.
template <typename T, bool SPLIT, typename Fallback>
cudaError_t pt_pack(const ConvTranspose2dParams& p, ScalarKind kind, void* packed,
                    cudaStream_t stream, Fallback fallback) {
  const PtPackArgs a = pt_pack_args(p, kind, packed);
  if (a.total == 0) return cudaSuccess;
  PtTilePackArgs t;
  if (!pt_tile_pack_args(p, a, t)) return fallback(a);
  if (pt_pack_has_padding(a)) {
    const cudaError_t err = cudaMemsetAsync(
        packed, 0, (size_t)((SPLIT ? 2 : 1) * a.total * (int64_t)sizeof(T)), stream);
    if (err != cudaSuccess) return err;
  }
  const dim3 grid((unsigned)((t.inner + 31) / 32), (unsigned)((t.rows + 31) / 32));
  gemm_phase_tma_pack_weight_tile_kernel<T, SPLIT><<<grid, dim3(32, 8), 0, stream>>>(t);
  return cudaGetLastError();
}

// fp32 strict: both blocks (hi, lo) in one pass.
cudaError_t pt_launch_pack_split(const ConvTranspose2dParams& p, void* packed,
                                 cudaStream_t stream) {
  return pt_pack<float, true>(p, ScalarKind::kFloat32, packed, stream, [&](const PtPackArgs& a) {
    gemm_phase_tma_pack_weight_split_kernel<<<pack_grid(a.total), 256, 0, stream>>>(a);
    return cudaGetLastError();
  });
}

// Other element types and fp32 with TF32.
template <typename T>
cudaError_t pt_launch_pack_any(const ConvTranspose2dParams& p, ScalarKind kind, void* packed,
                               cudaStream_t stream) {
  return pt_pack<T, false>(p, kind, packed, stream, [&](const PtPackArgs& a) {
    gemm_phase_tma_pack_weight_kernel<T><<<pack_grid(a.total), 256, 0, stream>>>(a);
    return cudaGetLastError();
  });
}

}  // namespace

bool gemm_phase_tma_supports(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32) {
#if !defined(DECONV_PATCH_SM90A)
  (void)p;
  (void)kind;
  (void)allow_tf32;
  return false;
#else
  return pt_geometry_ok(p, kind, pt_is_split(kind, allow_tf32)) &&
         tensor_map_encoder() != nullptr && current_device_is_sm90();
#endif
}

int gemm_phase_tma_num_configs() { return kPtNumConfigs; }

const char* gemm_phase_tma_config_name(int config) {
  return config >= 0 && config < kPtNumConfigs ? kPtConfigNames[config] : "";
}

int64_t gemm_phase_tma_packed_weight_bytes(const ConvTranspose2dParams& p, ScalarKind kind,
                                           bool allow_tf32) {
  const bool split = pt_is_split(kind, allow_tf32);
  if (!pt_weight_side_ok(p, kind, split)) return 0;
  const AxisPlan h = plan_axis(p.ph_h, 0), w = plan_axis(p.ph_w, 0);
  const PtGeom geo = pt_geom(p, kind, h, w);
  return (split ? 2 : 1) * geo.rows * geo.kmax * pt_elem_bytes(kind);
}

cudaError_t launch_gemm_phase_tma_pack_weight(const ConvTranspose2dParams& p, ScalarKind kind,
                                              bool allow_tf32, void* packed,
                                              cudaStream_t stream) {
  const bool split = pt_is_split(kind, allow_tf32);
  if (!pt_weight_side_ok(p, kind, split)) return cudaErrorInvalidValue;
  if (packed == nullptr || p.weight == nullptr) return cudaErrorInvalidValue;
  if (split) return pt_launch_pack_split(p, packed, stream);
  switch (kind) {
    case ScalarKind::kFloat16: return pt_launch_pack_any<__half>(p, kind, packed, stream);
    case ScalarKind::kBFloat16: return pt_launch_pack_any<__nv_bfloat16>(p, kind, packed, stream);
    case ScalarKind::kFloat32: return pt_launch_pack_any<float>(p, kind, packed, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_conv_transpose2d_gemm_phase_tma(const ConvTranspose2dParams& p,
                                                   ScalarKind kind, bool allow_tf32,
                                                   const void* packed, cudaStream_t stream,
                                                   int config) {
  if (!gemm_phase_tma_supports(p, kind, allow_tf32)) return cudaErrorInvalidValue;
  if (config < -1 || config >= kPtNumConfigs) return cudaErrorInvalidValue;
  if (pt_output_empty(p)) return cudaSuccess;
  if (packed == nullptr || !pt_aligned16(packed)) return cudaErrorInvalidValue;
  switch (kind) {
#if DECONV_PATCH_UNIT_HAS_KIND(1)
    case ScalarKind::kFloat16: return gemm_phase_tma_launch_f16(p, packed, config, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(2)
    case ScalarKind::kBFloat16: return gemm_phase_tma_launch_bf16(p, packed, config, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(0)
    case ScalarKind::kFloat32:
      return allow_tf32 ? gemm_phase_tma_launch_tf32(p, packed, config, stream)
                        : gemm_phase_tma_launch_f32x3(p, packed, config, stream);
#endif
  }
  return cudaErrorInvalidValue;
}

}  // namespace deconv_patch
