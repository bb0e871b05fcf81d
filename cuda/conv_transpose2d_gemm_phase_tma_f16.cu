// gemm_phase_tma's GEMM kernels for __half (see conv_transpose2d_gemm_phase_tma_impl.cuh).
#include "conv_transpose2d_gemm_phase_tma_impl.cuh"

namespace deconv_patch {

cudaError_t gemm_phase_tma_launch_f16(const ConvTranspose2dParams& p, const void* packed,
                                      int config, cudaStream_t stream) {
  return pt_launch_typed<__half>(p, ScalarKind::kFloat16, packed, config, stream);
}

}  // namespace deconv_patch
