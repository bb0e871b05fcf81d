"""fp32 precision of the grouped kernel (cuda/grouped/grouped.cu) on grouped layers with
several channels per group and large, dilated kernels, where one output sums a hundred or more
products: forced, in fp32 strict (TF32 off for cuDNN and matmuls), on NaN-poisoned outputs, every
element against a float64 reference with the bound of tests/helpers.py (2x PyTorch's own
max error + 1 ulp of the largest output). A single serial fp32 chain per output measured up to
3.4x PyTorch's error on such layers; the kernel sums channel blocks into partials instead.
Also bf16, fp16 and TF32 on some of the same shapes, with the same bound."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from tests.cases import Case, random_paddings
from tests.helpers import check_variant

pytestmark = pytest.mark.cuda

SWEEP_SIZE = 150
SEEDS = range(5)


@pytest.fixture
def fp32_strict():
    """TF32 off for matmuls too (check_variant sets cuDNN's flag from the case)."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


def _case(batch: int, cin: int, weight: tuple, groups: int, hw: tuple, stride: tuple,
          padding: tuple, output_padding: tuple, dilation: tuple) -> Case:
    """An fp32 strict case without bias, input (batch, cin, *hw), weight shape `weight`."""
    args = ConvTransposeArgs(stride, padding, output_padding, dilation, groups)
    return Case(batch=batch, in_channels=cin, out_channels=weight[1] * groups, hw=hw,
                kernel=weight[2:], args=args, bias=False, dtype=torch.float32,
                channels_last=False, weight_channels_last=False, non_contiguous=False,
                unbatched=False, tf32=False)


# Layers where the single-chain order measured 2.2-3.4x PyTorch's max error on an H100.
LAYERS = {
    "x5-22-11x9_w22-2-6x7_s1x4_p3x1_d3x3_g2":
        _case(5, 22, (22, 2, 6, 7), 2, (11, 9), (1, 4), (3, 1), (0, 0), (3, 3)),
    "x1-48-14x15_w48-3-7x6_s3x1_p3x6_op2x0_d1x2_g4":
        _case(1, 48, (48, 3, 7, 6), 4, (14, 15), (3, 1), (3, 6), (2, 0), (1, 2)),
    "x3-33-3x20_w33-7-5x7_s3x1_p0x2_op2x0_d1x2_g3":
        _case(3, 33, (33, 7, 5, 7), 3, (3, 20), (3, 1), (0, 2), (2, 0), (1, 2)),
}


def _sweep_case(seed: int) -> Case:
    """A random grouped layer: Cin/g 8-16, Cout/g 1-16, kernel up to 7x7, dilation 1-3,
    groups 2-8, stride 1-4, any valid padding / output_padding, batch 1-5; NCHW, channels_last
    (the kernel's other lane mapping) or strided input; fp32 strict, no bias."""
    rng = random.Random(seed * 9973 + 29)
    while True:
        groups = rng.randint(2, 8)
        cin_g, cout_g = rng.randint(8, 16), rng.randint(1, 16)
        kernel = (rng.randint(1, 7), rng.randint(1, 7))
        stride = (rng.randint(1, 4), rng.randint(1, 4))
        dilation = (rng.randint(1, 3), rng.randint(1, 3))
        padding, output_padding = random_paddings(rng, kernel, stride, dilation)
        hw = (rng.randint(1, 16), rng.randint(1, 16))
        args = ConvTransposeArgs(stride, padding, output_padding, dilation, groups)  # type: ignore[arg-type]
        if any(v <= 0 for v in args.output_hw(hw, kernel)):
            continue
        layout = rng.random()
        return Case(batch=rng.randint(1, 5), in_channels=cin_g * groups,
                    out_channels=cout_g * groups, hw=hw, kernel=kernel,  # type: ignore[arg-type]
                    args=args, bias=False, dtype=torch.float32, channels_last=layout < 0.3,
                    weight_channels_last=rng.random() < 0.1, non_contiguous=layout > 0.85,
                    unbatched=False, tf32=False)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("layer", list(LAYERS))
def test_grouped_fp32_strict_layers(layer, channels_last, seed, fp32_strict):
    case = dataclasses.replace(LAYERS[layer], channels_last=channels_last)
    check_variant(planner.GROUPED, seed + 131_000, lambda _: case)


@pytest.mark.parametrize("seed", range(SWEEP_SIZE))
def test_grouped_fp32_strict_sweep(seed, fp32_strict):
    # Every case is inside the kernel's domain (at most 16 x 16 channels per group, 7x7 taps):
    # a refusal fails the test.
    check_variant(planner.GROUPED, seed + 132_000, _sweep_case)


MODES = {"bf16": (torch.bfloat16, False), "fp16": (torch.float16, False),
         "tf32": (torch.float32, True)}
SHAPES = [*(("layer", name) for name in LAYERS), *(("sweep", s) for s in range(6))]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{k}-{v}" for k, v in SHAPES])
def test_grouped_other_modes(shape, mode):
    """16-bit input / output and TF32 allowed on the same shapes (with bias: the epilogue's one
    rounding to the output type)."""
    dtype, tf32 = MODES[mode]
    kind, key = shape
    base = LAYERS[key] if kind == "layer" else _sweep_case(key)
    case = dataclasses.replace(base, dtype=dtype, tf32=tf32, bias=True)
    check_variant(planner.GROUPED, 133_000 + len(SHAPES) * list(MODES).index(mode) +
                  SHAPES.index(shape), lambda _: case)
