// The registered families' tables (binding/family_units.hpp).
#include "binding/family_units.hpp"

#include <array>
#include <atomic>
#include <cstring>

#include <c10/util/Exception.h>

namespace deconv_patch {
namespace {

// Written under the GIL by register_family, read by kernel calls from any thread.
std::array<std::atomic<const FamilyUnit*>, kMaxFamilies>& unit_tables() {
  static std::array<std::atomic<const FamilyUnit*>, kMaxFamilies> tables{};
  return tables;
}

void check_code(int64_t code) {
  TORCH_CHECK(code >= 0 && code < kMaxFamilies, "deconv_patch: kernel family code ", code,
              " is out of range");
}

}  // namespace

void register_family_unit(int64_t code, const std::string& name, uintptr_t table_address) {
  check_code(code);
  TORCH_CHECK(table_address != 0, "deconv_patch: a null unit table for ", name);
  const auto* unit = reinterpret_cast<const FamilyUnit*>(table_address);
  TORCH_CHECK(unit->abi == kFamilyUnitAbi && unit->table_bytes == sizeof(FamilyUnit),
              "deconv_patch: the build unit of ", name, " was compiled from other sources (unit "
              "ABI ", unit->abi, ", table of ", unit->table_bytes, " bytes); rebuild it");
  TORCH_CHECK(unit->name != nullptr && name == unit->name, "deconv_patch: the table registered as ",
              name, " is ", unit->name ? unit->name : "unnamed");
  const FamilyUnit* before = nullptr;
  if (!unit_tables()[code].compare_exchange_strong(before, unit))
    TORCH_CHECK(before == unit, "deconv_patch: kernel family code ", code, " is already ",
                before->name);
}

std::vector<std::string> registered_family_units() {
  std::vector<std::string> names;
  for (const auto& slot : unit_tables())
    if (const FamilyUnit* unit = slot.load(std::memory_order_acquire)) names.emplace_back(unit->name);
  return names;
}

const FamilyUnit& family_unit(int64_t code) {
  check_code(code);
  const FamilyUnit* unit = unit_tables()[code].load(std::memory_order_acquire);
  TORCH_CHECK(unit != nullptr, "deconv_patch: kernel family code ", code, " is not loaded "
              "(deconv_patch.kernels.extension.load_units registers a family's units)");
  return *unit;
}

const FamilyUnit* find_family_unit(const char* name) {
  for (const auto& slot : unit_tables()) {
    const FamilyUnit* unit = slot.load(std::memory_order_acquire);
    if (unit != nullptr && std::strcmp(unit->name, name) == 0) return unit;
  }
  return nullptr;
}

}  // namespace deconv_patch
