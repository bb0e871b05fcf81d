// The gemm_phase_tma build unit: the family's functions as the binding calls them
// (common/family_unit.h). TMA tiled loads read 16-byte channel rows, so NCHW input is re-laid
// out first.
#include "common/family_unit.h"
#include "gemm_phase_tma/gemm_phase_tma.h"

namespace deconv_patch {
namespace {

int64_t workspace_bytes(const ConvTranspose2dParams& p, const UnitCall& c) {
  return gemm_phase_tma_workspace_bytes(p, c.kind, c.allow_tf32, c.config);
}

cudaError_t launch(const ConvTranspose2dParams& p, const UnitCall& c) {
  return launch_conv_transpose2d_gemm_phase_tma(p, c.kind, c.allow_tf32, c.packed, c.stream,
                                                c.config, c.workspace);
}

}  // namespace

DECONV_PATCH_DEFINE_UNIT(gemm_phase_tma, &gemm_phase_tma_num_configs, &gemm_phase_tma_config_name,
                         &unit_supports<gemm_phase_tma_supports>, &unit_reads_rows_always,
                         &unit_packed_bytes_tf32<gemm_phase_tma_packed_weight_bytes>,
                         &unit_reads_packed_always,
                         &unit_pack<launch_gemm_phase_tma_pack_weight>, &workspace_bytes, &launch,
                         &unit_weight_always_fits)

}  // namespace deconv_patch
