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

// fp32 strict: both blocks (hi, lo) in one pass.
cudaError_t pt_launch_pack_split(const ConvTranspose2dParams& p, void* packed,
                                 cudaStream_t stream) {
  const PtPackArgs a = pt_pack_args(p, ScalarKind::kFloat32, packed);
  if (a.total == 0) return cudaSuccess;
  gemm_phase_tma_pack_weight_split_kernel<<<pack_grid(a.total), 256, 0, stream>>>(a);
  return cudaGetLastError();
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
    case ScalarKind::kFloat16: return pt_launch_pack<__half>(p, kind, packed, stream);
    case ScalarKind::kBFloat16: return pt_launch_pack<__nv_bfloat16>(p, kind, packed, stream);
    case ScalarKind::kFloat32: return pt_launch_pack<float>(p, kind, packed, stream);
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
