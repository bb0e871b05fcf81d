"""Where the time of a small layer goes: host (Python + C++ + launch) versus GPU.

The layer benchmark records a CUDA event pair around each call, so a layer whose GPU work is
shorter than the host's per-call work measures the host. This separates the two, per layer:
  * host us/call  - wall time of N back-to-back calls with no synchronisation (the host's issue
                    rate; the GPU queue absorbs the kernels as long as it keeps up),
  * gpu us/call   - the same call captured 20 times into a CUDA graph and replayed (no host
                    work at all), CUDA events,
for PyTorch (F.conv_transpose2d and nn.ConvTranspose2d) and FastConvTranspose2d with each of
its variants forced, plus the pieces of our call path (plan-cache lookup, prepared call).
--training measures a training call instead (the forward autograd records, alone and with the
backward of the input and parameters) for nn.ConvTranspose2d, FastConvTranspose2d's default
(PyTorch's convolution) and its kernels_in_training path (our forward kernel in a C++ node);
with --update, the pass train.py's layer rows time instead (fp32 module, bf16 under autocast,
forward + backward + the optimizer's in-place update, so our path re-packs its weight).
--input-gradient measures the input gradient alone: ATen's (cuDNN's where it has a kernel)
against gemm_phase_tma's (the binding's phase_tma_grad_input, its weight pack included), with
fewer calls per timing (a call's three launches must not fill the launch queue).
--prefilter measures a recorded forward on PyTorch's path on a 1 x 1 input of batch 1 (host
time alone: the GPU never limits), nn.ConvTranspose2d's and FastConvTranspose2d's with
kernels_in_training None (the training prefilter) and False (none), both once their recorded
path is armed (C++), the default on its Python path, and the prefilter alone.

    python benchmarks/host_overhead.py [--only dcgan.g2,simplebl.d2] [--modes bf16,tf32]
                                       [--training [--update] | --input-gradient |
                                        --prefilter]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import math
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layers import MODES, SUITE, Layer  # noqa: E402

import deconv_patch  # noqa: E402
from deconv_patch import kernels, ops
from deconv_patch.kernels import packed_weights, planner  # noqa: E402
from deconv_patch.kernels.extension import load_extension, load_units  # noqa: E402
from deconv_patch.timing import capture_graph, time_cuda  # noqa: E402

DEFAULT_ONLY = "dcgan.g2,dcgan.g4,pix2pix.u6,simplebl.d2,vae.dec,maskrcnn"


def host_us(fn: Callable[[], object], calls: int = 400) -> float:
    """Wall microseconds per call over `calls` unsynchronised calls (after a warm-up)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def gpu_us(fn: Callable[[], object], per_graph: int = 20) -> Optional[float]:
    """GPU microseconds per call: `per_graph` calls captured into one CUDA graph, replayed."""
    try:
        replay, _graph = capture_graph(lambda: [fn() for _ in range(per_graph)])
    except Exception as e:  # noqa: BLE001 - a path that cannot be captured is reported, not fatal
        print(f"    (graph capture failed: {type(e).__name__}: {str(e)[:80]})")
        return None
    return time_cuda(replay, 3, 15).median_ms * 1e3 / per_graph


def event_us(fn: Callable[[], object], reps: int = 200) -> float:
    """What benchmarks/layers.py measures: median of one event pair per call, no sync between."""
    for _ in range(10):
        fn()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(reps)]
    for s, e in pairs:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) * 1e3 for s, e in pairs)
    return times[len(times) // 2]


def layer_and_input(layer: Layer, mode: str, layout: str
                    ) -> Tuple[torch.Tensor, torch.nn.ConvTranspose2d]:
    """A random input in `layout` and the layer as nn.ConvTranspose2d, in `mode`'s dtype (and
    cuDNN's TF32 flag set for it)."""
    dtype, tf32 = MODES[mode]
    torch.backends.cudnn.allow_tf32 = tf32
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    x = torch.randn(layer.batch, layer.cin, *layer.hw, device="cuda", dtype=dtype
                    ).contiguous(memory_format=fmt)
    reference = torch.nn.ConvTranspose2d(
        layer.cin, layer.cout, layer.kernel, layer.stride, layer.padding,  # type: ignore[arg-type]
        layer.output_padding, layer.groups, layer.bias, layer.dilation,  # type: ignore[arg-type]
        device="cuda", dtype=dtype)
    return x, reference


def measure(layer: Layer, mode: str, layout: str, variants: List[str], trace: bool = False
            ) -> None:
    dtype, tf32 = MODES[mode]
    x, reference = layer_and_input(layer, mode, layout)
    fast = deconv_patch.FastConvTranspose2d.from_module(reference)
    w, b, a = reference.weight, reference.bias, layer.args
    fns: Dict[str, Callable[[], object]] = {
        "F.conv_transpose2d": lambda: F.conv_transpose2d(x, w, b, a.stride, a.padding,
                                                         a.output_padding, a.groups, a.dilation),
        "nn.ConvTranspose2d": lambda: reference(x),
        "empty_like(out)": None,  # filled below
        "Fast (planner)": lambda: fast(x),
        # The op as a compiled graph calls it, and aten's (the op's C++ kernel, or its Python
        # kernel with DECONV_PATCH_OP_KERNEL=python).
        "torch.ops.deconv_patch": lambda: torch.ops.deconv_patch.conv_transpose2d(
            x, w, b, a.stride, a.padding, a.output_padding, a.groups, a.dilation),
        "torch.ops.aten.conv_transpose2d": lambda: torch.ops.aten.conv_transpose2d.input(
            x, w, b, a.stride, a.padding, a.output_padding, a.groups, a.dilation),
    }
    out = reference(x)
    fns["empty_like(out)"] = lambda: torch.empty_like(out)
    for v in variants:
        def run(v=v):
            with planner.use_variant(v):
                return fast(x)
        try:
            with torch.no_grad():
                y = run()
            err = (y.float() - out.float()).abs().max().item()
            if not math.isfinite(err) or err > 0.1:
                print(f"    {v}: wrong result (max err {err:.3g}); skipped")
                continue
        except RuntimeError as e:
            print(f"    {v}: {str(e)[:90]}")
            continue
        fns[f"Fast forced {v}"] = run
    print(f"\n{layer.name} {mode} {layout}  (planner: {fast.plan_for(x).variant})")
    print(f"  {'path':34s} {'host us':>8s} {'gpu us':>8s} {'event us':>9s}")
    with torch.no_grad():
        for name, fn in fns.items():
            g = gpu_us(fn) if name != "empty_like(out)" else None
            h = host_us(fn)
            e = event_us(fn)
            print(f"  {name:34s} {h:8.1f} {'-' if g is None else f'{g:8.1f}':>8s} {e:9.1f}",
                  flush=True)
        # The pieces of our kernel path (cache hit).
        tiny = torch.empty(1, device="cuda")
        pieces: Dict[str, Callable[[], object]] = {
            "piece: module plan-cache lookup": lambda: fast._entry_for(x, None, w, b),
            "piece: torch.empty": lambda: torch.empty(out.shape, device="cuda", dtype=dtype),
            # One ATen op's dispatch and kernel launch: this host's floor for any GPU call.
            "piece: tiny launch (fill_)": lambda: tiny.fill_(1.0),
        }
        if len(variants) and f"Fast forced {variants[0]}" in fns:
            call = ops.kernel_call(variants[0], x, w, a)
            pieces[f"piece: prepared call {variants[0]}"] = lambda: call(x, w, b)
            kernel, config = planner.split_variant(variants[0])
            packed = (packed_weights.packed_weight(kernel, w, a, tf32)
                      if planner.reads_packed_weight(variants[0]) else None)
            forward = load_extension().conv_transpose2d_forward
            cl = out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
            ext_args = (kernels.BY_NAME[kernel].code, x, w, b, list(a.stride), list(a.padding), list(a.output_padding),
                        list(a.dilation), a.groups, cl, tf32, None, None, None, 0, 0.01, packed,
                        config)
            pieces["piece: extension forward only"] = lambda: forward(*ext_args)
        armed = fast.__dict__.get("_fast_path")
        if armed is not None:
            pieces["piece: armed C++ fast path"] = lambda: armed(x, w, b)
        for name, fn in pieces.items():
            print(f"  {name:34s} {host_us(fn):8.1f}")
        if trace:
            print_trace(fns["Fast (planner)"])


def measure_training(layer: Layer, mode: str, layout: str, update: bool = False) -> None:
    """Host, GPU and event time of a recorded forward and of forward + backward (gradients of
    the input, weight and bias against a fixed random output gradient), per training path;
    host us as the least of 9 timings of 20 unsynchronised passes. `update`: train.py's layer
    pass instead (its mode's autocast, the optimizer's in-place update after the backward)."""
    if update:  # (benchmarks/ is on sys.path)
        from train import _TF32_FLAGS, _autocast, _layer_pass
        reference, x = layer.module_and_input(torch.float32, channels_last=layout == "nhwc")
        reference.train()
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = \
            _TF32_FLAGS.get(mode, (True, True))
        casting = _autocast(mode)
    else:
        x, reference = layer_and_input(layer, mode, layout)
        casting = contextlib.nullcontext()
    x.requires_grad_(True)
    default = deconv_patch.FastConvTranspose2d.from_module(copy.deepcopy(reference))
    ours = deconv_patch.FastConvTranspose2d.from_module(copy.deepcopy(reference))
    ours.kernels_in_training = True
    with torch.no_grad(), casting:
        grad = torch.randn_like(reference(x))
        plan = ours.plan_for(x).variant
    print(f"\n{layer.name} {mode} {layout} training  (plan: {plan})")
    print(f"  {'path':46s} {'host us':>8s} {'gpu us':>8s} {'event us':>9s}")
    for name, m in (("nn.ConvTranspose2d", reference), ("Fast, default", default),
                    ("Fast, kernels_in_training", ours)):
        leaves = [x, *m.parameters()]
        calls: Dict[str, Callable[[], object]] = {
            "forward": lambda m=m: m(x),
            "forward + backward": lambda m=m, leaves=leaves: torch.autograd.grad(
                m(x), leaves, grad)}
        if update:
            calls = {"forward + backward + update": _layer_pass(m, x, grad, mode, "all")}
        for what, fn in calls.items():
            g = gpu_us(fn)
            # (few passes per timing: a pass launches up to a dozen kernels, and a full launch
            # queue would make the host wait for the GPU)
            host = min(host_us(fn, calls=20) for _ in range(9))
            print(f"  {name + ', ' + what:46s} {host:8.1f} "
                  f"{'-' if g is None else f'{g:8.1f}':>8s} {event_us(fn):9.1f}", flush=True)


def measure_input_gradient(layer: Layer, mode: str, layout: str) -> None:
    """Host and GPU time of the input gradient alone, ATen's and gemm_phase_tma's: host us as
    the least of 7 timings of 40 unsynchronised calls."""
    x, reference = layer_and_input(layer, mode, layout)
    w = reference.weight.detach()
    dy = torch.randn_like(reference(x)).contiguous(
        memory_format=torch.channels_last if layout == "nhwc" else torch.contiguous_format)
    s, p, d = list(layer.stride), list(layer.padding), list(layer.dilation)
    core = load_units(kernels.BY_NAME[planner.GEMM_PHASE_TMA].units_for("none", x.dtype))
    paths = {"ATen": lambda: torch.ops.aten.convolution_backward(
                 dy, x, w, None, s, p, d, True, list(layer.output_padding), layer.groups,
                 [True, False, False]),
             "gemm_phase_tma": lambda: core.phase_tma_grad_input(x, dy, w, s, p, d,
                                                                 layer.groups)}
    print(f"{layer.name:28s} {mode} {layout} input gradient", end="")
    for name, fn in paths.items():
        try:
            host = min(host_us(fn, calls=40) for _ in range(7))
        except Exception as e:  # noqa: BLE001 - a layer the kernel refuses is reported
            print(f" | {name}: {str(e)[:60]}", end="")
            continue
        g = gpu_us(fn)
        print(f" | {name} host {host:6.1f} gpu {'-' if g is None else f'{g:6.1f}'}", end="")
    print(flush=True)


def measure_prefilter(layer: Layer, mode: str) -> None:
    """Host us of a recorded forward on PyTorch's path, per path, on a 1 x 1 input (least of 9
    timings of 2,000 calls): what the training prefilter adds to nn.ConvTranspose2d's call, and
    the patched layers' calls once their recorded path is armed (the extension loaded, as in a
    model optimize() planned; "Python path": nothing armed, the prefilter asked each call)."""
    load_extension()
    a = layer.args
    _, reference = layer_and_input(layer, mode, "nchw")  # (in the mode's dtype and TF32 flag)
    default = deconv_patch.FastConvTranspose2d.from_module(copy.deepcopy(reference))
    off = deconv_patch.FastConvTranspose2d.from_module(copy.deepcopy(reference))
    off.kernels_in_training = False
    w, b = reference.weight, reference.bias
    x = torch.randn(1, layer.cin, 1, 1, device="cuda", dtype=w.dtype, requires_grad=True)
    prefilter = default._training_prefilter()
    paths: Dict[str, Callable[[], object]] = {
        "F.conv_transpose2d": lambda: F.conv_transpose2d(x, w, b, a.stride, a.padding,
                                                         a.output_padding, a.groups, a.dilation),
        "nn.ConvTranspose2d": lambda: reference(x),
        "Fast, default": lambda: default(x),
        "Fast, kernels_in_training=False": lambda: off(x),
        "Fast, default, Python path": lambda: (  # (nothing armed: the prefilter asked)
            default.__dict__.pop("_fast_path_recorded", None),
            default.__dict__.pop("_recorded_seen", None), default(x)),
        "piece: prefilter (may_train)": lambda: prefilter.may_train(x)}
    print(f"{layer.name:28s} {mode} recorded forward, host us:", end="")
    for name, fn in paths.items():
        print(f" | {name} {min(host_us(fn, calls=2000) for _ in range(9)):.2f}", end="")
    print(flush=True)


def print_trace(fn: Callable[[], object], calls: int = 50) -> None:
    """The host side of `calls` calls under torch.profiler: the ATen ops and CUDA runtime /
    driver calls one call makes, by self CPU time per call (what the host time above is made
    of; the profiler adds its own cost to every recorded op)."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if e.self_cpu_time_total > 0 and e.count >= calls]
    rows.sort(key=lambda e: -e.self_cpu_time_total)
    print(f"  trace of Fast (planner), per call ({calls} calls): self CPU us, count, name")
    for e in rows[:12]:
        print(f"    {e.self_cpu_time_total / calls:7.1f}  x{e.count / calls:<4.1f} {e.key[:90]}")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=DEFAULT_ONLY)
    p.add_argument("--modes", default="bf16,tf32")
    p.add_argument("--formats", default="nhwc,nchw")
    p.add_argument("--variants", default="gemm_phase_tma,gemm_phase,gemm_phase_sm90:128x64s4,"
                   "gemm_kxs_sm90,direct,gemm_kxs")
    p.add_argument("--trace", action="store_true",
                   help="also print the host calls of one planner call (torch.profiler)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--training", action="store_true",
                      help="a training call per path instead (recorded forward, + backward)")
    what.add_argument("--input-gradient", action="store_true",
                      help="the input gradient alone, ATen's and gemm_phase_tma's")
    what.add_argument("--prefilter", action="store_true",
                      help="a recorded forward on a 1 x 1 input per kernels_in_training setting")
    p.add_argument("--update", action="store_true",
                   help="with --training: train.py's layer pass (autocast, optimizer update)")
    args = p.parse_args(argv)
    # training and its gradients: PyTorch's default, as train.py
    torch.backends.cudnn.benchmark = not (args.training or args.input_gradient or
                                          args.prefilter)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    wanted = args.only.split(",")
    for layer in SUITE:
        if not any(layer.name.startswith(o) for o in wanted):
            continue
        for mode in args.modes.split(","):
            if args.prefilter:
                measure_prefilter(layer, mode)
                continue
            for layout in args.formats.split(","):
                if args.training:
                    measure_training(layer, mode, layout, args.update)
                    continue
                if args.input_gradient:
                    measure_input_gradient(layer, mode, layout)
                    continue
                variants = [v for v in args.variants.split(",")
                            if not (v.startswith("gemm_phase_sm90") and mode == "tf32")]
                measure(layer, mode, layout, variants, args.trace)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
