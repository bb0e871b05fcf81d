"""The config lists the binding reads through the families' tables, against the registry's
(a family's launcher takes a config index, the registry names it): one check, which CI runs on
the units it builds without a GPU (.ci/build_extension.py) and the GPU suite on the built
extension."""

from __future__ import annotations

from typing import Any, List

from . import FAMILIES


def config_list_mismatches(core: Any) -> List[str]:
    """Every way the binding's config lists (`core`: the loaded core module, every family
    registered; `core.config_names(code)`: names, None where the table leaves one to the
    registry) differ from the registry's; empty when they agree. Families whose table lists no
    configs (gemm_col2im passes its configs to another family's GEMM) are not compared."""
    problems = []
    for family in FAMILIES:
        listed = list(core.config_names(family.code))
        if not listed:
            continue
        registry = {c.index: c.variant.split(":", 1)[1] for c in family.configs}
        for index, name in registry.items():
            if not 0 <= index < len(listed):
                problems.append(f"{family.name}: the registry's config {name!r} has index "
                                f"{index}, the binding lists {len(listed)} configs")
            elif listed[index] is not None and listed[index] != name:
                problems.append(f"{family.name}: config {index} is {listed[index]!r} in the "
                                f"binding, {name!r} in the registry")
        for index, name in enumerate(listed):
            if name is not None and registry.get(index) != name:
                problems.append(f"{family.name}: the binding's config {index} ({name!r}) is "
                                "not the registry's")
        if all(name is None for name in listed) and len(listed) != len(registry):
            problems.append(f"{family.name}: the binding has {len(listed)} configs, the "
                            f"registry {len(registry)}")
    return problems
