"""The binding's table of registered units (cuda/binding/family_units.cpp), built on the CPU
with stand-in tables: which unit a call of an activation and element type launches through
(whole units first, then the type's, the activation's, the pair's), the any-unit questions,
gemm_col2im's lookup by name, and the registration checks. The GPU suite runs it with real
units; this runs it where CI has no GPU."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional

import pytest

from deconv_patch.kernels.build_units import cuda_source_dir

pytestmark = pytest.mark.extended  # one small extension build: about a minute on 2 cores

# The binding's file itself, beside stand-in tables (no function in them is called).
PROBE = r"""
#include <deque>
#include "binding/family_units.cpp"

namespace {
std::deque<deconv_patch::FamilyUnit> tables;
}

// A stand-in table holding (activation, kind), as its unit would have been compiled; its index.
int64_t make_table(std::string name, int64_t activation, int64_t kind) {
  static std::deque<std::string> names;
  names.push_back(name);
  deconv_patch::FamilyUnit t{};
  t.abi = deconv_patch::kFamilyUnitAbi;
  t.name = names.back().c_str();
  t.table_bytes = sizeof(deconv_patch::FamilyUnit);
  t.activation = static_cast<int>(activation);
  t.kind = static_cast<int>(kind);
  tables.push_back(t);
  return static_cast<int64_t>(tables.size()) - 1;
}

void register_table(int64_t code, std::string name, int64_t table, int64_t activation,
                    int64_t kind) {
  deconv_patch::register_family_unit(code, name, reinterpret_cast<uintptr_t>(&tables[table]),
                                     activation, kind);
}

int64_t index_of(const deconv_patch::FamilyUnit* unit) {
  for (size_t i = 0; i < tables.size(); ++i)
    if (&tables[i] == unit) return static_cast<int64_t>(i);
  return -1;
}

// The table a call launches through (its index), or the binding's error.
int64_t launch_table(int64_t code, int64_t activation, int64_t kind) {
  return index_of(&deconv_patch::family_unit(code, activation, kind));
}

int64_t find_table(std::string name, int64_t kind) {
  const auto* unit =
      deconv_patch::find_family_unit(name.c_str(), static_cast<deconv_patch::ScalarKind>(kind));
  return unit == nullptr ? -1 : index_of(unit);
}

std::vector<std::tuple<std::string, int64_t, int64_t>> registered() {
  std::vector<std::tuple<std::string, int64_t, int64_t>> out;
  for (const auto& u : deconv_patch::registered_family_units())
    out.emplace_back(u.family, u.activation, u.kind);
  return out;
}
"""

EVERY = -1
RELU, TANH = 1, 6
F32, F16, BF16 = 0, 1, 2


def _cuda_headers() -> Optional[Path]:
    """The CUDA toolkit's include folder (common/family_unit.h names CUDA types): from
    $CUDA_HOME / $CUDA_PATH, torch's guess, /usr/local/cuda or where nvcc really lives (a
    wrapper script on PATH can sit outside the toolkit, as on CI's machine)."""
    from torch.utils import cpp_extension

    nvcc = shutil.which("nvcc")
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), cpp_extension.CUDA_HOME,
             "/usr/local/cuda", nvcc and str(Path(os.path.realpath(nvcc)).parents[1])]
    for root in filter(None, roots):
        if (Path(root) / "include" / "cuda_runtime_api.h").is_file():
            return Path(root) / "include"
    return None


@pytest.fixture(scope="module")
def binding(tmp_path_factory):
    from torch.utils import cpp_extension

    headers = _cuda_headers()
    if headers is None:
        pytest.skip("needs the CUDA toolkit's headers")
    return cpp_extension.load_inline(
        name="family_units_probe", cpp_sources=[PROBE],
        functions=["make_table", "register_table", "launch_table", "find_table", "registered"],
        extra_include_paths=[str(cuda_source_dir()), str(headers)],
        build_directory=str(tmp_path_factory.mktemp("family_units_probe")))


def test_a_call_launches_through_the_widest_unit_that_holds_it(binding):
    code = 7
    pair = binding.make_table("fam", RELU, F32)
    binding.register_table(code, "fam", pair, RELU, F32)
    assert binding.launch_table(code, RELU, F32) == pair
    for activation, kind in ((RELU, BF16), (TANH, F32)):  # not loaded: the binding's error
        with pytest.raises(RuntimeError, match=rf"code {code} is not loaded for activation "
                                               rf"{activation} and element type {kind}"):
            binding.launch_table(code, activation, kind)
    # the questions any unit answers (packing, configs): any registered table
    assert binding.launch_table(code, EVERY, EVERY) == pair
    with pytest.raises(RuntimeError, match="not loaded"):
        binding.launch_table(code, EVERY, BF16)  # any activation, but bf16: none holds it
    bf16 = binding.make_table("fam", EVERY, BF16)
    binding.register_table(code, "fam", bf16, EVERY, BF16)
    assert binding.launch_table(code, TANH, BF16) == bf16
    assert binding.launch_table(code, EVERY, BF16) == bf16
    relu = binding.make_table("fam", RELU, EVERY)
    binding.register_table(code, "fam", relu, RELU, EVERY)
    # a unit of every type before the pair's own; the type's before the activation's
    assert binding.launch_table(code, RELU, F32) == relu
    assert binding.launch_table(code, RELU, BF16) == bf16
    assert binding.launch_table(code, RELU, F16) == relu
    whole = binding.make_table("fam", EVERY, EVERY)
    binding.register_table(code, "fam", whole, EVERY, EVERY)
    for activation in (EVERY, RELU, TANH):
        for kind in (EVERY, F32, F16, BF16):
            assert binding.launch_table(code, activation, kind) == whole
    assert sorted(binding.registered()) == sorted(
        [("fam", RELU, F32), ("fam", EVERY, BF16), ("fam", RELU, EVERY), ("fam", EVERY, EVERY)])


def test_another_familys_gemm_is_found_by_name_for_the_calls_type(binding):
    code = 8
    f16 = binding.make_table("gemm", 0, F16)  # activation none, fp16
    binding.register_table(code, "gemm", f16, 0, F16)
    assert binding.find_table("gemm", F16) == f16
    assert binding.find_table("gemm", BF16) == -1
    assert binding.find_table("other", F16) == -1


def test_registration_checks_what_a_table_holds(binding):
    code = 9
    table = binding.make_table("chk", TANH, F16)
    with pytest.raises(RuntimeError, match="holds activation 6 and element type 1"):
        binding.register_table(code, "chk", table, TANH, BF16)  # registered as another type
    with pytest.raises(RuntimeError, match="is chk"):
        binding.register_table(code, "other", table, TANH, F16)  # under another name
    binding.register_table(code, "chk", table, TANH, F16)
    binding.register_table(code, "chk", table, TANH, F16)  # the same again: nothing happens
    again = binding.make_table("chk", TANH, F16)
    with pytest.raises(RuntimeError, match="already registered"):
        binding.register_table(code, "chk", again, TANH, F16)
    with pytest.raises(RuntimeError, match="unknown element type code 3"):
        binding.launch_table(code, TANH, 3)
    with pytest.raises(RuntimeError, match="out of range"):
        binding.launch_table(64, TANH, F16)
    other = binding.make_table("imposter", EVERY, EVERY)
    with pytest.raises(RuntimeError, match="is already chk"):
        binding.register_table(code, "imposter", other, EVERY, EVERY)
