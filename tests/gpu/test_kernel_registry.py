"""The registry (deconv_patch/kernels/) against the built extension: the binding's family codes
and config lists are the registry's, and the binding's refusals are typed."""

from __future__ import annotations

import pytest
import torch

from deconv_patch import kernels, ops
from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.kernels.extension import load_extension
from deconv_patch.kernels.binding_configs import config_list_mismatches

pytestmark = pytest.mark.cuda


def test_every_family_is_registered_under_its_code():
    """Each family's table carries its own name, registered under the registry's code (the
    binding checks the name at registration); the core's family with the core. Units of one
    activation or element type that earlier calls in this process loaded stay registered beside
    the whole ones, under their family's code too."""
    units = load_extension().registered_families()
    by_code = [f.name for f in sorted(kernels.FAMILIES, key=lambda f: f.code)]
    assert [name for name, activation, kind in units if (activation, kind) == (-1, -1)] == by_code
    assert [by_code.index(name) for name, _, _ in units] == sorted(
        by_code.index(name) for name, _, _ in units)


def test_binding_config_lists_are_the_registrys():
    assert config_list_mismatches(load_extension()) == []


def test_a_binding_refusal_falls_back_to_pytorch_unless_forced():
    """gemm_kxs refuses a layer whose kernel is not its stride (the binding's own check): the
    op's first run of such a plan computes PyTorch's result; forced, the typed error shows."""
    x = torch.randn(2, 16, 5, 5, device="cuda")
    w = torch.randn(16, 8, 3, 3, device="cuda")
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    call = ops.kernel_call(planner.GEMM_KXS, x, w, args)
    with pytest.raises(load_extension().KernelRefused, match="does not support"):
        call(x, w, None)
    entry = ops.OpPlan(planner.Plan(planner.GEMM_KXS, "test", candidates=(planner.GEMM_KXS,)),
                       args)
    assert ops.first_run(entry, call, x, w, None) is None
    assert entry.plan.variant == planner.ATEN
