"""The kernel instance files in cuda/ are tools/generate_instances.py's output, byte for byte,
and every file the generator writes is one the build compiles."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from deconv_patch.kernels import extension

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("generate_instances",
                                                  ROOT / "tools" / "generate_instances.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


def test_committed_instances_match_the_generator():
    gen = _generator()
    insts = gen.instances()
    assert len({i.path for i in insts}) == len(insts)
    files = gen.files()
    assert set(files) >= {i.path for i in insts}
    for path, text in files.items():
        assert path.read_text() == text, f"{path}: run tools/generate_instances.py"
    assert gen.main(["--check"]) == 0


def test_generated_files_are_built_and_name_their_launcher():
    sources = {p.resolve() for p in extension.source_files()}
    for inst in _generator().instances():
        assert inst.path.resolve() in sources
        launcher = f"{inst.family}_launch_{inst.name}("
        generated = inst.path.parent / f"{inst.family}_instances.h"
        kernel_header = inst.path.parent / f"{inst.family}_kernel.cuh"
        header = (generated if generated.is_file() else kernel_header).read_text()
        # the launcher each instance defines is the one the family's headers declare
        assert launcher in inst.path.read_text() and launcher in header, launcher
        if generated.is_file():
            assert f'#include "{inst.family}/{generated.name}"' in kernel_header.read_text()


def test_phase_tma_compiles_each_tile_config_in_a_file_of_its_own():
    """gemm_phase_tma: per element type and fp32 mode a launcher that picks the config, and per
    config a file that instantiates that config's kernel alone, so a build compiles the
    configs in parallel. The generator's config names are the kernel's, in its order."""
    gen = _generator()
    kernel = (ROOT / "cuda" / "gemm_phase_tma" / "gemm_phase_tma_kernel.cuh").read_text()
    names = kernel.split("kPtConfigNames[kPtNumConfigs] = {", 1)[1].split("}", 1)[0]
    assert [n.strip().strip('"') for n in names.replace("\n", " ").split(",")] == \
        list(gen.PHASE_TMA_CONFIGS)
    for mode, *_ in gen.PHASE_TMA_MODES:
        files = [ROOT / "cuda" / "gemm_phase_tma" / f"gemm_phase_tma_{mode}_c{i}.cu"
                 for i in range(len(gen.PHASE_TMA_CONFIGS))]
        for i, path in enumerate(files):
            text = path.read_text()
            assert text.count("pt_launch_config<") == 1 and f", {i}>(" in text, path
        picker = (ROOT / "cuda" / "gemm_phase_tma" / f"gemm_phase_tma_{mode}.cu").read_text()
        assert "pt_launch_config<" not in picker and "pt_launch_cfg<" not in picker
        for i in range(len(files)):
            assert f"case {i}: return gemm_phase_tma_launch_{mode}_c{i}(" in picker
