// gemm_kxs_sm90's public API (gemm_kxs_sm90/gemm_kxs_sm90.h): the checks, weight packing and
// the dispatch to the per-element-type GEMM launchers. The kernels, the index math and the
// pipeline are in gemm_kxs_sm90/gemm_kxs_sm90_kernel.cuh.
#include "gemm_kxs_sm90/gemm_kxs_sm90_kernel.cuh"
#include "common/unit_kind.h"

namespace deconv_patch {

bool gemm_kxs_sm90_supports(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32) {
#if !defined(DECONV_PATCH_SM90A)
  (void)p;
  (void)kind;
  (void)allow_tf32;
  return false;
#else
  if (kind == ScalarKind::kFloat32 && !allow_tf32) return false;
  return geometry_ok(p, kind) && tensor_map_encoder() != nullptr && current_device_is_sm90();
#endif
}

int gemm_kxs_sm90_num_configs() { return kNumConfigs; }

int64_t gemm_kxs_sm90_packed_weight_bytes(const ConvTranspose2dParams& p, ScalarKind kind) {
  if (!weight_side_ok(p, kind)) return 0;
  return packed_rows(p) * p.in_channels * elem_bytes(kind);
}

cudaError_t launch_gemm_kxs_sm90_pack_weight(const ConvTranspose2dParams& p, ScalarKind kind,
                                             bool allow_tf32, void* packed,
                                             cudaStream_t stream) {
  if (kind == ScalarKind::kFloat32 && !allow_tf32) return cudaErrorInvalidValue;
  if (!weight_side_ok(p, kind)) return cudaErrorInvalidValue;
  if (packed == nullptr || p.weight == nullptr) return cudaErrorInvalidValue;
  switch (kind) {
    case ScalarKind::kFloat16: return launch_pack<__half>(p, packed, stream);
    case ScalarKind::kBFloat16: return launch_pack<__nv_bfloat16>(p, packed, stream);
    case ScalarKind::kFloat32: return launch_pack<float>(p, packed, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_conv_transpose2d_gemm_kxs_sm90(const ConvTranspose2dParams& p,
                                                  ScalarKind kind, bool allow_tf32,
                                                  const void* packed, cudaStream_t stream,
                                                  int config) {
  if (!gemm_kxs_sm90_supports(p, kind, allow_tf32)) return cudaErrorInvalidValue;
  if (config < -1 || config >= kNumConfigs) return cudaErrorInvalidValue;
  if (p.batch * p.out_channels * p.out_h * p.out_w == 0) return cudaSuccess;
  if (packed == nullptr || !aligned16(packed)) return cudaErrorInvalidValue;
  switch (kind) {
#if DECONV_PATCH_UNIT_HAS_KIND(1)
    case ScalarKind::kFloat16: return gemm_kxs_sm90_launch_f16(p, kind, packed, config, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(2)
    case ScalarKind::kBFloat16: return gemm_kxs_sm90_launch_bf16(p, kind, packed, config, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(0)
    case ScalarKind::kFloat32: return gemm_kxs_sm90_launch_f32(p, kind, packed, config, stream);
#endif
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_conv_transpose2d_gemm_kxs_sm90_f32_out(const ConvTranspose2dParams& p,
                                                          ScalarKind kind, const void* packed,
                                                          cudaStream_t stream, int config) {
  if (kind == ScalarKind::kFloat32 || !gemm_kxs_sm90_supports(p, kind, false))
    return cudaErrorInvalidValue;
  if (config < -1 || config >= kGemmKxsSm90F32OutConfigs) return cudaErrorInvalidValue;
  if (p.batch * p.out_channels * p.out_h * p.out_w == 0) return cudaSuccess;
  if (packed == nullptr || !aligned16(packed)) return cudaErrorInvalidValue;
#if DECONV_PATCH_UNIT_HAS_KIND(1)
  if (kind == ScalarKind::kFloat16)
    return gemm_kxs_sm90_launch_f32_out_f16(p, kind, packed, config, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(2)
  if (kind == ScalarKind::kBFloat16)
    return gemm_kxs_sm90_launch_f32_out_bf16(p, kind, packed, config, stream);
#endif
  return cudaErrorInvalidValue;
}

}  // namespace deconv_patch
