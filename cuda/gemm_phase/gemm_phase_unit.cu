// The gemm_phase build unit's table: what the binding calls (see common/family_unit.h).
#include "gemm_phase/gemm_phase.h"

namespace deconv_patch {
namespace {

constexpr GemmPhaseUnit kUnit{
    {kFamilyUnitAbi, KernelFamily::kGemmPhase, sizeof(GemmPhaseUnit)},
    &gemm_phase_supports,
    &gemm_phase_num_configs,
    &gemm_phase_packed_weight_bytes,
    &launch_gemm_phase_pack_weight,
    &launch_conv_transpose2d_gemm_phase,
};

}  // namespace
}  // namespace deconv_patch

extern "C" __attribute__((visibility("default")))
const void* deconv_patch_unit_gemm_phase() {
  return &deconv_patch::kUnit;
}
