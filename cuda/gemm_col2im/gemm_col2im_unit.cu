// The gemm_col2im build unit: the family's functions as the binding calls them
// (common/family_unit.h). One GEMM over every tap: the layer as a 1 x 1 kernel with KH*KW*Cout
// output channels (no bias, no epilogue) into the fp32 [N*H*W, KH*KW*Cout] workspace, run by
// another family's unit: gemm_kxs_sm90 (16-bit operands through its fp32-output kernels, so the
// sum of taps is rounded once; fp32 with TF32), or gemm_phase_tma's 3xTF32 for fp32 without
// TF32 (the call's config is then that GEMM's). col2im then sums each output pixel's taps and
// applies the epilogue (gemm_col2im/col2im.h). One group.
#include "common/family_unit.h"
#include "common/tap_major_copy.cuh"
#include "gemm_col2im/col2im.h"

namespace deconv_patch {
namespace {

struct Gemm {
  const FamilyUnit* unit;  // null when its unit is not registered
  UnitCall call;
};

Gemm gemm_for(const UnitCall& c) {
  const bool three_tf32 = c.kind == ScalarKind::kFloat32 && !c.allow_tf32;
  const char* gemm = three_tf32 ? "gemm_phase_tma" : "gemm_kxs_sm90";
  Gemm g{c.find_unit ? c.find_unit(gemm, c.kind) : nullptr, c};
  g.call.out_kind = ScalarKind::kFloat32;
  g.call.workspace = nullptr;
  return g;
}

int64_t columns(const ConvTranspose2dParams& p) {
  return int64_t{p.ph_h.kernel} * p.ph_w.kernel * p.out_per_group;
}

// The GEMM's weight side: the tap-major copy [Cin, KH*KW*Cout] as a dense 1 x 1 kernel.
ConvTranspose2dParams gemm_weight(const ConvTranspose2dParams& p, const void* copy) {
  const int64_t ncol = columns(p);
  ConvTranspose2dParams q = p;
  q.weight = copy;
  q.groups = 1;
  q.in_per_group = p.in_channels;
  q.out_per_group = ncol;
  q.out_channels = ncol;
  q.ph_h = make_axis_phase(1, 0, 1, 1);
  q.ph_w = make_axis_phase(1, 0, 1, 1);
  q.w_stride[0] = ncol;
  q.w_stride[1] = q.w_stride[2] = q.w_stride[3] = 1;
  return q;
}

// The GEMM's call: p's input, the workspace `cols` as its channels_last [N, ncol, H, W] output.
ConvTranspose2dParams gemm_call(const ConvTranspose2dParams& p, void* cols) {
  const int64_t ncol = columns(p);
  ConvTranspose2dParams q = gemm_weight(p, nullptr);
  q.bias = nullptr;
  q.epi = EpilogueParams{};
  q.output = cols;
  q.out_h = p.in_h;
  q.out_w = p.in_w;
  q.out_stride[0] = p.in_h * p.in_w * ncol;
  q.out_stride[1] = 1;
  q.out_stride[2] = p.in_w * ncol;
  q.out_stride[3] = ncol;
  q.out_channels_last = true;
  return q;
}

// (Asked with the workspace, which the GEMM's check sees as its output.)
bool supports(const ConvTranspose2dParams& p, const UnitCall& c) {
  const Gemm g = gemm_for(c);
  return p.groups == 1 && c.out_kind == c.kind && g.unit != nullptr &&
         c.workspace != nullptr && g.unit->supports(gemm_call(p, c.workspace), g.call);
}

int64_t round_up_16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

// The GEMM's packed weight, then (16-byte aligned) the tap-major copy it is packed from.
int64_t gemm_packed_bytes(const ConvTranspose2dParams& p, const Gemm& g) {
  return g.unit == nullptr ? -1 : g.unit->packed_weight_bytes(gemm_weight(p, nullptr), g.call);
}

int64_t packed_weight_bytes(const ConvTranspose2dParams& p, const UnitCall& c) {
  const int64_t head = gemm_packed_bytes(p, gemm_for(c));
  return head > 0 ? round_up_16(head) + tap_major_copy_bytes(p, c.kind) : -1;
}

cudaError_t pack_weight(const ConvTranspose2dParams& p, const UnitCall& c, void* packed) {
  const Gemm g = gemm_for(c);
  const int64_t head = gemm_packed_bytes(p, g);
  if (head <= 0) return cudaErrorInvalidValue;
  void* copy = static_cast<char*>(packed) + round_up_16(head);
  const cudaError_t err = launch_tap_major_copy(p, c.kind, copy, c.stream);
  if (err != cudaSuccess) return err;
  return g.unit->pack_weight(gemm_weight(p, copy), g.call, packed);
}

int64_t workspace_bytes(const ConvTranspose2dParams& p, const UnitCall&) {
  return 4 * p.batch * p.in_h * p.in_w * columns(p);
}

cudaError_t launch(const ConvTranspose2dParams& p, const UnitCall& c) {
  Gemm g = gemm_for(c);
  if (g.unit == nullptr || c.workspace == nullptr) return cudaErrorInvalidValue;
  const cudaError_t err = g.unit->launch(gemm_call(p, c.workspace), g.call);
  if (err != cudaSuccess) return err;
  return launch_col2im(p, static_cast<const float*>(c.workspace), c.kind, c.stream);
}

}  // namespace

DECONV_PATCH_DEFINE_UNIT(gemm_col2im, &unit_no_configs, &unit_no_config_name, &supports,
                         &unit_reads_rows_always, &packed_weight_bytes, &unit_reads_packed_always,
                         &pack_weight, &workspace_bytes, &launch, &unit_weight_always_fits)

}  // namespace deconv_patch
