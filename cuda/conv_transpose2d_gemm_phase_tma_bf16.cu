// gemm_phase_tma's GEMM kernels for __nv_bfloat16 (see conv_transpose2d_gemm_phase_tma_impl.cuh).
#include "conv_transpose2d_gemm_phase_tma_impl.cuh"

namespace deconv_patch {

cudaError_t gemm_phase_tma_launch_bf16(const ConvTranspose2dParams& p, const void* packed,
                                       int config, cudaStream_t stream) {
  return pt_launch_typed<__nv_bfloat16>(p, ScalarKind::kBFloat16, packed, config, stream);
}

}  // namespace deconv_patch
