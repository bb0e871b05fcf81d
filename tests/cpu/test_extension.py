"""Build plumbing that can be checked without a GPU: sources, flags, cache path, clear errors."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch

from deconv_patch.kernels import build_units, extension
from deconv_patch.kernels.activations import ACTIVATIONS


def test_sources_are_found_and_kernel_files_have_no_torch_headers():
    files = build_units.source_files()
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


def test_a_unit_of_one_element_type_compiles_that_types_files_with_its_flags():
    """A family's unit for one element type leaves out the per-type files of the other types
    (gemm_phase_tma's fp32 kinds are TF32 and 3xTF32; gemm_kxs_sm90's fp32-output kernels of
    16-bit operands belong to that operand type) and keeps the files every type shares; its
    nvcc flags name the type and activation; the names round-trip."""
    def names(unit):
        return {f.name for f in extension.unit_sources(unit)}

    whole = names("gemm_phase_tma")
    f32 = names("gemm_phase_tma@relu.f32")
    bf16 = names("gemm_phase_tma.bf16")
    shared = {"gemm_phase_tma.cu", "gemm_phase_tma_unit.cu"}
    assert shared <= f32 and shared <= bf16 and f32 | bf16 < whole
    assert {"gemm_phase_tma_tf32_c0.cu", "gemm_phase_tma_f32x3.cu"} <= f32
    assert not any("bf16" in n or "f16" in n for n in f32)
    assert all("bf16" in n for n in bf16 - shared)
    kxs_f16 = names("gemm_kxs_sm90@none.f16")
    assert {"gemm_kxs_sm90_f32_out_f16_c0.cu", "gemm_kxs_sm90_area_f16_c2.cu"} <= kxs_f16
    assert not any("bf16" in n or "_f32_c" in n or "area_f32" in n for n in kxs_f16)
    ffma = names("ffma_tile.f32")
    assert {"ffma_tile.cu", "ffma_tile_unit.cu", "ffma_tile_f32.cu", "ffma_tile_f32_c9.cu"} <= ffma
    assert len(ffma) == 3 + 10 and not any("f16" in n for n in ffma)
    # a single-file family: the same file, the type chosen by the flag
    assert names("grouped.bf16") == names("grouped")
    assert extension.unit_flags("grouped.bf16") == ["-DDECONV_PATCH_UNIT_KIND=2"]
    assert extension.unit_flags("gemm_phase_tma@tanh.f16") == [
        "-DDECONV_PATCH_UNIT_ACTIVATION=6", "-DDECONV_PATCH_UNIT_KIND=1"]
    assert extension.unit_flags("grouped") == []
    for unit in ("grouped", "grouped.f32", "gemm_phase_tma@relu", "gemm_phase_tma@relu.bf16"):
        parts = extension.unit_parts(unit)
        assert extension.unit_name(*parts) == unit
    assert extension.unit_parts("gemm_phase_tma@relu.bf16") == ("gemm_phase_tma", "relu", "bf16")
    for bad in ("grouped.f64", "gemm_phase_tma@swish", "grouped@relu.int8"):
        with pytest.raises(ValueError, match="no build unit"):
            extension.unit_parts(bad)
    # the registry asks for the call's type; gemm_col2im for its GEMM's units too
    from deconv_patch import kernels
    assert kernels.BY_NAME["grouped"].units_for("relu", torch.float16) == ("grouped.f16",)
    assert kernels.BY_NAME["gemm_col2im"].units_for("tanh", torch.bfloat16) == (
        "gemm_kxs_sm90@none.bf16", "gemm_phase_tma@none.bf16", "gemm_col2im.bf16")
    assert kernels.BY_NAME["gemm_phase_tma"].units_for("relu", torch.float64) == (
        "gemm_phase_tma@relu",)


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
    binding = sorted((root / "binding").glob("*.cpp"))
    assert {"torch_binding.cpp", "python_module.cpp", "prepared_call.cpp"} <= {
        f.name for f in binding}
    for path in binding:
        code = path.read_text()
        includes = re.findall(r'#include "(\w+)/', code)
        # (relayout and direct_backward: core kernels the binding launches itself, not families)
        assert set(includes) <= {"binding", "common", "relayout", "direct_backward"}, \
            (path.name, includes)
        assert "switch (family" not in code and "KernelFamily" not in code, path.name
    # torch's whole extension header is the slowest header to compile: the core's files include
    # what they use, which keeps them off a first use's longest path.
    for path in sorted((root / "binding").glob("*.[ch]pp")):
        assert "torch/extension.h" not in path.read_text(), path.name
    for family in kernels.FAMILIES:  # what the registry loads exists
        for activation in ACTIVATIONS:
            for dtype in (torch.float32, torch.float16, torch.bfloat16):
                units = family.units_for(activation, dtype)
                folders = {extension.unit_parts(u).folder for u in units}
                assert folders <= set(extension.unit_names()), family.name
                assert all(extension.unit_sources(u) for u in units), family.name
    assert kernels.BY_NAME["direct"].units_for("relu", torch.float32) == ()
    assert "direct" not in extension.unit_names()


def test_first_use_compiles_what_is_missing_at_once_then_loads_each_unit_once(monkeypatch,
                                                                             tmp_path):
    """load_units compiles, all at once, the units (the core too) that have no build yet,
    compiles a single one in this process, registers each unit once and never rebuilds what a
    process has loaded."""
    at_once, built, registered = [], [], []

    def build_there(unit):  # a build on disk, as an earlier process left it
        (tmp_path / unit).mkdir()
        (tmp_path / unit / f"{extension._library_name(unit)}.so").write_bytes(b"")

    asked = []

    class Core:
        def registered_families(self):
            asked.append(1)
            parts = [extension.unit_parts(u) for u in registered]
            return [(p.folder, ACTIVATIONS.get(p.activation, -1), extension.KINDS.get(p.kind, -1))
                    for p in parts]

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
        build_there("ffma_tile")
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
        build_there("gemm_phase_tma")
        extension.load_units(["gemm_phase_tma@silu", "gemm_kxs_sm90@tanh"])
        assert registered[-1] == "gemm_phase_tma" and len(at_once) == 2
        count = len(built)
        extension.load_units(["gemm_phase_tma@gelu"])  # the whole unit is loaded: nothing to do
        assert len(built) == count and registered.count("gemm_phase_tma") == 1
        # units of one activation and element type: built alone ...
        extension.load_units(["gemm_kxs_sm90@relu.bf16", "gemm_out_tile.f16"])
        assert at_once[-1] == ["gemm_kxs_sm90@relu.bf16", "gemm_out_tile.f16"]
        assert registered[-2:] == ["gemm_kxs_sm90@relu.bf16", "gemm_out_tile.f16"]
        # ... unless a unit holding them is there: the whole one, or the activation's or type's
        build_there("gemm_kxs_sm90@silu")
        assert extension._library_name("gemm_kxs_sm90@silu") == (
            f"{extension.EXTENSION_NAME}_gemm_kxs_sm90__silu")
        extension.load_units(["gemm_kxs_sm90@silu.f32", "gemm_phase_tma@relu.f16",
                              "gemm_out_tile.f16"])
        assert registered[-1] == "gemm_kxs_sm90@silu"  # built: loaded, not compiled
        assert registered.count("gemm_phase_tma") == 1 and registered.count("gemm_out_tile.f16") == 1
        assert len(at_once) == 3 and "gemm_kxs_sm90@silu.f32" not in built
    finally:
        extension._load_unit.cache_clear()
        extension._load_unit_set.cache_clear()


def test_units_compiled_at_once_share_the_cores_by_their_files():
    """The families share cpus + 2 jobs by their files; the core compiles all its files at
    once beside them (its torch-header files are the longest of a first use)."""
    families = extension.unit_names()
    jobs = extension.compile_jobs([extension.CORE, *families], 16)
    files = {u: len(extension.unit_sources(u)) for u in families}
    assert set(jobs) == {extension.CORE, *families} and min(jobs.values()) >= 1
    assert jobs[extension.CORE] == min(len(extension.unit_sources(extension.CORE)), 16 + 2)
    shared = sum(jobs[u] for u in families)
    assert abs(shared - 18) <= len(families)  # ninja's cpus + 2, rounded per unit
    most = max(files, key=files.get)
    assert jobs[most] == max(jobs[u] for u in families)
    assert extension.compile_jobs(["grouped"], 2) == {"grouped": 4}
    assert extension.compile_jobs([extension.CORE], 2) == {extension.CORE: 4}


@pytest.mark.parametrize("jobserver", [True, False])
def test_units_compiled_with_the_core_run_behind_it(monkeypatch, tmp_path, jobserver):
    """Compiled at once, each unit is a process of its own. The core gets its jobs (MAX_JOBS);
    the families share a jobserver where ninja joins one (MAKEFLAGS, no MAX_JOBS: an explicit
    -j makes ninja leave it), else get fixed shares. Beside the core, the family units'
    processes run at a lower priority (told by their environment; each lowers its own, which
    its compilers inherit). A MAX_JOBS or MAKEFLAGS of the caller's reaches no build."""
    import subprocess

    started = []

    class Done:
        returncode = 0

        def __init__(self, command, **kwargs):
            started.append((command[3], kwargs))

        def communicate(self, timeout=None):
            return "", None

    monkeypatch.setattr(subprocess, "Popen", Done)
    monkeypatch.setattr(extension, "cache_dir", lambda capabilities=None: tmp_path)
    monkeypatch.setattr(extension, "_capabilities", lambda: [(9, 0)])
    monkeypatch.setattr(extension, "ninja_joins_jobserver", lambda: jobserver)
    monkeypatch.setenv("MAX_JOBS", "99")
    monkeypatch.setenv("MAKEFLAGS", "-j99")
    units = [extension.CORE, "grouped.bf16", "ffma_tile.f32"]
    extension._compile_at_once(units)
    envs = {unit: kwargs["env"] for unit, kwargs in started}
    assert set(envs) == set(units)
    jobs = extension.compile_jobs(units, os.cpu_count() or 1)
    nice = extension._NICE_ENV
    assert envs[extension.CORE]["MAX_JOBS"] == str(jobs[extension.CORE])
    assert nice not in envs[extension.CORE] and "MAKEFLAGS" not in envs[extension.CORE]
    for unit in ("grouped.bf16", "ffma_tile.f32"):
        assert envs[unit][nice] == "5"
        if jobserver:
            assert "MAX_JOBS" not in envs[unit]
            assert re.fullmatch(rf"-j{(os.cpu_count() or 1) + 2} --jobserver-auth=fifo:\S+",
                                envs[unit]["MAKEFLAGS"])
        else:
            assert envs[unit]["MAX_JOBS"] == str(jobs[unit]) and "MAKEFLAGS" not in envs[unit]
    if jobserver:  # one pool for all, gone once the builds are
        fifo = envs["grouped.bf16"]["MAKEFLAGS"].split("fifo:")[1]
        assert envs["ffma_tile.f32"]["MAKEFLAGS"].endswith(fifo) and not os.path.exists(fifo)
    started.clear()
    extension._compile_at_once(["grouped.bf16", "ffma_tile.f32"])  # no core: nothing to yield to
    assert all(nice not in kw["env"] for _, kw in started)
    started.clear()
    extension._compile_at_once([extension.CORE, "grouped.bf16"])  # one family: its own jobs
    assert [kw["env"].get("MAKEFLAGS") for _, kw in started] == [None, None]


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


def test_the_built_core_is_loaded_where_it_is_built_and_never_compiled(monkeypatch, tmp_path):
    """built_core (the recorded path's way to the extension): the loaded core where there is
    one; else the core's build from the cache, loaded; else None, without building anything,
    also where the kernels could be built here."""
    loads, builds = [], []
    core = object()
    monkeypatch.setattr(extension, "cache_dir", lambda capabilities=None: tmp_path)
    monkeypatch.setattr(extension, "extension_available", lambda: True)
    monkeypatch.setattr(extension, "loaded_extension", lambda: None)
    monkeypatch.setattr(extension, "load_core", lambda: loads.append(1) or core)
    monkeypatch.setattr(extension, "_build_here", lambda unit: builds.append(unit))
    monkeypatch.setattr(extension, "_compile_at_once", lambda units: builds.append(units))
    try:
        extension._load_built_core.cache_clear()
        assert extension.built_core() is None and not loads and not builds  # nothing built
        library = tmp_path / build_units.CORE / f"{extension._library_name(build_units.CORE)}.so"
        library.parent.mkdir(parents=True)
        library.write_bytes(b"")
        assert extension.built_core() is None  # (the answer is kept for the process)
        extension._load_built_core.cache_clear()
        assert extension.built_core() is core and loads == [1] and not builds
        assert extension.built_core() is core and loads == [1]
        extension._load_built_core.cache_clear()
        loaded = object()
        monkeypatch.setattr(extension, "loaded_extension", lambda: loaded)
        assert extension.built_core() is loaded and loads == [1]
        extension._load_built_core.cache_clear()
        monkeypatch.setattr(extension, "loaded_extension", lambda: None)
        monkeypatch.setattr(extension, "extension_available", lambda: False)
        assert extension.built_core() is None and loads == [1]
    finally:
        extension._load_built_core.cache_clear()
