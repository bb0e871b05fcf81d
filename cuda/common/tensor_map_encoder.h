// cuTensorMapEncodeTiled, looked up in the driver at run time (nothing links libcuda), once per
// process; shared by the TMA kernels' launchers (gemm_kxs_sm90, gemm_phase_tma). Host-only; no
// torch headers.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

namespace deconv_patch {

// The driver's encoder, or nullptr when the driver lacks it (the TMA kernels then report
// themselves unsupported).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = []() -> PFN_cuTensorMapEncodeTiled_v12000 {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                                             cudaEnableDefault, &status);
#else
    const cudaError_t err =
        cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &ptr, cudaEnableDefault, &status);
#endif
    if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || ptr == nullptr) {
      (void)cudaGetLastError();  // do not leave the failed lookup as the launch's error
      return nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

}  // namespace deconv_patch
