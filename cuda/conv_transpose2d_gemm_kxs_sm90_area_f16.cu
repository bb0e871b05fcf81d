// gemm_kxs_sm90's kernel-area GEMM kernels (configs 3..5) for __half (see
// conv_transpose2d_gemm_kxs_sm90_impl.cuh, "Kernel-area tiles").
#include "conv_transpose2d_gemm_kxs_sm90_impl.cuh"

namespace deconv_patch {

cudaError_t gemm_kxs_sm90_launch_area_f16(const ConvTranspose2dParams& p, ScalarKind kind,
                                          const void* packed, int base_config,
                                          cudaStream_t stream) {
  return launch_area_typed<__half>(p, kind, packed, base_config, stream);
}

}  // namespace deconv_patch
