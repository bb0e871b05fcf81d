"""The planner on the GPU, across kernel families: where cuDNN cannot run (output_padding >=
stride), 3xTF32 for deep fp32-strict sums and cuDNN for shallow ones, the grouped kernel for
few channels per group, the wgmma configs among the 16-bit candidates, and cuDNN for small
channels_last k == stride layers off Hopper."""

from __future__ import annotations

import pytest
import torch

from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.ops import run_variant

pytestmark = pytest.mark.cuda


def test_planner_where_cudnn_cannot_run():
    """output_padding >= stride: gemm_phase where channels fill tensor-core tiles, else direct,
    and in 16-bit with <= gemm_out_tile.DEFAULT_MAX_CHANNELS output channels per group gemm_out_tile
    (either way); k != stride elsewhere: gemm_phase_tma untimed on Hopper, else cuDNN unless
    autotune times gemm_phase faster."""
    args = ConvTransposeArgs.from_values(stride=1, output_padding=1, dilation=2)
    w = torch.randn(64, 48, 3, 3, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(2, 64, 16, 16, device="cuda", dtype=torch.bfloat16)
    assert planner.plan(x, w, args).variant == planner.GEMM_PHASE
    assert planner.plan(x[:, :8], w[:8, :40].contiguous(), args).variant == planner.DIRECT
    for few in (w[:, :32], w[:8, :4]):  # few output channels: the output-tiled kernel
        assert planner.plan(x[:, :few.shape[0]], few.contiguous(), args).variant == \
            planner.GEMM_OUT_TILE
    common = planner.plan(x, w, ConvTransposeArgs.from_values(2, 1))
    # (cudnn.benchmark off: gemm_phase_tma's untimed default on Hopper, cuDNN elsewhere)
    on_sm90 = torch.cuda.get_device_capability() == (9, 0)
    assert common.variant.startswith(planner.GEMM_PHASE_TMA) if on_sm90 else \
        common.variant == planner.ATEN
    assert planner.PHASE_CONFIGS[0] in common.candidates
    for tile in planner.PHASE_CONFIGS:  # every named tile config runs and agrees
        got = run_variant(tile, x, w, None, args)
        torch.testing.assert_close(got, run_variant(planner.GEMM_PHASE, x, w, None, args),
                                   rtol=1e-2, atol=1e-2)
    from deconv_patch.kernels.extension import load_extension
    code = planner.kernels.BY_NAME[planner.GEMM_PHASE].code
    assert len(load_extension().config_names(code)) == len(planner.PHASE_CONFIGS)


def test_planner_rules_for_3xtf32_grouped_and_wgmma_phase():
    """3xTF32 for deep fp32-strict k == stride sums (gemm_phase_tma's on Hopper, gemm_kxs's
    elsewhere), cuDNN for shallow ones; deep fp32-strict phase layers: gemm_phase_tma's 3xTF32
    on Hopper, cuDNN elsewhere (gemm_phase's 3xTF32 is forced-only); the grouped kernel for few
    channels per group; wgmma configs among the 16-bit autotune candidates."""
    kxs = ConvTransposeArgs.from_values(stride=2)
    x = torch.randn(8, 128, 160, 128, device="cuda")
    w = torch.randn(128, 64, 2, 2, device="cuda")
    phase = ConvTransposeArgs.from_values(stride=2, padding=1)
    w4 = torch.randn(128, 64, 4, 4, device="cuda")
    on_sm90 = torch.cuda.get_device_capability() == (9, 0)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        # (on Hopper the untimed rule runs deep k == stride sums on gemm_phase_tma's 3xTF32)
        nchw = planner.plan(x, w, kxs)
        cl = planner.plan(x.contiguous(memory_format=torch.channels_last), w, kxs)
        if on_sm90:
            assert nchw.variant.startswith(planner.GEMM_PHASE_TMA), nchw
            assert cl.variant.startswith(planner.GEMM_PHASE_TMA), cl
        else:
            assert nchw.variant == planner.GEMM_KXS and cl.variant == planner.KXS_TAP_MAJOR
        assert planner.plan(x[:, :4], w[:4], kxs).variant == planner.ATEN
        strict_phase = planner.plan(x[:2, :, :32, :32], w4, phase)  # (see MIN_3XTF32_DEPTH)
        assert strict_phase.variant == (planner.GEMM_PHASE_TMA if on_sm90 else planner.ATEN)
        assert planner.PHASE_CONFIGS[0] not in strict_phase.candidates
    dw = planner.plan(torch.randn(4, 64, 32, 32, device="cuda", dtype=torch.bfloat16),
                      torch.randn(64, 1, 4, 4, device="cuda", dtype=torch.bfloat16),
                      ConvTransposeArgs.from_values(stride=2, padding=1, groups=64))
    assert dw.variant == planner.GROUPED and planner.ATEN in dw.candidates
    bf = planner.plan(x[:2, :, :32, :32].bfloat16(), w4.bfloat16(), phase)
    assert (set(planner.SM90_CONFIGS) <= set(bf.candidates)) == (
        torch.cuda.get_device_capability() == (9, 0))


def test_planner_prefers_cudnn_for_small_channels_last_gemm():
    x = torch.randn(2, 256, 14, 14, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(256, 256, 2, 2, device="cuda", dtype=torch.bfloat16)
    args = ConvTransposeArgs.from_values(stride=2)
    nhwc = planner.plan(x.contiguous(memory_format=torch.channels_last), w, args)
    if torch.cuda.get_device_capability() == (9, 0):  # the TMA + wgmma kernel, at every size
        assert nhwc.variant == planner.KXS_SM90_WINNER
    else:
        assert nhwc.variant == "aten" and "gemm_kxs" in nhwc.candidates and not nhwc.fallback
    nchw = planner.plan(x, w, args)  # 0.8 MiB output: host-bound either way
    assert nchw.variant == "aten" and "host-bound" in nchw.reason and "gemm_kxs" in nchw.candidates
    big = planner.plan(torch.cat([x] * 8), w, args)  # 6.4 MiB output: the kernel runs
    assert big.variant == "gemm_kxs"


# (layer: batch, in, out, input hw, kernel, stride, padding, output_padding; mode) with the family
# the untimed rule gives it on Hopper (cudnn.benchmark off)
_UNTIMED_LAYERS = [
    ((16, 128, 64, (16, 16), 4, 2, 1, 0), "tf32", planner.GEMM_PHASE_TMA),
    ((16, 256, 128, (8, 8), 4, 2, 1, 0), "bf16", planner.GEMM_PHASE_TMA),
    ((2, 128, 64, (32, 32), 3, 2, 1, 1), "fp16", planner.GEMM_PHASE_TMA),
    ((8, 64, 3, (16, 16), 4, 2, 1, 0), "tf32", planner.FFMA_TILE),
    ((8, 64, 3, (16, 16), 4, 2, 1, 0), "fp32", planner.FFMA_TILE),
    ((8, 128, 64, (64, 64), 2, 2, 0, 0), "tf32", planner.GEMM_KXS_SM90),
    ((8, 128, 64, (64, 64), 2, 2, 0, 0), "fp32", planner.GEMM_PHASE_TMA),
    ((8, 64, 64, (16, 16), 3, 1, 1, 1), "fp32", planner.GEMM_PHASE_TMA),  # op >= stride
    # ... with TF32 allowed for convolutions: ATen's native GEMMs are fp32 (cuBLAS's default),
    # so its fp32 form (3xTF32)
    ((8, 64, 64, (16, 16), 3, 1, 1, 1), "tf32", planner.GEMM_PHASE_TMA),
]


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("layer,mode,family", _UNTIMED_LAYERS)
def test_untimed_defaults_run_through_the_module(layer, mode, family, channels_last):
    """With cudnn.benchmark off, a FastConvTranspose2d runs the untimed rule's family on Hopper
    (cuDNN or gemm_kxs elsewhere) and its output is within the bound of PyTorch's error against
    float64 (TF32: the error of TF32 operands), twice (the second call through the armed C++
    fast path)."""
    import deconv_patch
    from deconv_patch.reference import conv_transpose2d_float64, tf32_round
    from tests.helpers import allowed_error, max_error, runs_tf32

    n, cin, cout, hw, k, s, p, op = layer
    dilation = 2 if op >= s else 1
    dtype = {"tf32": torch.float32, "fp32": torch.float32, "bf16": torch.bfloat16,
             "fp16": torch.float16}[mode]
    gen = torch.Generator().manual_seed(cin + cout + k)
    x = torch.randn(n, cin, *hw, generator=gen).cuda().to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    ref_module = torch.nn.ConvTranspose2d(cin, cout, k, s, p, op, dilation=dilation).cuda()
    with torch.no_grad():
        ref_module.weight.copy_(torch.randn(ref_module.weight.shape, generator=gen) /
                                (cin * k * k) ** 0.5)
        ref_module.bias.copy_(torch.randn(cout, generator=gen))
    ref_module = ref_module.to(dtype)
    fast = deconv_patch.FastConvTranspose2d.from_module(ref_module)
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, benchmark=False,
                                                     allow_tf32=mode == "tf32"):
        chosen = fast.plan_for(x).variant
        expected = ref_module(x)
        outs = [fast(x), fast(x)]
    if torch.cuda.get_device_capability() == (9, 0):
        assert planner.split_variant(chosen)[0] == family, chosen
    ref = conv_transpose2d_float64(x, ref_module.weight, ref_module.bias,
                                   ConvTransposeArgs.from_values(s, p, op, 1, dilation))
    torch_err = max_error(expected, ref)
    args = ConvTransposeArgs.from_values(s, p, op, 1, dilation)
    if mode == "tf32" and runs_tf32(dtype, args, True):  # (not where ATen's GEMMs are fp32)
        ref_tf32 = conv_transpose2d_float64(tf32_round(x), tf32_round(ref_module.weight),
                                            ref_module.bias, args)
        torch_err = max(torch_err, max_error(ref_tf32, ref))
    for out in outs:
        assert out.shape == expected.shape and out.stride() == expected.stride()
        assert max_error(out, ref) <= allowed_error(torch_err, ref, dtype), chosen


def test_an_example_call_under_autocast_lists_the_units_of_autocasts_dtype():
    """optimize() records its example calls before the op's autocast rule casts them: inside
    CUDA autocast a float32 call is planned, and its units listed, in autocast's dtype."""
    from deconv_patch import FastConvTranspose2d
    from deconv_patch.modules import example_plan

    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the untimed rule gives this layer gemm_phase_tma on Hopper only")
    layer = FastConvTranspose2d.from_module(torch.nn.ConvTranspose2d(128, 64, 4, 2, 1).cuda())
    geometry = ((64, 128, 16, 16), (32768, 256, 16, 1), torch.float32, torch.device("cuda"))
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        plain = example_plan(layer, *geometry)[1]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            cast = example_plan(layer, *geometry)[1]
        with torch.autocast("cuda", dtype=torch.float16):
            half = example_plan(layer, *geometry)[1]
    assert plain and all(u.endswith(".f32") for u in plain), plain
    assert cast and all(u.endswith(".bf16") for u in cast), cast
    assert half and all(u.endswith(".f16") for u in half), half
