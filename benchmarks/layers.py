"""Layer benchmark: deconv_patch vs PyTorch's cuDNN path on ConvTranspose2d layers of published
models, in one process.

    python benchmarks/layers.py [--quick] [--modes tf32,fp32,bf16,fp16] [--formats nchw,nhwc]
                                [--json out.json]

Per layer and mode: cuDNN time (cudnn.benchmark=True, warmed up), our time (a
FastConvTranspose2d, as optimize() installs it; autotune is on since cudnn.benchmark is), speedup
(cuDNN / ours), our % of the roofline floor and the variant the planner chose. CUDA events
around each call, median of many reps, inputs rotated through more than 2x the L2 size so small
layers are not flattered by the cache. Also each side's GPU time per call (the calls captured in
a CUDA graph and replayed: host launch work excluded, as inside a model whose GPU runs ahead of
the host). Last lines: geomean speedup per mode (event time | GPU time), slowest layer.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import statistics
import sys
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

import deconv_patch
from deconv_patch.kernels import planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.timing import capture_graph, median_interleaved, time_cuda


@dataclass(frozen=True)
class Layer:
    name: str
    batch: int
    cin: int
    cout: int
    hw: Tuple[int, int]
    kernel: Tuple[int, int]
    stride: Tuple[int, int] = (1, 1)
    padding: Tuple[int, int] = (0, 0)
    output_padding: Tuple[int, int] = (0, 0)
    groups: int = 1
    dilation: Tuple[int, int] = (1, 1)
    bias: bool = True

    @property
    def args(self) -> ConvTransposeArgs:
        return ConvTransposeArgs(self.stride, self.padding, self.output_padding, self.dilation,
                                 self.groups)

    @property
    def out_hw(self) -> Tuple[int, int]:
        return self.args.output_hw(self.hw, self.kernel)

    def flops(self) -> float:
        """Multiply-adds that land in the output x2 (inserted zeros not counted)."""
        return 2.0 * self.batch * self.cin * (self.cout // self.groups) * self.hw[0] * self.hw[1] \
            * self.kernel[0] * self.kernel[1]

    def module_and_input(self, dtype: torch.dtype, channels_last: bool
                         ) -> Tuple[torch.nn.ConvTranspose2d, torch.Tensor]:
        """The layer as an eval-mode nn.ConvTranspose2d on the GPU and a random input of its
        batch, both channels_last or both NCHW (for the profiling scripts)."""
        conv = torch.nn.ConvTranspose2d(
            self.cin, self.cout, self.kernel, self.stride, self.padding,  # type: ignore[arg-type]
            self.output_padding, self.groups, self.bias, self.dilation,  # type: ignore[arg-type]
            device="cuda", dtype=dtype).eval()
        x = torch.randn(self.batch, self.cin, *self.hw, device="cuda", dtype=dtype)
        if channels_last:
            conv = conv.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        return conv, x

    def bytes(self, elem: int) -> float:
        oh, ow = self.out_hw
        n_in = self.batch * self.cin * self.hw[0] * self.hw[1]
        n_w = self.cin * (self.cout // self.groups) * self.kernel[0] * self.kernel[1]
        n_out = self.batch * self.cout * oh * ow
        return float(elem * (n_in + n_w + n_out + (self.cout if self.bias else 0)))


def sq(v: int) -> Tuple[int, int]:
    return (v, v)


# Layers from published architectures, at the batch sizes those models train or serve with.
SUITE: List[Layer] = [
    Layer("dcgan.g1 100>512 1x1", 64, 100, 512, sq(1), sq(4), bias=False),
    Layer("dcgan.g2 512>256 4x4", 64, 512, 256, sq(4), sq(4), sq(2), sq(1), bias=False),
    Layer("dcgan.g3 256>128 8x8", 64, 256, 128, sq(8), sq(4), sq(2), sq(1), bias=False),
    Layer("dcgan.g4 128>64 16x16", 64, 128, 64, sq(16), sq(4), sq(2), sq(1), bias=False),
    Layer("dcgan.g5 64>3 32x32", 64, 64, 3, sq(32), sq(4), sq(2), sq(1), bias=False),
    Layer("unet.up1 1024>512 28", 8, 1024, 512, sq(28), sq(2), sq(2)),
    Layer("unet.up4 128>64 196", 8, 128, 64, sq(196), sq(2), sq(2)),
    Layer("pix2pix.u2 1024>512 8", 4, 1024, 512, sq(8), sq(4), sq(2), sq(1), bias=False),
    Layer("pix2pix.u6 256>64 64", 4, 256, 64, sq(64), sq(4), sq(2), sq(1), bias=False),
    Layer("cyclegan.up1 256>128 64", 1, 256, 128, sq(64), sq(3), sq(2), sq(1), sq(1)),
    Layer("cyclegan.up2 128>64 128", 1, 128, 64, sq(128), sq(3), sq(2), sq(1), sq(1)),
    Layer("simplebl.d1 2048>256 8x6", 32, 2048, 256, (8, 6), sq(4), sq(2), sq(1), bias=False),
    Layer("simplebl.d2 256>256 16x12", 32, 256, 256, (16, 12), sq(4), sq(2), sq(1), bias=False),
    Layer("simplebl.d3 256>256 32x24", 32, 256, 256, (32, 24), sq(4), sq(2), sq(1), bias=False),
    Layer("fsrcnn.x3 56>1 k9s3", 16, 56, 1, sq(64), sq(9), sq(3), sq(4), sq(2)),
    Layer("maskrcnn.mask 256>256 14", 100, 256, 256, sq(14), sq(2), sq(2)),
    Layer("keypointrcnn 512>17 14", 100, 512, 17, sq(14), sq(4), sq(2), sq(1)),
    Layer("yolov8seg.proto 256 80", 8, 256, 256, sq(80), sq(2), sq(2)),
    Layer("fcn8s.up8 21 k16s8", 4, 21, 21, sq(64), sq(16), sq(8), sq(4), bias=False),
    Layer("depthwise.up 64 k4s2 g64", 16, 64, 64, sq(64), sq(4), sq(2), sq(1), groups=64),
    Layer("grouped 128 g8 k3s2op1", 16, 128, 128, sq(32), sq(3), sq(2), sq(1), sq(1), groups=8),
    Layer("dilated 64 k3 d2", 16, 64, 64, sq(32), sq(3), sq(1), sq(2), dilation=sq(2)),
    Layer("asym 64>32 k3x5 s1x2", 16, 64, 32, (24, 40), (3, 5), (1, 2), (1, 2), (0, 1)),
    Layer("vae.dec 128>64 32", 32, 128, 64, sq(32), sq(4), sq(2), sq(1)),
    # output_padding >= stride: PyTorch cannot use cuDNN and runs slow_conv_transpose2d.
    Layer("outpad>=stride k3 s1 d2", 16, 64, 64, sq(32), sq(3), sq(1), sq(1), sq(1),
          dilation=sq(2)),
]
# Layers the planner's rules were not read from (its untimed rule was read off SUITE,
# docs/performance/autotune.md): other published models, batch 1, odd sizes, one-axis strides,
# a stride area past the rule's limit. `--suite held-out` runs them.
HELD_OUT: List[Layer] = [
    Layer("enet.up 128>64 k3s2op1", 8, 128, 64, (64, 64), sq(3), sq(2), sq(1), sq(1)),
    Layer("enet.up2 64>16 k3s2op1", 8, 64, 16, (128, 128), sq(3), sq(2), sq(1), sq(1)),
    Layer("linknet.dec4 512>256 k3s2", 4, 512, 256, (8, 8), sq(3), sq(2), sq(1), sq(1)),
    Layer("centernet.d1 512>256 k4s2", 32, 512, 256, (16, 16), sq(4), sq(2), sq(1), bias=False),
    Layer("higherhrnet 49>32 k4s2", 8, 49, 32, (128, 128), sq(4), sq(2), sq(1), bias=False),
    Layer("vae.mnist 64>32 k4s2 7x7", 128, 64, 32, (7, 7), sq(4), sq(2), sq(1)),
    Layer("dcgan.g2 b1 512>256", 1, 512, 256, sq(4), sq(4), sq(2), sq(1), bias=False),
    Layer("segan 64>32 k1x31 s1x2", 16, 64, 32, (1, 256), (1, 31), (1, 2), (0, 15), (0, 1)),
    Layer("spec 128>64 k4x3 s2x1", 16, 128, 64, (32, 64), (4, 3), (2, 1), (1, 1)),
    Layer("fcn32s 21 k64s32", 2, 21, 21, (16, 16), sq(64), sq(32), sq(16), bias=False),
    Layer("monai.up 64>32 k2s2 odd", 4, 64, 32, (37, 45), sq(2), sq(2)),
    Layer("dcgan.g1 b1 128>1024 1x1", 1, 128, 1024, sq(1), sq(4), bias=False),
]
# Layers neither set holds (the held-out layers have informed the rule too): the rule's next
# check. Other published models (WGAN-GP's k5 s2 op1, pix2pixHD at 512 x 1024, UNet++,
# CenterNet-R18, LSGAN, FCN-16s, a depthwise pose head), inference at batch 1 and 2, and the
# channel counts and sizes between the suite's. `--suite fresh` runs them.
FRESH: List[Layer] = [
    Layer("wgangp.g2 256>128 k5s2op1", 64, 256, 128, sq(4), sq(5), sq(2), sq(2), sq(1)),
    Layer("wgangp.g3 128>64 k5s2op1", 64, 128, 64, sq(8), sq(5), sq(2), sq(2), sq(1)),
    Layer("wgangp.out 64>3 k5s2op1", 64, 64, 3, sq(16), sq(5), sq(2), sq(2), sq(1)),
    Layer("pix2pixhd.up1 1024>512 b1", 1, 1024, 512, (32, 64), sq(3), sq(2), sq(1), sq(1)),
    Layer("pix2pixhd.up4 128>64 b1", 1, 128, 64, (256, 512), sq(3), sq(2), sq(1), sq(1)),
    Layer("unetpp.up 256>128 k2s2 b2", 2, 256, 128, sq(48), sq(2), sq(2)),
    Layer("centernet.r18 256>256 b1", 1, 256, 256, sq(16), sq(4), sq(2), sq(1), bias=False),
    Layer("dcgan.celeba 128>64 16x16", 128, 128, 64, sq(16), sq(4), sq(2), sq(1), bias=False),
    Layer("lsgan 256>256 k3s2op1 8x8", 32, 256, 256, sq(8), sq(3), sq(2), sq(1), sq(1)),
    Layer("fcn16s 21 k4s2", 1, 21, 21, (32, 32), sq(4), sq(2), bias=False),
    Layer("posehead.dw 160 k4s2 g160", 8, 160, 160, sq(14), sq(4), sq(2), sq(1), groups=160),
    Layer("dcgan.g3 b8 256>128", 8, 256, 128, sq(8), sq(4), sq(2), sq(1), bias=False),
]
# Layers cuDNN has no kernel for (output_padding >= stride on an axis, which needs a dilation
# above the stride): PyTorch runs its native im2col kernels, forward and backward. The backward
# rule for them (kernels/direct_backward.py) was read off this set. `--suite no-cudnn`.
NO_CUDNN: List[Layer] = [
    Layer("nocudnn 16 k3 s1 d2 64", 8, 16, 16, sq(64), sq(3), sq(1), sq(2), sq(1),
          dilation=sq(2)),
    Layer("nocudnn 64 g4 k3 s1 d2 32", 16, 64, 64, sq(32), sq(3), sq(1), sq(1), sq(1),
          dilation=sq(2), groups=4),
    Layer("nocudnn 128>64 k3 s1 d3 48", 8, 128, 64, sq(48), sq(3), sq(1), sq(3), sq(2),
          dilation=sq(3)),
    Layer("nocudnn 64>32 k3 s2 d3 32", 8, 64, 32, sq(32), sq(3), sq(2), sq(2), sq(2),
          dilation=sq(3)),
    Layer("nocudnn 256 k3 s1 d2 32", 8, 256, 256, sq(32), sq(3), sq(1), sq(2), sq(1),
          dilation=sq(2)),
    Layer("nocudnn 512>256 k3 s1 d2 16", 4, 512, 256, sq(16), sq(3), sq(1), sq(2), sq(1),
          dilation=sq(2)),
    Layer("nocudnn 32>3 k5 s1 d2 64", 16, 32, 3, sq(64), sq(5), sq(1), sq(4), sq(1),
          dilation=sq(2)),
    Layer("nocudnn 64 k3 s1x2 d2 40", 8, 64, 64, (40, 40), sq(3), (1, 2), sq(1), sq(1),
          dilation=sq(2)),
]
SUITES = {"suite": SUITE, "held-out": HELD_OUT, "fresh": FRESH, "no-cudnn": NO_CUDNN}
QUICK = ["dcgan.g3 256>128 8x8", "unet.up4 128>64 196", "cyclegan.up2 128>64 128",
         "simplebl.d2 256>256 16x12", "maskrcnn.mask 256>256 14", "depthwise.up 64 k4s2 g64"]

MODES: Dict[str, Tuple[torch.dtype, bool]] = {
    "tf32": (torch.float32, True),
    "fp32": (torch.float32, False),
    "bf16": (torch.bfloat16, False),
    "fp16": (torch.float16, False),
}


@dataclass
class Ceilings:
    copy_gbs: float
    tf32_tflops: float
    fp32_tflops: float
    half_tflops: float

    def rate(self, mode: str) -> float:
        return {"tf32": self.tf32_tflops, "fp32": self.fp32_tflops}.get(mode, self.half_tflops)


def median_ms(fn, inputs: List[torch.Tensor], warmup: int, reps: int) -> float:
    """Median ms per call of fn, rotating through `inputs` (so L2 does not flatter)."""
    turn = itertools.count()
    return time_cuda(lambda: fn(inputs[next(turn) % len(inputs)]), warmup, reps).median_ms


def paired_median_ms(fns, inputs: List[torch.Tensor], warmup: int, reps: int) -> List[float]:
    """Median ms per call of each fn, the fns taking turns call by call (time_interleaved), so
    clock and background drift hit both sides alike; inputs rotate as in median_ms."""
    turns = [itertools.count() for _ in fns]
    calls = [lambda fn=fn, t=t: fn(inputs[next(t) % len(inputs)]) for fn, t in zip(fns, turns)]
    return median_interleaved(calls, warmup, reps)


def graph_ms(fn, inputs: List[torch.Tensor], calls: int = 8, reps: int = 15) -> float:
    """GPU time per call, host launch work excluded: `calls` calls (inputs rotating, as above)
    captured into a CUDA graph, the graph replayed `reps` times, median / calls. Inside a model
    the GPU runs ahead of the host, so this is what a layer costs there; the event time above
    also holds the host's per-call work wherever that exceeds the kernel (small layers). A
    captured layer that reads a packed weight packs once per replay: calls=1 is a model graphed
    with one forward per replay, each layer paying its whole pack."""
    batch = [inputs[i % len(inputs)] for i in range(calls)]
    replay, _graph = capture_graph(lambda: [fn(x) for x in batch])
    return time_cuda(replay, 3, reps).median_ms / len(batch)


def measure_ceilings() -> Ceilings:
    """Measured copy bandwidth and matmul rates (the roofline's two ceilings)."""
    n = 256 * 1024 * 1024 // 4
    src = torch.empty(n, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda _: dst.copy_(src), [src], 3, 10)
    copy = 2 * n * 4 / copy_ms / 1e6

    def mm_rate(dtype: torch.dtype, tf32: bool, size: int) -> float:
        a = torch.randn(size, size, device="cuda", dtype=dtype)
        b = torch.randn(size, size, device="cuda", dtype=dtype)
        torch.backends.cuda.matmul.allow_tf32 = tf32
        ms = median_ms(lambda _: a @ b, [a], 3, 10)
        torch.backends.cuda.matmul.allow_tf32 = False
        return 2 * size**3 / ms / 1e9

    return Ceilings(copy, mm_rate(torch.float32, True, 8192), mm_rate(torch.float32, False, 4096),
                    mm_rate(torch.bfloat16, False, 8192))


@dataclass
class Row:
    layer: str
    mode: str
    layout: str
    cudnn_ms: float
    ours_ms: float
    speedup: float
    floor_ms: float
    ours_pct_of_floor: float
    cudnn_x_floor: float
    variant: str
    max_err_ours: float
    max_err_cudnn: float
    # GPU time per call (graph_ms; NaN where capture failed) and the ratio / floor share on it.
    cudnn_gpu_ms: float = float("nan")
    ours_gpu_ms: float = float("nan")
    gpu_speedup: float = float("nan")
    ours_gpu_pct_of_floor: float = float("nan")


def layer_tensors(layer: Layer, mode: str, layout: str, l2_bytes: int
                  ) -> Tuple[List[torch.Tensor], torch.Tensor, Optional[torch.Tensor]]:
    """The mode's TF32 flag set, then random inputs in the layout (enough copies to rotate
    through more than 2x the L2, so small layers are not flattered by the cache), a weight
    scaled to keep outputs O(1) and a bias where the layer has one."""
    dtype, tf32 = MODES[mode]
    torch.backends.cudnn.allow_tf32 = tf32
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    elem = torch.tensor([], dtype=dtype).element_size()
    in_bytes = layer.batch * layer.cin * layer.hw[0] * layer.hw[1] * elem
    copies = max(1, min(32, math.ceil(2 * l2_bytes / max(1, in_bytes))))
    inputs = [torch.randn(layer.batch, layer.cin, *layer.hw, device="cuda", dtype=dtype)
              .contiguous(memory_format=fmt) for _ in range(copies)]
    w = (torch.randn(layer.cin, layer.cout // layer.groups, *layer.kernel, device="cuda")
         / math.sqrt(layer.cin // layer.groups * layer.kernel[0] * layer.kernel[1])).to(dtype)
    b = torch.randn(layer.cout, device="cuda", dtype=dtype) if layer.bias else None
    return inputs, w, b


def bench_layer(layer: Layer, mode: str, layout: str, ceil: Ceilings, reps: int,
                l2_bytes: int, variant: Optional[str] = None, graph_calls: int = 8) -> Row:
    dtype = MODES[mode][0]
    elem = torch.tensor([], dtype=dtype).element_size()
    inputs, w, b = layer_tensors(layer, mode, layout, l2_bytes)
    a = layer.args
    call = (a.stride, a.padding, a.output_padding, a.groups, a.dilation)


    forced = planner.use_variant(variant) if variant else contextlib.nullcontext()
    # What optimize() gives users: the patched module (eager fast path included).
    module = deconv_patch.FastConvTranspose2d(
        layer.cin, layer.cout, layer.kernel, layer.stride, layer.padding,  # type: ignore[arg-type]
        layer.output_padding, layer.groups, layer.bias, layer.dilation,  # type: ignore[arg-type]
        device="cuda", dtype=dtype)
    with torch.no_grad():
        module.weight.copy_(w)
        if b is not None:
            module.bias.copy_(b)
    # PyTorch's side is the nn.ConvTranspose2d the user had: same module-call overhead.
    reference = torch.nn.ConvTranspose2d(
        layer.cin, layer.cout, layer.kernel, layer.stride, layer.padding,  # type: ignore[arg-type]
        layer.output_padding, layer.groups, layer.bias, layer.dilation,  # type: ignore[arg-type]
        device="cuda", dtype=dtype)
    reference.load_state_dict(module.state_dict())

    def ref_fn(x):
        return reference(x)

    def ours_fn(x):
        return module(x)

    with torch.no_grad(), forced:
        ref64 = F.conv_transpose2d(inputs[0].double(), w.double(),
                                   None if b is None else b.double(), *call)
        err_ours = (ours_fn(inputs[0]).double() - ref64).abs().max().item()
        err_cudnn = (ref_fn(inputs[0]).double() - ref64).abs().max().item()
        del ref64
        cudnn_ms, ours_ms = paired_median_ms([ref_fn, ours_fn], inputs, 5, reps)
        chosen = module.plan_for(inputs[0]).variant
        try:
            cudnn_gpu, ours_gpu = (graph_ms(fn, inputs, graph_calls) for fn in (ref_fn, ours_fn))
        except RuntimeError as exc:  # reported, not fatal: the event times above stand
            print(f"{layer.name} {mode} {layout}: CUDA graph timing failed: {exc}".splitlines()[0])
            cudnn_gpu = ours_gpu = float("nan")
    floor_ms = max(layer.flops() / (ceil.rate(mode) * 1e9),
                   layer.bytes(elem) / (ceil.copy_gbs * 1e6))
    return Row(layer.name, mode, layout, cudnn_ms, ours_ms, cudnn_ms / ours_ms, floor_ms,
               100.0 * floor_ms / ours_ms, cudnn_ms / floor_ms, chosen, err_ours, err_cudnn,
               cudnn_gpu, ours_gpu, cudnn_gpu / ours_gpu, 100.0 * floor_ms / ours_gpu)


def geomean(values: List[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a subset that runs in a minute")
    parser.add_argument("--modes", default="tf32,fp32,bf16,fp16")
    parser.add_argument("--formats", default="nchw,nhwc")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json", default=None, help="write all rows here")
    parser.add_argument("--variant", default=None, choices=planner.NAMED_VARIANTS,
                        help="force one variant instead of the planner's choice")
    parser.add_argument("--no-autotune", action="store_true",
                        help="cudnn.benchmark off on both sides (PyTorch's default): cuDNN's "
                             "heuristic choice against the planner's, no autotune")
    parser.add_argument("--only", default=None,
                        help="comma-separated layer name prefixes (e.g. unet,maskrcnn)")
    parser.add_argument("--suite", default="suite", choices=sorted(SUITES),
                        help="the layer suite, or layers the planner's rules were not read from")
    parser.add_argument("--graph-calls", type=int, default=8,
                        help="calls per captured graph in the GPU-time columns (1: each call "
                             "pays its weight pack, as in a model graphed per forward)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/layers.py needs a CUDA GPU; none is visible.", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = not args.no_autotune
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 * 2**20)
    ceil = measure_ceilings()
    print(f"{props.name}: copy {ceil.copy_gbs:.0f} GB/s, TF32 {ceil.tf32_tflops:.0f}, "
          f"fp32 {ceil.fp32_tflops:.0f}, bf16 {ceil.half_tflops:.0f} TFLOP/s; torch "
          f"{torch.__version__}, cuDNN {torch.backends.cudnn.version()}, deconv_patch "
          f"{deconv_patch.__version__}")
    layers = [l for l in SUITES[args.suite] if not args.quick or l.name in QUICK]
    if args.only:
        wanted = args.only.split(",")
        layers = [l for l in layers if any(l.name.startswith(w) for w in wanted)]
    modes = args.modes.split(",")
    formats = args.formats.split(",")
    rows: List[Row] = []
    header = (f"{'layer':28s} {'mode':4s} {'fmt':4s} {'cuDNN ms':>9s} {'ours ms':>9s} "
              f"{'speedup':>7s} {'%floor':>6s} {'cuDNN/floor':>11s} {'GPU us':>13s} "
              f"{'GPU x':>6s} {'variant':8s}")
    print(header)
    for mode in modes:
        for layout in formats:
            for layer in layers:
                try:
                    r = bench_layer(layer, mode, layout, ceil, args.reps, l2, args.variant,
                                    args.graph_calls)
                except RuntimeError as exc:  # a forced variant that does not cover this layer
                    if not args.variant:
                        raise
                    print(f"{layer.name:28s} {mode:4s} {layout:4s} skipped: {exc}".splitlines()[0])
                    continue
                rows.append(r)
                print(f"{r.layer:28s} {r.mode:4s} {r.layout:4s} {r.cudnn_ms:9.4f} "
                      f"{r.ours_ms:9.4f} {r.speedup:6.2f}x {r.ours_pct_of_floor:5.1f}% "
                      f"{r.cudnn_x_floor:10.1f}x {1e3 * r.cudnn_gpu_ms:6.1f}/"
                      f"{1e3 * r.ours_gpu_ms:<6.1f} {r.gpu_speedup:5.2f}x {r.variant:8s}",
                      flush=True)
    torch.backends.cudnn.allow_tf32 = True
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": props.name, "torch": torch.__version__,
                       "cudnn_benchmark": not args.no_autotune,
                       "ceilings": asdict(ceil), "rows": [asdict(r) for r in rows]}, fh, indent=1)
    print("== geomean speedup (cuDNN time / ours) per mode and layout")
    for mode in modes:
        for layout in formats:
            sel = [r for r in rows if r.mode == mode and r.layout == layout]
            if not sel:
                continue
            gpu = [r for r in sel if math.isfinite(r.gpu_speedup)]
            print(f"{mode:4s} {layout:4s} geomean {geomean([r.speedup for r in sel]):.2f}x  "
                  f"median %floor {statistics.median(r.ours_pct_of_floor for r in sel):.1f}%  "
                  f"cuDNN geomean x floor {geomean([r.cudnn_x_floor for r in sel]):.1f}  | "
                  f"GPU time: geomean {geomean([r.gpu_speedup for r in gpu]):.2f}x  median "
                  f"%floor {statistics.median([r.ours_gpu_pct_of_floor for r in gpu] or [0]):.1f}%")
    worst = min(rows, key=lambda r: r.speedup)
    print(f"slowest vs cuDNN: {worst.layer} {worst.mode} {worst.layout}: {worst.speedup:.2f}x")
    gpu_rows = [r for r in rows if math.isfinite(r.gpu_speedup)]
    if gpu_rows:
        w = min(gpu_rows, key=lambda r: r.gpu_speedup)
        print(f"slowest vs cuDNN in GPU time: {w.layer} {w.mode} {w.layout}: "
              f"{w.gpu_speedup:.2f}x ({w.variant})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
