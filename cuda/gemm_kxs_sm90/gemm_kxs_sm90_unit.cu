// The gemm_kxs_sm90 build unit: the family's functions as the binding calls them
// (common/family_unit.h). An fp32 out_kind with 16-bit operands runs the fp32-output kernels
// (gemm_col2im's GEMM).
#include "common/family_unit.h"
#include "gemm_kxs_sm90/gemm_kxs_sm90.h"

namespace deconv_patch {
namespace {

// The registry names the configs (deconv_patch/kernels/gemm_kxs_sm90.py); the count is checked.
const char* config_name(int) { return nullptr; }

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

int64_t packed_weight_bytes(const ConvTranspose2dParams& p, const UnitCall& c) {
  const int64_t bytes = gemm_kxs_sm90_packed_weight_bytes(p, c.kind);
  return bytes > 0 ? bytes : -1;
}

cudaError_t pack_weight(const ConvTranspose2dParams& p, const UnitCall& c, void* packed) {
  return launch_gemm_kxs_sm90_pack_weight(p, c.kind, c.allow_tf32, packed, c.stream);
}

cudaError_t launch(const ConvTranspose2dParams& p, const UnitCall& c) {
  if (f32_out(c))
    return launch_conv_transpose2d_gemm_kxs_sm90_f32_out(p, c.kind, c.packed, c.stream, c.config);
  if (c.out_kind != c.kind) return cudaErrorInvalidValue;
  return launch_conv_transpose2d_gemm_kxs_sm90(p, c.kind, c.allow_tf32, c.packed, c.stream,
                                               c.config);
}

}  // namespace

DECONV_PATCH_DEFINE_UNIT(gemm_kxs_sm90, &gemm_kxs_sm90_num_configs, &config_name, &supports,
                         &reads_rows, &packed_weight_bytes, &unit_reads_packed_always,
                         &pack_weight, &unit_no_bytes, &launch, &unit_weight_always_fits)

}  // namespace deconv_patch
