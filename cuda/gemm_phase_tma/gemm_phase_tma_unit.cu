// The gemm_phase_tma build unit: the family's functions as the binding calls them
// (common/family_unit.h).
#include "common/family_unit.h"
#include "gemm_phase_tma/gemm_phase_tma.h"

namespace deconv_patch {
namespace {

bool supports(const ConvTranspose2dParams& p, const UnitCall& c) {
  return c.out_kind == c.kind && gemm_phase_tma_supports(p, c.kind, c.allow_tf32);
}

int64_t packed_weight_bytes(const ConvTranspose2dParams& p, const UnitCall& c) {
  const int64_t bytes = gemm_phase_tma_packed_weight_bytes(p, c.kind, c.allow_tf32);
  return bytes > 0 ? bytes : -1;
}

cudaError_t pack_weight(const ConvTranspose2dParams& p, const UnitCall& c, void* packed) {
  return launch_gemm_phase_tma_pack_weight(p, c.kind, c.allow_tf32, packed, c.stream);
}

cudaError_t launch(const ConvTranspose2dParams& p, const UnitCall& c) {
  return launch_conv_transpose2d_gemm_phase_tma(p, c.kind, c.allow_tf32, c.packed, c.stream,
                                                c.config);
}

}  // namespace

// TMA tiled loads read 16-byte channel rows, so NCHW input is re-laid out first.
DECONV_PATCH_DEFINE_UNIT(gemm_phase_tma, &gemm_phase_tma_num_configs, &gemm_phase_tma_config_name,
                         &supports, &unit_reads_rows_always, &packed_weight_bytes,
                         &unit_reads_packed_always, &pack_weight, &unit_no_bytes, &launch,
                         &unit_weight_always_fits)

}  // namespace deconv_patch
