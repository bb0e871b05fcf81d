// The kernel families the binding dispatches on: one code each, the same numbers as the
// registry's entries (deconv_patch/kernels/, KernelFamily.code). Plain C++: kernels and the
// binding include it.
#pragma once

namespace deconv_patch {

enum class KernelFamily : int {
  kDirect = 0,
  kGrouped = 1,
  kFfmaTile = 2,
  kGemmKxs = 3,
  kGemmKxsSm90 = 4,
  kGemmPhase = 5,
  kGemmPhaseSm90 = 6,
  kGemmPhaseTma = 7,
  kGemmOutTile = 8,
  kGemmCol2im = 9,
  kCount = 10,
};

inline const char* kernel_family_name(KernelFamily f) {
  switch (f) {
    case KernelFamily::kDirect: return "direct";
    case KernelFamily::kGrouped: return "grouped";
    case KernelFamily::kFfmaTile: return "ffma_tile";
    case KernelFamily::kGemmKxs: return "gemm_kxs";
    case KernelFamily::kGemmKxsSm90: return "gemm_kxs_sm90";
    case KernelFamily::kGemmPhase: return "gemm_phase";
    case KernelFamily::kGemmPhaseSm90: return "gemm_phase_sm90";
    case KernelFamily::kGemmPhaseTma: return "gemm_phase_tma";
    case KernelFamily::kGemmOutTile: return "gemm_out_tile";
    case KernelFamily::kGemmCol2im: return "gemm_col2im";
    default: return "unknown";
  }
}

}  // namespace deconv_patch
