// The ffma_tile build unit: the family's functions as the binding calls them
// (common/family_unit.h).
#include "common/family_unit.h"
#include "ffma_tile/ffma_tile.h"

namespace deconv_patch {
namespace {

bool supports(const ConvTranspose2dParams& p, const UnitCall& c) {
  return c.out_kind == c.kind && ffma_tile_supports(p, c.kind, c.config);
}

cudaError_t launch(const ConvTranspose2dParams& p, const UnitCall& c) {
  // fp32 without TF32 sums each channel's taps apart (error as PyTorch's on deep sums).
  const bool tap_sums = c.kind == ScalarKind::kFloat32 && !c.allow_tf32;
  return launch_conv_transpose2d_ffma_tile(p, c.kind, c.config, tap_sums, c.stream);
}

}  // namespace

DECONV_PATCH_DEFINE_UNIT(ffma_tile, &ffma_tile_num_configs, &ffma_tile_config_name, &supports,
                         &unit_reads_rows_never, &unit_no_bytes, &unit_reads_packed_never,
                         &unit_packs_nothing, &unit_no_bytes, &launch, &unit_weight_always_fits)

}  // namespace deconv_patch
