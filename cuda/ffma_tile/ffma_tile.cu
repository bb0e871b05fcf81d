// ffma_tile's public API (ffma_tile/ffma_tile.h): the heuristic config and the dispatch to the
// per-element-type pickers of the generated per-config files. The kernel, its geometry and the
// per-config templates are in ffma_tile/ffma_tile_kernel.cuh.
#include "ffma_tile/ffma_tile_kernel.cuh"
#include "common/unit_kind.h"

namespace deconv_patch {
namespace {

// The heuristic config (-1): the stride picks the family, the output channels per group the
// register tile: one position per thread up to 4 channels (twice the threads of q1x2, which
// left the H100 at 8-9 warps a SM on FSRCNN and DCGAN's output layer; the fastest forced on
// both), fewest padded channels above.
int default_config(const ConvTranspose2dParams& p) {
  if (p.ph_h.stride == 3) return 9;
  const int64_t c = p.out_per_group;
  if (c <= 3) return 5;
  if (c <= 4) return 6;
  if (c <= 6) return 3;
  return 4;
}

int resolve_config(const ConvTranspose2dParams& p, int config) {
  return config == -1 ? default_config(p) : config;
}

}  // namespace

int ffma_tile_num_configs() { return kNumConfigs; }

const char* ffma_tile_config_name(int config) {
  return config >= 0 && config < kNumConfigs ? kConfigs[config].name : "";
}

bool ffma_tile_supports(const ConvTranspose2dParams& p, ScalarKind kind, int config) {
  const int c = resolve_config(p, config);
  if (c < 0 || c >= kNumConfigs) return false;
  switch (kind) {
#if DECONV_PATCH_UNIT_HAS_KIND(0)
    case ScalarKind::kFloat32: return ffma_tile_supports_f32(p, c);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(1)
    case ScalarKind::kFloat16: return ffma_tile_supports_f16(p, c);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(2)
    case ScalarKind::kBFloat16: return ffma_tile_supports_bf16(p, c);
#endif
    default: break;
  }
  return false;
}

cudaError_t launch_conv_transpose2d_ffma_tile(const ConvTranspose2dParams& p, ScalarKind kind,
                                              int config, bool tap_sums, cudaStream_t stream) {
  const int c = resolve_config(p, config);
  if (c < 0 || c >= kNumConfigs) return cudaErrorInvalidValue;
  switch (kind) {
#if DECONV_PATCH_UNIT_HAS_KIND(0)
    case ScalarKind::kFloat32: return ffma_tile_launch_f32(p, c, tap_sums, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(1)
    case ScalarKind::kFloat16: return ffma_tile_launch_f16(p, c, tap_sums, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(2)
    case ScalarKind::kBFloat16: return ffma_tile_launch_bf16(p, c, tap_sums, stream);
#endif
    default: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace deconv_patch
