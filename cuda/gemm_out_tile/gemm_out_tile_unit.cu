// The gemm_out_tile build unit's table: what the binding calls (see common/family_unit.h).
#include "gemm_out_tile/gemm_out_tile.h"

namespace deconv_patch {
namespace {

constexpr GemmOutTileUnit kUnit{
    {kFamilyUnitAbi, KernelFamily::kGemmOutTile, sizeof(GemmOutTileUnit)},
    &gemm_out_tile_supports,
    &gemm_out_tile_weight_fits,
    &gemm_out_tile_num_configs,
    &gemm_out_tile_config_name,
    &gemm_out_tile_packed_weight_bytes,
    &launch_gemm_out_tile_pack_weight,
    &launch_conv_transpose2d_gemm_out_tile,
};

}  // namespace
}  // namespace deconv_patch

extern "C" __attribute__((visibility("default")))
const void* deconv_patch_unit_gemm_out_tile() {
  return &deconv_patch::kUnit;
}
