"""Where a transposed convolution's backward stands: each gradient's GPU time against its
roofline floor, for PyTorch's path and for library compositions that could replace it.

    python benchmarks/backward_bounds.py [--modes tf32,bf16] [--formats nchw,nhwc]
                                         [--only unet,maskrcnn] [--deterministic]
                                         [--columns fwd,dgrad,dgrad mma,...]

Per layer of the suite, mode and layout, GPU time per call (calls captured in a CUDA graph and
replayed, as layers.py's GPU column) of:

  * fwd: PyTorch's forward (`F.conv_transpose2d`), and ours (`torch.ops.deconv_patch`);
  * dgrad / wgrad: ATen's `convolution_backward` for grad_input alone, and for the weight's
    (and bias's) gradient alone: what a training step with our forward still pays cuDNN for;
    `direct`: the same gradients on the direct backward kernels (cuda/direct_backward, every
    layer, whether or not the planner would give it them), `tiled` both gradients as GEMMs
    per group on CUDA cores (grad_input_tiled.cu, weight_grad_tiled.cu), and `mma` on tensor
    cores (grad_input_mma.cu, weight_grad_mma.cu; fp32 as 3xTF32); `dgrad tma`: grad_input as
    the strided correlation on gemm_phase_tma's kernel (Hopper, one group; its weight pack
    included, as a training step would pay it);
  * for kernel == stride layers (no padding, dilation or groups), the two gradients as one
    cuBLAS GEMM each over grad_output rearranged so each input pixel's k*k output pixels form
    one row (`mm` columns: the rearranging copy included).

Each gradient does the forward's multiply-adds, so its floor is the forward's:
max(flops / matmul rate, bytes / copy bandwidth). `--deterministic` sets
`torch.backends.cudnn.deterministic` (what `torch.use_deterministic_algorithms(True)` sets).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Set

import torch
import torch.nn.functional as F

import deconv_patch  # noqa: F401  (registers torch.ops.deconv_patch)
from deconv_patch.kernels.extension import load_units
from layers import MODES, SUITES, Ceilings, Layer, geomean, graph_ms, layer_tensors, \
    measure_ceilings


@dataclass
class Row:
    layer: str
    mode: str
    layout: str
    floor_us: float
    us: Dict[str, float]  # column -> GPU us per call (NaN where it failed or does not apply)


def _kxs(layer: Layer) -> bool:
    return (layer.kernel == layer.stride and layer.padding == (0, 0) and layer.groups == 1
            and layer.dilation == (1, 1) and layer.output_padding == (0, 0))


def _rows_of(gy: torch.Tensor, layer: Layer) -> torch.Tensor:
    """grad_output as [N*H*W, kh*kw*Cout]: each input pixel's k x k output block in one row
    (a copy, whichever the layout)."""
    n, co = gy.shape[0], gy.shape[1]
    (h, w), (kh, kw) = layer.hw, layer.kernel
    blocks = gy.permute(0, 2, 3, 1).reshape(n, h, kh, w, kw, co)
    return blocks.permute(0, 1, 3, 2, 4, 5).reshape(n * h * w, kh * kw * co)


def _columns(x: torch.Tensor) -> torch.Tensor:
    """The input as [N*H*W, Cin] (a view for channels_last, a copy for NCHW)."""
    return x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])


def bench(layer: Layer, mode: str, layout: str, ceil: Ceilings, l2: int,
          only_columns: Optional[Set[str]] = None) -> Row:
    dtype = MODES[mode][0]
    elem = torch.tensor([], dtype=dtype).element_size()
    inputs, w, b = layer_tensors(layer, mode, layout, l2)
    a = layer.args
    hyper = (a.stride, a.padding, a.output_padding, a.groups, a.dilation)
    out_shape = F.conv_transpose2d(inputs[0], w, b, *hyper).shape
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    grads = [torch.randn(out_shape, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
             for _ in range(min(len(inputs), 4))]
    pairs = [(x, grads[i % len(grads)]) for i, x in enumerate(inputs)]
    bias_sizes = [layer.cout] if b is not None else None

    def backward(mask: List[bool], via_cl: bool = False) -> Callable[[object], object]:
        def run(pair):
            x, gy = pair
            if via_cl:  # cuDNN's channels_last kernels: ATen re-lays out grad_output to match
                x = x.contiguous(memory_format=torch.channels_last)
            grads = torch.ops.aten.convolution_backward(
                gy, x, w, bias_sizes, list(a.stride), list(a.padding), list(a.dilation), True,
                list(a.output_padding), a.groups, mask)
            if via_cl:  # back to the layouts of the NCHW input and the weight
                return [g.contiguous() if g is not None else None for g in grads]
            return grads
        return run

    columns: Dict[str, Callable[[object], object]] = {
        "fwd": lambda p: F.conv_transpose2d(p[0], w, b, *hyper),
        "fwd ours": lambda p: torch.ops.deconv_patch.conv_transpose2d(
            p[0], w, b, list(a.stride), list(a.padding), list(a.output_padding), a.groups,
            list(a.dilation)),
        "dgrad": backward([True, False, False]),
        "wgrad": backward([False, True, b is not None]),
        "bwd": backward([True, True, b is not None]),
    }
    core = load_units(())
    direct_hyper = (list(a.stride), list(a.padding), list(a.dilation), a.groups)
    columns["dgrad direct"] = lambda p: core.direct_grad_input(p[0], p[1], w, *direct_hyper)
    columns["dgrad tiled"] = lambda p: core.tiled_grad_input(p[0], p[1], w, *direct_hyper)
    columns["wgrad direct"] = lambda p: core.direct_weight_grad(p[0], p[1], w, *direct_hyper)
    columns["wgrad tiled"] = lambda p: core.tiled_weight_grad(p[0], p[1], w, *direct_hyper)
    columns["dgrad mma"] = lambda p: core.mma_grad_input(p[0], p[1], w, *direct_hyper)
    columns["wgrad mma"] = lambda p: core.mma_weight_grad(p[0], p[1], w, *direct_hyper)
    if torch.cuda.get_device_capability() == (9, 0):  # gemm_phase_tma's kernel: Hopper only
        tma = load_units(["gemm_phase_tma"])
        columns["dgrad tma"] = lambda p: tma.phase_tma_grad_input(p[0], p[1], w, *direct_hyper)
    if layout == "nchw":
        columns["dgrad cl"] = backward([True, False, False], via_cl=True)
        columns["wgrad cl"] = backward([False, True, b is not None], via_cl=True)
        columns["bwd cl"] = backward([True, True, b is not None], via_cl=True)
    if _kxs(layer):
        (kh, kw), co = layer.kernel, layer.cout
        # W as [Cin, kh*kw*Cout], its columns in _rows_of's order.
        w_rows = w.permute(0, 2, 3, 1).reshape(layer.cin, kh * kw * co)
        columns["dgrad mm"] = lambda p: _rows_of(p[1], layer) @ w_rows.t()
        columns["wgrad mm"] = lambda p: _columns(p[0]).t() @ _rows_of(p[1], layer)
    us: Dict[str, float] = {}
    with torch.no_grad():
        for name, fn in columns.items():
            if only_columns is not None and name not in only_columns:
                continue
            try:
                us[name] = 1e3 * graph_ms(fn, pairs, calls=4)
            except RuntimeError as exc:  # reported, the other columns stand
                print(f"{layer.name} {mode} {layout} {name}: {exc}".splitlines()[0])
                us[name] = float("nan")
    floor_ms = max(layer.flops() / (ceil.rate(mode) * 1e9),
                   layer.bytes(elem) / (ceil.copy_gbs * 1e6))
    return Row(layer.name, mode, layout, 1e3 * floor_ms, us)


COLUMNS = ["fwd", "fwd ours", "dgrad", "dgrad mm", "dgrad cl", "dgrad direct", "dgrad tiled",
           "dgrad mma", "dgrad tma", "wgrad", "wgrad mm", "wgrad cl", "wgrad direct", "wgrad tiled",
           "wgrad mma", "bwd", "bwd cl"]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--modes", default="tf32,bf16")
    p.add_argument("--formats", default="nchw,nhwc")
    p.add_argument("--only", default=None, help="comma-separated layer name prefixes")
    p.add_argument("--suite", default="suite", choices=sorted(SUITES))
    p.add_argument("--deterministic", action="store_true")
    p.add_argument("--columns", default=None,
                   help="comma-separated columns to time (default: all); the geomeans need "
                        "fwd, fwd ours, dgrad and wgrad")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/backward_bounds.py needs a CUDA GPU; none is visible.", file=sys.stderr)
        return 2
    torch.backends.cudnn.deterministic = args.deterministic
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 * 2**20)
    ceil = measure_ceilings()
    print(f"{props.name}: copy {ceil.copy_gbs:.0f} GB/s, TF32 {ceil.tf32_tflops:.0f}, "
          f"bf16 {ceil.half_tflops:.0f} TFLOP/s; torch {torch.__version__}, cudnn.benchmark "
          f"{torch.backends.cudnn.benchmark}, deterministic {args.deterministic}")
    layers = SUITES[args.suite]
    only_columns = set(args.columns.split(",")) if args.columns else None
    shown = [c for c in COLUMNS if only_columns is None or c in only_columns]
    if args.only:
        layers = [l for l in layers if any(l.name.startswith(o) for o in args.only.split(","))]
    print(f"{'layer':28s} {'mode':4s} {'fmt':4s} {'floor':>7s} "
          + " ".join(f"{c:>9s}" for c in shown) + "   (GPU us per call)")
    rows: List[Row] = []
    for mode in args.modes.split(","):
        for layout in args.formats.split(","):
            for layer in layers:
                r = bench(layer, mode, layout, ceil, l2, only_columns)
                rows.append(r)
                cells = " ".join(f"{r.us.get(c, math.nan):9.1f}" for c in shown)
                print(f"{r.layer:28s} {mode:4s} {layout:4s} {r.floor_us:7.1f} {cells}",
                      flush=True)
    print("== per mode and layout: geomean of PyTorch's time / floor (x), median % of floor")
    for mode in args.modes.split(","):
        for layout in args.formats.split(","):
            sel = [r for r in rows if r.mode == mode and r.layout == layout]
            if not sel:
                continue
            parts = []
            for c in ("fwd", "fwd ours", "dgrad", "wgrad"):
                ok = [r for r in sel if math.isfinite(r.us.get(c, math.nan))]
                if not ok:
                    continue
                parts.append(f"{c} {geomean([r.us[c] / r.floor_us for r in ok]):.1f}x "
                             f"{statistics.median(100 * r.floor_us / r.us[c] for r in ok):.0f}%")
            for grad in ("dgrad", "wgrad"):  # the cuBLAS compositions (k == s layers)
                mm = [r for r in sel if math.isfinite(r.us.get(f"{grad} mm", math.nan))]
                if mm:
                    ratio = geomean([r.us[grad] / r.us[f"{grad} mm"] for r in mm])
                    parts.append(f"{grad} aten/mm {ratio:.2f}x")
            for grad, kind in (("dgrad", "direct"), ("dgrad", "tiled"), ("dgrad", "mma"),
                               ("dgrad", "tma"), ("wgrad", "direct"), ("wgrad", "tiled"),
                               ("wgrad", "mma")):
                col = f"{grad} {kind}"  # the backward kernels of cuda/direct_backward
                ok = [r for r in sel if math.isfinite(r.us.get(col, math.nan))
                      and math.isfinite(r.us.get(grad, math.nan))]
                if ok:
                    ratios = [r.us[grad] / r.us[col] for r in ok]
                    parts.append(f"{grad} aten/{kind} {geomean(ratios):.2f}x "
                                 f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
            for grad in ("dgrad", "wgrad", "bwd"):  # NCHW through cuDNN's channels_last kernels
                cl = [r for r in sel if math.isfinite(r.us.get(f"{grad} cl", math.nan))]
                if cl:
                    ratios = [r.us[grad] / r.us[f"{grad} cl"] for r in cl]
                    parts.append(f"{grad} nchw/cl {geomean(ratios):.2f}x "
                                 f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
            print(f"{mode:4s} {layout:4s} " + " | ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
