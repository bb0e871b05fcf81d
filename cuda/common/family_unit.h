// A kernel family's build unit: its folder compiled into a shared library of its own on first
// use (the direct kernel's lives in the extension's core), which exports one C function,
// deconv_patch_unit_<family>(), returning its FamilyUnit: the same table of functions for every
// family. Python hands the table's address to the binding with the family's name and code
// (register_family); the binding checks the table, then runs every family through it alone, so
// a new family needs no line outside its own folder and its Python entry. Plain C++: kernels and
// the binding include it.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "common/params.h"
#include "common/unit_kind.h"

namespace deconv_patch {

// Bumped whenever FamilyUnit, UnitCall or ConvTranspose2dParams changes, so a unit built from
// other sources is refused.
constexpr int kFamilyUnitAbi = 5;

// The fused activation a unit's kernels were compiled for, where its build holds one
// (-DDECONV_PATCH_UNIT_ACTIVATION=<Activation code>: a first use compiles what its layers fuse,
// common/epilogue.cuh), else -1: every activation.
#ifdef DECONV_PATCH_UNIT_ACTIVATION
constexpr int kUnitActivation = DECONV_PATCH_UNIT_ACTIVATION;
#else
constexpr int kUnitActivation = -1;
#endif

struct FamilyUnit;

// Another registered family's table by name that runs `kind` without a fused activation, or
// nullptr (what gemm_col2im runs its GEMM with).
using FindUnit = const FamilyUnit* (*)(const char* name, ScalarKind kind);

// One call of a family, beyond the convolution's params.
struct UnitCall {
  ScalarKind kind;      // the input's and weight's element type
  ScalarKind out_kind;  // the output's: `kind`, except gemm_kxs_sm90's fp32 output of 16-bit
                        // operands (gemm_col2im's GEMM); other families refuse another kind
  bool allow_tf32;
  int config;            // a tile config 0..num_configs()-1, or -1: the family's own choice
  const void* packed;    // pack_weight's buffer (16-byte aligned) where reads_packed(), else null
  void* workspace;       // workspace_bytes() bytes (256-byte aligned), null when that is 0;
                         // supports and launch see it
  cudaStream_t stream;
  FindUnit find_unit;
};

// Every function takes the call's params (for packing and the weight-only questions just the
// weight-side fields) and the call; a launch runs on call.stream without synchronising.
struct FamilyUnit {
  int abi;               // kFamilyUnitAbi as the unit was compiled
  const char* name;      // the family's name, as the Python registry spells it
  unsigned table_bytes;  // sizeof(FamilyUnit) as the unit was compiled
  int activation;        // kUnitActivation as the unit was compiled
  int kind;              // kUnitKind as the unit was compiled (common/unit_kind.h)
  // Tile configs: launch takes config 0..num_configs()-1 (named config_name(i)) or -1.
  int (*num_configs)();
  const char* (*config_name)(int config);
  // True exactly when launch computes `p` with call's kind, TF32 flag and config.
  bool (*supports)(const ConvTranspose2dParams& p, const UnitCall& call);
  // Whether the kernel reads its input as 16-byte channel rows, so that the binding hands it a
  // channels_last copy of an input in another layout (asked with the input as it is).
  bool (*reads_rows)(const ConvTranspose2dParams& p, const UnitCall& call);
  // Bytes of the packed weight pack_weight writes: 0 when the family packs none, negative when
  // it cannot pack this weight. Whether call.config reads it: reads_packed.
  int64_t (*packed_weight_bytes)(const ConvTranspose2dParams& p, const UnitCall& call);
  bool (*reads_packed)(const UnitCall& call);
  cudaError_t (*pack_weight)(const ConvTranspose2dParams& p, const UnitCall& call, void* packed);
  // Bytes of scratch memory a launch needs (gemm_col2im's column buffer), 0 for none.
  int64_t (*workspace_bytes)(const ConvTranspose2dParams& p, const UnitCall& call);
  cudaError_t (*launch)(const ConvTranspose2dParams& p, const UnitCall& call);
  // Whether a layer's weight (weight-side fields of p) fits the family's tiles whatever the
  // input: what the planner asks of gemm_out_tile before making it a default.
  bool (*weight_fits)(const ConvTranspose2dParams& p, const UnitCall& call);
};

// Table entries for families without configs, packed weights, workspaces or weight limits.
inline int unit_no_configs() { return 0; }
inline const char* unit_no_config_name(int) { return ""; }
inline bool unit_reads_rows_never(const ConvTranspose2dParams&, const UnitCall&) { return false; }
inline bool unit_reads_rows_always(const ConvTranspose2dParams&, const UnitCall&) { return true; }
inline int64_t unit_no_bytes(const ConvTranspose2dParams&, const UnitCall&) { return 0; }
inline bool unit_reads_packed_never(const UnitCall&) { return false; }
inline bool unit_reads_packed_always(const UnitCall&) { return true; }
inline cudaError_t unit_packs_nothing(const ConvTranspose2dParams&, const UnitCall&, void*) {
  return cudaErrorInvalidValue;
}
inline bool unit_weight_always_fits(const ConvTranspose2dParams&, const UnitCall&) { return true; }
// Configs the registry names (deconv_patch/kernels/<family>.py; the binding checks the count).
inline const char* unit_unnamed_config(int) { return nullptr; }
// 16-bit input read as 16-byte channel rows (fp32 gathered in place).
inline bool unit_reads_rows_unless_fp32(const ConvTranspose2dParams&, const UnitCall& c) {
  return c.kind != ScalarKind::kFloat32;
}

// Table entries made from a family's own functions of the common shapes.
template <bool (*Supports)(const ConvTranspose2dParams&, ScalarKind, bool)>
bool unit_supports(const ConvTranspose2dParams& p, const UnitCall& c) {
  return c.out_kind == c.kind && Supports(p, c.kind, c.allow_tf32);
}
// (a family's own byte count is 0 where it cannot pack the weight)
template <int64_t (*Bytes)(const ConvTranspose2dParams&, ScalarKind)>
int64_t unit_packed_bytes(const ConvTranspose2dParams& p, const UnitCall& c) {
  const int64_t bytes = Bytes(p, c.kind);
  return bytes > 0 ? bytes : -1;
}
template <int64_t (*Bytes)(const ConvTranspose2dParams&, ScalarKind, bool)>
int64_t unit_packed_bytes_tf32(const ConvTranspose2dParams& p, const UnitCall& c) {
  const int64_t bytes = Bytes(p, c.kind, c.allow_tf32);
  return bytes > 0 ? bytes : -1;
}
template <cudaError_t (*Pack)(const ConvTranspose2dParams&, ScalarKind, bool, void*, cudaStream_t)>
cudaError_t unit_pack(const ConvTranspose2dParams& p, const UnitCall& c, void* packed) {
  return Pack(p, c.kind, c.allow_tf32, packed, c.stream);
}

}  // namespace deconv_patch

// Defines a unit's table, deconv_patch_unit_NAME(), from the FamilyUnit members after
// kind, in their order.
#define DECONV_PATCH_DEFINE_UNIT(NAME, ...)                                              \
  extern "C" __attribute__((visibility("default"))) const void* deconv_patch_unit_##NAME() { \
    static constexpr deconv_patch::FamilyUnit unit{deconv_patch::kFamilyUnitAbi, #NAME,      \
                                                   sizeof(deconv_patch::FamilyUnit),         \
                                                   deconv_patch::kUnitActivation,                \
                                                   deconv_patch::kUnitKind, __VA_ARGS__};  \
    return &unit;                                                                         \
  }
