// The gemm_phase_sm90 build unit: the family's functions as the binding calls them
// (common/family_unit.h). It reads only 16-bit channels_last rows, so NCHW input is re-laid out.
#include "common/family_unit.h"
#include "gemm_phase_sm90/gemm_phase_sm90.h"

namespace deconv_patch {
namespace {

cudaError_t launch(const ConvTranspose2dParams& p, const UnitCall& c) {
  return launch_conv_transpose2d_gemm_phase_sm90(p, c.kind, c.allow_tf32, c.packed, c.stream,
                                                 c.config);
}

}  // namespace

DECONV_PATCH_DEFINE_UNIT(gemm_phase_sm90, &gemm_phase_sm90_num_configs, &unit_unnamed_config,
                         &unit_supports<gemm_phase_sm90_supports>, &unit_reads_rows_unless_fp32,
                         &unit_packed_bytes<gemm_phase_sm90_packed_weight_bytes>,
                         &unit_reads_packed_always,
                         &unit_pack<launch_gemm_phase_sm90_pack_weight>, &unit_no_bytes, &launch,
                         &unit_weight_always_fits)

}  // namespace deconv_patch
