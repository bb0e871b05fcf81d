// The grouped build unit: the family's functions as the binding calls them (common/family_unit.h).
#include "common/family_unit.h"
#include "grouped/grouped.h"

namespace deconv_patch {
namespace {

bool supports(const ConvTranspose2dParams& p, const UnitCall& c) {
  return c.out_kind == c.kind && grouped_supports(p, c.kind);
}

cudaError_t launch(const ConvTranspose2dParams& p, const UnitCall& c) {
  return launch_conv_transpose2d_grouped(p, c.kind, c.stream);
}

}  // namespace

DECONV_PATCH_DEFINE_UNIT(grouped, &unit_no_configs, &unit_no_config_name, &supports,
                         &unit_reads_rows_never, &unit_no_bytes, &unit_reads_packed_never,
                         &unit_packs_nothing, &unit_no_bytes, &launch, &unit_weight_always_fits)

}  // namespace deconv_patch
