"""The planner's layer-level rules (planner.plan_layer / may_use_kernel) without a GPU: the
device's compute capability is stubbed, so CI checks which variant each kind of layer gets and
why. The GPU tests check the same rules through planner.plan on real CUDA tensors."""

from __future__ import annotations

import pytest
import torch

from deconv_patch.kernels import (call_rules, device_info, gemm_out_tile, gemm_phase_tma,
                                   planner)
from deconv_patch import kernel_calls
from deconv_patch.arguments import ConvTransposeArgs
from tests.helpers import tf32_settings_restored

CUDA0 = torch.device("cuda", 0)


@pytest.fixture(params=[(9, 0), (8, 0)], ids=["sm90", "sm80"])
def capability(request, monkeypatch):
    monkeypatch.setattr(device_info, "capability", lambda index: request.param)
    monkeypatch.setattr(device_info, "multiprocessors", lambda index: 132)
    return request.param


def _untimed_phase(capability) -> str:
    """The untimed default of a TF32 / 16-bit stride-phase layer cuDNN can run, with >= 16
    output channels per group: gemm_phase_tma (its plan_layer name) on Hopper, else cuDNN."""
    return planner.PHASE_TMA_UNTIMED if capability == (9, 0) else planner.ATEN


def _plan(dtype, kernel, args, channels, tf32=True):
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
        return planner.plan_layer(CUDA0, dtype, kernel, args, channels)


def test_k_equal_stride_layers_get_gemm_kxs_and_its_tap_major_candidate(capability):
    args = ConvTransposeArgs.from_values(stride=2)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        chosen = _plan(dtype, (2, 2), args, (128, 64))
        assert chosen.variant == planner.GEMM_KXS
        wgmma = set(planner.KXS_SM90_CONFIGS) if capability == (9, 0) else set()
        assert set(chosen.candidates) == {planner.GEMM_KXS, planner.KXS_TAP_MAJOR,
                                          planner.ATEN} | wgmma


def test_k_equal_stride_layers_gemm_kxs_sm90_cannot_run_list_gemm_phase_tma(capability):
    """Grouped or output_padding k == stride layers: gemm_kxs_sm90 refuses them, the phase TMA
    kernel is timed instead (Hopper; 16-bit, TF32, and fp32 strict on these 128-deep sums)."""
    for args in (ConvTransposeArgs.from_values(stride=2, groups=2),
                 ConvTransposeArgs.from_values(stride=2, output_padding=1)):
        for dtype, tf32 in ((torch.bfloat16, True), (torch.float32, True),
                            (torch.float32, False)):
            chosen = _plan(dtype, (2, 2), args, (128, 64), tf32=tf32)
            assert not set(planner.KXS_SM90_CONFIGS) & set(chosen.candidates)
            has_tma = set(planner.PHASE_TMA_CONFIGS) <= set(chosen.candidates)
            assert has_tma == (capability == (9, 0))


def test_kernel_area_configs_stand_in_for_their_base_configs_on_nchw_output(capability):
    """gemm_kxs_sm90's kernel-area configs are the kernel's configs 3-5. The layout-free plan
    lists configs 0-2; for NCHW output each is swapped for its area twin (the choice too), for
    channels_last output nothing changes (there the twins are the same machine code)."""
    assert [planner.split_variant(v) for v in planner.KXS_SM90_AREA_CONFIGS] == \
        [(planner.GEMM_KXS_SM90, 3 + i) for i in range(3)]
    assert all(planner.is_variant(v) for v in planner.KXS_SM90_AREA_CONFIGS)
    assert planner.KXS_SM90_NCHW_WINNER in planner.KXS_SM90_AREA_CONFIGS
    for kernel in ((2, 2), (2, 4)):
        args = ConvTransposeArgs.from_values(stride=kernel)
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            chosen = _plan(dtype, kernel, args, (256, 256))
            assert not set(planner.KXS_SM90_AREA_CONFIGS) & set(chosen.candidates)
            assert planner.kxs_sm90_for_output(chosen, nhwc_out=True) == chosen
            nchw = planner.kxs_sm90_for_output(chosen, nhwc_out=False)
            base = [v for v in chosen.candidates if v in planner.KXS_SM90_CONFIGS]
            assert len(base) == (3 if capability == (9, 0) else 0)
            assert not set(planner.KXS_SM90_CONFIGS) & set(nchw.candidates)
            assert [v for v in nchw.candidates if v in planner.KXS_SM90_AREA_CONFIGS] == \
                [planner.KXS_SM90_AREA_CONFIGS[planner.KXS_SM90_CONFIGS.index(v)] for v in base]
            others = [v for v in chosen.candidates if v not in base]
            assert [v for v in nchw.candidates if v not in planner.KXS_SM90_AREA_CONFIGS] == \
                others
            assert (nchw.variant, nchw.reason) == (chosen.variant, chosen.reason)
    forced = planner.Plan(planner.KXS_SM90_CONFIGS[1], "why", candidates=planner.KXS_SM90_CONFIGS)
    twin = planner.kxs_sm90_for_output(forced, nhwc_out=False)
    assert twin.variant == planner.KXS_SM90_AREA_CONFIGS[1]
    assert twin.candidates == planner.KXS_SM90_AREA_CONFIGS


@pytest.mark.parametrize("cin_g,expected", [(planner.MIN_3XTF32_DEPTH, planner.GEMM_KXS),
                                            (planner.MIN_3XTF32_DEPTH - 1, planner.ATEN)])
def test_fp32_strict_runs_3xtf32_only_on_deep_k_equal_stride_sums(capability, cin_g, expected):
    args = ConvTransposeArgs.from_values(stride=2)
    chosen = _plan(torch.float32, (2, 2), args, (cin_g, 64), tf32=False)
    assert chosen.variant == expected, chosen.reason
    if expected == planner.GEMM_KXS:
        assert "3xTF32" in chosen.reason


@pytest.mark.parametrize("cin_g", [planner.MIN_3XTF32_DEPTH // 4, planner.MIN_3XTF32_DEPTH // 4 - 1])
@pytest.mark.parametrize("cout_g", [256, 32, 31])
def test_fp32_strict_phase_layers_run_gemm_phase_tma_on_hopper(capability, cin_g, cout_g):
    """fp32 strict, k != stride, Hopper, sums of >= MIN_3XTF32_DEPTH products (k4 s2: 4 taps a
    phase): gemm_phase_tma's 3xTF32 from 32 output channels per group, cuDNN below (both with
    its configs as autotune candidates); elsewhere cuDNN. gemm_phase's 3xTF32 never (it missed
    the bound on deep sums, strict_error_scan.py)."""
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    chosen = _plan(torch.float32, (4, 4), args, (cin_g, cout_g), tf32=False)
    assert not set(chosen.candidates) & set(planner.PHASE_CONFIGS + planner.SM90_CONFIGS)
    tma = capability == (9, 0) and 4 * cin_g >= planner.MIN_3XTF32_DEPTH
    assert (set(planner.PHASE_TMA_CONFIGS) <= set(chosen.candidates)) == tma, chosen
    expected = planner.GEMM_PHASE_TMA if tma and cout_g >= 32 else planner.ATEN
    assert chosen.variant == expected, chosen
    if tma:
        assert planner.ATEN in chosen.candidates and "3xTF32" in chosen.reason


def test_fp32_strict_few_input_channels_rule_out_gemm_phase_tma(capability):
    """8 input channels per group, deep only through its 49 taps: below the tensor-core tiles'
    16-channel floor, so neither the default nor a candidate."""
    args = ConvTransposeArgs.from_values(stride=1, padding=3)
    chosen = _plan(torch.float32, (7, 7), args, (8, 64), tf32=False)
    assert chosen.variant == planner.ATEN
    assert not set(planner.PHASE_TMA_CONFIGS) & set(chosen.candidates)


def test_reduction_depth_counts_channels_times_taps_per_phase():
    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)
    assert planner.reduction_depth(16, (4, 4), k4s2) == 64
    assert planner.reduction_depth(16, (2, 2), ConvTransposeArgs.from_values(stride=2)) == 16
    assert planner.reduction_depth(3, (1, 1), ConvTransposeArgs.from_values(stride=3)) == 3


@pytest.mark.parametrize("channels,stride,expected", [
    ((1, 1), 2, planner.GROUPED),       # depthwise k4 s2
    ((16, 16), 2, planner.GROUPED),     # grouped g8 of 128
    ((32, 32), 2, planner.GROUPED),
    ((48, 48), 2, "phase"),             # above 32 per group: the phase layers' default
    ((1, 1), 8, planner.ATEN),          # FCN x8: stride area 64 > 16
])
def test_grouped_layers(capability, channels, stride, expected):
    args = ConvTransposeArgs.from_values(stride=stride, padding=1, groups=8)
    chosen = _plan(torch.bfloat16, (2 * stride, 2 * stride), args, channels)
    if expected == "phase":
        expected = _untimed_phase(capability)
    assert chosen.variant == expected, chosen.reason
    if max(channels) <= 32:
        assert planner.GROUPED in chosen.candidates and planner.ATEN in chosen.candidates


def test_wgmma_configs_are_16_bit_autotune_candidates_on_sm90_only(capability):
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        chosen = _plan(dtype, (4, 4), args, (256, 128))
        assert chosen.variant == _untimed_phase(capability)
        assert planner.PHASE_CONFIGS[0] in chosen.candidates
        has_sm90 = set(planner.SM90_CONFIGS) <= set(chosen.candidates)
        assert has_sm90 == (capability == (9, 0) and dtype != torch.float32)
        has_tma = set(planner.PHASE_TMA_CONFIGS) <= set(chosen.candidates)
        assert has_tma == (capability == (9, 0))  # TF32 allowed here: fp32 too
    with torch.backends.cudnn.flags(enabled=False, allow_tf32=True):
        no_cudnn = _plan(torch.bfloat16, (4, 4), args, (256, 128))
    assert (set(planner.PHASE_TMA_CONFIGS) <= set(no_cudnn.candidates)) == (capability == (9, 0))


def test_few_channels_rule_out_every_phase_config(capability, monkeypatch):
    """Below 16 input channels per group a k step of gemm_phase (and its wgmma twins) would be
    mostly padding (the rules beneath gemm_out_tile's default, which is switched off here)."""
    monkeypatch.setattr(gemm_out_tile, "DEFAULT_MAX_CHANNELS", 0)
    args = ConvTransposeArgs.from_values(stride=1, output_padding=1, dilation=2)
    chosen = _plan(torch.bfloat16, (3, 3), args, (8, 4))
    assert chosen.variant == planner.DIRECT
    assert not set(chosen.candidates) & set(planner.PHASE_CONFIGS + planner.SM90_CONFIGS +
                                            planner.PHASE_TMA_CONFIGS)


def test_few_output_channels_keep_the_phase_gemms_as_autotune_candidates_only(capability,
                                                                              monkeypatch):
    """DCGAN's 64 > 3 output layer: 16+ input channels fill the k steps, 3 output channels pad
    the n tile: autotune may time the phase GEMMs, but without gemm_out_tile's default (switched
    off here) the untimed default stays cuDNN (or the direct kernel where cuDNN cannot run)."""
    monkeypatch.setattr(gemm_out_tile, "DEFAULT_MAX_CHANNELS", 0)
    phase = set(planner.PHASE_CONFIGS)
    hopper = set(planner.SM90_CONFIGS + planner.PHASE_TMA_CONFIGS)
    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)
    few = _plan(torch.bfloat16, (4, 4), k4s2, (64, 3))
    assert few.variant == planner.ATEN and "too few" not in few.reason
    assert phase <= set(few.candidates) and planner.GROUPED in few.candidates
    assert (hopper <= set(few.candidates)) == (capability == (9, 0))
    no_cudnn = ConvTransposeArgs.from_values(stride=1, output_padding=1, dilation=2)
    chosen = _plan(torch.bfloat16, (3, 3), no_cudnn, (64, 3))
    assert chosen.variant == planner.DIRECT and "too few" in chosen.reason
    assert phase <= set(chosen.candidates)


def test_may_use_kernel_follows_the_grouped_and_3xtf32_rules():
    kxs = ConvTransposeArgs.from_values(stride=2)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        assert planner.may_use_kernel(CUDA0, torch.float32, (2, 2), kxs, (128, 64))
        assert not planner.may_use_kernel(CUDA0, torch.float32, (2, 2), kxs, (8, 64))
    grouped = ConvTransposeArgs.from_values(stride=2, padding=1, groups=64)
    assert planner.may_use_kernel(CUDA0, torch.bfloat16, (4, 4), grouped, (1, 1))
    assert not planner.may_use_kernel(CUDA0, torch.bfloat16, (4, 4),
                                      ConvTransposeArgs.from_values(stride=2, padding=1),
                                      (256, 128))
    assert not planner.may_use_kernel(torch.device("cpu"), torch.bfloat16, (2, 2), kxs)


@pytest.mark.parametrize("tf32", [True, False])
def test_grouped_kernel_is_an_autotune_candidate_for_dense_layers_with_few_channels(
        capability, tf32, monkeypatch):
    """DCGAN's 64 > 3 output layer, FSRCNN's 56 > 1: the grouped kernel (FFMA, exact in every
    mode, fp32 strict included) is timed against cuDNN; wider layers never list it (without
    gemm_out_tile's 16-bit default, switched off here)."""
    monkeypatch.setattr(gemm_out_tile, "DEFAULT_MAX_CHANNELS", 0)
    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)
    for dtype in (torch.bfloat16, torch.float32):
        few = _plan(dtype, (4, 4), k4s2, (64, 3), tf32=tf32)
        # (fp32 on Hopper: ffma_tile's untimed default, see test_ffma_tile_...)
        ffma = capability == (9, 0) and dtype == torch.float32
        assert few.variant == ("ffma_tile:s2q1x1o3" if ffma else planner.ATEN), few
        assert planner.GROUPED in few.candidates, few
        assert planner.ATEN in few.candidates
        wide = _plan(dtype, (4, 4), k4s2, (128, 64), tf32=tf32)
        assert planner.GROUPED not in wide.candidates


@pytest.mark.parametrize("name,kernel,args,channels", [
    ("dcgan.g5 64>3 k4 s2", (4, 4), ConvTransposeArgs.from_values(stride=2, padding=1), (64, 3)),
    ("fcn8s.up8 21>21 k16 s8", (16, 16), ConvTransposeArgs.from_values(stride=8, padding=4),
     (21, 21)),
    ("fsrcnn 56>1 k9 s3", (9, 9), ConvTransposeArgs.from_values(stride=3, padding=4,
                                                               output_padding=2), (56, 1)),
    ("8>4 op >= stride", (3, 3), ConvTransposeArgs.from_values(stride=1, output_padding=1,
                                                              dilation=2), (8, 4)),
    ("depthwise k4 s2", (4, 4), ConvTransposeArgs.from_values(stride=2, padding=1, groups=64),
     (1, 1)),
    ("64>3 k2 s2", (2, 2), ConvTransposeArgs.from_values(stride=2), (64, 3)),
])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_few_output_channel_layers_list_gemm_out_tile(capability, name, kernel, args, channels,
                                                      dtype):
    """<= 32 output channels per group, 16-bit or TF32, any GPU of ours: every gemm_out_tile
    config is an autotune candidate ahead of PyTorch's path, even below the phase GEMMs'
    16-channel floor (few channels are what it is for); the untimed default in 16-bit where
    cuDNN (or gemm_phase) was, and in TF32 from 8 output channels per group (fcn8s), while
    gemm_kxs's and the grouped kernel's defaults stay (TF32 from stride area 16: fcn8s)."""
    chosen = _plan(dtype, kernel, args, channels)
    assert chosen.candidates[-1] == planner.ATEN
    listed = [v for v in chosen.candidates if v in planner.OUT_TILE_CONFIGS]
    assert listed == list(planner.OUT_TILE_CONFIGS), (name, chosen)
    assert chosen.candidates.index(planner.OUT_TILE_CONFIGS[-1]) < \
        chosen.candidates.index(planner.ATEN)
    tf32_default = channels[1] >= gemm_out_tile.FP32_DEFAULT_MIN_CHANNELS and \
        args.stride[0] * args.stride[1] >= gemm_out_tile.FP32_DEFAULT_MIN_STRIDE_AREA
    if (dtype == torch.float32 and not tf32_default) or name in ("depthwise k4 s2", "64>3 k2 s2"):
        assert chosen.variant != planner.GEMM_OUT_TILE, (name, chosen)
    else:
        assert chosen.variant == planner.GEMM_OUT_TILE, (name, chosen)


def test_gemm_out_tile_3xtf32_is_a_candidate_on_deep_fp32_strict_sums(capability):
    """fp32 strict: gemm_out_tile's 3xTF32 is an autotune candidate (never the untimed
    default) where each output sums >= MIN_3XTF32_DEPTH products, and absent below."""
    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)
    for channels in ((64, 3), (21, 21), (512, 17), (16, 32)):  # 256, 84, 2048, 64 products
        strict = _plan(torch.float32, (4, 4), k4s2, channels, tf32=False)
        assert set(planner.OUT_TILE_CONFIGS) <= set(strict.candidates), strict
        assert strict.variant != planner.GEMM_OUT_TILE and strict.candidates[-1] == \
            planner.ATEN, strict
    for channels in ((8, 3), (15, 21)):  # 32, 60 products
        strict = _plan(torch.float32, (4, 4), k4s2, channels, tf32=False)
        assert not set(planner.OUT_TILE_CONFIGS) & set(strict.candidates), strict
    grouped = _plan(torch.float32, (3, 3), ConvTransposeArgs.from_values(
        stride=2, padding=1, output_padding=1, groups=8), (16, 16), tf32=False)  # 32 products
    assert not set(planner.OUT_TILE_CONFIGS) & set(grouped.candidates), grouped


def test_gemm_out_tile_is_no_candidate_for_many_output_channels(capability):
    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)
    for channels in ((64, 33), (128, 64), (21, 256)):
        for dtype in (torch.bfloat16, torch.float32):
            wide = _plan(dtype, (4, 4), k4s2, channels)
            assert not set(planner.OUT_TILE_CONFIGS) & set(wide.candidates), wide
    unknown = _plan(torch.bfloat16, (4, 4), k4s2, None)  # channels unknown: not listed
    assert not set(planner.OUT_TILE_CONFIGS) & set(unknown.candidates)


def test_gemm_out_tile_needs_compute_capability_8(monkeypatch):
    monkeypatch.setattr(device_info, "capability", lambda index: (7, 5))
    chosen = _plan(torch.bfloat16, (4, 4), ConvTransposeArgs.from_values(stride=2, padding=1),
                   (64, 3))
    assert chosen.variant == planner.ATEN and chosen.fallback
    assert planner.out_tile_configs(CUDA0, torch.bfloat16, ConvTransposeArgs(), (64, 3)) == ()


def test_gemm_out_tile_config_names_split_into_kernel_and_index():
    assert [planner.split_variant(v) for v in planner.OUT_TILE_CONFIGS] == \
        [(planner.GEMM_OUT_TILE, i) for i in range(7)]
    assert all(planner.is_variant(v) and planner.reads_packed_weight(v)
               for v in (planner.GEMM_OUT_TILE, *planner.OUT_TILE_CONFIGS))
    assert planner.split_variant(planner.GEMM_OUT_TILE) == (planner.GEMM_OUT_TILE, -1)


def test_out_tile_default_follows_its_constant(capability, monkeypatch):
    """gemm_out_tile.DEFAULT_MAX_CHANNELS makes gemm_out_tile (its heuristic config) the untimed
    16-bit default in place of cuDNN / gemm_phase up to that many output channels per group, and
    the fp32 one (TF32, or 3xTF32 on sums deep enough) from FP32_DEFAULT_MIN_CHANNELS; the
    grouped kernel's and gemm_kxs's defaults stay; plan_layer(out_tile_default=False) is the plan it
    replaces (plan() falls back to it where the kernel's shared memory cannot hold the layer)."""
    monkeypatch.setattr(gemm_out_tile, "DEFAULT_MAX_CHANNELS", 21)
    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)
    assert _plan(torch.bfloat16, (4, 4), k4s2, (64, 3)).variant == planner.GEMM_OUT_TILE
    assert _plan(torch.float16, (4, 4), k4s2, (64, 21)).variant == planner.GEMM_OUT_TILE
    assert planner.plan_layer(CUDA0, torch.bfloat16, (4, 4), k4s2, (64, 3),
                              out_tile_default=False).variant == planner.ATEN
    fcn = ConvTransposeArgs.from_values(stride=8, padding=4)
    assert _plan(torch.float32, (16, 16), fcn, (21, 21)).variant == planner.GEMM_OUT_TILE
    # (fp32 strict too: 3xTF32, the sums 84 deep)
    assert _plan(torch.float32, (16, 16), fcn, (21, 21), tf32=False).variant == \
        planner.GEMM_OUT_TILE
    assert _plan(torch.float32, (16, 16), fcn, (3, 21), tf32=False).variant == planner.ATEN
    assert _plan(torch.float32, (16, 16), fcn, (21, 7)).variant == planner.ATEN  # < 8 in TF32
    assert _plan(torch.float32, (4, 4), k4s2, (64, 16)).variant == _untimed_phase(capability)
    monkeypatch.setattr(gemm_out_tile, "FP32_DEFAULT_MIN_CHANNELS", 3)
    monkeypatch.setattr(gemm_out_tile, "FP32_DEFAULT_MIN_STRIDE_AREA", 4)
    assert _plan(torch.float32, (4, 4), k4s2, (64, 3)).variant == planner.GEMM_OUT_TILE
    monkeypatch.setattr(gemm_out_tile, "FP32_DEFAULT_MIN_CHANNELS", 8)
    monkeypatch.setattr(gemm_out_tile, "FP32_DEFAULT_MIN_STRIDE_AREA", 16)
    no_cudnn = ConvTransposeArgs.from_values(stride=1, output_padding=1, dilation=2)
    assert _plan(torch.bfloat16, (3, 3), no_cudnn, (8, 4)).variant == planner.GEMM_OUT_TILE
    assert _plan(torch.bfloat16, (4, 4), k4s2, (64, 24)).variant == _untimed_phase(capability)
    assert _plan(torch.float32, (4, 4), k4s2, (64, 3), tf32=False).variant == (
        "ffma_tile:s2q1x1o3" if capability == (9, 0) else planner.ATEN)  # (its FFMA default)
    assert _plan(torch.bfloat16, (2, 2), ConvTransposeArgs.from_values(stride=2),
                 (64, 3)).variant == planner.GEMM_KXS
    dw = ConvTransposeArgs.from_values(stride=2, padding=1, groups=64)
    assert _plan(torch.bfloat16, (4, 4), dw, (1, 1)).variant == planner.GROUPED
    assert planner.may_use_kernel(CUDA0, torch.bfloat16, (4, 4), k4s2, (64, 3))
    assert not planner.may_use_kernel(CUDA0, torch.float32, (4, 4), k4s2, (64, 3))


def _fake_cuda_layer(cin, cout, kernel, dtype=torch.bfloat16):
    """Fake CUDA tensors (no GPU needed): plan() reads only their shapes, dtypes and device."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(2, cin, 8, 8, device="cuda", dtype=dtype)
        w = torch.empty(cin, cout, kernel, kernel, device="cuda", dtype=dtype)
    return x, w


class _StubExtension:
    """What plan() asks of the extension: weight_fits of gemm_out_tile, with sizes and a dtype
    name."""

    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def weight_fits(self, *args):
        self.calls.append(args)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize("answer,expected", [(True, planner.GEMM_OUT_TILE),
                                             (False, planner.ATEN),
                                             (RuntimeError("no device"), planner.ATEN)])
def test_plan_asks_the_extension_whether_gemm_out_tile_fits(capability, monkeypatch, answer,
                                                             expected):
    """The 16-bit default holds only where the extension says the kernel's shared memory holds
    the layer; otherwise (or when the extension cannot answer) the plan it replaced runs, and
    says why. The question carries sizes and the dtype's name (planning reads no tensor data, so
    fake tensors plan), and is asked once per layer geometry."""
    from deconv_patch.kernels import extension
    stub = _StubExtension(answer)
    units = []
    monkeypatch.setattr(extension, "load_units", lambda asked: units.append(tuple(asked)) or stub)
    monkeypatch.setattr(planner, "_OUT_TILE_FITS", {})
    x, w = _fake_cuda_layer(64, 3, 4)
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    chosen = planner.plan(x, w, args)
    assert chosen.variant == expected, chosen
    assert set(planner.OUT_TILE_CONFIGS) <= set(chosen.candidates)
    if expected != planner.GEMM_OUT_TILE:
        assert "shared memory cannot hold" in chosen.reason
    code = planner.kernels.BY_NAME[planner.GEMM_OUT_TILE].code
    assert stub.calls == [(code, 0, "bfloat16", [64, 3, 4, 4], [2, 2], [1, 1], [1, 1], 1, False)]
    # The question loads one unit of that family only (none loaded: its unit of the layer's
    # element type; every unit of a family answers alike).
    assert units == [(f"{planner.GEMM_OUT_TILE}.bf16",)]
    planner.plan(x, w, args)
    assert len(stub.calls) == 1  # cached per geometry
    # fp32 with TF32 (FCN's x8 up-sampling, the TF32 default): asked in TF32 mode, not 3xTF32
    # (whose packed weight is twice as large).
    x32, w32 = _fake_cuda_layer(21, 21, 16, torch.float32)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        assert planner.plan(x32, w32, ConvTransposeArgs.from_values(stride=8, padding=4)
                            ).variant == expected
    assert stub.calls[-1] == (code, 0, "float32", [21, 21, 16, 16], [8, 8], [4, 4], [1, 1], 1,
                              True)


def test_ffma_tile_is_a_candidate_for_few_output_channels_in_every_mode(capability):
    """ffma_tile (FFMA, so exact in fp32 strict too): its stride family's configs are autotune
    candidates for <= 8 output channels per group with kernel == taps x stride (k4 s2, k9 s3),
    dilation 1, equal strides; the untimed default only in fp32 (TF32 or strict) on Hopper,
    with one input position per thread for the fewest output channels that hold the layer's;
    absent everywhere else."""
    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)
    k9s3 = ConvTransposeArgs.from_values(stride=3, padding=4, output_padding=2)
    family = {s: {v for v in planner.FFMA_TILE_CONFIGS if v.startswith(f"ffma_tile:s{s}q")}
              for s in (2, 3)}
    assert family[2] and family[3] and family[2] | family[3] == set(planner.FFMA_TILE_CONFIGS)
    for dtype, tf32 in ((torch.bfloat16, True), (torch.float16, True), (torch.float32, True),
                        (torch.float32, False)):
        for kernel, args, channels, s in (((4, 4), k4s2, (64, 3), 2), ((9, 9), k9s3, (56, 1), 3),
                                          ((4, 4), k4s2, (512, 8), 2)):
            chosen = _plan(dtype, kernel, args, channels, tf32=tf32)
            listed = {v for v in chosen.candidates if v.startswith(planner.FFMA_TILE)}
            assert listed == family[s], (dtype, tf32, channels, chosen)
            default = {(64, 3): "ffma_tile:s2q1x1o3", (56, 1): "ffma_tile:s3q1x1o1"}.get(
                channels) if capability == (9, 0) and dtype == torch.float32 else None
            if default is not None:
                assert chosen.variant == default, chosen
            else:
                assert not chosen.variant.startswith(planner.FFMA_TILE), chosen
        for kernel, args, channels in (
                ((4, 4), k4s2, (512, 17)),                                          # > 8 out
                ((3, 3), k4s2, (64, 3)),                                            # k != 2s
                ((4, 4), ConvTransposeArgs.from_values(stride=2, dilation=2), (64, 3)),
                ((4, 4), ConvTransposeArgs.from_values(stride=(2, 1)), (64, 3)),
                ((2, 2), ConvTransposeArgs.from_values(stride=2), (64, 3))):        # k == s
            chosen = _plan(dtype, kernel, args, channels, tf32=tf32)
            assert not any(v.startswith(planner.FFMA_TILE) for v in chosen.candidates), \
                (kernel, args, channels, chosen)
    assert planner.split_variant(planner.FFMA_TILE_CONFIGS[-1]) == (
        planner.FFMA_TILE, len(planner.FFMA_TILE_CONFIGS) - 1)
    assert not planner.reads_packed_weight(planner.FFMA_TILE_CONFIGS[0])


def test_gemm_col2im_lists_its_3xtf32_configs_in_fp32_strict_on_hopper(capability):
    """fp32 without TF32: gemm_col2im's 3xTF32 configs (gemm_phase_tma tiles) are autotune
    candidates on Hopper for one group and input channels >= MIN_3XTF32_DEPTH (its GEMM's sum
    depth), never the untimed default; its TF32 / 16-bit configs are not listed there."""
    assert [planner.split_variant(v) for v in planner.COL2IM_3XTF32_CONFIGS] == \
        [(planner.GEMM_COL2IM, planner.PHASE_TMA_CONFIGS.index(
            v.replace("gemm_col2im:3xtf32-", "gemm_phase_tma:"))) for v in
         planner.COL2IM_3XTF32_CONFIGS]
    assert all(planner.is_variant(v) for v in planner.COL2IM_3XTF32_CONFIGS)
    strict, tf32 = set(planner.COL2IM_3XTF32_CONFIGS), set(planner.COL2IM_CONFIGS)
    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)
    hopper = capability == (9, 0)
    for channels in ((512, 17), (1024, 512), (64, 3)):
        chosen = _plan(torch.float32, (4, 4), k4s2, channels, tf32=False)
        assert (strict <= set(chosen.candidates)) == hopper, chosen
        assert not tf32 & set(chosen.candidates) and chosen.variant != planner.GEMM_COL2IM
        chosen = _plan(torch.float32, (4, 4), k4s2, channels, tf32=True)
        assert not strict & set(chosen.candidates)
    for channels, args in (((32, 17), k4s2),
                           ((512, 16), ConvTransposeArgs.from_values(stride=2, groups=2))):
        chosen = _plan(torch.float32, (4, 4), args, channels, tf32=False)
        assert not strict & set(chosen.candidates), chosen


def _fake_input(batch, cin, hw, dtype, channels_last=False):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(batch, cin, *hw, device="cuda", dtype=dtype)
        return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def _fake_weight(cin, cout, kernel, dtype):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        return torch.empty(cin, cout, *kernel, device="cuda", dtype=dtype)


@pytest.mark.parametrize("layer,tf32_tile,half_tile", [
    # (batch, in, out, input hw): rows per phase = batch * input pixels for k4 s2 p1
    ((64, 512, 256, (4, 4)), "128x64s8pp", "128x64s8pp"),     # DCGAN g2: 1,024 rows
    ((4, 1024, 512, (8, 8)), "128x64s8pp", "128x64s8pp"),     # pix2pix u2: 256 rows
    ((64, 256, 128, (8, 8)), "128x128s6", "128x128s6pp"),     # DCGAN g3: both tiles fill waves
    ((32, 2048, 256, (8, 6)), "128x128s6", "128x128s6pp"),    # SimpleBaseline d1
    ((32, 256, 256, (32, 24)), "128x128s6", "128x128s6pp"),   # SimpleBaseline d3
    ((64, 128, 64, (16, 16)), "128x64s8pp", "128x64s8pp"),    # <= 64 output channels
])
def test_untimed_phase_default_is_gemm_phase_tma_sized_by_waves_on_hopper(capability, layer,
                                                                          tf32_tile, half_tile):
    """With cudnn.benchmark off, a TF32 / 16-bit stride-phase layer with >= 16 output channels
    runs gemm_phase_tma on Hopper, its tile picked for the call's rows (132 SMs here); cuDNN
    elsewhere, and in fp32 strict the 3xTF32 rule as before."""
    batch, cin, cout, hw = layer
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    for dtype, tf32, tile in ((torch.float32, True, tf32_tile), (torch.bfloat16, True, half_tile),
                              (torch.float16, True, half_tile)):
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32, benchmark=False):
            chosen = planner.plan(_fake_input(batch, cin, hw, dtype),
                                  _fake_weight(cin, cout, (4, 4), dtype), args)
        want = f"{planner.GEMM_PHASE_TMA}:{tile}" if capability == (9, 0) else planner.ATEN
        assert chosen.variant == want, chosen
        assert chosen.variant in chosen.candidates or chosen.variant == planner.ATEN
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        strict = planner.plan(_fake_input(batch, cin, hw, torch.float32),
                              _fake_weight(cin, cout, (4, 4), torch.float32), args)
    rows = batch * hw[0] * hw[1]
    # (NCHW input: below the rows gemm_phase_tma needs there, cuDNN)
    assert strict.variant == (planner.GEMM_PHASE_TMA if capability == (9, 0) and
                              rows >= gemm_phase_tma.MIN_UNTIMED_STRICT_ROWS_NCHW
                              else planner.ATEN)


def test_the_strict_row_threshold_asks_whether_the_kernel_reads_the_input_in_place(capability):
    """gemm_phase_tma reads NCHW input through a channels_last copy, so its 3xTF32 default needs
    more rows there; an input already laid out so (a 1 x 1 image, either layout) counts as read
    in place. DCGAN g3 at batch 8 (512 rows per phase, the measured case): gemm_phase_tma on
    Hopper for channels_last input, cuDNN for NCHW."""
    assert call_rules.reads_in_place(_fake_input(32, 128, (1, 1), torch.float32))
    assert call_rules.reads_in_place(_fake_input(32, 128, (8, 8), torch.float32, True))
    assert not call_rules.reads_in_place(_fake_input(32, 128, (8, 8), torch.float32))
    assert not call_rules.reads_in_place(_fake_input(1, 128, (8, 8), torch.float32)[0])
    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False, benchmark=False):
        plans = [planner.plan(_fake_input(8, 256, (8, 8), torch.float32, channels_last),
                              _fake_weight(256, 128, (4, 4), torch.float32), k4s2)
                 for channels_last in (False, True)]
    hopper = capability == (9, 0)
    assert plans[0].variant == planner.ATEN, plans[0]
    assert plans[1].variant == (planner.GEMM_PHASE_TMA if hopper else planner.ATEN), plans[1]


@pytest.mark.parametrize("channels_last", [False, True])
def test_fp32_untimed_tma_defaults_need_enough_work(capability, channels_last):
    """fp32 small layers keep cuDNN (or gemm_kxs) without autotune: TF32 under
    MIN_UNTIMED_TF32_FLOPS, 3xTF32 under MIN_UNTIMED_STRICT_ROWS rows per stride phase, each
    checked on both sides of its threshold; 16-bit layers keep gemm_phase_tma at any size; in
    every mode input channels that do not fill the TMA's 16-byte rows keep cuDNN, and so do TF32
    deep sums into 33-64 channels on channels_last input."""
    hopper = capability == (9, 0)
    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)

    def plan(batch, cin, cout, hw, dtype, tf32, kernel=(4, 4), args=k4s2):
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32, benchmark=False):
            return planner.plan(_fake_input(batch, cin, hw, dtype, channels_last),
                                _fake_weight(cin, cout, kernel, dtype), args)

    # VAE's 64 > 32 k4s2 on 7 x 7 at batch 128: 0.41 GFLOP; at batch 160: 0.51 GFLOP.
    small = plan(128, 64, 32, (7, 7), torch.float32, True)
    assert call_rules.flops_of(_fake_input(128, 64, (7, 7), torch.float32),
                          _fake_weight(64, 32, (4, 4), torch.float32)) < \
        gemm_phase_tma.MIN_UNTIMED_TF32_FLOPS
    assert small.variant == planner.ATEN, small
    if hopper:
        assert "GFLOP" in small.reason and planner.PHASE_TMA_UNTIMED in small.candidates
    big = plan(160, 64, 32, (7, 7), torch.float32, True)
    assert big.variant == (planner.PHASE_TMA_UNTIMED if hopper else planner.ATEN), big
    for half in (torch.bfloat16, torch.float16):  # 16-bit: any size (here 0.07 GFLOP)
        tiny = plan(1, 512, 256, (4, 4), half, False)
        assert tiny.variant == (planner.PHASE_TMA_UNTIMED if hopper else planner.ATEN), tiny
    # fp32 strict: Linknet's 512 > 256 k3s2 on 8 x 8 at batch 4 (256 rows per phase), 8 (512)
    # and 16 (1,024); below the rows (1,024 on NCHW input, which the kernel reads through a
    # copy), gemm_col2im's 3xTF32 on Hopper for channels_last input, else cuDNN
    assert (gemm_phase_tma.MIN_UNTIMED_STRICT_ROWS, gemm_phase_tma.MIN_UNTIMED_STRICT_ROWS_NCHW) \
        == (512, 1024)
    k3s2 = ConvTransposeArgs.from_values(stride=2, padding=1, output_padding=1)
    few = plan(4, 512, 256, (8, 8), torch.float32, False, (3, 3), k3s2)
    assert few.variant == (planner.COL2IM_3XTF32_CONFIGS[0] if hopper and channels_last
                           else planner.ATEN), few
    if hopper and not channels_last:
        assert "rows per stride phase" in few.reason
    enough_nhwc = plan(8, 512, 256, (8, 8), torch.float32, False, (3, 3), k3s2)
    assert enough_nhwc.variant == (planner.GEMM_PHASE_TMA if hopper and channels_last
                                   else planner.ATEN), enough_nhwc
    if hopper and not channels_last:
        assert "NCHW input" in enough_nhwc.reason
    enough = plan(16, 512, 256, (8, 8), torch.float32, False, (3, 3), k3s2)
    assert enough.variant == (planner.GEMM_PHASE_TMA if hopper else planner.ATEN), enough
    # TF32 channels_last input, 33-64 output channels, sums >= 1,024 deep (pix2pix u6, 256 > 64
    # k4 s2): cuDNN's NHWC kernel; NCHW input, 512-deep sums or 16-bit keep gemm_phase_tma.
    u6 = plan(4, 256, 64, (64, 64), torch.float32, True)
    if channels_last:
        assert u6.variant == planner.ATEN, u6
        if hopper:
            assert "NHWC" in u6.reason
    else:
        assert u6.variant == (planner.PHASE_TMA_UNTIMED if hopper else planner.ATEN), u6
    for shallower in (plan(4, 128, 64, (64, 64), torch.float32, True),
                      plan(4, 256, 64, (64, 64), torch.bfloat16, False),
                      plan(4, 256, 128, (64, 64), torch.float32, True)):
        assert planner.split_variant(shallower.variant)[0] == \
            (planner.GEMM_PHASE_TMA if hopper else planner.ATEN), shallower
    # Channels that do not fill 16-byte rows (HigherHRNet's 49; fp32: 4 a row, 16-bit: 8): the
    # kernel would refuse them, so cuDNN is the plan in every mode; 48 channels keep the default.
    for dtype, tf32 in ((torch.float32, True), (torch.float32, False), (torch.bfloat16, False)):
        odd = plan(8, 49, 64, (32, 32), dtype, tf32)
        assert odd.variant == planner.ATEN, odd
        if hopper:
            assert "16-byte rows" in odd.reason and planner.PHASE_TMA_CONFIGS[0] in odd.candidates
        even = plan(8, 48, 64, (32, 32), dtype, tf32)
        assert planner.split_variant(even.variant)[0] == \
            (planner.GEMM_PHASE_TMA if hopper else planner.ATEN), even
    # ... and a 1 x 1 input (DCGAN's first layer at batch 1, a k == stride GEMM) keeps gemm_kxs,
    # which needs no packed 3xTF32 weight; at batch 512 it takes gemm_phase_tma's 3xTF32
    latent = ConvTransposeArgs.from_values()
    one = plan(1, 128, 1024, (1, 1), torch.float32, False, (4, 4), latent)
    assert one.variant == planner.GEMM_KXS, one
    many = plan(512, 128, 1024, (1, 1), torch.float32, False, (4, 4), latent)
    assert planner.split_variant(many.variant)[0] == \
        (planner.GEMM_PHASE_TMA if hopper else planner.GEMM_KXS), many


def test_untimed_tma_tile_rule():
    """gemm_phase_tma.untimed_config: the 128x64 tile up to 64 output channels, else 128x128
    unless the 128x64 tile fills the SMs' waves better."""
    from deconv_patch.kernels import gemm_phase_tma as tma
    assert tma.untimed_config(True, 10**6, 4, 64, 132) == "gemm_phase_tma:128x64s8pp"
    # 4 phases x 8 row tiles x 2 (128-wide) = 64 tiles: half a wave; 128 of the 64-wide fill it
    assert tma.untimed_config(True, 1024, 4, 256, 132) == "gemm_phase_tma:128x64s8pp"
    # 4 x 48 x 2 = 384 tiles = 2.9 waves either way: the wider tile
    assert tma.untimed_config(True, 6144, 4, 256, 132) == "gemm_phase_tma:128x128s6"
    assert tma.untimed_config(False, 6144, 4, 256, 132) == "gemm_phase_tma:128x128s6pp"


@pytest.mark.parametrize("shape", [(0, 256, 8, 8), (2, 256, 0, 8), (256, 8, 8)],
                         ids=["batch0", "empty", "unbatched"])
def test_untimed_rule_plans_empty_and_unbatched_inputs(capability, shape):
    """An empty batch or output, or an unbatched input, plans without error (the tile rule has
    no rows to weigh there)."""
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    for dtype, tf32 in ((torch.bfloat16, True), (torch.float32, True), (torch.float32, False)):
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
            chosen = planner.plan(_fake_input(shape[0], shape[1], shape[2:], dtype)
                                  if len(shape) == 4 else _fake_unbatched(shape, dtype),
                                  _fake_weight(256, 256, (4, 4), dtype), args)
        assert chosen.variant in chosen.candidates or chosen.variant in (
            planner.ATEN, planner.GEMM_PHASE_TMA), chosen


def _fake_unbatched(shape, dtype):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        return torch.empty(*shape, device="cuda", dtype=dtype)


def test_untimed_rule_leaves_large_strides_and_few_channels_alone(capability):
    """Unmeasured for gemm_phase_tma: stride area > 4 (FCN's x8, whose 64 phases the kernel
    refuses) and fewer than 16 output channels per group (TF32 <= 8 has ffma_tile)."""
    fcn = ConvTransposeArgs.from_values(stride=8, padding=4)
    assert planner.plan_layer(CUDA0, torch.bfloat16, (16, 16), fcn, (64, 64)).variant == \
        planner.ATEN
    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        assert planner.plan_layer(CUDA0, torch.float32, (4, 4), k4s2, (64, 12)).variant == \
            planner.ATEN
        assert planner.plan_layer(CUDA0, torch.float32, (4, 4), k4s2, (64, 16)).variant == \
            _untimed_phase(capability)


@pytest.mark.parametrize("hw", [(28, 28), (14, 14), (1, 1)])
def test_tf32_nchw_k_equal_stride_runs_the_hopper_kernel(capability, hw):
    """TF32 NCHW input with kernel == stride: gemm_kxs_sm90's NCHW-output config on Hopper
    (any plane size; a 1 x 1 input is planned as k == stride) where Cin % 4 == 0, gemm_kxs
    elsewhere."""
    x = _fake_input(8, 256, hw, torch.float32)
    w = _fake_weight(256, 128, (2, 2) if hw != (1, 1) else (4, 4), torch.float32)
    args = ConvTransposeArgs.from_values(stride=2) if hw != (1, 1) else \
        ConvTransposeArgs.from_values()
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        chosen = planner.plan(x, w, args)
    if capability == (9, 0):
        assert chosen.variant == planner.KXS_SM90_NCHW_WINNER, chosen
        assert chosen.variant in chosen.candidates
    else:
        assert chosen.variant in (planner.GEMM_KXS, planner.ATEN), chosen
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # (3xTF32: see below)
        assert not planner.plan(x, w, args).variant.startswith(planner.GEMM_KXS_SM90)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):  # Cin % 4: the kernel's
        odd = planner.plan(_fake_input(8, 255, hw, torch.float32),
                           _fake_weight(255, 128, w.shape[-2:], torch.float32), args)
    assert not odd.variant.startswith(planner.GEMM_KXS_SM90), odd


def test_a_tensor_past_32_bits_takes_the_untimed_tma_default_away(capability):
    """gemm_phase_tma's untimed default is a config of its family: where a tensor reaches 2^31
    elements the phase kernels leave the plan, that default included."""
    x = _fake_input(4096, 256, (64, 64), torch.bfloat16)  # output 4096*128*128*128 > 2^31
    with torch.backends.cudnn.flags(enabled=True):
        chosen = planner.plan(x, _fake_weight(256, 128, (4, 4), torch.bfloat16),
                              ConvTransposeArgs.from_values(stride=2, padding=1))
    assert not chosen.variant.startswith(planner.GEMM_PHASE_TMA), chosen
    assert not any(v.startswith(planner.GEMM_PHASE_TMA) for v in chosen.candidates)


@pytest.mark.parametrize("channels_last", [False, True])
def test_fp32_strict_untimed_defaults_on_hopper(capability, channels_last):
    """fp32 without TF32 on Hopper: k == stride layers with sums deep enough for 3xTF32 run
    gemm_phase_tma (sized like its other untimed calls) instead of gemm_kxs; a layer cuDNN
    cannot run (output_padding >= stride) runs it instead of direct; shallow sums and other
    GPUs keep the rules before."""
    def plan(x, cout, kernel, args):
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            return planner.plan(x, _fake_weight(x.shape[1], cout, kernel, torch.float32), args)

    up1 = plan(_fake_input(8, 1024, (28, 28), torch.float32), 512, (2, 2),
               ConvTransposeArgs.from_values(stride=2))
    up4 = plan(_fake_input(8, 128, (196, 196), torch.float32), 64, (2, 2),
               ConvTransposeArgs.from_values(stride=2))
    shallow = plan(_fake_input(8, 32, (196, 196), torch.float32), 64, (2, 2),
                   ConvTransposeArgs.from_values(stride=2))
    outpad = plan(_fake_input(16, 64, (32, 32), torch.float32), 64, (3, 3),
                  ConvTransposeArgs.from_values(stride=1, padding=1, output_padding=1,
                                                dilation=2))
    if capability == (9, 0):
        assert up1.variant == "gemm_phase_tma:128x128s6", up1
        assert up4.variant == "gemm_phase_tma:128x64s8pp", up4
        assert outpad.variant == "gemm_phase_tma:128x64s8pp", outpad
        assert all(p.variant in p.candidates for p in (up1, up4, outpad))
    else:
        assert up1.variant in (planner.GEMM_KXS, planner.KXS_TAP_MAJOR), up1
        assert outpad.variant == planner.DIRECT, outpad
    assert shallow.variant == planner.ATEN, shallow  # 32-deep sums: 3xTF32 misses the bound


# The measured rule: direct kernels for depthwise layers; where cuDNN has no kernel
# (output_padding >= stride), up to a number of multiply-adds per pixel, the mma kernels in
# 16-bit (36,864) and the tiled ones in fp32 (weight gradient: 36,864; input gradient, with fp32
# GEMMs: 73,728); on layers without groups with at most 4 output and at least 32 input channels
# the mma kernels in 16-bit, and their weight gradient in fp32 with TF32 allowed (3xTF32);
# on Hopper the input gradient of dense layers without a cuDNN kernel on gemm_phase_tma's
# kernel; ATen's elsewhere.
@pytest.mark.parametrize("weight_shape,stride,padding,output_padding,groups,kind", [
    ((64, 1, 4, 4), (2, 2), (1, 1), (0, 0), 64, "depthwise"),
    ((32, 1, 3, 3), (1, 1), (1, 1), (0, 0), 32, "depthwise"),     # k3 s1
    ((64, 3, 4, 4), (2, 2), (1, 1), (0, 0), 1, "few out"),        # DCGAN's RGB output
    ((56, 1, 9, 9), (3, 3), (4, 4), (2, 2), 1, "few out"),        # FSRCNN
    ((64, 4, 4, 4), (2, 2), (1, 1), (0, 0), 1, "few out"),        # 4 out
    ((128, 4, 4, 4), (2, 2), (1, 1), (0, 0), 2, "aten"),          # 64 in, 4 out per group
    ((64, 5, 4, 4), (2, 2), (1, 1), (0, 0), 1, "aten"),           # 5 out
    ((16, 3, 4, 4), (2, 2), (1, 1), (0, 0), 1, "aten"),           # 16 in
    ((16, 4, 3, 3), (1, 1), (1, 1), (1, 1), 1, "no cudnn"),       # output_padding >= stride
    ((64, 32, 3, 3), (1, 2), (1, 1), (1, 1), 1, "no cudnn"),      # ... on one axis
    ((64, 64, 3, 3), (1, 1), (1, 1), (1, 1), 1, "no cudnn"),      # 36,864 MACs a pixel
    ((128, 64, 3, 3), (1, 1), (1, 1), (1, 1), 1, "input only"),   # 73,728
    ((256, 256, 3, 3), (1, 1), (1, 1), (1, 1), 1, "aten"),        # 589,824: ATen's GEMMs
    ((64, 64, 3, 3), (1, 1), (1, 1), (1, 1), 4, "no cudnn"),      # grouped, 2,304 per group
    ((16, 1, 3, 3), (1, 1), (1, 1), (1, 1), 16, "depthwise"),     # depthwise comes first
    ((64, 2, 4, 4), (2, 2), (1, 1), (0, 0), 64, "aten"),          # one in, two out per group
    ((1024, 512, 2, 2), (2, 2), (0, 0), (0, 0), 1, "aten"),       # U-Net's up1
    ((128, 16, 3, 3), (2, 2), (1, 1), (1, 1), 8, "aten"),         # 16 per group
    ((1024, 1, 9, 9), (2, 2), (4, 4), (0, 0), 1024, "aten"),      # depthwise, 82,944 MACs
])
@pytest.mark.parametrize("tf32_matmul", [False, True], ids=["fp32-gemms", "tf32-gemms"])
@pytest.mark.parametrize("allow_tf32", [True, False], ids=["tf32", "strict"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_backward_plan_gives_the_backward_kernels_the_layers_they_won(
        capability, weight_shape, stride, padding, output_padding, groups, kind, dtype,
        channels_last, allow_tf32, tf32_matmul):
    args = ConvTransposeArgs.from_values(stride, padding, output_padding, groups, (2, 2))
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32_matmul
    try:
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=allow_tf32):
            chosen = planner.backward_plan(torch.device("cuda", 0), dtype, weight_shape, args,
                                           channels_last)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    direct, tiled, aten = planner.DIRECT_BACKWARD, planner.TILED_BACKWARD, planner.ATEN
    mma = planner.MMA_BACKWARD
    sixteen_bit = dtype != torch.float32
    # The direct input gradient measured faster than cuDNN's only in channels_last, the tiled
    # one than ATen's native kernel only in fp32 with fp32 GEMMs.
    tiled_x = tiled if not tf32_matmul else aten
    no_cudnn = any(op >= s for op, s in zip(output_padding, stride))
    want_w, want_x = {
        "depthwise": (direct, direct if channels_last else
                      (mma if sixteen_bit else tiled_x) if no_cudnn else aten),
        # (fp32: the weight gradient as 3xTF32 with TF32 allowed, the input gradient cuDNN's)
        "few out": (mma, mma) if sixteen_bit else (mma, aten) if allow_tf32 else (aten, aten),
        "no cudnn": (mma, mma) if sixteen_bit else (tiled, tiled_x),
        "input only": (aten, aten) if sixteen_bit else (aten, tiled_x),
        "aten": (aten, aten),
    }[kind]
    # On Hopper, dense layers where grad_output's channels fill 16-byte rows: the input gradient
    # on gemm_phase_tma's kernel in fp32 strict on sums of >= 64 products (3xTF32), with or
    # without cuDNN; without a cuDNN kernel also in 16-bit and in TF32. Without a cuDNN kernel
    # PyTorch's GEMMs are cuBLAS's, so the matmul setting says which of the two the call is.
    _, out_channels, kh, kw = weight_shape
    strict = not sixteen_bit and not (tf32_matmul if no_cudnn else allow_tf32)
    if capability == (9, 0) and groups == 1 and max(stride) <= 8 and \
            out_channels % (8 if sixteen_bit else 4) == 0 and \
            ((strict and out_channels * kh * kw >= 64) or (no_cudnn and not strict)):
        want_x = planner.PHASE_TMA_BACKWARD
    assert (chosen.weight_grad.variant, chosen.grad_input.variant) == (want_w, want_x), chosen
    for gradient in (chosen.grad_input, chosen.weight_grad):
        assert gradient.reason and not gradient.fallback
        # (every kernel a plan names has the binding's code: kernel_calls hands it over)
        assert gradient.variant in kernel_calls._BACKWARD_KERNEL_CODES


@pytest.mark.parametrize("tf32_matmul", [False, True], ids=["fp32-gemms", "tf32-gemms"])
@pytest.mark.parametrize("allow_tf32", [True, False], ids=["tf32", "strict"])
def test_recorded_calls_train_on_the_grouped_kernel_and_where_cudnn_has_none(allow_tf32,
                                                                             tf32_matmul):
    plain = ConvTransposeArgs.from_values((2, 2), (1, 1), (1, 1), 1, (1, 1))
    no_cudnn = ConvTransposeArgs.from_values((1, 1), (1, 1), (1, 1), 1, (2, 2))
    wide, rgb, narrow = (64, 64, 4, 4), (64, 3, 4, 4), (16, 3, 4, 4)
    with tf32_settings_restored(), \
            torch.backends.cudnn.flags(enabled=True, allow_tf32=allow_tf32):
        torch.backends.cuda.matmul.allow_tf32 = tf32_matmul
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            sixteen_bit = dtype != torch.float32
            assert planner.trains_on_kernel(planner.GROUPED, dtype, plain, wide)
            # a k4 s2 dense layer: our forward with ATen's backward in TF32 (a call of unknown
            # size; test below), PyTorch's in 16-bit and in fp32 without TF32 off Hopper
            tf32 = dtype == torch.float32 and allow_tf32
            assert planner.trains_on_kernel(planner.GEMM_PHASE, dtype, plain, wide) == tf32
            assert planner.trains_on_kernel(planner.GEMM_PHASE, dtype, plain, narrow) == tf32
            assert not planner.trains_on_kernel(planner.ATEN, dtype, no_cudnn, wide)
            assert not planner.trains_on_kernel(planner.ATEN, dtype, plain, rgb)
            # few output channels: in 16-bit any kernel of ours (both gradients on the
            # tensor-core kernels); fp32 keeps PyTorch's, with TF32 allowed too
            for variant in (planner.GEMM_PHASE, planner.DIRECT, planner.FFMA_TILE,
                            planner.FFMA_TILE_CONFIGS[0]):
                assert planner.trains_on_kernel(variant, dtype, plain, rgb) == sixteen_bit
                # 16 in: not a few-output layer (a dense one: TF32's forward rule)
                assert planner.trains_on_kernel(variant, dtype, plain, narrow) == tf32
            # ATen computes these in its native kernels, whose GEMMs follow the matmul setting:
            # fp32 trains on ours where that is fp32 (our kernels then run fp32's precision too)
            want = sixteen_bit or not tf32_matmul
            for variant in (planner.GEMM_PHASE, planner.DIRECT, planner.GROUPED):
                assert planner.trains_on_kernel(variant, dtype, no_cudnn, wide) == (
                    want or variant == planner.GROUPED)


def test_fp32_strict_recorded_calls_train_on_ours_where_gemm_phase_tma_takes_the_input_gradient():
    """On Hopper in fp32 without TF32, a dense layer with a cuDNN kernel trains on its planned
    kernel where gemm_phase_tma's kernel takes the input gradient: one group, output channels in
    16-byte rows, strides up to 8, sums of at least 64 products. Nowhere else, and never with
    TF32 allowed, in 16-bit or where the plan is PyTorch's."""
    plain = ConvTransposeArgs.from_values((2, 2), (1, 1), (0, 0), 1, (1, 1))
    grouped = ConvTransposeArgs.from_values((2, 2), (1, 1), (0, 0), 2, (1, 1))
    stride9 = ConvTransposeArgs.from_values((9, 9), (0, 0), (0, 0), 1, (1, 1))
    dcgan, odd, shallow = (512, 256, 4, 4), (64, 6, 4, 4), (64, 4, 2, 2)
    tma = planner.GEMM_PHASE_TMA
    for allow_tf32 in (True, False):
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=allow_tf32):
            for hopper in (False, True):
                want = hopper and not allow_tf32
                if allow_tf32:  # (TF32: forward_in_training's rule, tested below)
                    continue
                assert planner.trains_on_kernel(tma, torch.float32, plain, dcgan,
                                                hopper=hopper) == want
                assert planner.trains_on_kernel(planner.GEMM_PHASE, torch.float32, plain,
                                                dcgan, hopper=hopper) == want
                assert not planner.trains_on_kernel(planner.ATEN, torch.float32, plain, dcgan,
                                                    hopper=hopper)
                assert not planner.trains_on_kernel(tma, torch.bfloat16, plain, dcgan,
                                                    hopper=hopper)
                assert not planner.trains_on_kernel(tma, torch.float32, plain, odd,
                                                    hopper=hopper)
                assert not planner.trains_on_kernel(tma, torch.float32, plain, shallow,
                                                    hopper=hopper)
                assert not planner.trains_on_kernel(tma, torch.float32, grouped, (512, 128, 4, 4),
                                                    hopper=hopper)
                assert not planner.trains_on_kernel(tma, torch.float32, stride9, (64, 64, 9, 9),
                                                    hopper=hopper)


@pytest.mark.parametrize("input_shape,channels_last,trains", [
    ((16, 64, 32, 32), False, False),     # 0.6 G multiply-adds, sums of 576: cuDNN keeps it
    ((16, 64, 32, 32), True, True),       # channels_last: ours took less host time than cuDNN's
    ((64, 64, 32, 32), False, True),      # 2.4 G multiply-adds
    ((64, 32, 32), False, False),         # unbatched
    ((1, 64, 171, 171), False, True),     # 1.08 G
])
def test_fp32_strict_training_in_nchw_needs_a_call_that_repays_the_input_gradients_host_work(
        input_shape, channels_last, trains):
    """In NCHW our input gradient (grad_output copied to channels_last, the weight packed, the
    GEMM) took more host time than cuDNN's: a recorded call trains on ours by default only from
    MIN_STRICT_NCHW_MACS multiply-adds or sums of MIN_STRICT_NCHW_DEPTH products on; a call of
    unknown size (the layer's report before any call) is answered from the layer."""
    dilated = ConvTransposeArgs.from_values((1, 1), (2, 2), (0, 0), 1, (2, 2))
    weight = (64, 64, 3, 3)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        assert planner.trains_on_kernel(planner.GEMM_PHASE_TMA, torch.float32, dilated, weight,
                                        hopper=True, call=(input_shape, channels_last)) == trains
        assert planner.trains_on_kernel(planner.GEMM_PHASE_TMA, torch.float32, dilated, weight,
                                        hopper=True)
        deep = (100, 512, 4, 4)  # DCGAN's first layer: sums of 8,192 on a 1 x 1 input
        assert planner.trains_on_kernel(planner.GEMM_PHASE_TMA, torch.float32,
                                        ConvTransposeArgs(), deep, hopper=True,
                                        call=((64, 100, 1, 1), False))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_tf32_and_sixteen_bit_recorded_calls_run_our_forward_where_the_call_repays_it(dtype):
    """With a cuDNN kernel and no gradient kernel of ours, a recorded call runs our planned
    forward (ATen's backward) in TF32 from MIN_TF32_MACS multiply-adds on (a stride-phase
    layer's from MIN_TF32_STRIDE_PHASE_MACS), either layout; in 16-bit only a kernel == stride
    layer's, from MIN_SIXTEEN_BIT_MACS on. Never without TF32 off Hopper, on PyTorch's plan, or
    for a few-output layer in fp32."""
    from deconv_patch.kernels import forward_in_training as rule

    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)
    kxs = ConvTransposeArgs.from_values(stride=2)
    weight = (512, 256, 2, 2)  # per pixel: 2^19 multiply-adds
    tf32 = dtype == torch.float32
    least = rule.MIN_TF32_MACS if tf32 else rule.MIN_SIXTEEN_BIT_MACS
    rows = (least >> 19) // 64  # a batch of 8, rows of 8 pixels
    at_least, below = (8, 512, rows, 8), (8, 512, rows - 1, 8)
    variant = planner.GEMM_KXS
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        for channels_last in (False, True):
            assert planner.trains_on_kernel(variant, dtype, kxs, weight,
                                            call=(at_least, channels_last))
            assert not planner.trains_on_kernel(variant, dtype, kxs, weight,
                                                call=(below, channels_last))
        unbatched = (512, rows, 8)  # a batch of 1
        assert not planner.trains_on_kernel(variant, dtype, kxs, weight, call=(unbatched, True))
        assert planner.trains_on_kernel(variant, dtype, kxs, weight)  # (some call may)
        # a k4 s2 layer: in TF32 as above, in 16-bit never (its stride-phase forward)
        k4 = (512, 256, 4, 4)
        assert planner.trains_on_kernel(planner.GEMM_PHASE_TMA, dtype, k4s2, k4,
                                        call=(at_least, False)) == tf32
        assert planner.trains_on_kernel(planner.GEMM_PHASE_TMA, dtype, k4s2, k4) == tf32
        # its TF32 threshold is the stride-phase one: 1.5 x the kernel == stride one
        phase_rows = rule.MIN_TF32_STRIDE_PHASE_MACS // (8 * 512 * 8 * 256 * 16)
        for rows_, trains in ((phase_rows, tf32), (phase_rows - 1, False),
                              (rule.MIN_TF32_MACS // (8 * 512 * 8 * 256 * 16), False)):
            assert planner.trains_on_kernel(planner.GEMM_PHASE_TMA, dtype, k4s2, k4,
                                            call=((8, 512, rows_, 8), False)) == trains
        assert not planner.trains_on_kernel(planner.ATEN, dtype, kxs, weight,
                                            call=(at_least, True))
        # a few-output layer: the tensor-core gradients in 16-bit, PyTorch's in TF32
        assert planner.trains_on_kernel(planner.GEMM_KXS, dtype, kxs, (64, 3, 2, 2),
                                        call=(at_least, False)) == (not tf32)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        assert planner.trains_on_kernel(variant, dtype, kxs, weight,
                                        call=(at_least, True)) == (not tf32)


def test_backward_plan_off_cuda_is_atens_fallback(capability):
    args = ConvTransposeArgs.from_values((2, 2), (1, 1), (0, 0), 16, (1, 1))
    on_cpu = planner.backward_plan(torch.device("cpu"), torch.float32, (16, 1, 4, 4), args, True)
    assert on_cpu.grad_input.variant == on_cpu.weight_grad.variant == planner.ATEN
    assert on_cpu.grad_input.fallback and on_cpu.weight_grad.fallback


def test_fp32_strict_phase_layers_left_to_cudnn_take_gemm_col2im_on_channels_last_input(
        capability, monkeypatch):
    """fp32 without TF32, cudnn.benchmark off, on Hopper: a phase layer the layer rules leave to
    cuDNN (here Keypoint R-CNN's 512 > 17 head: too few output channels for gemm_phase_tma)
    runs gemm_col2im's 3xTF32 on channels_last input with >= STRICT_DEFAULT_MIN_OUT_CHANNELS
    output channels and >= STRICT_DEFAULT_MIN_PIXELS input pixels; NCHW input, fewer channels
    or pixels, input channels off 16-byte rows, and other GPUs keep cuDNN."""
    from deconv_patch.kernels import gemm_col2im

    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)
    least_out = gemm_col2im.STRICT_DEFAULT_MIN_OUT_CHANNELS

    def plan(batch, cin, cout, hw, channels_last=True):
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False, benchmark=False):
            return planner.plan(_fake_input(batch, cin, hw, torch.float32, channels_last),
                                _fake_weight(cin, cout, (4, 4), torch.float32), k4s2)

    col2im = planner.COL2IM_3XTF32_CONFIGS[0] if capability == (9, 0) else planner.ATEN
    assert plan(4, 512, 17, (14, 14)).variant == col2im
    assert plan(1, 512, least_out, (8, 8)).variant == col2im  # 64 pixels
    assert plan(4, 512, 17, (14, 14), channels_last=False).variant == planner.ATEN
    assert plan(1, 512, 17, (7, 9)).variant == planner.ATEN  # 63 pixels
    monkeypatch.setattr(gemm_col2im, "STRICT_DEFAULT_MIN_OUT_CHANNELS", 18)
    assert plan(4, 512, 17, (14, 14)).variant == planner.ATEN  # 17 < 18 output channels
    monkeypatch.setattr(gemm_col2im, "STRICT_DEFAULT_MIN_OUT_CHANNELS", least_out)
    assert plan(4, 510, 17, (14, 14)).variant == planner.ATEN  # 510 channels: not 16-byte rows
    with planner.use_variant(planner.ATEN):
        assert plan(4, 512, 17, (14, 14)).variant == planner.ATEN


def test_layers_pytorch_runs_natively_are_planned_at_the_matmul_settings_precision(capability):
    """Where PyTorch runs its native kernels (output_padding >= stride, cuDNN disabled) its
    GEMMs are cuBLAS's: with TF32 allowed for convolutions but not for matmuls (PyTorch's
    defaults) such a layer gets fp32's plan (3xTF32 or FFMA, as with TF32 off), and with TF32
    in cuBLAS the TF32 plan; a layer cuDNN runs keeps the conv setting's."""
    no_cudnn = ConvTransposeArgs.from_values(stride=1, padding=1, output_padding=1, dilation=2)
    plain = ConvTransposeArgs.from_values(stride=2, padding=1)
    shapes = ((no_cudnn, (3, 3), (64, 64), True), (plain, (4, 4), (256, 128), False))
    with tf32_settings_restored():
        for args, kernel, channels, native in shapes:
            for cudnn in (True, False):
                def plan(conv: bool, matmul: bool):
                    torch.backends.cuda.matmul.allow_tf32 = matmul
                    with torch.backends.cudnn.flags(enabled=cudnn, allow_tf32=conv):
                        return planner.plan_layer(CUDA0, torch.float32, kernel, args, channels)

                strict, tf32 = plan(False, False), plan(True, True)
                assert strict != tf32, (args, cudnn)  # (fp32's plan differs from TF32's here)
                defaults = plan(True, False)
                assert defaults == (strict if native or not cudnn else tf32), (args, cudnn)
                assert plan(False, True) == (tf32 if native or not cudnn else strict)


def test_a_dilated_channels_last_call_in_deterministic_mode_keeps_the_settings_precision(
        capability):
    """In deterministic mode ATen gives a dilated layer's NCHW call its native kernels (cuBLAS's
    TF32 setting) and a channels_last one cuDNN (the convolution setting). Where the two
    settings differ, a channels_last call runs PyTorch's convolution (our kernels would take
    cuBLAS's precision); an NCHW one, and any call with equal settings, is planned as usual."""
    args = ConvTransposeArgs.from_values(stride=2, padding=2, output_padding=1, dilation=2)
    w = _fake_weight(64, 64, (3, 3), torch.float32)

    def plan(channels_last: bool, deterministic: bool) -> planner.Plan:
        x = _fake_input(8, 64, (16, 16), torch.float32, channels_last)
        with torch.backends.cudnn.flags(enabled=True, deterministic=deterministic,
                                        allow_tf32=True):
            return planner.plan(x, w, args)

    with tf32_settings_restored():
        torch.backends.cuda.matmul.allow_tf32 = False
        kept = plan(True, True)
        assert kept.variant == planner.ATEN and "deterministic" in kept.reason, kept
        assert not kept.fallback
        assert "deterministic" not in plan(True, False).reason
        assert "deterministic" not in plan(False, True).reason
        torch.backends.cuda.matmul.allow_tf32 = True  # (equal settings: TF32 either way)
        assert "deterministic" not in plan(True, True).reason


def test_training_graphs_call_the_op_where_every_recorded_call_trains_on_the_grouped_kernel():
    """planner.trains_in_compiled_graphs: the grouped kernel's training layers (depthwise,
    few channels per group, stride area <= 16), in every kernel dtype on CUDA, without
    autotune; not dense layers (whose recorded calls train on ours by size or on a packed
    weight), nor float64, the CPU, or a stride area past the grouped kernel's default."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")

    def args(stride=(2, 2), groups=1, dilation=(1, 1)):
        return ConvTransposeArgs(stride, (1, 1), (0, 0), dilation, groups)

    grouped = [(args(groups=64), 64, 64), (args((2, 3), 4, (2, 1)), 32, 64),
               (args(groups=8), 128, 128)]
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        for a, cin, cout in grouped:
            for dtype in (torch.float32, torch.bfloat16, torch.float16):
                assert planner.trains_in_compiled_graphs(cuda, dtype, a, cin, cout)
                assert planner.trains_in_compiled_graphs(cuda, dtype, a, cin, cout) == \
                    planner.trains_on_kernel(planner.GROUPED, dtype, a, (cin, cout // a.groups,
                                                                         4, 4))
            assert not planner.trains_in_compiled_graphs(cuda, torch.float64, a, cin, cout)
            assert not planner.trains_in_compiled_graphs(cpu, torch.float32, a, cin, cout)
        assert not planner.trains_in_compiled_graphs(cuda, torch.float32, args(), 256, 128)
        assert not planner.trains_in_compiled_graphs(cuda, torch.bfloat16, args(), 64, 3)
        assert not planner.trains_in_compiled_graphs(cuda, torch.float32, args((8, 8), 21),
                                                     21, 21)
    with torch.backends.cudnn.flags(enabled=True, benchmark=True):
        assert not planner.trains_in_compiled_graphs(cuda, torch.float32, args(groups=64), 64,
                                                     64)
