// The gemm_kxs_sm90 build unit's table: what the binding calls (see common/family_unit.h).
#include "gemm_kxs_sm90/gemm_kxs_sm90.h"

namespace deconv_patch {
namespace {

constexpr GemmKxsSm90Unit kUnit{
    {kFamilyUnitAbi, KernelFamily::kGemmKxsSm90, sizeof(GemmKxsSm90Unit)},
    &gemm_kxs_sm90_supports,
    &gemm_kxs_sm90_num_configs,
    &gemm_kxs_sm90_packed_weight_bytes,
    &launch_gemm_kxs_sm90_pack_weight,
    &launch_conv_transpose2d_gemm_kxs_sm90,
    &launch_conv_transpose2d_gemm_kxs_sm90_f32_out,
};

}  // namespace
}  // namespace deconv_patch

extern "C" __attribute__((visibility("default")))
const void* deconv_patch_unit_gemm_kxs_sm90() {
  return &deconv_patch::kUnit;
}
