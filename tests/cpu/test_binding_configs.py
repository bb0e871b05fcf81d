"""The config-list check CI and the GPU suite run against the built units, on stand-in cores:
agreement passes, and each kind of disagreement is named."""

from __future__ import annotations

from types import SimpleNamespace

from deconv_patch.kernels import BY_NAME
from deconv_patch.kernels.binding_configs import COUNTED, NAMED, config_list_mismatches


def _core(**overrides):
    members = {}
    for family in NAMED:
        names = [c.variant.split(":", 1)[1] for c in BY_NAME[family].configs]
        members[f"{family}_config_names"] = (lambda names=names: list(names))
    for family in COUNTED:
        members[f"{family}_num_configs"] = (lambda n=len(BY_NAME[family].configs): n)
    members.update(overrides)
    return SimpleNamespace(**members)


def test_agreeing_lists_pass():
    assert all(BY_NAME[f].configs for f in NAMED + COUNTED)  # (else the check checks nothing)
    assert config_list_mismatches(_core()) == []


def test_each_disagreement_is_named():
    names = [c.variant.split(":", 1)[1] for c in BY_NAME["gemm_out_tile"].configs]
    swapped = names[1:] + names[:1]
    problems = config_list_mismatches(_core(
        gemm_out_tile_config_names=lambda: swapped,
        gemm_phase_num_configs=lambda: len(BY_NAME["gemm_phase"].configs) + 1))
    assert len(problems) == 2
    assert problems[0].startswith("gemm_out_tile:") and problems[1].startswith("gemm_phase:")
