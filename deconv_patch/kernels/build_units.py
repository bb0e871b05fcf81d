"""What a build unit of the CUDA extension is: its name (a family's folder, whole or for one
fused activation and/or element type), the sources it compiles and the nvcc flags that select
what it holds. deconv_patch/kernels/extension.py builds, loads and registers the units."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

import torch

from .activations import ACTIVATIONS


class ExtensionUnavailableError(RuntimeError):
    """The CUDA kernels cannot be built or loaded here; the message says what to install."""


def cuda_source_dir() -> Path:
    """cuda/ of a source checkout (editable install), or the copy a wheel ships."""
    here = Path(__file__).resolve().parents[1]  # the deconv_patch package
    for candidate in (here.parent / "cuda", here / "_cuda"):
        if (candidate / "binding" / "torch_binding.cpp").is_file():
            return candidate
    raise ExtensionUnavailableError(
        f"deconv_patch: CUDA sources not found next to {here}; reinstall the package"
    )


CORE = "core"
# The core's folders: the binding, the input re-layout it runs, the kernel every call can use,
# and the backward kernels the binding's recorded calls run.
CORE_FOLDERS = ("binding", "relayout", "direct", "direct_backward")


# A unit built for one fused activation and/or element type: "<family>[@<activation>][.<kind>]".
ACTIVATION_MARK = "@"
KIND_MARK = "."
# Element types a unit can be built for: name -> code of the CUDA `ScalarKind` enum
# (cuda/common/params.h, cuda/common/unit_kind.h).
KINDS: Dict[str, int] = {"f32": 0, "f16": 1, "bf16": 2}
_KIND_OF_DTYPE = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
# How a family's per-type source files name their element type (the last such word of the file
# name: gemm_phase_tma_tf32_c0.cu, gemm_kxs_sm90_f32_out_bf16.cu, whose operands are bf16).
_FILE_KIND_WORDS = {"f32": "f32", "tf32": "f32", "f32x3": "f32", "f16": "f16", "bf16": "bf16"}


class UnitParts(NamedTuple):
    """What a build unit holds: its family's folder, and the fused activation and element type
    it was built for (None: every one)."""

    folder: str
    activation: Optional[str]
    kind: Optional[str]


def dtype_kind(dtype: torch.dtype) -> Optional[str]:
    """The element-type name (KINDS) of a dtype the kernels run, else None."""
    return _KIND_OF_DTYPE.get(dtype)


def unit_name(family: str, activation: Optional[str] = None, kind: Optional[str] = None) -> str:
    """The unit of `family`'s kernels for one fused activation (a name of ACTIVATIONS) and/or
    one element type (a name of KINDS); the whole unit when both are None."""
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"deconv_patch: no activation {activation!r} (activations: "
                         f"{', '.join(ACTIVATIONS)})")
    if kind is not None and kind not in KINDS:
        raise ValueError(f"deconv_patch: no element type {kind!r} (types: {', '.join(KINDS)})")
    return (family + (f"{ACTIVATION_MARK}{activation}" if activation else "")
            + (f"{KIND_MARK}{kind}" if kind else ""))


def unit_parts(unit: str) -> UnitParts:
    """unit_name's parts of a unit's name."""
    rest, kind_mark, kind = unit.partition(KIND_MARK)
    folder, mark, activation = rest.partition(ACTIVATION_MARK)
    if (mark and activation not in ACTIVATIONS) or (kind_mark and kind not in KINDS):
        raise ValueError(f"deconv_patch: no build unit {unit!r}")
    return UnitParts(folder, activation if mark else None, kind if kind_mark else None)


def _file_kind(path: Path) -> Optional[str]:
    """The element type a family's source file holds kernels for (None: every type)."""
    words = [_FILE_KIND_WORDS[w] for w in path.stem.split("_") if w in _FILE_KIND_WORDS]
    return words[-1] if words else None


def unit_names() -> List[str]:
    """The kernel families' build units: each folder of cuda/ with a <folder>_unit.cu (its
    table), but the core's."""
    root = cuda_source_dir()
    return sorted(p.parent.name for p in root.glob("*/*_unit.cu")
                  if p.name == f"{p.parent.name}_unit.cu"
                  and p.parent.name not in CORE_FOLDERS)


def unit_sources(unit: str) -> List[Path]:
    """The .cpp and .cu files a unit compiles (CORE, or a family's folder: whole, or of one
    activation, or without the per-type files of other element types)."""
    root = cuda_source_dir()
    family, _, kind = unit_parts(unit)
    if unit != CORE and family not in unit_names():
        raise ValueError(f"deconv_patch: no build unit {unit!r} (units: {unit_names()})")
    folders = [root / f for f in (CORE_FOLDERS if unit == CORE else (family,))]
    return [f for d in folders for f in (*sorted(d.glob("*.cpp")), *sorted(d.glob("*.cu")))
            if kind is None or _file_kind(f) in (None, kind)]


def source_files() -> List[Path]:
    """Every unit's sources: the core's, then each family's."""
    return [f for unit in (CORE, *unit_names()) for f in unit_sources(unit)]


def unit_flags(unit: str) -> List[str]:
    """nvcc flags of one unit beyond the build's: the activation and element type it holds."""
    _, activation, kind = unit_parts(unit)
    return ([] if activation is None else
            [f"-DDECONV_PATCH_UNIT_ACTIVATION={ACTIVATIONS[activation]}"]) + (
        [] if kind is None else [f"-DDECONV_PATCH_UNIT_KIND={KINDS[kind]}"])
