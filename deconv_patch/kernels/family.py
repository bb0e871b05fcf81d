"""What the registry knows of one kernel family: its name, its configs and the weight it reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch

from ..arguments import ConvTransposeArgs
from .build_units import dtype_kind, unit_name


@dataclass(frozen=True)
class Config:
    """One named config of a family: the variant name users and autotune see
    ("gemm_phase_tma:128x128s6pp"), the index the extension's launcher takes, and whether it
    reads a pre-packed weight (packed_weights.py) instead of the weight as it is."""

    variant: str
    index: int
    packed_weight: bool


# (dtype, weight, args, variant) -> why the family cannot run this call, or None.
Refusal = Callable[[torch.dtype, torch.Tensor, ConvTransposeArgs, str], Optional[str]]


def no_refusal(dtype: torch.dtype, weight: torch.Tensor, args: ConvTransposeArgs,
               variant: str) -> Optional[str]:
    return None


@dataclass(frozen=True)
class KernelFamily:
    """One kernel family: `name` alone lets the launcher pick its config (index -1), each of
    `configs` forces one. `refusal` is the family's own rule for a call the planner did not
    plan (a forced variant, autotune's candidates): checked before the extension is asked, with
    the planner's wording."""

    name: str
    code: int  # where the binding keeps its table (unique, < 64; cuda/binding/family_units.hpp)
    summary: str
    configs: Tuple[Config, ...] = ()
    packed_weight: bool = False  # the bare name's (config -1) weight
    refusal: Refusal = no_refusal
    # () for the families the extension's core holds; else its own folder is its build unit
    # (cuda/<name>/, deconv_patch/kernels/build_units.py), built per element type.
    needs_units: Optional[Tuple[str, ...]] = None
    # Whether its kernels are compiled per fused activation, so that a first use can build the
    # unit of one activation (build_units.unit_name) instead of its whole folder.
    per_activation: bool = False
    # Other families whose kernels its calls run, without a fused activation (gemm_col2im's
    # GEMM).
    runs: Tuple["KernelFamily", ...] = ()

    def units_for(self, activation: str, dtype: torch.dtype) -> Tuple[str, ...]:
        """The build units a call fusing `activation` on `dtype` loads."""
        if self.needs_units is not None:
            return self.needs_units
        kind = dtype_kind(dtype)
        own = unit_name(self.name, activation if self.per_activation else None, kind)
        return tuple(u for f in self.runs for u in f.units_for("none", dtype)) + (own,)

    @property
    def variants(self) -> Tuple[str, ...]:
        return tuple(c.variant for c in self.configs)


def configs(family: str, names: Tuple[str, ...], packed_weight: bool, first_index: int = 0,
            prefix: Optional[str] = None) -> Tuple[Config, ...]:
    """Configs named "<prefix or family>:<name>", at consecutive launcher indices."""
    head = prefix if prefix is not None else family
    return tuple(Config(f"{head}:{n}", first_index + i, packed_weight)
                 for i, n in enumerate(names))
