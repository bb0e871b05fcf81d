"""The config lists the binding reads through the build units' tables, against the registry's
(a unit's launcher takes a config index, the registry names it): one check, which CI runs on the
units it builds without a GPU (.ci/build_extension.py) and the GPU suite on the built extension."""

from __future__ import annotations

from typing import Any, List

from . import BY_NAME

# Families whose binding lists its config names, and those that only count them.
NAMED = ("gemm_phase_tma", "gemm_out_tile", "ffma_tile")
COUNTED = ("gemm_phase", "gemm_phase_sm90", "gemm_kxs_sm90")


def config_list_mismatches(core: Any) -> List[str]:
    """Every way the binding's config lists (`core`: the loaded core module, every unit
    registered) differ from the registry's; empty when they agree."""
    problems = []
    for family in NAMED:
        listed = list(getattr(core, f"{family}_config_names")())
        configs = BY_NAME[family].configs
        names = [c.variant.split(":", 1)[1] for c in configs]
        if listed != names:
            problems.append(f"{family}: the binding lists {listed}, the registry {names}")
        if [c.index for c in configs] != list(range(len(configs))):
            problems.append(f"{family}: the registry's config indices are not 0..n-1")
    for family in COUNTED:
        count = int(getattr(core, f"{family}_num_configs")())
        if count != len(BY_NAME[family].configs):
            problems.append(f"{family}: the binding has {count} configs, the registry "
                            f"{len(BY_NAME[family].configs)}")
    return problems
