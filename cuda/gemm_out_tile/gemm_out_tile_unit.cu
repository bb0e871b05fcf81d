// The gemm_out_tile build unit: the family's functions as the binding calls them
// (common/family_unit.h).
#include "common/family_unit.h"
#include "gemm_out_tile/gemm_out_tile.h"

namespace deconv_patch {
namespace {

bool supports(const ConvTranspose2dParams& p, const UnitCall& c) {
  return c.out_kind == c.kind && gemm_out_tile_supports(p, c.kind, c.allow_tf32);
}

// It reads any layout, but NCHW one element at a time: from 1 MiB of input a re-layout pass
// plus its 16-byte cp.async path is the faster pair (docs/performance/out-tile.md); smaller
// inputs are read in place.
bool reads_rows(const ConvTranspose2dParams& p, const UnitCall& c) {
  const int64_t element = c.kind == ScalarKind::kFloat32 ? 4 : 2;
  return p.batch * p.in_channels * p.in_h * p.in_w * element >= (int64_t{1} << 20);
}

int64_t packed_weight_bytes(const ConvTranspose2dParams& p, const UnitCall& c) {
  const int64_t bytes = gemm_out_tile_packed_weight_bytes(p, c.kind, c.allow_tf32);
  return bytes > 0 ? bytes : -1;
}

cudaError_t pack_weight(const ConvTranspose2dParams& p, const UnitCall& c, void* packed) {
  return launch_gemm_out_tile_pack_weight(p, c.kind, c.allow_tf32, packed, c.stream);
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
                         &supports, &reads_rows, &packed_weight_bytes, &unit_reads_packed_always,
                         &pack_weight, &unit_no_bytes, &launch, &weight_fits)

}  // namespace deconv_patch
