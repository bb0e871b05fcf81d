// The gemm_phase_sm90 build unit's table: what the binding calls (see common/family_unit.h).
#include "gemm_phase_sm90/gemm_phase_sm90.h"

namespace deconv_patch {
namespace {

constexpr GemmPhaseSm90Unit kUnit{
    {kFamilyUnitAbi, KernelFamily::kGemmPhaseSm90, sizeof(GemmPhaseSm90Unit)},
    &gemm_phase_sm90_supports,
    &gemm_phase_sm90_num_configs,
    &gemm_phase_sm90_packed_weight_bytes,
    &launch_gemm_phase_sm90_pack_weight,
    &launch_conv_transpose2d_gemm_phase_sm90,
};

}  // namespace
}  // namespace deconv_patch

extern "C" __attribute__((visibility("default")))
const void* deconv_patch_unit_gemm_phase_sm90() {
  return &deconv_patch::kUnit;
}
