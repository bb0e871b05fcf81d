// The ffma_tile build unit's table: what the binding calls (see common/family_unit.h).
#include "ffma_tile/ffma_tile.h"

namespace deconv_patch {
namespace {

constexpr FfmaTileUnit kUnit{
    {kFamilyUnitAbi, KernelFamily::kFfmaTile, sizeof(FfmaTileUnit)},
    &ffma_tile_num_configs,
    &ffma_tile_config_name,
    &ffma_tile_supports,
    &launch_conv_transpose2d_ffma_tile,
};

}  // namespace
}  // namespace deconv_patch

extern "C" __attribute__((visibility("default")))
const void* deconv_patch_unit_ffma_tile() {
  return &deconv_patch::kUnit;
}
