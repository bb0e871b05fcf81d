// The gemm_col2im build unit's table: what the binding calls (see common/family_unit.h).
#include "gemm_col2im/col2im.h"

namespace deconv_patch {
namespace {

constexpr GemmCol2imUnit kUnit{
    {kFamilyUnitAbi, KernelFamily::kGemmCol2im, sizeof(GemmCol2imUnit)},
    &launch_col2im,
};

}  // namespace
}  // namespace deconv_patch

extern "C" __attribute__((visibility("default")))
const void* deconv_patch_unit_gemm_col2im() {
  return &deconv_patch::kUnit;
}
