"""The config-list check CI and the GPU suite run against the built units, on stand-in cores:
agreement passes, and each kind of disagreement is named."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Dict, List, Optional

from deconv_patch.kernels import BY_NAME, FAMILIES
from deconv_patch.kernels.binding_configs import config_list_mismatches

# Families whose tables leave every config's name to the registry (the binding lists None).
UNNAMED = ("gemm_phase", "gemm_phase_sm90", "gemm_kxs_sm90")


def _lists() -> Dict[str, List[Optional[str]]]:
    """The lists an agreeing binding gives: names by index, None where the table names none."""
    lists: Dict[str, List[Optional[str]]] = {}
    for family in FAMILIES:
        if not family.configs or family.name == "gemm_col2im":  # (its GEMMs' configs)
            lists[family.name] = []
            continue
        listed: List[Optional[str]] = [None] * (max(c.index for c in family.configs) + 1)
        for config in family.configs:
            listed[config.index] = None if family.name in UNNAMED else \
                config.variant.split(":", 1)[1]
        lists[family.name] = listed
    return lists


def _core(lists):
    by_code = {BY_NAME[name].code: listed for name, listed in lists.items()}
    return SimpleNamespace(config_names=lambda code: list(by_code[code]))


def test_agreeing_lists_pass():
    lists = _lists()
    assert all(lists[f] for f in (*UNNAMED, "gemm_phase_tma", "gemm_out_tile", "ffma_tile",
                                  "gemm_kxs"))  # (else the check checks nothing)
    assert lists["gemm_kxs"] == [None, "tap_major"]  # config 0 is the bare family's
    assert config_list_mismatches(_core(lists)) == []


def test_each_disagreement_is_named():
    lists = _lists()
    names = lists["gemm_out_tile"]
    lists["gemm_out_tile"] = names[1:] + names[:1]  # the same names, in another order
    lists["gemm_phase"] = lists["gemm_phase"] + [None]  # one config more than the registry's
    lists["ffma_tile"] = lists["ffma_tile"][:-1]  # the registry's last config missing
    problems = config_list_mismatches(_core(lists))
    assert {p.split(":")[0] for p in problems} == {"gemm_out_tile", "gemm_phase", "ffma_tile"}
    assert any("has index" in p for p in problems if p.startswith("ffma_tile"))
    assert any("the binding has" in p for p in problems if p.startswith("gemm_phase"))
