// The kernel families' tables this process has registered (common/family_unit.h): an explicit
// cache of their addresses by code, filled by Python (register_family) once it has loaded a
// family's unit (the core's own families included); the binding calls a family only through its
// table. The codes are the Python registry's (deconv_patch/kernels/, KernelFamily.code).
//
// A family's whole unit holds its kernels for every fused activation. A family whose kernels are
// compiled per activation can also be built one activation at a time (a first use compiles only
// the activations its layers fuse): such a unit registers under the activation it holds.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/family_unit.h"

namespace deconv_patch {

// More than the registry will ever list; a code is an index into the table.
constexpr int kMaxFamilies = 64;
// What register_family_unit's `activation` is for a unit holding every activation.
constexpr int64_t kEveryActivation = -1;

// Checks the table (ABI, size, the family's name) and records it under `code` and `activation`
// (an Activation code, or kEveryActivation); a unit registers once (again with the same table is
// a no-op).
void register_family_unit(int64_t code, const std::string& name, uintptr_t table_address,
                          int64_t activation);

// The registered units: (family name, activation or kEveryActivation).
std::vector<std::pair<std::string, int64_t>> registered_family_units();

// A registered table of family `code` that launches calls fusing `activation` (its whole unit, or
// the unit of that activation), or any of its tables for kEveryActivation (the questions about a
// weight, config names, packing: every unit of a family answers them alike). An error (not a
// refusal) when none is: the layer above loads a call's units before it calls the family.
const FamilyUnit& family_unit(int64_t code, int64_t activation);

// A registered table of the family named `name` that launches calls without a fused activation
// (another family's GEMM, UnitCall::find_unit), or nullptr.
const FamilyUnit* find_family_unit(const char* name);

}  // namespace deconv_patch
