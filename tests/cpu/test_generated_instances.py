"""The kernel instance files in cuda/ are tools/generate_instances.py's output, byte for byte,
and every file the generator writes is one the build compiles."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from deconv_patch.kernels import build_units

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
    sources = {p.resolve() for p in build_units.source_files()}
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
        _check_per_config(gen, "gemm_phase_tma", mode, ("pt_launch_config<",),
                          len(gen.PHASE_TMA_CONFIGS))


def test_kxs_sm90_compiles_each_tile_config_in_files_of_its_own():
    """gemm_kxs_sm90: the same per element type for its plain, kernel-area and (16-bit)
    fp32-output kernels; its config names are the registry's."""
    from deconv_patch.kernels import gemm_kxs_sm90

    gen = _generator()
    assert tuple(c.variant.split(":")[1] for c in gemm_kxs_sm90.CONFIGS[:3]) == \
        gen.KXS_SM90_CONFIGS
    templates = ("kxs_launch_config<", "kxs_launch_area_config<", "kxs_launch_f32_out_config<")
    for short in gen.ELEMENTS:
        _check_per_config(gen, "gemm_kxs_sm90", short, templates[:1], 3)
        _check_per_config(gen, "gemm_kxs_sm90", f"area_{short}", templates[1:2], 3,
                          picker=short)
    for short in ("f16", "bf16"):
        _check_per_config(gen, "gemm_kxs_sm90", f"f32_out_{short}", templates[2:], 3)


def test_ffma_tile_compiles_each_config_of_each_type_in_a_file_of_its_own():
    """ffma_tile: per element type a picker (launch and supports) and per config a file that
    instantiates that config's kernels and answers for it; its config names are the kernel's
    and the registry's, in order."""
    from deconv_patch.kernels import ffma_tile

    gen = _generator()
    kernel = (ROOT / "cuda" / "ffma_tile" / "ffma_tile_kernel.cuh").read_text()
    assert re.findall(r'\{\d, \d, \d, \d, \d, "(\w+)"\}', kernel) == list(gen.FFMA_TILE_CONFIGS)
    assert tuple(c.variant.split(":")[1] for c in ffma_tile.FAMILY.configs) == \
        gen.FFMA_TILE_CONFIGS
    for short in gen.ELEMENTS:
        _check_per_config(gen, "ffma_tile", short, ("config_launch<",),
                          len(gen.FFMA_TILE_CONFIGS))
        folder = ROOT / "cuda" / "ffma_tile"
        for i in range(len(gen.FFMA_TILE_CONFIGS)):
            text = (folder / f"ffma_tile_{short}_c{i}.cu").read_text()
            assert text.count("config_supports<") == 1 and f", {i}>(p)" in text
        assert f"ffma_tile_supports_{short}_c9(p)" in (folder / f"ffma_tile_{short}.cu").read_text()


def _check_per_config(gen, family: str, mode: str, templates: tuple, configs: int,
                      picker: str = "") -> None:
    """Each of a mode's per-config files instantiates one config of one kernel template; the
    mode's picker (or `picker`'s) instantiates none and calls every config's launcher."""
    folder = ROOT / "cuda" / family
    for i in range(configs):
        text = (folder / f"{family}_{mode}_c{i}.cu").read_text()
        assert sum(text.count(t) for t in templates) == 1 and f", {i}>(" in text, (mode, i)
    chooser = (folder / f"{family}_{picker or mode}.cu").read_text()
    assert not any(t in chooser for t in templates), picker or mode
    for i in range(configs):
        assert f"{family}_launch_{mode}_c{i}(" in chooser, (mode, i)
