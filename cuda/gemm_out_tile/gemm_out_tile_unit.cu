// The gemm_out_tile build unit: the family's functions as the binding calls them
// (common/family_unit.h).
#include "common/family_unit.h"
#include "gemm_out_tile/gemm_out_tile.h"

namespace deconv_patch {
namespace {

// It reads any layout, but NCHW one element at a time: from 1 MiB of input a re-layout pass
// plus its 16-byte cp.async path is the faster pair (docs/performance/out-tile.md); smaller
// inputs are read in place.
bool reads_rows(const ConvTranspose2dParams& p, const UnitCall& c) {
  const int64_t element = c.kind == ScalarKind::kFloat32 ? 4 : 2;
  return p.batch * p.in_channels * p.in_h * p.in_w * element >= (int64_t{1} << 20);
}

cudaError_t launch(const ConvTranspose2dParams& p, const UnitCall& c) {
  return launch_conv_transpose2d_gemm_out_tile(p, c.kind, c.allow_tf32, c.packed, c.config,
                                               c.stream);
}

bool weight_fits(const ConvTranspose2dParams& p, const UnitCall& c) {
  return gemm_out_tile_weight_fits(p, c.kind, c.allow_tf32);
}

}  // namespace

DECONV_PATCH_DEFINE_UNIT(gemm_out_tile, &gemm_out_tile_num_configs, &gemm_out_tile_config_name,
                         &unit_supports<gemm_out_tile_supports>, &reads_rows,
                         &unit_packed_bytes_tf32<gemm_out_tile_packed_weight_bytes>,
                         &unit_reads_packed_always, &unit_pack<launch_gemm_out_tile_pack_weight>,
                         &unit_no_bytes, &launch, &weight_fits)

}  // namespace deconv_patch
