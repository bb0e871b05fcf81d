// The registered families' tables (binding/family_units.hpp).
#include "binding/family_units.hpp"

#include <array>
#include <atomic>
#include <cstring>

#include <c10/util/Exception.h>

namespace deconv_patch {
namespace {

constexpr int kActivations = static_cast<int>(Activation::kHardswish) + 1;
// Per family: its whole unit's table, then one per activation.
constexpr int kSlots = 1 + kActivations;

using Slots = std::array<std::atomic<const FamilyUnit*>, kSlots>;

// Written under the GIL by register_family, read by kernel calls from any thread.
std::array<Slots, kMaxFamilies>& unit_tables() {
  static std::array<Slots, kMaxFamilies> tables{};
  return tables;
}

void check_code(int64_t code) {
  TORCH_CHECK(code >= 0 && code < kMaxFamilies, "deconv_patch: kernel family code ", code,
              " is out of range");
}

int slot_of(int64_t activation) {
  TORCH_CHECK(activation >= kEveryActivation && activation < kActivations,
              "deconv_patch: unknown activation code ", activation);
  return static_cast<int>(activation + 1);
}

const FamilyUnit* load(int64_t code, int slot) {
  return unit_tables()[code][slot].load(std::memory_order_acquire);
}

// The whole unit, else the activation's, else (kEveryActivation) the first registered.
const FamilyUnit* lookup(int64_t code, int64_t activation) {
  if (const FamilyUnit* whole = load(code, 0)) return whole;
  if (activation != kEveryActivation) return load(code, slot_of(activation));
  for (int slot = 1; slot < kSlots; ++slot)
    if (const FamilyUnit* unit = load(code, slot)) return unit;
  return nullptr;
}

}  // namespace

void register_family_unit(int64_t code, const std::string& name, uintptr_t table_address,
                          int64_t activation) {
  check_code(code);
  const int slot = slot_of(activation);
  TORCH_CHECK(table_address != 0, "deconv_patch: a null unit table for ", name);
  const auto* unit = reinterpret_cast<const FamilyUnit*>(table_address);
  TORCH_CHECK(unit->abi == kFamilyUnitAbi && unit->table_bytes == sizeof(FamilyUnit),
              "deconv_patch: the build unit of ", name, " was compiled from other sources (unit "
              "ABI ", unit->abi, ", table of ", unit->table_bytes, " bytes); rebuild it");
  TORCH_CHECK(unit->name != nullptr && name == unit->name, "deconv_patch: the table registered as ",
              name, " is ", unit->name ? unit->name : "unnamed");
  TORCH_CHECK(unit->activation == activation, "deconv_patch: the unit of ", name,
              " registered for activation ", activation, " holds activation ", unit->activation);
  for (int other = 0; other < kSlots; ++other) {
    const FamilyUnit* there = load(code, other);
    TORCH_CHECK(there == nullptr || std::strcmp(there->name, name.c_str()) == 0,
                "deconv_patch: kernel family code ", code, " is already ", there ? there->name : "");
  }
  const FamilyUnit* before = nullptr;
  if (!unit_tables()[code][slot].compare_exchange_strong(before, unit))
    TORCH_CHECK(before == unit, "deconv_patch: a unit of ", name, " for activation ", activation,
                " is already registered");
}

std::vector<std::pair<std::string, int64_t>> registered_family_units() {
  std::vector<std::pair<std::string, int64_t>> units;
  for (const Slots& slots : unit_tables())
    for (int slot = 0; slot < kSlots; ++slot)
      if (const FamilyUnit* unit = slots[slot].load(std::memory_order_acquire))
        units.emplace_back(unit->name, slot - 1);
  return units;
}

const FamilyUnit& family_unit(int64_t code, int64_t activation) {
  check_code(code);
  const FamilyUnit* unit = lookup(code, activation);
  TORCH_CHECK(unit != nullptr, "deconv_patch: kernel family code ", code, " is not loaded for "
              "activation ", activation, " (deconv_patch.kernels.extension.load_units registers "
              "a call's units)");
  return *unit;
}

const FamilyUnit* find_family_unit(const char* name) {
  for (int64_t code = 0; code < kMaxFamilies; ++code) {
    const FamilyUnit* unit = lookup(code, static_cast<int64_t>(Activation::kNone));
    if (unit != nullptr && std::strcmp(unit->name, name) == 0) return unit;
  }
  return nullptr;
}

}  // namespace deconv_patch
