// The registered families' tables (binding/family_units.hpp).
#include "binding/family_units.hpp"

#include <array>
#include <atomic>
#include <cstring>

#include <c10/util/Exception.h>

namespace deconv_patch {
namespace {

constexpr int kActivations = static_cast<int>(Activation::kHardswish) + 1;
constexpr int kKinds = static_cast<int>(ScalarKind::kBFloat16) + 1;
// Per family: one slot per (activation or every, element type or every).
constexpr int kSlots = (1 + kActivations) * (1 + kKinds);

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

void check_holds(int64_t activation, int64_t kind) {
  TORCH_CHECK(activation >= kEveryActivation && activation < kActivations,
              "deconv_patch: unknown activation code ", activation);
  TORCH_CHECK(kind >= kEveryKind && kind < kKinds, "deconv_patch: unknown element type code ",
              kind);
}

int slot_of(int64_t activation, int64_t kind) {
  return static_cast<int>((activation + 1) * (1 + kKinds) + kind + 1);
}
int64_t activation_of(int slot) { return slot / (1 + kKinds) - 1; }
int64_t kind_of(int slot) { return slot % (1 + kKinds) - 1; }

// Whether what a unit holds (`held`, or every) covers what a call asks (`asked`, or any).
bool covers(int64_t held, int64_t asked, int64_t every) {
  return held == every || asked == every || held == asked;
}

const FamilyUnit* load(int64_t code, int64_t activation, int64_t kind) {
  return unit_tables()[code][slot_of(activation, kind)].load(std::memory_order_acquire);
}

// The first registered table covering the activation and kind, whole units first. A launch
// (both given) reads its four slots straight away: this runs on every kernel call.
const FamilyUnit* lookup(int64_t code, int64_t activation, int64_t kind) {
  if (activation != kEveryActivation && kind != kEveryKind) {
    for (const int64_t a : {kEveryActivation, activation})
      for (const int64_t k : {kEveryKind, kind})
        if (const FamilyUnit* unit = load(code, a, k)) return unit;
    return nullptr;
  }
  for (int slot = 0; slot < kSlots; ++slot) {
    if (!covers(activation_of(slot), activation, kEveryActivation) ||
        !covers(kind_of(slot), kind, kEveryKind))
      continue;
    if (const FamilyUnit* unit = unit_tables()[code][slot].load(std::memory_order_acquire))
      return unit;
  }
  return nullptr;
}

}  // namespace

void register_family_unit(int64_t code, const std::string& name, uintptr_t table_address,
                          int64_t activation, int64_t kind) {
  check_code(code);
  check_holds(activation, kind);
  TORCH_CHECK(table_address != 0, "deconv_patch: a null unit table for ", name);
  const auto* unit = reinterpret_cast<const FamilyUnit*>(table_address);
  TORCH_CHECK(unit->abi == kFamilyUnitAbi && unit->table_bytes == sizeof(FamilyUnit),
              "deconv_patch: the build unit of ", name, " was compiled from other sources (unit "
              "ABI ", unit->abi, ", table of ", unit->table_bytes, " bytes); rebuild it");
  TORCH_CHECK(unit->name != nullptr && name == unit->name, "deconv_patch: the table registered as ",
              name, " is ", unit->name ? unit->name : "unnamed");
  TORCH_CHECK(unit->activation == activation && unit->kind == kind, "deconv_patch: the unit of ",
              name, " registered for activation ", activation, " and element type ", kind,
              " holds activation ", unit->activation, " and element type ", unit->kind);
  for (int other = 0; other < kSlots; ++other) {
    const FamilyUnit* there = unit_tables()[code][other].load(std::memory_order_acquire);
    TORCH_CHECK(there == nullptr || std::strcmp(there->name, name.c_str()) == 0,
                "deconv_patch: kernel family code ", code, " is already ", there ? there->name : "");
  }
  const FamilyUnit* before = nullptr;
  if (!unit_tables()[code][slot_of(activation, kind)].compare_exchange_strong(before, unit))
    TORCH_CHECK(before == unit, "deconv_patch: a unit of ", name, " for activation ", activation,
                " and element type ", kind, " is already registered");
}

std::vector<RegisteredUnit> registered_family_units() {
  std::vector<RegisteredUnit> units;
  for (const Slots& slots : unit_tables())
    for (int slot = 0; slot < kSlots; ++slot)
      if (const FamilyUnit* unit = slots[slot].load(std::memory_order_acquire))
        units.push_back({unit->name, activation_of(slot), kind_of(slot)});
  return units;
}

const FamilyUnit& family_unit(int64_t code, int64_t activation, int64_t kind) {
  check_code(code);
  check_holds(activation, kind);
  const FamilyUnit* unit = lookup(code, activation, kind);
  TORCH_CHECK(unit != nullptr, "deconv_patch: kernel family code ", code, " is not loaded for "
              "activation ", activation, " and element type ", kind, " (deconv_patch.kernels."
              "extension.load_units registers a call's units)");
  return *unit;
}

const FamilyUnit* find_family_unit(const char* name, ScalarKind kind) {
  for (int64_t code = 0; code < kMaxFamilies; ++code) {
    const FamilyUnit* unit =
        lookup(code, static_cast<int64_t>(Activation::kNone), static_cast<int64_t>(kind));
    if (unit != nullptr && std::strcmp(unit->name, name) == 0) return unit;
  }
  return nullptr;
}

}  // namespace deconv_patch
