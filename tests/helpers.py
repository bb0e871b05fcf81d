"""Checks and small builders shared by the test modules (no test module imports another).

GPU kernel checks: a forced variant's output is NaN-poisoned before the call and compared, every
element, with a float64 reference. The bound per config: our max error against the reference
must be at most twice PyTorch's own max error against the same reference, plus one ulp of the
dtype at the largest |reference| (two correct implementations may round the final output to
neighbouring values). With TF32 allowed, PyTorch's error is raised to the error inherent to
TF32 operands (cuDNN may or may not have used TF32 for the shape).

Also: the model-level "foundation bound" of the examples, BatchNorm builders, and the console
script run as users run it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import io
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import deconv_patch  # noqa: F401  (registers the ops)
from deconv_patch.kernels import packed_weights, planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.epilogue import ACTIVATIONS, Epilogue
from deconv_patch.kernels.precision import tf32_allowed
from deconv_patch.ops import KernelRefusal, run_variant
from deconv_patch.reference import conv_transpose2d_float64, tf32_round

from tests.cases import Case, call_args, random_case

ROOT = Path(__file__).resolve().parents[1]
OP = torch.ops.deconv_patch.conv_transpose2d
FUSED = torch.ops.deconv_patch.conv_transpose2d_fused


# ---- error bounds ------------------------------------------------------------------------------

def max_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return (out.double() - ref).abs().max().item() if out.numel() else 0.0


def allowed_error(torch_err: float, ref: torch.Tensor, dtype: torch.dtype) -> float:
    scale = ref.abs().max().item() if ref.numel() else 0.0
    return 2.0 * torch_err + torch.finfo(dtype).eps * scale


def assert_step_within_bar(got: Sequence[torch.Tensor], pytorch: Sequence[torch.Tensor],
                           exact: Sequence[torch.Tensor], dtype: torch.dtype) -> None:
    """A training step's tensors (the output, then the gradients) against float64's, each
    within the project's bar: twice PyTorch's own error plus one ulp of the largest value."""
    assert len(got) == len(pytorch) == len(exact)
    for i, (g, w, e) in enumerate(zip(got, pytorch, exact)):
        g, w, e = g.detach(), w.detach(), e.detach()
        assert g.shape == w.shape and g.dtype == w.dtype
        assert torch.isfinite(g).all()
        err, bar = max_error(g, e), allowed_error(max_error(w, e), e, dtype)
        assert err <= bar, f"tensor {i} of the step: error {err:.3e} against a bar of {bar:.3e}"


# ---- packed weights ------------------------------------------------------------------------------


def _poisoned_pack(variant: str, weight: torch.Tensor, case: Case,
                   allow_tf32: bool) -> torch.Tensor:
    """pack_weight's buffer for `weight` in `variant`'s layout, made where the allocator has just
    held a buffer of the same size filled with 0xFF (so a packed element left unwritten shows)."""
    from deconv_patch.kernels.extension import load_extension
    ext = load_extension()
    a = case.args
    call = (planner.kernels.BY_NAME[variant].code, weight, a.stride, a.padding,
            a.output_padding, a.dilation, a.groups, allow_tf32)
    torch.full((ext.pack_weight(*call).numel(),), 255, dtype=torch.uint8, device="cuda")
    return ext.pack_weight(*call)


def check_tiled_pack(variant: str, case: Case, fp32_strict: bool) -> None:
    """The tiled pack (cuda/common/tiled_pack.cuh: a weight whose inner elements are
    contiguous, plain or channels_last) writes byte for byte the buffer the family's per-element
    pack writes for a strided view of the same values: zero padding and TF32 rounding included,
    and for a family with an fp32 strict packing (`fp32_strict`) its two blocks."""
    shape = (case.in_channels, case.out_channels // case.args.groups, *case.kernel)
    wide = torch.randn(*shape[:3], shape[3] + 1, device="cuda").to(case.dtype)
    strided = wide[..., :shape[3]]  # inner elements not contiguous: the per-element pack
    for allow_tf32 in ((True, False) if case.dtype == torch.float32 and fp32_strict else (True,)):
        reference = _poisoned_pack(variant, strided, case, allow_tf32)
        for layout in (torch.contiguous_format, torch.channels_last):
            packed = _poisoned_pack(variant, strided.contiguous(memory_format=layout), case,
                                    allow_tf32)
            assert torch.equal(packed, reference), (variant, str(case), layout, allow_tf32)


# ---- one variant forced on the GPU -------------------------------------------------------------

def runs_tf32(dtype: torch.dtype, args: ConvTransposeArgs, tf32: bool) -> bool:
    """Whether PyTorch's own call may use TF32 with cuDNN enabled and its TF32 flag `tf32`
    (precision.tf32_allowed: where PyTorch runs its native kernels, cuBLAS's setting decides,
    fp32 by default). Only then does a bar widen to the error of TF32 operands."""
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
        return dtype == torch.float32 and tf32_allowed(args)


def refused_as_fp32(case, tf32: bool, refused: KernelRefusal) -> bool:
    """Whether a forced variant's refusal is that of a TF32 case PyTorch computes in fp32 (no
    cuDNN kernel, fp32 GEMMs: tf32 False) by a family without an fp32 mode for it, which the
    planner would not give the call either. Other refusals are the caller's to raise (fp32
    strict's: check_strict)."""
    return case.tf32 and not tf32 and "without TF32" in str(refused)


def check_variant(variant: str, seed: int, make_case=random_case) -> None:
    """`variant` forced on make_case(seed), NaN-poisoned output, against float64 with the bound
    above; the op (with the variant forced) and the fake kernel give PyTorch's shape and
    strides, and the op the same values."""
    case = make_case(seed)
    x, w, b = case.make("cuda", seed)
    tf32 = runs_tf32(case.dtype, case.args, case.tf32)
    # PyTorch and the variant run under the case's TF32 setting (an fp32 kernel reads it: with
    # TF32 off it runs its strict mode, or refuses).
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=case.tf32):
        expected = F.conv_transpose2d(*call_args(case, x, w, b))
        poisoned = torch.full_like(expected, float("nan"))  # same shape and strides as PyTorch's
        try:
            got = run_variant(variant, x, w, b, case.args, out=poisoned)
        except KernelRefusal as refused:
            if refused_as_fp32(case, tf32, refused):
                return
            raise
    ref = conv_transpose2d_float64(x, w, b, case.args)
    torch.cuda.synchronize()
    assert got.data_ptr() == poisoned.data_ptr()
    assert not torch.isnan(got).any(), f"{case}: unwritten output elements"
    err, torch_err = max_error(got, ref), max_error(expected, ref)
    if tf32 and x.numel():
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
    if runs_tf32(dtype, args, tf32):  # the bar is the error inherent to TF32 operands
        torch_err = max(torch_err, max_error(
            conv_transpose2d_float64(tf32_round(x), tf32_round(w), b, args), ref))
    err = max_error(got, ref)
    assert err <= allowed_error(torch_err, ref, dtype), (
        f"{variant} {layer}: error {err:.3e} vs PyTorch {torch_err:.3e}")


# ---- TF32 rounding of the A operand ------------------------------------------------------------

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


# ---- fp32 without TF32: the 3xTF32 mode --------------------------------------------------------

def fp32_strict(make_case: Callable[[int], Case]) -> Callable[[int], Case]:
    """make_case with every case in fp32, TF32 not allowed (the 3xTF32 mode's domain)."""
    def make(seed: int) -> Case:
        return dataclasses.replace(make_case(seed), dtype=torch.float32, tf32=False)
    return make


def check_strict(variant: str, seed: int, make_case: Callable[[int], Case]) -> None:
    """check_variant in fp32 without TF32; sums shallower than planner.MIN_3XTF32_DEPTH are
    refused by the kernel call (3xTF32 would miss the bound there) and skip."""
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        try:
            check_variant(variant, seed, fp32_strict(make_case))
        except RuntimeError as exc:
            if "does not support fp32 without TF32" not in str(exc):
                raise
            case = fp32_strict(make_case)(seed)
            depth = planner.reduction_depth(case.in_channels // case.args.groups, case.kernel,
                                            case.args)
            assert depth < planner.MIN_3XTF32_DEPTH, f"{case}: refused at depth {depth}"
            pytest.skip(f"{case}: {depth}-deep sums stay off 3xTF32")


def check_3xtf32_beats_tf32(variant: str, stride: int, kernel: int) -> None:
    """The split must really be there: on a deep reduction (K = 1024 channels x taps), 3xTF32's
    error is a small fraction of the error TF32 operands alone would give."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 1024, 12, 10, generator=gen).cuda()
    w = (torch.randn(1024, 64, kernel, kernel, generator=gen) / 32).cuda()
    args = ConvTransposeArgs.from_values(stride=stride, padding=(kernel - stride) // 2)
    ref = conv_transpose2d_float64(x, w, None, args)
    tf32_err = max_error(conv_transpose2d_float64(tf32_round(x), tf32_round(w), None, args), ref)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        got = run_variant(variant, x, w, None, args)
        cudnn = F.conv_transpose2d(x, w, None, stride, (kernel - stride) // 2)
    err, cudnn_err = max_error(got, ref), max_error(cudnn, ref)
    assert err < 0.05 * tf32_err, f"3xTF32 error {err:.3e} vs TF32 operands {tf32_err:.3e}"
    assert err <= 8 * cudnn_err + 1e-7 * ref.abs().max().item(), (
        f"3xTF32 error {err:.3e} vs cuDNN fp32 {cudnn_err:.3e}")


# ---- the fused epilogue ------------------------------------------------------------------------

def random_epilogue(seed: int, channels: int, device: str) -> Epilogue:
    """A seeded epilogue: scale and shift each present 70% of the time, the activation picked
    by seed % the number of activations (so consecutive seeds cover them all)."""
    names = list(ACTIVATIONS)
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    scale = (torch.rand(channels, generator=gen) + 0.5).to(device) if rng.random() < 0.7 else None
    shift = torch.randn(channels, generator=gen).to(device) if rng.random() < 0.7 else None
    return Epilogue(scale, shift, names[seed % len(names)], rng.choice((0.01, 0.2, 0.5)))


def check_epilogue(variant: str, case, seed: int, via_op: bool = False) -> None:
    """`variant` forced with a random epilogue (seeded) on NaN-poisoned output, against the
    float64 reference of conv -> epilogue; with via_op, the fused op (which plans its own
    variant) must be as accurate and return PyTorch's shape and strides."""
    x, w, b = case.make("cuda", seed)
    epi = random_epilogue(seed, case.out_channels, "cuda")
    tf32 = runs_tf32(case.dtype, case.args, case.tf32)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=case.tf32):
        unfused = epi.apply(F.conv_transpose2d(*call_args(case, x, w, b)))
        poisoned = torch.full_like(unfused, float("nan"))
        try:
            got = run_variant(variant, x, w, b, case.args, out=poisoned, epilogue=epi)
        except KernelRefusal as refused:
            if refused_as_fp32(case, tf32, refused):
                return
            raise
        fused = FUSED(*call_args(case, x, w, b), epi.scale, epi.shift, epi.activation,
                      epi.negative_slope) if via_op else None
    torch.cuda.synchronize()
    assert got.data_ptr() == poisoned.data_ptr() and not torch.isnan(got).any(), str(case)
    wide = Epilogue(*(None if t is None else t.double() for t in (epi.scale, epi.shift)),
                    epi.activation, epi.negative_slope)
    ref = wide.apply(conv_transpose2d_float64(x, w, b, case.args))
    err, torch_err = max_error(got, ref), max_error(unfused, ref)
    if tf32 and x.numel():
        ref_tf32 = wide.apply(conv_transpose2d_float64(tf32_round(x), tf32_round(w), b, case.args))
        torch_err = max(torch_err, max_error(ref_tf32, ref))
    assert err <= allowed_error(torch_err, ref, case.dtype), (
        f"{case} {epi.activation}: error {err:.3e} vs PyTorch {torch_err:.3e}")
    if fused is not None:
        # The conv's layout: strides equal on every dim of size > 1. A size-1 dim's stride
        # addresses nothing, and PyTorch's own elementwise ops disagree on it (for a 1-channel
        # channels_last tensor, mul keeps stride 1 on C, relu gives H*W).
        assert fused.shape == unfused.shape and all(
            a == b for a, b, n in zip(fused.stride(), unfused.stride(), fused.shape) if n > 1)
        assert max_error(fused, ref) <= allowed_error(torch_err, ref, case.dtype), str(case)


# ---- packed weights ----------------------------------------------------------------------------

def check_repacks_after_an_in_place_weight_update(variant: str, x: torch.Tensor,
                                                  w: torch.Tensor, args: ConvTransposeArgs):
    """A variant reading a packed weight packs again after w changes in place (version counter)
    and computes with the new values: w * -2 gives exactly -2x the output."""
    first = run_variant(variant, x, w, None, args)
    packs = packed_weights.cache().packs
    with torch.no_grad():
        w.mul_(-2.0)
    second = run_variant(variant, x, w, None, args)
    assert packed_weights.cache().packs == packs + 1
    torch.testing.assert_close(second, first * -2.0, rtol=0, atol=0)  # exact: power-of-2 scale


# ---- torch.compile graphs ----------------------------------------------------------------------

def capturing_compile(module: nn.Module) -> Tuple[Any, List[torch.fx.GraphModule]]:
    """torch.compile(module, fullgraph=True) with a backend that keeps each graph Dynamo
    captures (in the list returned beside it) and runs it as traced; Dynamo's caches reset."""
    graphs: List[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, _inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    return torch.compile(module, backend=backend, fullgraph=True), graphs


def graph_calls(graph: torch.fx.GraphModule) -> List[object]:
    """The call targets of a captured graph."""
    return [n.target for n in graph.graph.nodes if n.op == "call_function"]


def compiled_graph_calls(module: nn.Module, x: torch.Tensor) -> Tuple[List[object], torch.Tensor]:
    """The call targets of the one graph Dynamo captures for module(x) (fullgraph, no_grad),
    and the compiled output."""
    compiled, graphs = capturing_compile(module)
    with torch.no_grad():
        out = compiled(x)
    assert len(graphs) == 1
    return graph_calls(graphs[0]), out


def calls_our_op(targets: Iterable[object]) -> bool:
    """Whether a graph's call targets include torch.ops.deconv_patch.conv_transpose2d."""
    return any(t in (OP, OP.default) for t in targets)


# ---- whole models: the foundation bound --------------------------------------------------------

# How many layers optimize() fuses into the ConvTranspose2d before them, per example model.
FUSED_LAYERS = {"dcgan": 5, "unet": 0, "pix2pix": 8, "cyclegan": 0, "simple_baseline": 3,
                "fsrcnn": 0, "mask_rcnn": 1}


def to_double(value: Any) -> Any:
    """Tensors (also inside lists and tuples) in float64."""
    if isinstance(value, torch.Tensor):
        return value.double()
    if isinstance(value, (list, tuple)):
        return type(value)(to_double(v) for v in value)
    return value


def ulp(value: float, dtype: torch.dtype) -> float:
    """One unit in the last place of `value` in `dtype`."""
    if value == 0:
        return torch.finfo(dtype).tiny
    return torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(value))


def bound_check(reference: Any, original: Any, patched: Any, dtype: torch.dtype,
                label: str) -> None:
    """The foundation bound: |patched - fp64| <= 2 |original - fp64| + 1 ulp(max |fp64|)."""
    from examples._common import flatten_tensors

    refs, origs, outs = (flatten_tensors(v) for v in (reference, original, patched))
    assert len(refs) == len(origs) == len(outs) and refs
    for ref, orig, out in zip(refs, origs, outs):
        assert out.shape == ref.shape and out.dtype == orig.dtype
        assert torch.isfinite(out).all(), label
        err_orig = (orig.double() - ref).abs().max().item()
        err_out = (out.double() - ref).abs().max().item()
        limit = 2 * err_orig + ulp(ref.abs().max().item(), dtype)
        assert err_out <= limit, f"{label}: error {err_out:.3e} > limit {limit:.3e}"


# ---- BatchNorm builders ------------------------------------------------------------------------

def random_bn(channels: int) -> nn.BatchNorm2d:
    """A BatchNorm2d with non-trivial running statistics and affine parameters (train mode)."""
    bn = nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.running_mean.normal_(0.0, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.normal_(1.0, 0.3)
        bn.bias.normal_()
    return bn


class ChainDecoder(nn.Module):
    """Two conv -> BatchNorm -> activation chains on layers the planner gives kernels (64
    channels in), then a plain conv: the GPU tests' model with fused chains."""

    def __init__(self) -> None:
        super().__init__()
        self.block1 = nn.Sequential(nn.ConvTranspose2d(64, 64, 4, 2, 1, bias=False), random_bn(64),
                                    nn.ReLU())
        self.block2 = nn.Sequential(nn.ConvTranspose2d(64, 32, 2, 2), random_bn(32),
                                    nn.LeakyReLU(0.2))
        self.out = nn.ConvTranspose2d(32, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.block2(self.block1(x)))


def assert_within_scale(got: torch.Tensor, want: torch.Tensor, what: str,
                        fraction: float = 1e-2) -> None:
    """Every element of `got` within `fraction` of `want`'s largest magnitude: our kernels and
    cuDNN (or a fold and the unfused modules) round differently, by an ulp of the larger term,
    which an elementwise tolerance fails where terms cancel; a stale pack or fold, or a
    BatchNorm applied twice, is off by far more."""
    err = (got.float() - want.float()).abs().max().item()
    scale = want.float().abs().max().item()
    assert err <= fraction * scale, \
        f"{what}: max error {err:.3g} against max |output| {scale:.3g}"


def randomize_bn(model: nn.Module) -> None:
    """Every BatchNorm2d of `model` gets random running statistics and affine parameters."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            n = module.num_features
            module.running_mean.copy_(torch.randn(n) * 0.3)
            module.running_var.copy_(torch.rand(n) + 0.5)
            module.weight.data.copy_(torch.rand(n) + 0.5)
            module.bias.data.copy_(torch.randn(n) * 0.2)


# ---- the console script ------------------------------------------------------------------------

def run_cli(*args: str, cwd: Optional[Path] = ROOT) -> subprocess.CompletedProcess:
    """`deconv-patch ARGS` in a subprocess, as users run it (the module when the console
    script is not installed); from the repository root unless `cwd` says otherwise, with as
    many intra-op threads as this process (tests/conftest.py)."""
    exe = shutil.which("deconv-patch")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "deconv_patch.cli", *args]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS",
                                                            str(torch.get_num_threads()))}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def run_cli_in_process(*args: str, cwd: Optional[Path] = ROOT) -> subprocess.CompletedProcess:
    """`deconv-patch ARGS` through the console script's own entry point (deconv_patch.cli.main)
    in this process: what a run does after its start-up (importing torch, seconds each), for
    the tests of what the commands do; tests of the script itself use run_cli. The exit code is
    main()'s (argparse's for usage errors); the working directory and torch's random state are
    restored afterwards."""
    from deconv_patch import cli

    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    with torch.random.fork_rng(devices=[]), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            os.chdir(cwd or here)
            code = cli.main(list(args))
        except SystemExit as exc:  # argparse: --help, usage errors
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        finally:
            os.chdir(here)
    return subprocess.CompletedProcess(["deconv-patch", *args], code, out.getvalue(),
                                       err.getvalue())


def run_cli_concurrently(calls: Iterable[Sequence[str]],
                         cwd: Optional[Path] = ROOT) -> List[subprocess.CompletedProcess]:
    """run_cli for each argument list, as many at a time as there are cores, the results in
    order. A short run is mostly the console script's start-up (importing torch, seconds), which
    runs that do not depend on each other can overlap."""
    calls = [list(c) for c in calls]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(lambda argv: run_cli(*argv, cwd=cwd), calls))


# ---- threads sharing a patched model ---------------------------------------------------------

def forwards_interleaved(model: nn.Module, inputs: Dict[str, torch.Tensor], monkeypatch,
                         timeout: float = 30.0) -> Dict[str, torch.Tensor]:
    """`model`'s eval forward (no gradients) on inputs["A"] in thread A and on inputs["B"] in
    thread B, with B's whole forward run between A's first fused conv call (its hand-over made)
    and the rest of A's: the interleaving that threads sharing a model (a server's workers)
    can meet at any time. Returns each thread's output."""
    import contextvars
    import threading

    from deconv_patch.fused_chain import FusedChain

    real = FusedChain.hand_over
    a_handed_over, b_done = threading.Event(), threading.Event()

    def pausing_a(self, output):
        real(self, output)
        if threading.current_thread().name == "A" and not a_handed_over.is_set():
            a_handed_over.set()
            assert b_done.wait(timeout)

    monkeypatch.setattr(FusedChain, "hand_over", pausing_a)
    outputs: Dict[str, torch.Tensor] = {}
    errors: list = []

    def run(name: str) -> None:
        try:
            with torch.no_grad():
                outputs[name] = model(inputs[name])
        except BaseException as exc:  # (raised below, in the test's thread)
            errors.append(exc)

    # Each thread runs in a copy of the caller's context (as asyncio.to_thread's workers do),
    # so context variables the test set (tests/conftest.py: chains_fold_on_cpu) hold there too.
    a = threading.Thread(target=contextvars.copy_context().run, args=(run, "A"), name="A")
    a.start()
    assert a_handed_over.wait(timeout), "thread A made no fused call"
    b = threading.Thread(target=contextvars.copy_context().run, args=(run, "B"), name="B")
    b.start()
    b.join(timeout)
    b_done.set()
    a.join(timeout)
    if errors:
        raise errors[0]
    assert set(outputs) == {"A", "B"}
    return outputs


# ---- TF32 settings --------------------------------------------------------------------------

HAS_FP32_PRECISION_API = hasattr(torch._C, "_get_fp32_precision_getter")


@contextlib.contextmanager
def tf32_settings_restored() -> Iterator[None]:
    """The block may set TF32 through either API (the legacy allow_tf32 flags, or the
    per-operator fp32_precision settings of torch 2.9+); afterwards both read as before it,
    with conv, RNN and matmul back in step (the legacy getters raise while they are not)."""
    conv, matmul = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        yield
    finally:
        if HAS_FP32_PRECISION_API:
            for backend, op in (("generic", "all"), ("cuda", "all")):
                torch._C._set_fp32_precision_setter(backend, op, "none")
            for name in ("conv", "rnn"):
                getattr(torch.backends.cudnn, name).fp32_precision = "tf32" if conv else "ieee"
            torch.backends.cuda.matmul.fp32_precision = "tf32" if matmul else "ieee"
        torch.backends.cudnn.allow_tf32 = conv
        torch.backends.cuda.matmul.allow_tf32 = matmul
