"""optimize() with example inputs compiles the build units its layers' calls will load at once,
before the fused check and the first calls (modules.prepare_kernels): the recorded forward keeps
each call's input geometry, each call is planned on fake tensors of it (the device's capability
stubbed, no GPU needed), and the families of the plans compile in one step. Autotune, CPU calls
and failures change nothing."""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import deconv_patch
from deconv_patch import modules
from deconv_patch.dataflow import record_forward
from deconv_patch.kernels import device_info, planner

CUDA0 = torch.device("cuda", 0)
# (deconv_patch.optimize is the function users call; its module is this)
OPTIMIZE = importlib.import_module("deconv_patch.optimize")


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.setattr(device_info, "capability", lambda index: (9, 0))
    monkeypatch.setattr(device_info, "multiprocessors", lambda index: 132)


class _Generator(nn.Module):
    """A 1 x 1 latent up-sampled by a k == stride layer, then a stride-2 phase layer."""

    def __init__(self) -> None:
        super().__init__()
        self.up1 = nn.ConvTranspose2d(64, 128, 4)
        self.up2 = nn.ConvTranspose2d(128, 64, 4, 2, 1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.up2(torch.relu(self.up1(z)))


def _units(*call) -> tuple:
    """The build units modules.example_plan lists for one call (module, shape, stride, dtype,
    device)."""
    return modules.example_plan(*call)[1]


def _fake(module: "modules.FastConvTranspose2d", shape: tuple, dtype: torch.dtype) -> tuple:
    """(input, weight, args) of a call on CUDA, as fake tensors."""
    with FakeTensorMode():
        x = torch.empty(shape, dtype=dtype, device=CUDA0)
        w = torch.empty(module.weight.shape, dtype=dtype, device=CUDA0)
    return x, w, module._args(module.output_padding)


def _fast(module: nn.ConvTranspose2d) -> "modules.FastConvTranspose2d":
    return deconv_patch.FastConvTranspose2d.from_module(module)


def test_the_recorded_forward_keeps_each_calls_input_geometry():
    model = _Generator()
    z = torch.randn(3, 64, 1, 1)
    record, _ = record_forward(model, (z,), {})
    (up1,) = record.conv_calls[id(model.up1)]
    (up2,) = record.conv_calls[id(model.up2)]
    assert up1.input == ((3, 64, 1, 1), z.stride(), torch.float32, torch.device("cpu"))
    assert up2.input[0] == (3, 128, 4, 4) and up2.input[2] == torch.float32


def test_each_call_plans_on_its_geometry_without_a_gpu(hopper, monkeypatch):
    model = _Generator()
    up1, up2 = _fast(model.up1), _fast(model.up2)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True, benchmark=False):
        # bf16 at batch 64: the 1 x 1 input runs as k == stride (gemm_kxs), the phase layer
        # gemm_phase_tma (Hopper's untimed default)
        latent = _units(up1, (64, 64, 1, 1), (64, 1, 1, 1), torch.bfloat16, CUDA0)
        phase = _units(up2, (64, 128, 4, 4), (2048, 16, 4, 1), torch.bfloat16,
                                     CUDA0)
        # on the CPU, and TF32 under 0.5 GFLOP (cuDNN): none
        cpu = _units(up2, (64, 128, 4, 4), (2048, 16, 4, 1), torch.float32,
                                   torch.device("cpu"))
        small = _units(up2, (1, 128, 4, 4), (2048, 16, 4, 1), torch.float32, CUDA0)
    # (gemm_kxs: one unit for every activation; gemm_phase_tma: the unit of the call's; both
    # of the call's element type)
    assert tuple(latent) == ("gemm_kxs.bf16",)
    assert tuple(phase) == ("gemm_phase_tma@none.bf16",)
    assert tuple(cpu) == () and tuple(small) == ()
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True, benchmark=False):
        # a chain that will fuse an activation into the calls: that activation's unit
        fused = modules.example_plan(up2, (64, 128, 4, 4), (2048, 16, 4, 1), torch.bfloat16,
                                     CUDA0, activations=("tanh",))[1]
        relu = _fast(nn.ConvTranspose2d(128, 64, 4, 2, 1))
        relu.activation = "relu"
        own = _units(relu, (64, 128, 4, 4), (2048, 16, 4, 1), torch.bfloat16, CUDA0)
    assert fused == ("gemm_phase_tma@tanh.bf16",)
    assert own == ("gemm_phase_tma@relu.bf16",)
    # autotune: no plan (it times the call first), and the units of what it times
    monkeypatch.setattr(modules.autotune, "enabled", lambda: True)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True, benchmark=False):
        timed = modules.example_plan(up2, (64, 128, 4, 4), (2048, 16, 4, 1), torch.bfloat16,
                                     CUDA0)
        candidates = planner.plan(*_fake(up2, (64, 128, 4, 4), torch.bfloat16)).candidates
    assert timed[0] is None and "gemm_phase_tma@none.bf16" in timed[1] and len(timed[1]) > 3
    assert set(timed[1]) == {u for v in candidates
                             for u in modules.variant_units(v, "none", torch.bfloat16)}


def test_a_gemm_out_tile_plan_lists_its_units_without_building_them(hopper, monkeypatch):
    """Whether a weight fits gemm_out_tile is its binding's answer: listing a call's units must
    not ask it (asking compiled gemm_out_tile alone, a step before the others). The units of
    both answers are listed: gemm_out_tile's, and those of the plan it would give way to."""
    asked = []
    monkeypatch.setattr(planner, "_OUT_TILE_FITS", {})
    monkeypatch.setattr("deconv_patch.kernels.extension.load_units",
                        lambda units: asked.append(tuple(units)) or pytest.fail("asked"))

    def units(cin: int, cout: int, hw: int) -> tuple:
        layer = _fast(nn.ConvTranspose2d(cin, cout, 4, 2, 1))
        shape = (64, cin, hw, hw)
        return tuple(_units(layer, shape, torch.empty(shape, device="meta").stride(),
                                          torch.bfloat16, CUDA0))

    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        # a DCGAN generator's last layer: gemm_out_tile, else cuDNN
        assert units(64, 3, 16) == ("gemm_out_tile.bf16",)
        # 17 output channels: gemm_out_tile, else gemm_phase_tma
        assert units(512, 17, 16) == ("gemm_out_tile.bf16", "gemm_phase_tma@none.bf16")
    assert asked == []
    # a plan made for a call asks the binding, as before
    with FakeTensorMode():
        x = torch.empty(64, 64, 16, 16, dtype=torch.bfloat16, device=CUDA0)
        w = torch.empty(64, 3, 4, 4, dtype=torch.bfloat16, device=CUDA0)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False), pytest.raises(
            pytest.fail.Exception):
        planner.plan(x, w, _fast(nn.ConvTranspose2d(64, 3, 4, 2, 1))._args((0, 0)))
    assert asked == [("gemm_out_tile.bf16",)]


def test_the_families_compile_in_one_step(hopper, monkeypatch):
    compiled = []
    monkeypatch.setattr(modules, "compile_units", lambda units: compiled.append(list(units)))
    model = _Generator()
    up1, up2 = _fast(model.up1), _fast(model.up2)
    calls = [(up1, ((64, 64, 1, 1), (64, 1, 1, 1), torch.bfloat16, CUDA0)),
             (up2, ((64, 128, 4, 4), (2048, 16, 4, 1), torch.bfloat16, CUDA0)),
             (up2, ((32, 128, 4, 4), (2048, 16, 4, 1), torch.bfloat16, CUDA0))]
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        assert modules.prepare_kernels(calls) == ("gemm_kxs.bf16", "gemm_phase_tma@none.bf16")
    assert compiled == [["gemm_kxs.bf16", "gemm_phase_tma@none.bf16"]]
    # up2's calls will fuse ReLU: its ReLU unit in place of its own (validate() runs it fused
    # too), in the same step
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        assert modules.prepare_kernels(calls, {id(up2): "relu"}) == (
            "gemm_kxs.bf16", "gemm_phase_tma@relu.bf16")
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        assert modules.prepare_kernels(calls[:0]) == ()
    assert len(compiled) == 2  # nothing to compile: not asked


def test_under_cuda_autocast_the_units_are_autocasts_dtype(hopper, monkeypatch):
    """Inside CUDA autocast the op casts a float32 call to autocast's dtype (as ATen's
    convolutions do), so optimize()'s example calls, recorded in float32, list the units of
    that dtype; a float64 call is not cast. (CUDA autocast cannot be entered without CUDA: its
    two queries are stubbed.)"""
    up2 = _fast(_Generator().up2)
    call = (up2, (64, 128, 16, 16), (32768, 256, 16, 1))
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        assert _units(*call, torch.float32, CUDA0) == ("gemm_phase_tma@none.f32",)
        monkeypatch.setattr(torch, "is_autocast_enabled",
                            lambda device_type=None: device_type == "cuda")
        monkeypatch.setattr(torch, "get_autocast_dtype", lambda device_type: torch.bfloat16)
        assert _units(*call, torch.float32, CUDA0) == ("gemm_phase_tma@none.bf16",)
        assert _units(*call, torch.float16, CUDA0) == ("gemm_phase_tma@none.bf16",)
        assert _units(*call, torch.float64, CUDA0) == ()


def test_compile_together_compiles_every_optimize_calls_units_at_its_end(hopper, monkeypatch):
    compiled = []
    monkeypatch.setattr(modules, "compile_units", lambda units: compiled.append(list(units)))
    model = _Generator()
    up1, up2 = _fast(model.up1), _fast(model.up2)

    def calls(dtype):
        return [(up1, ((64, 64, 1, 1), (64, 1, 1, 1), dtype, CUDA0)),
                (up2, ((64, 128, 4, 4), (2048, 16, 4, 1), dtype, CUDA0))]

    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        with deconv_patch.compile_together():
            assert modules.prepare_kernels(calls(torch.float16)) == (
                "gemm_kxs.f16", "gemm_phase_tma@none.f16")
            with deconv_patch.compile_together():  # a block inside one: the outer one's end
                assert modules.prepare_kernels(calls(torch.bfloat16)) == (
                    "gemm_kxs.bf16", "gemm_phase_tma@none.bf16")
            assert compiled == []
        assert compiled == [["gemm_kxs.bf16", "gemm_kxs.f16", "gemm_phase_tma@none.bf16",
                             "gemm_phase_tma@none.f16"]]
        # a block left by an exception compiles nothing; the calls compile on first use
        with pytest.raises(KeyError), deconv_patch.compile_together():
            modules.prepare_kernels(calls(torch.float16))
            raise KeyError("user code")
        assert len(compiled) == 1
        # nothing gathered: nothing to compile
        with deconv_patch.compile_together():
            pass
        assert len(compiled) == 1
        # a failed build at the end is a warning, as in prepare_kernels
        monkeypatch.setattr(modules, "compile_units", lambda units: 1 / 0)
        with pytest.warns(RuntimeWarning, match="compile on first use"):
            with deconv_patch.compile_together():
                modules.prepare_kernels(calls(torch.float16))
    # outside a block prepare_kernels compiles again
    monkeypatch.setattr(modules, "compile_units", lambda units: compiled.append(list(units)))
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        modules.prepare_kernels(calls(torch.float16))
    assert compiled[-1] == ["gemm_kxs.f16", "gemm_phase_tma@none.f16"]


def test_a_failure_to_plan_is_a_warning_never_an_error(hopper, monkeypatch):
    def broken(*args):
        raise RuntimeError("no planner today")

    monkeypatch.setattr(modules, "compile_units", lambda units: pytest.fail("compiled"))
    monkeypatch.setattr(planner, "plan", broken)
    up2 = _fast(_Generator().up2)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        with pytest.warns(RuntimeWarning, match="compile on first use"):
            assert modules.prepare_kernels(
                [(up2, ((64, 128, 4, 4), (2048, 16, 4, 1), torch.bfloat16, CUDA0))]) == ()


def test_optimize_prepares_the_recorded_calls_before_its_fused_check(monkeypatch):
    """optimize(model, example): every recorded call's geometry goes to prepare_kernels once,
    before decide() runs the fused check (which would meet the kernels one by one)."""
    seen, order = [], []
    monkeypatch.setattr(OPTIMIZE, "prepare_kernels",
                        lambda calls, fused: seen.extend(calls) or order.append("prepare") or ())
    real_decide = OPTIMIZE._Patcher.decide

    def decide(self, *args, **kwargs):
        order.append("decide")
        return real_decide(self, *args, **kwargs)

    monkeypatch.setattr(OPTIMIZE._Patcher, "decide", decide)
    model = _Generator().eval()
    z = torch.randn(5, 64, 1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        patched = deconv_patch.optimize(model, z)
    assert order == ["prepare", "decide"]
    assert [(m, g[0]) for m, g in seen] == [(patched.up1, (5, 64, 1, 1)),
                                            (patched.up2, (5, 128, 4, 4))]


def test_optimize_lists_the_activations_its_chains_would_fuse(monkeypatch):
    """The chains the record proves hand their activation to prepare_kernels (by conv), so that
    the units of the fused calls compile in the same step."""
    given = []
    monkeypatch.setattr(OPTIMIZE, "prepare_kernels",
                        lambda calls, fused: given.append((list(calls), fused)) or ())
    model = nn.Sequential(nn.ConvTranspose2d(64, 32, 4), nn.BatchNorm2d(32), nn.ReLU(),
                          nn.ConvTranspose2d(32, 16, 4, 2, 1), nn.Tanh(),
                          nn.ConvTranspose2d(16, 3, 4, 2, 1)).eval()
    z = torch.randn(2, 64, 1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        patched = deconv_patch.optimize(model, z)
        unfused = deconv_patch.optimize(model, z, fuse=False)
    (calls, fused), (_, none) = given
    assert fused == {id(patched[0]): "relu", id(patched[3]): "tanh"}
    assert [m for m, _ in calls] == [patched[0], patched[3], patched[5]]
    assert none is None and unfused[0].activation == "none"


def test_the_example_plans_are_what_the_layers_report_until_a_call_runs(hopper, monkeypatch):
    """summary() right after optimize(model, example) showed PyTorch for every layer: the last
    calls were the fused check's, which forces PyTorch's kernels. The check's forced plans no
    longer count; the example call's plan is reported until a call runs."""
    monkeypatch.setattr(modules, "compile_units", lambda units: None)
    model = _Generator()
    up1, up2 = _fast(model.up1), _fast(model.up2)
    last = _fast(nn.ConvTranspose2d(64, 3, 4, 2, 1))  # gemm_out_tile: its fit is not known yet
    calls = [(up1, ((64, 64, 1, 1), (64, 1, 1, 1), torch.bfloat16, CUDA0)),
             (up2, ((64, 128, 4, 4), (2048, 16, 4, 1), torch.bfloat16, CUDA0)),
             (last, ((64, 64, 16, 16), (16384, 256, 16, 1), torch.bfloat16, CUDA0))]
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        modules.prepare_kernels(calls)
    assert up1.__dict__["_last_plan"][:2] == (CUDA0, torch.bfloat16)
    assert up1.__dict__["_last_plan"][2].variant == "gemm_kxs"
    assert up2.__dict__["_last_plan"][2].variant.startswith("gemm_phase_tma:")
    assert "_last_plan" not in last.__dict__

    # a call's own plan replaces it, and a call under use_variant leaves it
    with FakeTensorMode():
        x = torch.empty(64, 128, 4, 4, dtype=torch.bfloat16, device=CUDA0)
        w = torch.empty(128, 64, 4, 4, dtype=torch.bfloat16, device=CUDA0)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        with planner.use_variant(planner.ATEN):
            assert up2._entry_for(x, None, w, None, "none", 0.0).plan.variant == planner.ATEN
        assert up2.__dict__["_last_plan"][2].variant.startswith("gemm_phase_tma:")
        with planner.use_variant(planner.DIRECT):
            up2._entry_for(x, None, w, None, "none", 0.0)
        assert up2.__dict__["_last_plan"][2].variant.startswith("gemm_phase_tma:")
        up2.__dict__.pop("_last_plan")
        up2._entry_for(x, None, w, None, "none", 0.0)
    assert up2.__dict__["_last_plan"][2].variant.startswith("gemm_phase_tma:")
