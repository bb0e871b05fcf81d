// The gemm_phase build unit: the family's functions as the binding calls them
// (common/family_unit.h). It gathers 16-byte rows of 16-bit input only from channels_last: for
// NCHW one re-layout pass (the input is an up-sampling layer's smallest tensor) is cheaper than
// 2-byte gathers.
#include "common/family_unit.h"
#include "gemm_phase/gemm_phase.h"

namespace deconv_patch {
namespace {

cudaError_t launch(const ConvTranspose2dParams& p, const UnitCall& c) {
  return launch_conv_transpose2d_gemm_phase(p, c.kind, c.allow_tf32, c.packed, c.config,
                                            c.stream);
}

}  // namespace

DECONV_PATCH_DEFINE_UNIT(gemm_phase, &gemm_phase_num_configs, &unit_unnamed_config,
                         &unit_supports<gemm_phase_supports>, &unit_reads_rows_unless_fp32,
                         &unit_packed_bytes<gemm_phase_packed_weight_bytes>,
                         &unit_reads_packed_always, &unit_pack<launch_gemm_phase_pack_weight>,
                         &unit_no_bytes, &launch, &unit_weight_always_fits)

}  // namespace deconv_patch
