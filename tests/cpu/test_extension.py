"""Build plumbing that can be checked without a GPU: sources, flags, cache path, clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from deconv_patch.kernels import extension
from deconv_patch.kernels.activations import ACTIVATIONS


def test_sources_are_found_and_kernel_files_have_no_torch_headers():
    files = extension.source_files()
    # torch-facing C++ (.cpp/.hpp): the binding and the prepared calls; kernels (.cu/.cuh/.h)
    # never include torch, so they compile on their own.
    root = extension.cuda_source_dir()
    names = {f.relative_to(root).as_posix() for f in files}
    assert {"binding/torch_binding.cpp", "binding/prepared_call.cpp"} <= names
    assert {"direct/direct.cu", "gemm_kxs/gemm_kxs.cu",
            "gemm_kxs_sm90/gemm_kxs_sm90_bf16.cu"} <= names
    # torch's loader names each object file after its source's file name alone.
    assert len({f.name for f in files}) == len(files), "two sources share a file name"
    for path in root.rglob("*"):
        if path.suffix in (".cu", ".cuh", ".h"):
            text = path.read_text()
            assert "torch/" not in text and "ATen/" not in text, path.name


def test_gencode_flags_cover_each_gpu_and_ptx_for_the_newest():
    flags = extension.gencode_flags([(8, 0), (9, 0)])
    assert flags == ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90a,code=sm_90a",
                     "-gencode=arch=compute_90,code=compute_90", "-DDECONV_PATCH_SM90A"]
    assert extension.gencode_flags([(8, 6)]) == ["-gencode=arch=compute_86,code=sm_86",
                                                 "-gencode=arch=compute_86,code=compute_86"]
    assert extension.gencode_flags([]) == []


def test_cache_dir_names_torch_cuda_arch_and_sources(monkeypatch, tmp_path):
    monkeypatch.setenv("DECONV_PATCH_CACHE", str(tmp_path))
    path = extension.cache_dir([(9, 0)])
    assert path.parent == tmp_path
    assert path.name.startswith(f"torch{torch.__version__.replace('+', '_')}")
    assert "sm90" in path.name and path.name.endswith(extension.sources_digest())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error path")
def test_clear_error_without_cuda():
    extension.load_core.cache_clear()
    with pytest.raises(extension.ExtensionUnavailableError, match="CUDA") as err:
        extension.load_extension()
    assert "install" in str(err.value).lower() or "visible" in str(err.value)
    assert not extension.extension_available()


def test_clear_error_when_cuda_home_has_no_headers(monkeypatch, tmp_path):
    """torch takes CUDA_HOME from `which nvcc`; a wrapper script outside the toolkit gives a
    root with bin/nvcc but no headers: say so instead of failing inside the compiler."""
    from torch.utils import cpp_extension

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("#!/bin/sh\n")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(extension, "_capabilities", lambda: [(9, 0)])
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(tmp_path))
    problem = extension._missing_requirements()
    assert problem is not None and "cuda_runtime_api.h" in problem and str(tmp_path) in problem
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda_runtime_api.h").write_text("")
    problem = extension._missing_requirements()
    assert problem is None or "cuda_runtime_api.h" not in problem  # (ninja may still be missing)


def test_every_source_is_in_exactly_one_build_unit():
    """The core and the families' units partition cuda/'s .cpp/.cu files: nothing compiled twice
    (two definitions of a launcher across libraries) or never."""
    root = extension.cuda_source_dir()
    units = [extension.CORE, *extension.unit_names()]
    owned = [f for unit in units for f in extension.unit_sources(unit)]
    assert len(owned) == len(set(owned))
    assert set(owned) == {*root.glob("*/*.cu"), *root.glob("*/*.cpp")}
    assert {"binding/torch_binding.cpp", "direct/direct.cu"} <= {
        f.relative_to(root).as_posix() for f in extension.unit_sources(extension.CORE)}
    with pytest.raises(ValueError, match="no build unit"):
        extension.unit_sources("nope")


def test_each_family_defines_its_table_in_its_own_folder():
    """Every registry family has cuda/<family>/<family>_unit.cu, which defines
    deconv_patch_unit_<family>() (common/family_unit.h's macro) with one entry per FamilyUnit
    member after the tag (the table is filled by position); the binding includes no family's
    header and switches on no family: it runs each through its table."""
    from deconv_patch import kernels

    root = extension.cuda_source_dir()
    header = (root / "common" / "family_unit.h").read_text()
    assert 'extern "C"' in header and "deconv_patch_unit_##NAME()" in header
    struct = re.search(r"struct FamilyUnit \{(.*?)\n\};", header, re.S)
    assert struct is not None
    members = re.findall(r"\(\*(\w+)\)\(", struct.group(1))
    assert members[:2] == ["num_configs", "config_name"] and len(members) == 10, members
    for family in kernels.FAMILIES:
        text = (root / family.name / f"{family.name}_unit.cu").read_text()
        table = re.search(rf"DECONV_PATCH_DEFINE_UNIT\({family.name},(.*?)\)\n", text, re.S)
        assert table is not None, family.name
        entries = [e.strip() for e in table.group(1).split(",")]
        assert len(entries) == len(members) and all(e.startswith("&") for e in entries), \
            (family.name, entries)
    for name in ("binding/torch_binding.cpp", "binding/family_units.cpp",
                 "binding/prepared_call.cpp"):
        code = (root / name).read_text()
        includes = re.findall(r'#include "(\w+)/', code)
        assert set(includes) <= {"binding", "common", "relayout"}, (name, includes)
        assert "switch (family" not in code and "KernelFamily" not in code, name
    for family in kernels.FAMILIES:  # what the registry loads exists
        for activation in ACTIVATIONS:
            folders = {extension.unit_parts(u)[0] for u in family.units_for(activation)}
            assert folders <= set(extension.unit_names()), family.name
    assert kernels.BY_NAME["direct"].units_for("relu") == ()
    assert "direct" not in extension.unit_names()


def test_first_use_compiles_what_is_missing_at_once_then_loads_each_unit_once(monkeypatch,
                                                                             tmp_path):
    """load_units compiles, all at once, the units (the core too) that have no build yet,
    compiles a single one in this process, registers each unit once and never rebuilds what a
    process has loaded."""
    at_once, built, registered = [], [], []

    asked = []

    codes = {name: code for name, code in ACTIVATIONS.items()}

    class Core:
        def registered_families(self):
            asked.append(1)
            return [(u.split("@")[0], codes[u.split("@")[1]] if "@" in u else -1)
                    for u in registered]

    core = Core()
    state = {"loaded": False}

    def load_core():
        state["loaded"] = True
        return core

    monkeypatch.setattr(extension, "cache_dir", lambda capabilities=None: tmp_path)
    monkeypatch.setattr(extension, "_capabilities", lambda: [(9, 0)])
    monkeypatch.setattr(extension, "extension_available", lambda: True)
    monkeypatch.setattr(extension, "load_core", load_core)
    monkeypatch.setattr(extension, "loaded_extension",
                        lambda: core if state["loaded"] else None)
    monkeypatch.setattr(extension, "_compile_at_once", lambda units: at_once.append(list(units)))
    monkeypatch.setattr(extension, "_build_here", lambda unit: built.append(unit) or f"{unit}.so")
    monkeypatch.setattr(extension, "register_unit", lambda c, unit, lib: registered.append(unit))
    extension._load_unit.cache_clear()
    extension._load_unit_set.cache_clear()
    try:
        (tmp_path / "ffma_tile").mkdir()
        (tmp_path / "ffma_tile" / f"{extension.EXTENSION_NAME}_ffma_tile.so").write_bytes(b"")
        assert extension.load_units(["grouped", "ffma_tile", "grouped"]) is core
        assert at_once == [[extension.CORE, "grouped"]]  # ffma_tile had a build
        assert built == ["grouped", "ffma_tile"] and registered == ["grouped", "ffma_tile"]
        extension.load_units(["ffma_tile", "grouped"])  # loaded: nothing happens
        assert built == ["grouped", "ffma_tile"] and len(at_once) == 1
        extension.load_units(["gemm_kxs"])  # one unit: compiled here (then loaded)
        assert built == ["grouped", "ffma_tile", "gemm_kxs", "gemm_kxs"] and len(at_once) == 1
        assert registered == ["grouped", "ffma_tile", "gemm_kxs"]
        before = len(asked)
        extension.load_units(("gemm_kxs",))  # a set loaded before: not even asked again
        assert len(asked) == before and built.count("gemm_kxs") == 2
        # a per-activation family: the unit of the asked activation, built for it alone ...
        extension.load_units(["gemm_phase_tma@relu", "gemm_kxs_sm90@tanh"])
        assert at_once[-1] == ["gemm_phase_tma@relu", "gemm_kxs_sm90@tanh"]
        assert registered[-2:] == ["gemm_phase_tma@relu", "gemm_kxs_sm90@tanh"]
        # ... unless its whole unit is built (or registered): that serves every activation
        (tmp_path / "gemm_phase_tma").mkdir()
        (tmp_path / "gemm_phase_tma" / f"{extension.EXTENSION_NAME}_gemm_phase_tma.so"
         ).write_bytes(b"")
        extension.load_units(["gemm_phase_tma@silu", "gemm_kxs_sm90@tanh"])
        assert registered[-1] == "gemm_phase_tma" and len(at_once) == 2
        count = len(built)
        extension.load_units(["gemm_phase_tma@gelu"])  # the whole unit is loaded: nothing to do
        assert len(built) == count and registered.count("gemm_phase_tma") == 1
    finally:
        extension._load_unit.cache_clear()
        extension._load_unit_set.cache_clear()


def test_units_compiled_at_once_share_the_cores_by_their_files():
    units = [extension.CORE, *extension.unit_names()]
    jobs = extension.compile_jobs(units, 16)
    files = {u: len(extension.unit_sources(u)) for u in units}
    assert set(jobs) == set(units) and min(jobs.values()) >= 1
    assert abs(sum(jobs.values()) - 18) <= len(units)  # ninja's cpus + 2, rounded per unit
    most = max(files, key=files.get)
    assert jobs[most] == max(jobs.values())
    assert extension.compile_jobs(["grouped"], 2) == {"grouped": 4}


def test_every_unit_links_the_cxx_runtime_this_process_runs(monkeypatch, tmp_path):
    # (tests/cpu/test_cxx_runtime.py shows what goes wrong without it)
    from torch.utils import cpp_extension

    calls = []
    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: calls.append(kwargs))
    for unit in (extension.CORE, *extension.unit_names()):
        extension.build_unit(unit, tmp_path, ["-lineinfo"])
    runtime = extension.runtime_libstdcxx()
    assert runtime and Path(runtime[0]).name.startswith("libstdc++.so")
    assert len(calls) == 1 + len(extension.unit_names())
    assert all(call["extra_ldflags"] == runtime for call in calls)
