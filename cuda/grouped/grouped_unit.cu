// The grouped build unit's table: what the binding calls (see common/family_unit.h).
#include "grouped/grouped.h"

namespace deconv_patch {
namespace {

constexpr GroupedUnit kUnit{
    {kFamilyUnitAbi, KernelFamily::kGrouped, sizeof(GroupedUnit)},
    &grouped_supports,
    &launch_conv_transpose2d_grouped,
};

}  // namespace
}  // namespace deconv_patch

extern "C" __attribute__((visibility("default")))
const void* deconv_patch_unit_grouped() {
  return &deconv_patch::kUnit;
}
