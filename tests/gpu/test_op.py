"""The op on CUDA (skipped without a GPU; run on the device): tensors past 2^31 elements,
autograd against ATen, torch.compile, CUDA graphs, the current stream, PyTorch's own errors for
invalid calls, the ATen fallback (and its warning) for other dtypes, the module's backend, and
the demo."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import deconv_patch
from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.ops import FallbackWarning, run_variant
from tests.cases import INVALID, call_args, random_case
from tests.helpers import OP, allowed_error, max_error

pytestmark = pytest.mark.cuda


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
    # the untimed rule (cudnn.benchmark off): gemm_phase_tma on Hopper, cuDNN elsewhere
    untimed = planner.PHASE_TMA_UNTIMED if torch.cuda.get_device_capability() == (9, 0) else \
        planner.ATEN
    assert f"backend={untimed}" in repr(fast)
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


def test_demo_passes_on_cuda(capsys):
    """At PyTorch's defaults, and with --autotune (cudnn.benchmark on for the run only)."""
    from deconv_patch.cli.demo import run_demo

    before = torch.backends.cudnn.benchmark
    assert run_demo(batch=16) == 0
    assert "settings: PyTorch's defaults (cudnn.benchmark off)" in capsys.readouterr().out
    assert run_demo(batch=16, autotune=True) == 0
    assert "settings: cudnn.benchmark on (autotune)" in capsys.readouterr().out
    assert torch.backends.cudnn.benchmark is before
