"""GPU correctness of ffma_tile (plain fp32 FFMA for few output channels per group with kernel ==
taps x stride: each thread computes every stride phase of a few input-aligned positions;
cuda/ffma_tile/ffma_tile.cu): the kernel's heuristic and every config forced on
NaN-poisoned random sweeps of padding / output_padding / grouping / channel counts / input
layout / dtype (fp32 with and without TF32: the kernel is exact FFMA either way) against a
float64 reference with the bound of tests/helpers.py (2x PyTorch's own error + 1 ulp of
the output), every fused activation, the benchmark's layers it is for at full size, its
refusals and the planner's listing."""

from __future__ import annotations

import functools

import pytest
import torch

from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.epilogue import ACTIVATIONS
from deconv_patch.ops import run_variant
from tests.cases import FEW_CHANNEL_LAYERS, random_ffma_tile_case
from tests.helpers import check_epilogue, check_full_layer, check_variant

pytestmark = pytest.mark.cuda


def _stride_of(variant: str) -> int:
    """The stride family of a config ("ffma_tile:s3q1x2o1" -> 3)."""
    return int(variant.split(":s")[1][0])


@pytest.mark.parametrize("seed", range(200))
def test_ffma_tile_sweep(seed):
    """The kernel's heuristic config, both stride families."""
    check_variant(planner.FFMA_TILE, seed + 120_000, random_ffma_tile_case)


@pytest.mark.parametrize("variant", planner.FFMA_TILE_CONFIGS)
@pytest.mark.parametrize("seed", range(50))
def test_ffma_tile_config_sweep(variant, seed):
    """Each config forced on its stride family (channel counts that leave partial channel
    chunks, partial tiles and positions outside the output included)."""
    check_variant(variant, seed + 121_000,
                  functools.partial(random_ffma_tile_case, stride=_stride_of(variant)))


@pytest.mark.parametrize("variant", planner.FFMA_TILE_CONFIGS)
@pytest.mark.parametrize("seed", range(len(ACTIVATIONS)))
def test_ffma_tile_epilogue_sweep(variant, seed):
    """Every config x every activation (the seed picks it, see check_epilogue)."""
    case = random_ffma_tile_case(seed + 122_000, stride=_stride_of(variant))
    check_epilogue(variant, case, seed)


def test_ffma_tile_configs_match_the_extension():
    from deconv_patch.kernels.extension import load_extension
    names = load_extension().config_names(planner.kernels.BY_NAME[planner.FFMA_TILE].code)
    assert [f"{planner.FFMA_TILE}:{n}" for n in names] == list(planner.FFMA_TILE_CONFIGS)


# The benchmark's few-channel layers of its stride families (Keypoint R-CNN's 17 channels: run
# forced, not listed by the planner).
_LAYERS = {k: FEW_CHANNEL_LAYERS[k] for k in ("dcgan.g5", "fsrcnn.x3", "keypoint")}


@pytest.mark.parametrize("layer", list(_LAYERS))
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("mode", ["bf16", "fp16", "tf32", "fp32"])
def test_ffma_tile_runs_the_benchmark_layers(layer, channels_last, mode):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32,
             "fp32": torch.float32}[mode]
    stride = _LAYERS[layer][5]
    for variant in (planner.FFMA_TILE, *(v for v in planner.FFMA_TILE_CONFIGS
                                         if _stride_of(v) == stride)):
        check_full_layer(variant, _LAYERS[layer], channels_last, dtype, tf32=mode != "fp32",
                         seed=13)


def test_ffma_tile_refuses_what_it_does_not_compute():
    """Kernels that are not taps x stride, dilation, unequal strides, and a config of the other
    stride family: refused with the binding's typed KernelRefused, never computed wrongly."""
    from deconv_patch.kernels.extension import load_extension
    refused = load_extension().KernelRefused
    x = torch.randn(2, 8, 9, 9, device="cuda")
    for kernel, args in (((3, 3), ConvTransposeArgs.from_values(stride=2, padding=1)),
                         ((4, 4), ConvTransposeArgs.from_values(stride=2, dilation=2)),
                         ((4, 4), ConvTransposeArgs.from_values(stride=(2, 1))),
                         ((6, 6), ConvTransposeArgs.from_values(stride=2))):
        w = torch.randn(8, 3, *kernel, device="cuda")
        with pytest.raises(refused, match="does not support"):
            run_variant(planner.FFMA_TILE, x, w, None, args)
    w = torch.randn(8, 3, 4, 4, device="cuda")
    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)
    with pytest.raises(refused, match="does not support"):
        run_variant(planner.FFMA_TILE_CONFIGS[-1], x, w, None, k4s2)  # a stride-3 config


def test_planner_lists_it_for_few_output_channel_layers():
    """An autotune candidate in every mode (fp32 strict included: FFMA is exact) for the layers
    it covers, with only its stride family's configs; absent for other kernels and for more
    than 8 output channels per group (Keypoint R-CNN's 17 measured 0.2-0.5x cuDNN)."""
    k4s2 = ConvTransposeArgs.from_values(stride=2, padding=1)
    x = torch.randn(2, 64, 8, 8, device="cuda")
    w = torch.randn(64, 3, 4, 4, device="cuda")
    s2 = {v for v in planner.FFMA_TILE_CONFIGS if _stride_of(v) == 2}
    for tf32 in (True, False):
        for dtype in (torch.float32, torch.bfloat16):
            with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
                chosen = planner.plan(x.to(dtype), w.to(dtype), k4s2)
            assert {v for v in chosen.candidates if v.startswith(planner.FFMA_TILE)} == s2, \
                chosen
    fsrcnn = planner.plan(torch.randn(1, 56, 8, 8, device="cuda"),
                          torch.randn(56, 1, 9, 9, device="cuda"),
                          ConvTransposeArgs.from_values(stride=3, padding=4, output_padding=2))
    assert {v for v in fsrcnn.candidates if v.startswith(planner.FFMA_TILE)} == \
        {v for v in planner.FFMA_TILE_CONFIGS if _stride_of(v) == 3}, fsrcnn
    k3 = planner.plan(x, torch.randn(64, 3, 3, 3, device="cuda"), k4s2)
    wide = planner.plan(x, torch.randn(64, 17, 4, 4, device="cuda"), k4s2)
    for chosen in (k3, wide):
        assert not any(v.startswith(planner.FFMA_TILE) for v in chosen.candidates), chosen
