"""GPU correctness of the CUDA kernels and the op (skipped without a GPU; run on the device).

Bound per config: our max error against a float64 reference must be at most twice PyTorch's own
max error against the same reference, plus one ulp of the dtype at the largest |reference| (two
correct implementations may round the final output to neighbouring values).
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import deconv_patch
from deconv_patch import planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.ops import FallbackWarning, run_variant
from deconv_patch.reference import conv_transpose2d_float64, tf32_round
from tests.cases import call_args, random_case, random_kxs_case, random_phase_case
from tests.test_arguments import INVALID

pytestmark = pytest.mark.cuda
OP = torch.ops.deconv_patch.conv_transpose2d
SWEEP_SIZE = 1200


def max_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return (out.double() - ref).abs().max().item() if out.numel() else 0.0


def allowed_error(torch_err: float, ref: torch.Tensor, dtype: torch.dtype) -> float:
    scale = ref.abs().max().item() if ref.numel() else 0.0
    return 2.0 * torch_err + torch.finfo(dtype).eps * scale


def check_variant(variant: str, seed: int, make_case=random_case) -> None:
    case = make_case(seed)
    x, w, b = case.make("cuda", seed)
    # PyTorch and the variant run under the case's TF32 setting (an fp32 kernel reads it: with
    # TF32 off it runs its strict mode, or refuses).
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=case.tf32):
        expected = F.conv_transpose2d(*call_args(case, x, w, b))
        poisoned = torch.full_like(expected, float("nan"))  # same shape and strides as PyTorch's
        got = run_variant(variant, x, w, b, case.args, out=poisoned)
    ref = conv_transpose2d_float64(x, w, b, case.args)
    torch.cuda.synchronize()
    assert got.data_ptr() == poisoned.data_ptr()
    assert not torch.isnan(got).any(), f"{case}: unwritten output elements"
    err, torch_err = max_error(got, ref), max_error(expected, ref)
    if case.dtype == torch.float32 and case.tf32 and x.numel():
        # TF32 is allowed: the bar is the error inherent to TF32 operands (cuDNN may or may
        # not have used TF32 for this shape, so its own error is no guide).
        ref_tf32 = conv_transpose2d_float64(tf32_round(x), tf32_round(w), b, case.args)
        torch_err = max(torch_err, max_error(ref_tf32, ref))
    assert err <= allowed_error(torch_err, ref, case.dtype), (
        f"{case}: error {err:.3e} vs PyTorch {torch_err:.3e}")
    with planner.use_variant(variant), \
            torch.backends.cudnn.flags(enabled=True, allow_tf32=case.tf32):
        via_op = OP(*call_args(case, x, w, b))
    assert via_op.shape == expected.shape and via_op.stride() == expected.stride(), str(case)
    assert torch.equal(via_op, got), f"{case}: op dispatch differs from the forced variant"
    with FakeTensorMode() as mode:
        fake_in = [None if t is None else mode.from_tensor(t) for t in (x, w, b)]
        fake = OP(*call_args(case, *fake_in))
    assert fake.shape == expected.shape and fake.stride() == expected.stride(), str(case)


def check_full_layer(variant: str, layer: tuple, channels_last: bool, dtype: torch.dtype,
                     tf32: bool = True, seed: int = 0) -> None:
    """`variant` on one of the benchmark's layers at full size (many tiles per CTA for the
    persistent kernels), layer = (batch, cin, cout, (h, w), kernel, stride, padding,
    output_padding, dilation), fresh random data, NaN-poisoned output, every element checked
    against a float64 reference with check_variant's bound (fp32 with TF32: the error inherent to
    TF32 operands; fp32 strict: PyTorch's own)."""
    n, cin, cout, hw, k, s, p, op, d = layer
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, cin, *hw, generator=gen).cuda().to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w = (torch.randn(cin, cout, k, k, generator=gen) / cin ** 0.5).cuda().to(dtype)
    b = torch.randn(cout, generator=gen).cuda().to(dtype)
    args = ConvTransposeArgs.from_values(stride=s, padding=p, output_padding=op, dilation=d)
    ref = conv_transpose2d_float64(x, w, b, args)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
        expected = F.conv_transpose2d(x, w, b, s, p, op, 1, d)
        got = run_variant(variant, x, w, b, args, out=torch.full_like(expected, float("nan")))
    torch.cuda.synchronize()
    assert not torch.isnan(got).any(), f"{variant} {layer}: unwritten output elements"
    torch_err = max_error(expected, ref)
    if dtype == torch.float32 and tf32:  # the bar is the error inherent to TF32 operands
        torch_err = max(torch_err, max_error(
            conv_transpose2d_float64(tf32_round(x), tf32_round(w), b, args), ref))
    err = max_error(got, ref)
    assert err <= allowed_error(torch_err, ref, dtype), (
        f"{variant} {layer}: error {err:.3e} vs PyTorch {torch_err:.3e}")


def _tf32_truncated(x: torch.Tensor) -> torch.Tensor:
    """x (float64 holding fp32 values) with its 13 bits below TF32 cleared (truncation)."""
    return (x.float().view(torch.int32) & ~0x1FFF).view(torch.float32).double()


def _tf32_ties_to_even(x: torch.Tensor) -> torch.Tensor:
    """x (float64 holding fp32 values) rounded to TF32 to nearest, ties to even."""
    bits = x.float().view(torch.int32)
    low, lsb = bits & 0x1FFF, (bits >> 13) & 1
    up = (low > 0x1000) | ((low == 0x1000) & (lsb == 1))
    return ((bits & ~0x1FFF) + up.int() * 0x2000).view(torch.float32).double()


def check_tf32_rounds_to_nearest_away(variant: str, args: ConvTransposeArgs,
                                       kernel: tuple, channels_last: bool) -> None:
    """TF32 mode rounds the input to nearest, ties away from zero (cvt.rna), before the tensor
    cores, exactly as the reference's tf32_round. The inputs have 12 significant bits (one
    more than TF32), about half of them ending in 1 (a tie); the weights are small multiples of
    1/2, so every product and partial sum is exact in fp32 and the output must equal the float64
    result of the rounded inputs bit for bit. Truncation (how the tensor cores read raw fp32) and
    ties to even give other outputs on the same data (checked)."""
    gen = torch.Generator().manual_seed(7)
    n, cin, cout, hw = 2, 8, 32, (12, 10)
    mant = torch.randint(2048, 4096, (n, cin, *hw), generator=gen)
    sign = torch.randint(0, 2, mant.shape, generator=gen) * 2 - 1
    x = (sign * mant).double() / 4096
    w = torch.randint(-4, 5, (cin, cout, *kernel), generator=gen).double() / 2
    expected = conv_transpose2d_float64(tf32_round(x), w, None, args)
    for other in (_tf32_truncated(x), _tf32_ties_to_even(x)):
        differs = conv_transpose2d_float64(other, w, None, args) != expected
        assert differs.double().mean() > 0.2, "the data must tell the roundings apart"
    xc = x.float().cuda()
    if channels_last:
        xc = xc.contiguous(memory_format=torch.channels_last)
    ref_shape = F.conv_transpose2d(xc, w.float().cuda(), None, args.stride, args.padding,
                                   args.output_padding, args.groups, args.dilation)
    poisoned = torch.full_like(ref_shape, float("nan"))
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        got = run_variant(variant, xc, w.float().cuda(), None, args, out=poisoned)
    torch.cuda.synchronize()
    assert got.data_ptr() == poisoned.data_ptr()
    wrong = (got.double().cpu() != expected).sum().item()
    assert wrong == 0, f"{variant}: {wrong} of {expected.numel()} outputs differ"


@pytest.mark.parametrize("seed", range(SWEEP_SIZE))
def test_direct_kernel_random_sweep(seed):
    check_variant(planner.DIRECT, seed)


@pytest.mark.parametrize("seed", range(400))
def test_gemm_kxs_kernel_random_sweep(seed):
    check_variant(planner.GEMM_KXS, seed, random_kxs_case)


@pytest.mark.parametrize("seed", range(600))
def test_gemm_phase_kernel_random_sweep(seed):
    check_variant(planner.GEMM_PHASE, seed, random_phase_case)


def _tf32_random_case(seed: int):
    """random_case with TF32 allowed for fp32 (gemm_phase's fp32 mode): tiny channel counts,
    depthwise and every hyperparameter."""
    case = random_case(seed + 20_000)
    return dataclasses.replace(case, tf32=True) if case.dtype == torch.float32 else case


@pytest.mark.parametrize("seed", range(300))
def test_gemm_phase_deep_k_tile_sweep(seed):
    """Config 128x128x64 (two 32-deep k-tiles per stage; odd tile counts end half-filled)."""
    check_variant("gemm_phase:128x128x64", seed + 5000, random_phase_case)


@pytest.mark.parametrize("seed", range(300))
def test_gemm_phase_kernel_small_channel_sweep(seed):
    check_variant(planner.GEMM_PHASE, seed, _tf32_random_case)


def test_planner_picks_gemm_kxs_for_kernel_equal_stride():
    x = torch.randn(8, 128, 160, 128, device="cuda", dtype=torch.bfloat16)  # 80 MiB output
    w = torch.randn(128, 64, 2, 2, device="cuda", dtype=torch.bfloat16)
    on_sm90 = torch.cuda.get_device_capability() == (9, 0)
    # dense 16-bit NCHW: the TMA + wgmma kernel reads it in place on Hopper (kernel-area tiles
    # for the NCHW output)
    assert planner.plan(x, w, ConvTransposeArgs.from_values(stride=2)).variant == (
        planner.KXS_SM90_NCHW_WINNER if on_sm90 else "gemm_kxs")
    assert planner.plan(x[:, :, :, :127], w, ConvTransposeArgs.from_values(stride=2)).variant \
        == "gemm_kxs"  # a view, not dense NCHW
    small = planner.plan(x[:1, :, :16, :16], w, ConvTransposeArgs.from_values(stride=2))
    assert small.variant == "aten" and "gemm_kxs" in small.candidates  # overhead would dominate
    nhwc = planner.plan(x.contiguous(memory_format=torch.channels_last), w,
                        ConvTransposeArgs.from_values(stride=2))
    # channels_last: the TMA + wgmma kernel on Hopper, else tap-major (16-byte stores)
    assert nhwc.variant == (planner.KXS_SM90_WINNER if on_sm90 else planner.KXS_TAP_MAJOR)
    # TF32 channels_last input: the cooperative 128x256 tile on Hopper (fp32 stores regrouped)
    nhwc32 = planner.plan(x[:2].float().contiguous(memory_format=torch.channels_last), w.float(),
                          ConvTransposeArgs.from_values(stride=2))
    if on_sm90:
        assert nhwc32.variant == planner.KXS_SM90_TF32_WINNER, nhwc32
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        strict = planner.plan(x.float(), w.float(), ConvTransposeArgs.from_values(stride=2))
        shallow = planner.plan(x[:, :8].float(), w[:8].float(),
                               ConvTransposeArgs.from_values(stride=2))
    assert strict.variant == "gemm_kxs" and "3xTF32" in strict.reason  # 128-deep sums
    assert shallow.variant == planner.ATEN  # 8-deep sums: 3xTF32 would miss fp32's bound


def test_planner_where_cudnn_cannot_run():
    """output_padding >= stride: gemm_phase where channels fill tensor-core tiles, else direct,
    and in 16-bit with <= OUT_TILE_DEFAULT_MAX_CHANNELS output channels per group gemm_out_tile
    (either way); k != stride elsewhere: cuDNN unless autotune times gemm_phase faster."""
    args = ConvTransposeArgs.from_values(stride=1, output_padding=1, dilation=2)
    w = torch.randn(64, 48, 3, 3, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(2, 64, 16, 16, device="cuda", dtype=torch.bfloat16)
    assert planner.plan(x, w, args).variant == planner.GEMM_PHASE
    assert planner.plan(x[:, :8], w[:8, :40].contiguous(), args).variant == planner.DIRECT
    for few in (w[:, :32], w[:8, :4]):  # few output channels: the output-tiled kernel
        assert planner.plan(x[:, :few.shape[0]], few.contiguous(), args).variant == \
            planner.GEMM_OUT_TILE
    common = planner.plan(x, w, ConvTransposeArgs.from_values(2, 1))
    assert common.variant == planner.ATEN and planner.PHASE_CONFIGS[0] in common.candidates
    for tile in planner.PHASE_CONFIGS:  # every named tile config runs and agrees
        got = run_variant(tile, x, w, None, args)
        torch.testing.assert_close(got, run_variant(planner.GEMM_PHASE, x, w, None, args),
                                   rtol=1e-2, atol=1e-2)
    from deconv_patch.extension import load_extension
    assert load_extension().gemm_phase_num_configs() == len(planner.PHASE_CONFIGS)


@pytest.mark.slow
@pytest.mark.parametrize("variant", [planner.DIRECT, planner.GEMM_KXS])
@pytest.mark.parametrize("cin,cout,hw,channels_last", [(4, 4, 64, False), (2, 1, 128, True)])
def test_tensor_past_2_31_elements(cin, cout, hw, channels_last, variant):
    batch = (2**31) // (cout * 4 * hw * hw) + 1  # k=2, s=2 doubles each side
    x = torch.randn(batch, cin, hw, hw, device="cuda", dtype=torch.bfloat16)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(cin, cout, 2, 2, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(cout, device="cuda", dtype=torch.bfloat16)
    args = ConvTransposeArgs.from_values(stride=2)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    out = torch.full((batch, cout, 2 * hw, 2 * hw), float("nan"), device="cuda",
                     dtype=torch.bfloat16).contiguous(memory_format=fmt)
    assert out.numel() > 2**31
    got = run_variant(variant, x, w, b, args, out=out)
    assert not torch.isnan(got).any()
    for n in (0, 1, batch // 2, batch - 2, batch - 1):
        ref = F.conv_transpose2d(x[n : n + 1].double(), w.double(), b.double(), 2)
        expected = F.conv_transpose2d(x[n : n + 1], w, b, 2)
        assert max_error(got[n : n + 1], ref) <= allowed_error(
            max_error(expected, ref), ref, torch.bfloat16), f"sample {n}"
    del x, out, got
    torch.cuda.empty_cache()


@pytest.mark.parametrize("seed", range(40))
def test_gradients_match_aten(seed):
    case = random_case(seed + 5000, dtypes=(torch.float32,))
    x, w, b = case.make("cuda", seed)
    if x.numel() == 0:
        pytest.skip("empty batch")
    leaves = [t.detach().clone().requires_grad_() for t in (x, w) + ((b,) if b is not None else ())]
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        out_ref = F.conv_transpose2d(*call_args(case, *leaves[:2], leaves[2] if b is not None else None))
        grad = torch.randn_like(out_ref)
        expected = torch.autograd.grad(out_ref, leaves, grad)
        with planner.use_variant("direct"):
            out = OP(*call_args(case, *leaves[:2], leaves[2] if b is not None else None))
        got = torch.autograd.grad(out, leaves, grad)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


def test_torch_compile_fullgraph_inductor():
    w = torch.randn(16, 8, 4, 4, device="cuda")
    b = torch.randn(8, device="cuda")

    def f(x):
        return torch.relu(OP(x, w, b, 2, 1, 0, 1, 1)) * 2

    x = torch.randn(4, 16, 9, 7, device="cuda")
    compiled = torch.compile(f, fullgraph=True)
    with planner.use_variant("direct"), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        torch.testing.assert_close(compiled(x), f(x))
        x2 = torch.randn(4, 16, 9, 7, device="cuda")
        torch.testing.assert_close(compiled(x2), f(x2))


def test_cuda_graph_capture_and_replay():
    w = torch.randn(12, 6, 3, 3, device="cuda", dtype=torch.float16)
    b = torch.randn(6, device="cuda", dtype=torch.float16)
    static_x = torch.randn(2, 12, 8, 8, device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), planner.use_variant("direct"):
        for _ in range(2):  # warm-up (builds/loads the extension) outside capture
            OP(static_x, w, b, 2, 1, 1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), planner.use_variant("direct"):
        static_out = OP(static_x, w, b, 2, 1, 1)
    for _ in range(3):
        static_x.copy_(torch.randn_like(static_x))
        graph.replay()
        torch.cuda.synchronize()
        ref = F.conv_transpose2d(static_x.double(), w.double(), b.double(), 2, 1, 1)
        expected = F.conv_transpose2d(static_x, w, b, 2, 1, 1)
        assert max_error(static_out, ref) <= allowed_error(max_error(expected, ref), ref,
                                                           torch.float16)


def test_runs_on_the_current_stream():
    x = torch.randn(8, 32, 16, 16, device="cuda")
    w = torch.randn(32, 16, 4, 4, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), planner.use_variant("direct"):
        out = OP(x, w, None, 2, 1)
    stream.synchronize()
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        torch.testing.assert_close(out, F.conv_transpose2d(x, w, None, 2, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_calls_raise_pytorchs_error_on_cuda(name):
    x, w, b, kw = INVALID[name]
    x, w = x.cuda(), w.cuda()
    b = None if b is None else b.cuda()
    try:
        expected = F.conv_transpose2d(x, w, b, **kw)
    except RuntimeError as exc:
        with pytest.raises(RuntimeError) as ours:
            deconv_patch.conv_transpose2d(x, w, b, **kw)
        assert str(ours.value) == str(exc)
    else:  # PyTorch's CUDA path accepts it: so must we, with the same result
        got = deconv_patch.conv_transpose2d(x, w, b, **kw)
        torch.testing.assert_close(got, expected)


def test_device_mismatch_raises():
    x = torch.randn(1, 4, 5, 5, device="cuda")
    w = torch.randn(4, 3, 3, 3)
    with pytest.raises(RuntimeError):
        F.conv_transpose2d(x, w)
    with pytest.raises(RuntimeError):
        OP(x, w)


def test_float64_and_complex_fall_back_to_aten_with_warning():
    x = torch.randn(2, 4, 5, 5, device="cuda", dtype=torch.float64)
    w = torch.randn(4, 3, 3, 3, device="cuda", dtype=torch.float64)
    with pytest.warns(FallbackWarning, match="float64"):
        got = OP(x, w, None, 2)
    torch.testing.assert_close(got, F.conv_transpose2d(x, w, None, 2), rtol=1e-12, atol=1e-12)


def test_no_fallback_warning_for_supported_dtypes():
    x = torch.randn(2, 4, 5, 5, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4, 3, 3, 3, device="cuda", dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        OP(x, w, None, 2)


def test_module_on_cuda_reports_kernel_backend_and_matches():
    ref = torch.nn.ConvTranspose2d(32, 16, 4, 2, 1).cuda()
    fast = deconv_patch.FastConvTranspose2d.from_module(ref)
    assert "backend=aten" in repr(fast)  # cuDNN beats the direct kernel on this layer
    outpad = deconv_patch.FastConvTranspose2d(8, 4, 3, stride=1, output_padding=1, dilation=2)
    assert "backend=direct" in repr(outpad.cuda())  # cuDNN cannot run output_padding >= stride
    with planner.use_variant("direct"):
        assert "backend=direct" in repr(fast)
    x = torch.randn(4, 32, 8, 8, device="cuda")
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False), \
            planner.use_variant("direct"):
        torch.testing.assert_close(fast(x), ref(x), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(fast(x, output_size=[17, 17]),
                                   ref(x, output_size=[17, 17]), rtol=1e-4, atol=1e-4)


def test_demo_passes_on_cuda():
    from deconv_patch.demo import run_demo

    assert run_demo(batch=16) == 0


# The suite's layers with few output channels (DCGAN's 64 > 3 output layer, FSRCNN's 56 > 1 k9
# s3), where the stride-phase GEMMs are autotune candidates (padded n tiles): each config at
# full size, 16-bit and TF32 (and gemm_phase_tma's 3xTF32 for fp32 strict).
FEW_OUT_LAYERS = [(64, 64, 3, (32, 32), 4, 2, 1, 0, 1), (16, 56, 1, (64, 64), 9, 3, 4, 2, 1)]


@pytest.mark.parametrize("variant", planner.PHASE_CONFIGS + planner.SM90_CONFIGS +
                         planner.PHASE_TMA_CONFIGS)
@pytest.mark.parametrize("layer", FEW_OUT_LAYERS, ids=["dcgan.g5", "fsrcnn.x3"])
@pytest.mark.parametrize("mode", ["bf16", "tf32", "fp32"])
def test_phase_gemms_on_few_output_channel_layers(variant, layer, mode):
    hopper_only = variant in planner.SM90_CONFIGS + planner.PHASE_TMA_CONFIGS
    if hopper_only and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("Hopper (sm_90a) kernel")
    if mode != "bf16" and variant in planner.SM90_CONFIGS:
        pytest.skip("gemm_phase_sm90 is 16-bit only")
    if mode == "fp32" and variant not in planner.PHASE_TMA_CONFIGS:
        pytest.skip("fp32 strict: only gemm_phase_tma's 3xTF32 is a candidate")
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    for channels_last in (False, True):
        check_full_layer(variant, layer, channels_last, dtype, tf32=mode != "fp32", seed=7)
