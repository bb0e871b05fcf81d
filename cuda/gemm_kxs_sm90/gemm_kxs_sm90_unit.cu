// The gemm_kxs_sm90 build unit: the family's functions as the binding calls them
// (common/family_unit.h). An fp32 out_kind with 16-bit operands runs the fp32-output kernels
// (gemm_col2im's GEMM).
#include "common/family_unit.h"
#include "gemm_kxs_sm90/gemm_kxs_sm90.h"

namespace deconv_patch {
namespace {

bool f32_out(const UnitCall& c) {
  return c.out_kind == ScalarKind::kFloat32 && c.kind != ScalarKind::kFloat32;
}

bool supports(const ConvTranspose2dParams& p, const UnitCall& c) {
  return (c.out_kind == c.kind || f32_out(c)) && gemm_kxs_sm90_supports(p, c.kind, c.allow_tf32);
}

// It reads 16-bit NCHW input in place where its build supports that.
bool reads_rows(const ConvTranspose2dParams& p, const UnitCall& c) {
  return !gemm_kxs_sm90_supports(p, c.kind, c.allow_tf32);
}

cudaError_t launch(const ConvTranspose2dParams& p, const UnitCall& c) {
  if (f32_out(c))
    return launch_conv_transpose2d_gemm_kxs_sm90_f32_out(p, c.kind, c.packed, c.stream, c.config);
  if (c.out_kind != c.kind) return cudaErrorInvalidValue;
  return launch_conv_transpose2d_gemm_kxs_sm90(p, c.kind, c.allow_tf32, c.packed, c.stream,
                                               c.config);
}

}  // namespace

DECONV_PATCH_DEFINE_UNIT(gemm_kxs_sm90, &gemm_kxs_sm90_num_configs, &unit_unnamed_config,
                         &supports, &reads_rows,
                         &unit_packed_bytes<gemm_kxs_sm90_packed_weight_bytes>,
                         &unit_reads_packed_always, &unit_pack<launch_gemm_kxs_sm90_pack_weight>,
                         &unit_no_bytes, &launch, &unit_weight_always_fits)

}  // namespace deconv_patch
