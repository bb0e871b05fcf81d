// gemm_phase_tma's public API (gemm_phase_tma/gemm_phase_tma.h): the checks, weight packing
// and the dispatch to the per-element-type GEMM launchers. The kernels, the index math and the
// pipeline are in gemm_phase_tma/gemm_phase_tma_kernel.cuh.
#include "gemm_phase_tma/gemm_phase_tma_kernel.cuh"
#include "common/k_slice_reduce.cuh"
#include "common/tiled_pack.cuh"
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

// The tiled pack's layout (common/tiled_pack.cuh) of the packed weight described at the top of
// gemm_phase_tma_kernel.cuh: the line of inner element (oc, kh, kw) is packed row (group 0,
// phase of (kh, kw), pt_logical_col(oc)) from the k of its tap on; weight row r (group g,
// channel c) sits g groups of rows further, at k offset c. split: fp32 strict's hi and lo blocks,
// lo `lo` elements after hi.
struct PtTileLayout {
  PtPackArgs a;
  int64_t group_stride;  // packed elements per group: phases * cout_pad * kmax
  int64_t lo;            // split: a.total
  int pad_h, pad_w, dil_h, dil_w, stride_h;
  bool split;

  __host__ __device__ int64_t line(int oc, int kh, int kw) const {
    const int rh = phase_of(kh, dil_h, pad_h, stride_h), rw = phase_of(kw, dil_w, pad_w, a.sw);
    const int tap = (kh - a.kh0_h[rh]) / a.step_h * a.taps_w[rw] + (kw - a.kh0_w[rw]) / a.step_w;
    return ((int64_t)(rh * a.sw + rw) * a.cout_pad + pt_logical_col(oc)) * a.kmax +
           (int64_t)tap * a.cin_pad;
  }
  __host__ __device__ int64_t row(int r) const {
    const int g = r / a.cin_g;
    return (int64_t)g * group_stride + (r - g * a.cin_g);
  }
  template <typename T>
  __device__ void store(void* packed, int64_t at, T v) const {
    if constexpr (std::is_same<T, float>::value) {
      if (split) {
        uint32_t hi, lo_bits;
        pt_split_tf32_bits(pt_float_bits(v), hi, lo_bits);
        static_cast<uint32_t*>(packed)[at] = hi;
        static_cast<uint32_t*>(packed)[lo + at] = lo_bits;
      } else {
        static_cast<uint32_t*>(packed)[at] = round_tf32_bits(pt_float_bits(v));
      }
    } else {
      static_cast<T*>(packed)[at] = v;
    }
  }
};

PtTileLayout pt_tile_layout(const ConvTranspose2dParams& p, const PtPackArgs& a, bool split) {
  PtTileLayout l;
  l.a = a;
  l.group_stride = (int64_t)a.phases * a.cout_pad * a.kmax;
  l.lo = a.total;
  l.pad_h = p.ph_h.pad;
  l.pad_w = p.ph_w.pad;
  l.dil_h = p.ph_h.dil;
  l.dil_w = p.ph_w.dil;
  l.stride_h = p.ph_h.stride;
  l.split = split;
  return l;
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

// The tiled pack (split: fp32 strict's two blocks), or the per-element kernel's launch
// (`fallback`) for a weight it does not read.
template <typename T, typename Fallback>
cudaError_t pt_pack(const ConvTranspose2dParams& p, ScalarKind kind, bool split, void* packed,
                    cudaStream_t stream, Fallback fallback) {
  const PtPackArgs a = pt_pack_args(p, kind, packed);
  if (a.total == 0) return cudaSuccess;
  TiledPackShape s;
  if (!tiled_pack_shape(p, s)) return fallback(a);
  const size_t zero_bytes =
      pt_pack_has_padding(a) ? (size_t)((split ? 2 : 1) * a.total * (int64_t)sizeof(T)) : 0;
  return launch_tiled_pack<T>(s, pt_tile_layout(p, a, split), packed, zero_bytes, stream);
}

// fp32 strict: both blocks (hi, lo) in one pass.
cudaError_t pt_launch_pack_split(const ConvTranspose2dParams& p, void* packed,
                                 cudaStream_t stream) {
  return pt_pack<float>(p, ScalarKind::kFloat32, true, packed, stream, [&](const PtPackArgs& a) {
    gemm_phase_tma_pack_weight_split_kernel<<<pack_grid(a.total), 256, 0, stream>>>(a);
    return cudaGetLastError();
  });
}

// Other element types and fp32 with TF32.
template <typename T>
cudaError_t pt_launch_pack_any(const ConvTranspose2dParams& p, ScalarKind kind, void* packed,
                               cudaStream_t stream) {
  return pt_pack<T>(p, kind, false, packed, stream, [&](const PtPackArgs& a) {
    gemm_phase_tma_pack_weight_kernel<T><<<pack_grid(a.total), 256, 0, stream>>>(a);
    return cudaGetLastError();
  });
}

// The GEMM launcher of the call's element type and fp32 mode (config -1: its own pick).
cudaError_t pt_launch_kind(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32,
                           const void* packed, int config, int k_slices, cudaStream_t stream) {
  switch (kind) {
#if DECONV_PATCH_UNIT_HAS_KIND(1)
    case ScalarKind::kFloat16:
      return gemm_phase_tma_launch_f16(p, packed, config, k_slices, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(2)
    case ScalarKind::kBFloat16:
      return gemm_phase_tma_launch_bf16(p, packed, config, k_slices, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(0)
    case ScalarKind::kFloat32:
      return allow_tf32 ? gemm_phase_tma_launch_tf32(p, packed, config, k_slices, stream)
                        : gemm_phase_tma_launch_f32x3(p, packed, config, k_slices, stream);
#endif
  }
  return cudaErrorInvalidValue;
}

// A call's k slices (pt_pick_slices) and the config they run: slices 1 unless the call is
// supported and sliced.
struct PtSlicing {
  int config;
  int slices;
};
PtSlicing pt_plan_slices(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32,
                         int config) {
  PtSlicing r{config, 1};
  if (p.gather_h.scale == 0 || pt_output_empty(p)) return r;
  if (!gemm_phase_tma_supports(p, kind, allow_tf32)) return r;
  const ConvTranspose2dParams q = pt_slice_params(p, nullptr);
  const int c = pt_is_split(kind, allow_tf32) ? pt_resolve_config<true>(q, kind, config)
                                              : pt_resolve_config<false>(q, kind, config);
  const int sms = device_sm_count(current_device());
  if (c < 0 || sms <= 0) return r;
  const AxisPlan h = pt_io_plan(q.ph_h, q.gather_h, q.out_h);
  const AxisPlan w = pt_io_plan(q.ph_w, q.gather_w, q.out_w);
  PtArgs a;
  if (!pt_fill_args(a, q, kind, pt_config_bn(c), pt_call_box(q, kind, h, w), h, w)) return r;
  r.config = c;
  r.slices = pt_pick_slices(q, a, sms);
  return r;
}

template <typename T>
cudaError_t pt_reduce_slices(const ConvTranspose2dParams& p, const void* workspace, int slices,
                             cudaStream_t stream) {
  KSliceReduceArgs a{};
  a.partial = static_cast<const float*>(workspace);
  a.out = p.output;
  a.slice_stride = pt_slice_elems(p);
  a.pixels = p.batch * p.out_h * p.out_w;
  a.hw = p.out_h * p.out_w;
  a.out_w = p.out_w;
  for (int i = 0; i < 4; ++i) a.os[i] = p.out_stride[i];
  a.channels = (int)p.out_channels;
  a.slices = slices;
  return launch_k_slice_reduce<T>(a, stream);
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

int64_t gemm_phase_tma_workspace_bytes(const ConvTranspose2dParams& p, ScalarKind kind,
                                       bool allow_tf32, int config) {
  const PtSlicing s = pt_plan_slices(p, kind, allow_tf32, config);
  return s.slices > 1 ? s.slices * pt_slice_elems(p) * (int64_t)sizeof(float) : 0;
}

cudaError_t launch_conv_transpose2d_gemm_phase_tma(const ConvTranspose2dParams& p,
                                                   ScalarKind kind, bool allow_tf32,
                                                   const void* packed, cudaStream_t stream,
                                                   int config, void* workspace) {
  if (!gemm_phase_tma_supports(p, kind, allow_tf32)) return cudaErrorInvalidValue;
  if (config < -1 || config >= kPtNumConfigs) return cudaErrorInvalidValue;
  if (pt_output_empty(p)) return cudaSuccess;
  if (packed == nullptr || !pt_aligned16(packed)) return cudaErrorInvalidValue;
  const PtSlicing s = pt_plan_slices(p, kind, allow_tf32, config);
  if (s.slices <= 1) return pt_launch_kind(p, kind, allow_tf32, packed, config, 1, stream);
  if (workspace == nullptr || !pt_aligned16(workspace)) return cudaErrorInvalidValue;
  const cudaError_t err = pt_launch_kind(pt_slice_params(p, workspace), kind, allow_tf32, packed,
                                         s.config, s.slices, stream);
  if (err != cudaSuccess) return err;
  switch (kind) {
    case ScalarKind::kFloat16: return pt_reduce_slices<__half>(p, workspace, s.slices, stream);
    case ScalarKind::kBFloat16:
      return pt_reduce_slices<__nv_bfloat16>(p, workspace, s.slices, stream);
    case ScalarKind::kFloat32: return pt_reduce_slices<float>(p, workspace, s.slices, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace deconv_patch
