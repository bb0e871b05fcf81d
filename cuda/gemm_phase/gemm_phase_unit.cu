// The gemm_phase build unit: the family's functions as the binding calls them
// (common/family_unit.h).
#include "common/family_unit.h"
#include "gemm_phase/gemm_phase.h"

namespace deconv_patch {
namespace {

// The registry names the configs (deconv_patch/kernels/gemm_phase.py); the count is checked.
const char* config_name(int) { return nullptr; }

bool supports(const ConvTranspose2dParams& p, const UnitCall& c) {
  return c.out_kind == c.kind && gemm_phase_supports(p, c.kind, c.allow_tf32);
}

// It gathers 16-byte rows of 16-bit input only from channels_last: for NCHW one re-layout pass
// (the input is an up-sampling layer's smallest tensor) is cheaper than 2-byte gathers.
bool reads_rows(const ConvTranspose2dParams&, const UnitCall& c) {
  return c.kind != ScalarKind::kFloat32;
}

int64_t packed_weight_bytes(const ConvTranspose2dParams& p, const UnitCall& c) {
  const int64_t bytes = gemm_phase_packed_weight_bytes(p, c.kind);
  return bytes > 0 ? bytes : -1;
}

cudaError_t pack_weight(const ConvTranspose2dParams& p, const UnitCall& c, void* packed) {
  return launch_gemm_phase_pack_weight(p, c.kind, c.allow_tf32, packed, c.stream);
}

cudaError_t launch(const ConvTranspose2dParams& p, const UnitCall& c) {
  return launch_conv_transpose2d_gemm_phase(p, c.kind, c.allow_tf32, c.packed, c.config,
                                            c.stream);
}

}  // namespace

DECONV_PATCH_DEFINE_UNIT(gemm_phase, &gemm_phase_num_configs, &config_name, &supports, &reads_rows,
                         &packed_weight_bytes, &unit_reads_packed_always, &pack_weight,
                         &unit_no_bytes, &launch, &unit_weight_always_fits)

}  // namespace deconv_patch
