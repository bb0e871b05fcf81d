"""The kernel-family registry (deconv_patch/kernels/): every variant name parses to its family
and launcher config, the families' codes fit the binding's table (cuda/binding/family_units.hpp),
and the op refuses what a family's own rules exclude, with a typed error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from deconv_patch import kernels, ops
from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs

TABLE = Path(__file__).resolve().parents[2] / "cuda" / "binding" / "family_units.hpp"


def test_family_codes_fit_the_bindings_table():
    slots = int(re.search(r"kMaxFamilies = (\d+);", TABLE.read_text()).group(1))
    codes = [f.code for f in kernels.FAMILIES]
    assert len(set(codes)) == len(codes) == len(kernels.FAMILIES) == 10
    assert all(0 <= code < slots for code in codes)
    assert len({f.name for f in kernels.FAMILIES}) == len(kernels.FAMILIES)


def test_every_config_parses_to_its_family_and_index():
    seen = set()
    for family in kernels.FAMILIES:
        assert kernels.split_variant(family.name) == (family.name, -1)
        assert kernels.family_of(family.name) is family
        indices = [c.index for c in family.configs]
        if family.name != planner.GEMM_COL2IM:  # (its configs index two GEMMs' lists)
            assert len(set(indices)) == len(indices), family.name
        for config in family.configs:
            assert config.variant not in seen
            seen.add(config.variant)
            assert config.variant.startswith(family.name + ":")
            assert kernels.split_variant(config.variant) == (family.name, config.index)
            assert kernels.family_of(config.variant) is family
            assert kernels.is_variant(config.variant)
    assert set(kernels.NAMED_VARIANTS) == seen | {f.name for f in kernels.FAMILIES} | {"aten"}
    assert kernels.split_variant("aten") == ("aten", -1) and kernels.family_of("aten") is None
    assert not kernels.is_variant("gemm_phase:256x256")


def test_col2im_configs_name_the_gemm_configs_they_run():
    for config in planner.COL2IM_CONFIGS:
        gemm = planner.KXS_SM90_CONFIGS[kernels.split_variant(config)[1]]
        assert gemm.split(":")[1] == config.split(":")[1]
    for config in planner.COL2IM_3XTF32_CONFIGS:
        gemm = planner.PHASE_TMA_CONFIGS[kernels.split_variant(config)[1]]
        assert gemm.split(":")[1] == config.split(":")[1].replace("3xtf32-", "")


def test_packed_weight_per_variant():
    packed = {planner.GEMM_PHASE, planner.GEMM_PHASE_SM90, planner.GEMM_KXS_SM90,
              planner.GEMM_PHASE_TMA, planner.GEMM_OUT_TILE, planner.GEMM_COL2IM}
    for family in kernels.FAMILIES:
        assert kernels.reads_packed_weight(family.name) == (family.name in packed)
        for config in family.configs:
            expected = family.name in packed or config.variant == planner.KXS_TAP_MAJOR
            assert kernels.reads_packed_weight(config.variant) == expected, config.variant
    assert not kernels.reads_packed_weight("aten")


@pytest.fixture
def strict_fp32():
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = before


def _weight(cin: int, cout: int, k: int) -> torch.Tensor:
    return torch.randn(cin, cout, k, k)


def test_refusals_follow_each_familys_rule(strict_fp32):
    args = ConvTransposeArgs((2, 2), (0, 0), (0, 0), (1, 1), 1)
    shallow, deep = _weight(8, 16, 2), _weight(128, 16, 2)  # depth 8 / 128 products
    for name in (planner.GEMM_KXS, planner.GEMM_PHASE, planner.GEMM_PHASE_TMA,
                 planner.GEMM_OUT_TILE):
        assert "fewer than 64 products" in kernels.refusal(name, torch.float32, shallow, args)
        assert kernels.refusal(name, torch.float32, deep, args) is None
        assert kernels.refusal(name, torch.bfloat16, shallow, args) is None
    assert kernels.refusal(planner.GEMM_KXS_SM90, torch.float32, deep, args) == \
        "fp32 without TF32"
    assert kernels.refusal(planner.GEMM_KXS_SM90, torch.float16, deep, args) is None
    wide = _weight(128, 33, 2)
    assert "33 output channels" in kernels.refusal(planner.GEMM_OUT_TILE, torch.bfloat16,
                                                   wide, args)
    # gemm_col2im: its GEMM sums over input channels only, and its configs are per mode.
    assert kernels.refusal(planner.COL2IM_CONFIGS[0], torch.float32, deep, args) is not None
    assert kernels.refusal(planner.COL2IM_3XTF32_CONFIGS[0], torch.float32, deep, args) is None
    torch.backends.cudnn.allow_tf32 = True
    assert kernels.refusal(planner.COL2IM_CONFIGS[0], torch.float32, deep, args) is None
    assert kernels.refusal(planner.COL2IM_3XTF32_CONFIGS[0], torch.float32, deep, args) \
        is not None
    for name in (planner.DIRECT, planner.GROUPED, planner.FFMA_TILE, "aten"):
        assert kernels.refusal(name, torch.float32, shallow, args) is None
    # gemm_phase_sm90: its weight packing's limits (16-bit, input channels in 8-channel steps)
    sm90 = planner.SM90_CONFIGS[0]
    assert kernels.refusal(sm90, torch.bfloat16, deep, args) is None
    assert "21 input channels" in kernels.refusal(sm90, torch.bfloat16, _weight(21, 21, 2), args)
    assert "16-bit only" in kernels.refusal(sm90, torch.float32, deep, args)
    grouped = ConvTransposeArgs((2, 2), (0, 0), (0, 0), (1, 1), 8)
    assert "4 input channels" in kernels.refusal(sm90, torch.float16, _weight(32, 4, 2), grouped)


def test_kernel_call_raises_a_typed_refusal(strict_fp32):
    x = torch.randn(1, 8, 4, 4)
    w = _weight(8, 16, 2)
    args = ConvTransposeArgs((2, 2), (0, 0), (0, 0), (1, 1), 1)
    with pytest.raises(ops.KernelRefusal, match="gemm_phase does not support"):
        ops.kernel_call(planner.PHASE_CONFIGS[1], x, w, args)
