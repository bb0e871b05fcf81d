// gemm_phase_tma's GEMM kernels for fp32 strict, 3xTF32
// (see conv_transpose2d_gemm_phase_tma_impl.cuh).
#include "conv_transpose2d_gemm_phase_tma_impl.cuh"

namespace deconv_patch {

cudaError_t gemm_phase_tma_launch_f32x3(const ConvTranspose2dParams& p, const void* packed,
                                        int config, cudaStream_t stream) {
  return pt_launch_typed<float, true>(p, ScalarKind::kFloat32, packed, config, stream);
}

}  // namespace deconv_patch
