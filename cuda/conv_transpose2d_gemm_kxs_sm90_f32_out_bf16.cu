// gemm_kxs_sm90's fp32-output GEMM kernels for __nv_bfloat16 operands (KxsF32OutConfig; see
// conv_transpose2d_gemm_kxs_sm90_impl.cuh): gemm_col2im's GEMM in 16-bit.
#include "conv_transpose2d_gemm_kxs_sm90_impl.cuh"

namespace deconv_patch {

cudaError_t gemm_kxs_sm90_launch_f32_out_bf16(const ConvTranspose2dParams& p, ScalarKind kind,
                                              const void* packed, int config,
                                              cudaStream_t stream) {
  return launch_f32_out_typed<__nv_bfloat16>(p, kind, packed, config, stream);
}

}  // namespace deconv_patch
