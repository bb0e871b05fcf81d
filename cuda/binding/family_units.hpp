// The kernel families' tables this process has registered (common/family_unit.h): an explicit
// cache of their addresses by code, filled by Python (register_family) once it has loaded a
// family's unit (the core's own families included); the binding calls a family only through its
// table. The codes are the Python registry's (deconv_patch/kernels/, KernelFamily.code).
//
// A family's whole unit holds its kernels for every fused activation and element type. A family
// can also be built for one element type, and one whose kernels are compiled per activation for
// one activation (a first use compiles only what its layers run): such a unit registers under
// the activation and element type it holds.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/family_unit.h"

namespace deconv_patch {

// More than the registry will ever list; a code is an index into the table.
constexpr int kMaxFamilies = 64;
// What register_family_unit's `activation` and `kind` are for a unit holding every activation or
// element type, and what a question any unit of a family answers asks for.
constexpr int64_t kEveryActivation = -1;
constexpr int64_t kEveryKind = -1;

// A registered unit: its family's name, the activation and element type it holds (or every).
struct RegisteredUnit {
  std::string family;
  int64_t activation;
  int64_t kind;
};

// Checks the table (ABI, size, the family's name, what it holds) and records it under `code`,
// `activation` (an Activation code, or kEveryActivation) and `kind` (a ScalarKind code, or
// kEveryKind); a unit registers once (again with the same table is a no-op).
void register_family_unit(int64_t code, const std::string& name, uintptr_t table_address,
                          int64_t activation, int64_t kind);

std::vector<RegisteredUnit> registered_family_units();

// A registered table of family `code` that launches calls fusing `activation` on element type
// `kind` (a unit holding both), or for kEveryActivation / kEveryKind any of its tables (the
// questions about a weight, config names, packing: every unit of a family answers them alike).
// An error (not a refusal) when none is: the layer above loads a call's units before it calls
// the family.
const FamilyUnit& family_unit(int64_t code, int64_t activation, int64_t kind);

// A registered table of the family named `name` that launches `kind` without a fused activation
// (another family's GEMM, UnitCall::find_unit), or nullptr.
const FamilyUnit* find_family_unit(const char* name, ScalarKind kind);

}  // namespace deconv_patch
