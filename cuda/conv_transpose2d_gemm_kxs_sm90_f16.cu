// gemm_kxs_sm90's GEMM kernels for __half (see conv_transpose2d_gemm_kxs_sm90_impl.cuh).
#include "conv_transpose2d_gemm_kxs_sm90_impl.cuh"

namespace deconv_patch {

cudaError_t gemm_kxs_sm90_launch_f16(const ConvTranspose2dParams& p, ScalarKind kind,
                                     const void* packed, int config, cudaStream_t stream) {
  return launch_typed<__half>(p, kind, packed, config, stream);
}

}  // namespace deconv_patch
