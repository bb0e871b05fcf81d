// The kernel families' build units this process has loaded (common/family_unit.h): an explicit
// cache of their tables' addresses, one per family, filled by Python (register_family) once it
// has built and loaded a unit; the binding calls a family only through its table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/family_unit.h"

namespace deconv_patch {

// Checks the table's tag (ABI, family, size) and records it; a family registers once (again
// with the same table is a no-op).
void register_family_unit(int64_t family_code, uintptr_t table_address);

// The names of the families whose units are registered, by code.
std::vector<std::string> registered_family_units();

// The registered table of `family`, of `table_bytes` bytes; an error (not a refusal) when its
// unit was not loaded: the layer above loads a family's units before it calls the family.
const void* family_unit_table(KernelFamily family, unsigned table_bytes);

// The registered table of type Table (whose kFamily names its family).
template <typename Table>
const Table& family_unit() {
  return *static_cast<const Table*>(family_unit_table(Table::kFamily, sizeof(Table)));
}

}  // namespace deconv_patch
