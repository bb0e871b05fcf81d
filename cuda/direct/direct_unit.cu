// The direct family's table (common/family_unit.h). It is part of the extension's core, the
// path every call can take, so it needs no unit of its own; Python registers it from the core.
#include "common/family_unit.h"
#include "direct/direct.h"

namespace deconv_patch {
namespace {

bool supports(const ConvTranspose2dParams&, const UnitCall& c) { return c.out_kind == c.kind; }

cudaError_t launch(const ConvTranspose2dParams& p, const UnitCall& c) {
  return launch_conv_transpose2d_direct(p, c.kind, c.stream);
}

}  // namespace

DECONV_PATCH_DEFINE_UNIT(direct, &unit_no_configs, &unit_no_config_name, &supports,
                         &unit_reads_rows_never, &unit_no_bytes, &unit_reads_packed_never,
                         &unit_packs_nothing, &unit_no_bytes, &launch, &unit_weight_always_fits)

}  // namespace deconv_patch
