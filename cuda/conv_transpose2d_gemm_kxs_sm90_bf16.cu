// gemm_kxs_sm90's GEMM kernels for __nv_bfloat16 (see conv_transpose2d_gemm_kxs_sm90_impl.cuh).
#include "conv_transpose2d_gemm_kxs_sm90_impl.cuh"

namespace deconv_patch {

cudaError_t gemm_kxs_sm90_launch_bf16(const ConvTranspose2dParams& p, ScalarKind kind,
                                      const void* packed, int config, cudaStream_t stream) {
  return launch_typed<__nv_bfloat16>(p, kind, packed, config, stream);
}

}  // namespace deconv_patch
