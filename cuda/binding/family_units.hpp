// The kernel families' tables this process has registered (common/family_unit.h): an explicit
// cache of their addresses by code, filled by Python (register_family) once it has loaded a
// family's unit (the core's own families included); the binding calls a family only through its
// table. The codes are the Python registry's (deconv_patch/kernels/, KernelFamily.code).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/family_unit.h"

namespace deconv_patch {

// More than the registry will ever list; a code is an index into the table.
constexpr int kMaxFamilies = 64;

// Checks the table (ABI, size, the family's name) and records it under `code`; a family
// registers once (again with the same table is a no-op).
void register_family_unit(int64_t code, const std::string& name, uintptr_t table_address);

// The names of the registered families, by code.
std::vector<std::string> registered_family_units();

// The registered table of family `code`; an error (not a refusal) when none is: the layer
// above loads a family's units before it calls the family.
const FamilyUnit& family_unit(int64_t code);

// The registered table of the family named `name`, or nullptr (UnitCall::find_unit).
const FamilyUnit* find_family_unit(const char* name);

}  // namespace deconv_patch
