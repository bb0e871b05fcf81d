"""Seeded random ConvTranspose2d configurations shared by the CPU and GPU sweeps, the
benchmark's few-channel layers, and calls PyTorch rejects."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from deconv_patch.arguments import ConvTransposeArgs

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Case:
    batch: int
    in_channels: int
    out_channels: int
    hw: Tuple[int, int]
    kernel: Tuple[int, int]
    args: ConvTransposeArgs
    bias: bool
    dtype: torch.dtype
    channels_last: bool
    weight_channels_last: bool
    non_contiguous: bool
    unbatched: bool
    tf32: bool

    def __str__(self) -> str:
        a = self.args
        flags = "".join(
            f for f, on in (("+cl", self.channels_last), ("+wcl", self.weight_channels_last),
                            ("+nc", self.non_contiguous), ("+3d", self.unbatched),
                            ("+tf32", self.tf32), ("+b", self.bias)) if on
        )
        return (f"n{self.batch}c{self.in_channels}-{self.out_channels}h{self.hw[0]}x{self.hw[1]}"
                f"k{self.kernel[0]}x{self.kernel[1]}s{a.stride[0]}x{a.stride[1]}"
                f"p{a.padding[0]}x{a.padding[1]}op{a.output_padding[0]}x{a.output_padding[1]}"
                f"d{a.dilation[0]}x{a.dilation[1]}g{a.groups}-{str(self.dtype)[6:]}{flags}")

    def make(self, device: str, seed: int = 0):
        """Fresh random (input, weight, bias) in this case's dtype, layout and device."""
        gen = torch.Generator().manual_seed(seed)
        g = self.args.groups
        shape = (self.batch, self.in_channels, self.hw[0], self.hw[1])
        wide = shape[3] * (2 if self.non_contiguous else 1)
        x = torch.randn(shape[0], shape[1], shape[2], wide, generator=gen)
        fan_in = (self.in_channels // g) * self.kernel[0] * self.kernel[1]
        w = torch.randn(self.in_channels, self.out_channels // g, *self.kernel, generator=gen)
        w = w / max(1.0, fan_in) ** 0.5
        b = torch.randn(self.out_channels, generator=gen) if self.bias else None
        x = x.to(device=device, dtype=self.dtype)
        w = w.to(device=device, dtype=self.dtype)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        if self.non_contiguous:  # a strided view of a larger tensor
            x = x[..., ::2]
        if self.weight_channels_last:
            w = w.contiguous(memory_format=torch.channels_last)
        if self.unbatched:
            x = x[0]
        if b is not None:
            b = b.to(device=device, dtype=self.dtype)
        return x, w, b


def random_paddings(rng: random.Random, kernel: Tuple[int, int], stride: Tuple[int, int],
                     dilation: Tuple[int, int]) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """Padding up to the dilated kernel's reach + 2, and (40% of the time per axis) an
    output_padding below max(stride, dilation), as PyTorch allows."""
    padding = tuple(rng.randint(0, dilation[i] * (kernel[i] - 1) + 2) for i in range(2))
    output_padding = tuple(
        rng.randint(0, max(stride[i], dilation[i]) - 1) if rng.random() < 0.4 else 0
        for i in range(2)
    )
    return padding, output_padding


def random_case(seed: int, dtypes=DTYPES, max_channels: int = 24) -> Case:
    """A valid random configuration; every hyperparameter PyTorch accepts can come up."""
    rng = random.Random(seed)
    while True:
        kind = rng.random()
        if kind < 0.15:  # depthwise
            groups = rng.randint(2, 12)
            cin, cout = groups, groups * rng.choice((1, 1, 2))
        elif kind < 0.35:
            groups = rng.choice((2, 3, 4))
            cin, cout = groups * rng.randint(1, 6), groups * rng.randint(1, 6)
        else:
            groups = 1
            cin, cout = rng.randint(1, max_channels), rng.randint(1, max_channels)
            if rng.random() < 0.2:
                cin, cout = rng.choice((32, 48, 64)), rng.choice((8, 16, 19, 33))
        square = rng.random() < 0.6

        def axis_pair(lo: int, hi: int) -> Tuple[int, int]:
            a = rng.randint(lo, hi)
            return (a, a) if square else (a, rng.randint(lo, hi))

        kernel = axis_pair(1, 7)
        stride = axis_pair(1, 4)
        dilation = axis_pair(1, 3) if rng.random() < 0.35 else (1, 1)
        padding, output_padding = random_paddings(rng, kernel, stride, dilation)
        hw = (rng.randint(1, 12), rng.randint(1, 12))
        args = ConvTransposeArgs(stride, padding, output_padding, dilation, groups)  # type: ignore[arg-type]
        if any(s <= 0 for s in args.output_hw(hw, kernel)):
            continue
        batch = rng.choice((0, 1, 1, 2, 3, 5))
        unbatched = batch == 1 and rng.random() < 0.3
        return Case(
            batch=batch,
            in_channels=cin,
            out_channels=cout,
            hw=hw,
            kernel=kernel,  # type: ignore[arg-type]
            args=args,
            bias=rng.random() < 0.6,
            dtype=rng.choice(dtypes),
            channels_last=rng.random() < 0.35,
            weight_channels_last=rng.random() < 0.1,
            non_contiguous=rng.random() < 0.2,
            unbatched=unbatched,
            tf32=rng.random() < 0.5,
        )


def call_args(case: Case, x, w, b: Optional[torch.Tensor]):
    a = case.args
    return (x, w, b, a.stride, a.padding, a.output_padding, a.groups, a.dilation)


def random_kxs_case(seed: int) -> Case:
    """A random kernel == stride, padding 0, dilation 1 configuration (the gemm_kxs family).

    fp32 cases allow TF32 (the kernel's fp32 mode); weights stay contiguous (its requirement).
    """
    rng = random.Random(seed * 7919 + 17)
    square = rng.random() < 0.6
    kh = rng.randint(1, 4)
    kernel = (kh, kh if square else rng.randint(1, 4))
    groups = rng.choice((1, 1, 1, 2, 3, 8))
    cin = groups * rng.choice((1, 3, 8, 16, 20, 33, 64, 96)) // (2 if groups == 8 else 1)
    cin = max(groups, cin - cin % groups)
    cout = groups * rng.choice((1, 2, 5, 8, 16, 40))
    output_padding = tuple(rng.randint(0, k - 1) if rng.random() < 0.3 else 0 for k in kernel)
    args = ConvTransposeArgs(kernel, (0, 0), output_padding, (1, 1), groups)  # type: ignore[arg-type]
    dtype = rng.choice(DTYPES)
    batch = rng.choice((0, 1, 2, 3, 5))
    return Case(
        batch=batch,
        in_channels=cin,
        out_channels=cout,
        hw=(rng.randint(1, 20), rng.randint(1, 20)),
        kernel=kernel,  # type: ignore[arg-type]
        args=args,
        bias=rng.random() < 0.6,
        dtype=dtype,
        channels_last=rng.random() < 0.4,
        weight_channels_last=False,
        non_contiguous=rng.random() < 0.2,
        unbatched=batch == 1 and rng.random() < 0.3,
        tf32=True if dtype == torch.float32 else rng.random() < 0.5,
    )


def random_phase_case(seed: int) -> Case:
    """A random configuration of any hyperparameters with tensor-core-sized channel counts (the
    gemm_phase family): every stride, padding, output_padding, dilation and grouping, channels
    per group from 1 to 160. fp32 cases allow TF32 (the kernel's fp32 mode)."""
    rng = random.Random(seed * 104729 + 3)
    base = random_case(seed + 900_000)
    groups = rng.choice((1, 1, 1, 2, 4))
    cin_g = rng.choice((1, 8, 16, 24, 32, 40, 64, 96, 160))
    cout_g = rng.choice((1, 8, 16, 19, 32, 48, 64, 128, 160))
    args = ConvTransposeArgs(base.args.stride, base.args.padding, base.args.output_padding,
                             base.args.dilation, groups)
    dtype = rng.choice(DTYPES)
    return Case(
        batch=min(base.batch, 3),
        in_channels=cin_g * groups,
        out_channels=cout_g * groups,
        hw=base.hw,
        kernel=base.kernel,
        args=args,
        bias=base.bias,
        dtype=dtype,
        channels_last=base.channels_last,
        weight_channels_last=base.weight_channels_last,
        non_contiguous=base.non_contiguous,
        unbatched=base.unbatched,
        tf32=True if dtype == torch.float32 else base.tf32,
    )


OUT_TILE_IN = (1, 3, 8, 16, 21, 24, 56, 64)
OUT_TILE_OUT = (1, 2, 3, 8, 17, 21, 24, 32)


def _sized_case(rng: random.Random, cin_g: int, cout_g: int, groups: int, hw: Tuple[int, int],
                kernel: Tuple[int, int], args: ConvTransposeArgs, max_out: int,
                fp32_tf32: Optional[bool]) -> Optional[Case]:
    """The rest of a random case in one draw order (batch, dtype, bias, layouts, unbatched,
    TF32): None when the output is empty or has more than `max_out` elements (the caller draws
    again). fp32_tf32: the TF32 flag of fp32 cases (None: drawn like the 16-bit ones')."""
    out_hw = args.output_hw(hw, kernel)
    batch = rng.choice((0, 1, 1, 2, 3))
    if any(v <= 0 for v in out_hw) or \
            max(batch, 1) * cout_g * groups * out_hw[0] * out_hw[1] > max_out:
        return None
    dtype = rng.choice(DTYPES)
    return Case(
        batch=batch,
        in_channels=cin_g * groups,
        out_channels=cout_g * groups,
        hw=hw,
        kernel=kernel,
        args=args,
        bias=rng.random() < 0.6,
        dtype=dtype,
        channels_last=rng.random() < 0.35,
        weight_channels_last=rng.random() < 0.1,
        non_contiguous=rng.random() < 0.2,
        unbatched=batch == 1 and rng.random() < 0.3,
        tf32=fp32_tf32 if dtype == torch.float32 and fp32_tf32 is not None else
        rng.random() < 0.5,
    )


def random_out_tile_case(seed: int) -> Case:
    """A random configuration in gemm_out_tile's domain (<= 32 output channels per group): any
    stride 1..8 (now and then up to 16, with a kernel at least as large: FCN's k16 s8 kind),
    kernel 1..9, dilation 1..3, padding, output_padding and grouping; fp16 / bf16, and fp32 with
    TF32 (its 3xTF32 mode has its own deep-sum cases in
    tests/gpu/gemm_out_tile/test_gemm_out_tile.py); NCHW, channels_last and strided input, small batches and asymmetric sizes up to 40. Input channels
    per group x the taps of one row phase (over all column phases) stay <= 400, so a block's
    weights fit its shared memory at once; outputs stay below 2^22 elements, so a sweep of
    hundreds stays quick."""
    rng = random.Random(seed * 7127 + 11)
    while True:
        groups = rng.choice((1, 1, 1, 2, 3))
        cout_g = rng.choice(OUT_TILE_OUT)
        square = rng.random() < 0.6

        def axis_pair(lo: int, hi: int) -> Tuple[int, int]:
            a = rng.randint(lo, hi)
            return (a, a) if square else (a, rng.randint(lo, hi))

        if rng.random() < 0.1:  # large strides, kernel >= stride
            stride = axis_pair(2, 16)
            kernel = tuple(rng.randint(s, 2 * s) for s in stride)
            dilation = (1, 1)
        else:
            stride = axis_pair(1, 8)
            kernel = axis_pair(1, 9)
            dilation = axis_pair(1, 3) if rng.random() < 0.35 else (1, 1)
        # Taps of one row phase over every column phase (a block holds the weights of all its
        # column phases): kernel rows k with equal k * dilation mod stride, times kernel width.
        taps = -(-kernel[0] // (stride[0] // math.gcd(stride[0], dilation[0]))) * kernel[1]
        cin_g = rng.choice([c for c in OUT_TILE_IN if c * taps <= 400])
        padding, output_padding = random_paddings(rng, kernel, stride, dilation)
        hw = (rng.randint(1, 40), rng.randint(1, 40))
        args = ConvTransposeArgs(stride, padding, output_padding, dilation, groups)  # type: ignore[arg-type]
        case = _sized_case(rng, cin_g, cout_g, groups, hw,
                           kernel, args, 2**22, fp32_tf32=True)  # type: ignore[arg-type]
        if case is not None:
            return case


# The benchmark's few-output-channel layers (batch, cin, cout, hw, kernel, stride, padding,
# output_padding, dilation): what gemm_out_tile and ffma_tile are for.
FEW_CHANNEL_LAYERS = {
    "fcn8s.up8": (4, 21, 21, (64, 64), 16, 8, 4, 0, 1),
    "dcgan.g5": (64, 64, 3, (32, 32), 4, 2, 1, 0, 1),
    "fsrcnn.x3": (16, 56, 1, (64, 64), 9, 3, 4, 2, 1),
    "keypoint": (100, 512, 17, (14, 14), 4, 2, 1, 0, 1),
}

FFMA_TILE_OUT = (1, 2, 3, 4, 5, 6, 8, 9, 12, 17, 24, 32)
FFMA_TILE_IN = (1, 3, 8, 16, 21, 56, 64, 100)


def random_ffma_tile_case(seed: int, stride: Optional[int] = None) -> Case:
    """A random configuration in ffma_tile's domain: stride 2 with a 4x4 kernel or stride 3 with
    a 9x9 one (`stride` fixes it), dilation 1, any padding and output_padding, 1-3 groups,
    <= 32 output channels per group; every dtype, fp32 with and without TF32 (the kernel is
    FFMA, exact either way); NCHW, channels_last and strided input, small batches (0 included)
    and asymmetric sizes up to 30. Outputs stay below 2^21 elements so hundreds run quickly."""
    rng = random.Random(seed * 6151 + 5)
    while True:
        s = stride if stride is not None else rng.choice((2, 2, 3))
        k = {2: 4, 3: 9}[s]
        groups = rng.choice((1, 1, 1, 2, 3))
        cout_g = rng.choice(FFMA_TILE_OUT)
        cin_g = rng.choice(FFMA_TILE_IN)
        padding = (rng.randint(0, k + 2), rng.randint(0, k + 2))
        output_padding = tuple(rng.randint(0, s - 1) if rng.random() < 0.4 else 0
                               for _ in range(2))
        hw = (rng.randint(1, 30), rng.randint(1, 30))
        args = ConvTransposeArgs((s, s), padding, output_padding, (1, 1), groups)  # type: ignore[arg-type]
        case = _sized_case(rng, cin_g, cout_g, groups, hw, (k, k), args, 2**21, fp32_tf32=None)
        if case is not None:
            return case


# Calls PyTorch rejects (each: input, weight, bias, keyword arguments of conv_transpose2d).
_r = torch.randn
INVALID = {
    "input 5-D": (_r(1, 2, 4, 4, 4), _r(2, 3, 3, 3), None, {}),
    "input 2-D": (_r(4, 4), _r(4, 3, 3, 3), None, {}),
    "weight 3-D": (_r(2, 4, 4, 4), _r(4, 3, 3), None, {}),
    "channels mismatch": (_r(2, 5, 4, 4), _r(4, 3, 3, 3), None, {}),
    "groups do not divide": (_r(2, 4, 4, 4), _r(4, 3, 3, 3), None, {"groups": 3}),
    "bias wrong size": (_r(2, 4, 4, 4), _r(4, 3, 3, 3), _r(4), {}),
    "bias 2-D": (_r(2, 4, 4, 4), _r(4, 3, 3, 3), _r(3, 1), {}),
    "zero stride": (_r(2, 4, 4, 4), _r(4, 3, 3, 3), None, {"stride": 0}),
    "negative padding": (_r(2, 4, 4, 4), _r(4, 3, 3, 3), None, {"padding": -1}),
    "negative output_padding": (_r(2, 4, 4, 4), _r(4, 3, 3, 3), None, {"output_padding": -1}),
    "zero dilation": (_r(2, 4, 4, 4), _r(4, 3, 3, 3), None, {"dilation": 0}),
    "zero groups": (_r(2, 4, 4, 4), _r(4, 3, 3, 3), None, {"groups": 0}),
    "output_padding >= stride and dilation": (
        _r(2, 4, 4, 4), _r(4, 3, 3, 3), None, {"stride": 2, "output_padding": 2}),
    "output too small": (_r(2, 4, 1, 1), _r(4, 3, 1, 1), None, {"padding": 1}),
    "empty spatial input": (_r(2, 4, 0, 4), _r(4, 3, 3, 3), None, {}),
    "zero input channels": (_r(2, 0, 4, 4), _r(0, 3, 3, 3), None, {}),
    "zero-size kernel": (_r(2, 4, 6, 6), _r(4, 3, 0, 3), None, {}),
    "weight dtype": (_r(2, 4, 4, 4), _r(4, 3, 3, 3).double(), None, {}),
    "bias dtype": (_r(2, 4, 4, 4), _r(4, 3, 3, 3), _r(3).double(), {}),
}
