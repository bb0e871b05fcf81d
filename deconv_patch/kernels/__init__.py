"""The kernel families, one entry each (`<family>.py`: its name, configs, whether it reads a
packed weight, and its own rules), and the lookups the planner and the op use. A variant is a
family name (its launcher picks the config) or one of its configs' names.

Adding a family: a module here with its `FAMILY` entry, listed in FAMILIES, and its folder
cuda/<family>/ (a build unit); the planner decides where it runs (planner.py). docs/kernels.md
shows the whole change."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from ..arguments import ConvTransposeArgs
from . import (direct, ffma_tile, gemm_col2im, gemm_kxs, gemm_kxs_sm90, gemm_out_tile,
               gemm_phase, gemm_phase_sm90, gemm_phase_tma, grouped)
from .family import Config, KernelFamily

ATEN = "aten"  # PyTorch's own implementation (cuDNN on CUDA where PyTorch can use it)

FAMILIES: Tuple[KernelFamily, ...] = (
    gemm_kxs.FAMILY, gemm_phase.FAMILY, direct.FAMILY, grouped.FAMILY, gemm_phase_sm90.FAMILY,
    gemm_kxs_sm90.FAMILY, gemm_phase_tma.FAMILY, gemm_out_tile.FAMILY, gemm_col2im.FAMILY,
    ffma_tile.FAMILY)
BY_NAME: Dict[str, KernelFamily] = {f.name: f for f in FAMILIES}
# Every config's variant name -> (family, config).
_CONFIGS: Dict[str, Tuple[KernelFamily, Config]] = {
    c.variant: (f, c) for f in FAMILIES for c in f.configs}
# Every name a variant may have: "aten", the family names, then their configs.
NAMED_VARIANTS: Tuple[str, ...] = (ATEN, *BY_NAME, *_CONFIGS)


def is_variant(variant: str) -> bool:
    return variant == ATEN or variant in BY_NAME or variant in _CONFIGS


def family_of(variant: str) -> Optional[KernelFamily]:
    """The family that runs `variant` (None for "aten" and unknown names)."""
    found = _CONFIGS.get(variant)
    return found[0] if found is not None else BY_NAME.get(variant)


def split_variant(variant: str) -> Tuple[str, int]:
    """(family name, launcher config index) of a variant; -1 lets the launcher pick."""
    found = _CONFIGS.get(variant)
    return (found[0].name, found[1].index) if found is not None else (variant, -1)


def reads_packed_weight(variant: str) -> bool:
    """Whether a variant reads a pre-packed weight (packed_weights.py) instead of the weight."""
    found = _CONFIGS.get(variant)
    if found is not None:
        return found[1].packed_weight
    family = BY_NAME.get(variant)
    return family is not None and family.packed_weight


def refusal(variant: str, dtype: torch.dtype, weight: torch.Tensor,
            args: ConvTransposeArgs) -> Optional[str]:
    """Why `variant`'s family does not run this call (its own rule, checked before the
    extension), or None."""
    family = family_of(variant)
    return None if family is None else family.refusal(dtype, weight, args, variant)


__all__ = ["ATEN", "BY_NAME", "Config", "FAMILIES", "KernelFamily", "NAMED_VARIANTS",
           "family_of", "is_variant", "reads_packed_weight", "refusal", "split_variant"]
