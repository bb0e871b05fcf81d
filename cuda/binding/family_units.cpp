// The registered build units' tables (binding/family_units.hpp).
#include "binding/family_units.hpp"

#include <array>
#include <atomic>

#include <c10/util/Exception.h>

namespace deconv_patch {
namespace {

constexpr int kFamilies = static_cast<int>(KernelFamily::kCount);

// Written under the GIL by register_family, read by kernel calls from any thread.
std::array<std::atomic<const FamilyUnitTag*>, kFamilies>& unit_tables() {
  static std::array<std::atomic<const FamilyUnitTag*>, kFamilies> tables{};
  return tables;
}

}  // namespace

void register_family_unit(int64_t family_code, uintptr_t table_address) {
  TORCH_CHECK(family_code >= 0 && family_code < kFamilies,
              "deconv_patch: unknown kernel family code ", family_code);
  TORCH_CHECK(table_address != 0, "deconv_patch: a null unit table");
  const auto* tag = reinterpret_cast<const FamilyUnitTag*>(table_address);
  const auto family = static_cast<KernelFamily>(family_code);
  TORCH_CHECK(tag->abi == kFamilyUnitAbi && tag->family == family,
              "deconv_patch: the build unit of ", kernel_family_name(family),
              " was compiled from other sources (unit ABI ", tag->abi, ", family code ",
              static_cast<int>(tag->family), "); rebuild it");
  const FamilyUnitTag* before = nullptr;
  if (!unit_tables()[family_code].compare_exchange_strong(before, tag))
    TORCH_CHECK(before == tag, "deconv_patch: ", kernel_family_name(family),
                " is already registered with another unit");
}

std::vector<std::string> registered_family_units() {
  std::vector<std::string> names;
  for (int i = 0; i < kFamilies; ++i)
    if (unit_tables()[i].load(std::memory_order_acquire) != nullptr)
      names.emplace_back(kernel_family_name(static_cast<KernelFamily>(i)));
  return names;
}

const void* family_unit_table(KernelFamily family, unsigned table_bytes) {
  const int code = static_cast<int>(family);
  TORCH_CHECK(code >= 0 && code < kFamilies, "deconv_patch: unknown kernel family code ", code);
  const FamilyUnitTag* tag = unit_tables()[code].load(std::memory_order_acquire);
  TORCH_CHECK(tag != nullptr, "deconv_patch: the build unit of ", kernel_family_name(family),
              " is not loaded (deconv_patch.kernels.extension.load_units)");
  TORCH_CHECK(tag->table_bytes == table_bytes, "deconv_patch: the build unit of ",
              kernel_family_name(family), " has a table of ", tag->table_bytes,
              " bytes, the binding expects ", table_bytes, "; rebuild it");
  return tag;
}

}  // namespace deconv_patch
