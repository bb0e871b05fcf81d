// The gemm_kxs build unit's table: what the binding calls (see common/family_unit.h).
#include "gemm_kxs/gemm_kxs.h"

namespace deconv_patch {
namespace {

constexpr GemmKxsUnit kUnit{
    {kFamilyUnitAbi, KernelFamily::kGemmKxs, sizeof(GemmKxsUnit)},
    &gemm_kxs_supports,
    &launch_conv_transpose2d_gemm_kxs,
};

}  // namespace
}  // namespace deconv_patch

extern "C" __attribute__((visibility("default")))
const void* deconv_patch_unit_gemm_kxs() {
  return &deconv_patch::kUnit;
}
