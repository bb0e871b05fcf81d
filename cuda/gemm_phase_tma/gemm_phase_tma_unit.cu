// The gemm_phase_tma build unit's table: what the binding calls (see common/family_unit.h).
#include "gemm_phase_tma/gemm_phase_tma.h"

namespace deconv_patch {
namespace {

constexpr GemmPhaseTmaUnit kUnit{
    {kFamilyUnitAbi, KernelFamily::kGemmPhaseTma, sizeof(GemmPhaseTmaUnit)},
    &gemm_phase_tma_supports,
    &gemm_phase_tma_num_configs,
    &gemm_phase_tma_config_name,
    &gemm_phase_tma_packed_weight_bytes,
    &launch_gemm_phase_tma_pack_weight,
    &launch_conv_transpose2d_gemm_phase_tma,
};

}  // namespace
}  // namespace deconv_patch

extern "C" __attribute__((visibility("default")))
const void* deconv_patch_unit_gemm_phase_tma() {
  return &deconv_patch::kUnit;
}
