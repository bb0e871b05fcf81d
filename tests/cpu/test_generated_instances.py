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
    for inst in insts:
        assert inst.path.read_text() == inst.text(), f"{inst.path}: run tools/generate_instances.py"
    assert gen.main(["--check"]) == 0


def test_generated_files_are_built_and_name_their_launcher():
    sources = {p.resolve() for p in extension.source_files()}
    for inst in _generator().instances():
        assert inst.path.resolve() in sources
        launcher = f"{inst.family}_launch_{inst.name}("
        header = (inst.path.parent / f"{inst.family}_kernel.cuh").read_text()
        # the launcher each instance defines is the one the family's kernel header declares
        assert launcher in inst.path.read_text() and launcher in header, launcher
