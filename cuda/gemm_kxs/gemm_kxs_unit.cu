// The gemm_kxs build unit: the family's functions as the binding calls them
// (common/family_unit.h). Config 1 reads the weight tap-major, from the copy pack_weight makes.
#include "common/family_unit.h"
#include "common/tap_major_copy.cuh"
#include "gemm_kxs/gemm_kxs.h"

namespace deconv_patch {
namespace {

constexpr int kTapMajor = 1;

int num_configs() { return 2; }

// Config 0 is the bare family's (the weight as it is); the registry names only config 1.
const char* config_name(int config) { return config == kTapMajor ? "tap_major" : nullptr; }

bool supports(const ConvTranspose2dParams& p, const UnitCall& c) {
  return c.out_kind == c.kind && gemm_kxs_supports(p, c.kind, c.config == kTapMajor);
}

int64_t packed_weight_bytes(const ConvTranspose2dParams& p, const UnitCall& c) {
  return tap_major_copy_bytes(p, c.kind);
}

bool reads_packed(const UnitCall& c) { return c.config == kTapMajor; }

cudaError_t pack_weight(const ConvTranspose2dParams& p, const UnitCall& c, void* packed) {
  return launch_tap_major_copy(p, c.kind, packed, c.stream);
}

cudaError_t launch(const ConvTranspose2dParams& p, const UnitCall& c) {
  if (c.config == kTapMajor && c.packed == nullptr) return cudaErrorInvalidValue;
  return launch_conv_transpose2d_gemm_kxs(p, c.kind, c.allow_tf32,
                                          c.config == kTapMajor ? c.packed : nullptr, c.stream);
}

}  // namespace

DECONV_PATCH_DEFINE_UNIT(gemm_kxs, &num_configs, &config_name, &supports, &unit_reads_rows_never,
                         &packed_weight_bytes, &reads_packed, &pack_weight, &unit_no_bytes,
                         &launch, &unit_weight_always_fits)

}  // namespace deconv_patch
