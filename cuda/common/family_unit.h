// A kernel family's build unit: its folder compiled into a shared library of its own on first
// use, which exports one C function, deconv_patch_unit_<family>(), returning its table: a
// struct of function pointers, declared in the family's header, that begins with a
// FamilyUnitTag. Python hands the table's address to the binding (register_family), which
// checks the tag before it calls through the table. Plain C++: kernels and the binding include
// it.
#pragma once

#include "common/kernel_family.h"

namespace deconv_patch {

// Bumped whenever a table's layout changes, so a unit built from other sources is refused.
constexpr int kFamilyUnitAbi = 1;

struct FamilyUnitTag {
  int abi;
  KernelFamily family;
  unsigned table_bytes;  // sizeof the family's table, as the unit was compiled
};

}  // namespace deconv_patch

// Defines a unit's table (a constant TABLE, tagged with TABLE::kFamily, the family's functions
// in the table's member order) and its exported getter, deconv_patch_unit_NAME().
#define DECONV_PATCH_DEFINE_UNIT(NAME, TABLE, ...)                                 \
  namespace deconv_patch {                                                        \
  namespace {                                                                     \
  constexpr TABLE kUnit{{kFamilyUnitAbi, TABLE::kFamily, sizeof(TABLE)}, __VA_ARGS__}; \
  }                                                                               \
  }                                                                               \
  extern "C" __attribute__((visibility("default"))) const void* deconv_patch_unit_##NAME() { \
    return &deconv_patch::kUnit;                                                  \
  }
