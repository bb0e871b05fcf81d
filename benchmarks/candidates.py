"""Every candidate of every suite layer, timed: what autotune chooses from, and how the untimed
rule's choice compares, with cudnn.benchmark off (PyTorch's default).

    python benchmarks/candidates.py [--quick] [--modes tf32,fp32,bf16,fp16] [--formats nchw,nhwc]
                                    [--only dcgan,unet] [--suite suite|held-out] [--reps 15]
                                    [--json out.json]

Per layer, mode and layout: the planner's untimed variant and its candidate list; each
candidate's event time per call (its prepared kernel call, as autotune times it; PyTorch's
F.conv_transpose2d for `aten`), all taking turns call by call, with cudnn.benchmark off, and its
GPU time (calls captured into a CUDA graph and replayed, as layers.py's GPU-time column: the
host's per-call work left out, which decides the event time of 20-60 us layers and moves it
between runs). Last lines, per mode and clock: the geomean speedup over PyTorch of the untimed
choice (and its slowest row) and of the best candidate per row: how far the untimed rule is
from what timing every candidate would give (the best of many noisy timings: an upper bound no
rule reaches).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

from deconv_patch.kernel_calls import kernel_call
from deconv_patch.kernels import planner
from layers import QUICK, SUITES, Layer, geomean, graph_ms, layer_tensors, paired_median_ms


@dataclass
class Row:
    layer: str
    mode: str
    layout: str
    untimed: str
    reason: str
    ms: Dict[str, float] = field(default_factory=dict)  # cudnn.benchmark off, aten included
    gpu_ms: Dict[str, float] = field(default_factory=dict)  # the same, by GPU time
    refused: List[str] = field(default_factory=list)

    def times(self, gpu: bool) -> Dict[str, float]:
        return self.gpu_ms if gpu else self.ms

    def best(self, gpu: bool = False) -> str:
        times = self.times(gpu)
        return min(times, key=times.__getitem__)

    def speedup(self, variant: str, gpu: bool = False) -> float:
        times = self.times(gpu)
        return times[planner.ATEN] / times[variant]


def _fns(layer: Layer, variants: List[str], x: torch.Tensor, w: torch.Tensor,
         b: Optional[torch.Tensor], refused: List[str]) -> Dict[str, Callable]:
    """Per variant a call taking the input: the prepared kernel call, or PyTorch's."""
    a = layer.args
    fns: Dict[str, Callable] = {}
    for variant in variants:
        if variant == planner.ATEN:
            fns[variant] = lambda t: F.conv_transpose2d(t, w, b, a.stride, a.padding,
                                                        a.output_padding, a.groups, a.dilation)
            continue
        try:
            call = kernel_call(variant, x, w, a)
            call(x, w, b)
        except Exception as exc:  # a refusal, or a failure: reported, the rest still timed
            refused.append(f"{variant}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                           if str(exc) else variant)
            continue
        fns[variant] = lambda t, call=call: call(t, w, b)
    return fns


def bench(layer: Layer, mode: str, layout: str, reps: int, l2_bytes: int) -> Row:
    inputs, w, b = layer_tensors(layer, mode, layout, l2_bytes)
    torch.backends.cudnn.benchmark = False
    plan = planner.plan(inputs[0], w, layer.args)
    variants = list(dict.fromkeys([plan.variant, *plan.candidates, planner.ATEN]))
    row = Row(layer.name, mode, layout, plan.variant, plan.reason)
    with torch.no_grad():
        fns = _fns(layer, variants, inputs[0], w, b, row.refused)
        names = list(fns)
        for name, ms in zip(names, paired_median_ms([fns[n] for n in names], inputs, 3, reps)):
            row.ms[name] = ms
        for name in names:
            try:
                row.gpu_ms[name] = graph_ms(fns[name], inputs, reps=reps)
            except RuntimeError as exc:  # reported, not fatal: the event time stands
                row.refused.append(f"{name}: CUDA graph timing failed: "
                                   f"{str(exc).splitlines()[0][:120] if str(exc) else ''}")
    return row


def summary(rows: List[Row]) -> List[str]:
    lines = ["== per mode: geomean speedup over PyTorch, cudnn.benchmark off (untimed choice | "
             "best candidate)"]
    for gpu in (False, True):
        for mode in dict.fromkeys(r.mode for r in rows):
            sel = [r for r in rows if r.mode == mode and
                   {r.untimed, planner.ATEN} <= set(r.times(gpu))]
            if not sel:
                continue
            untimed = [r.speedup(r.untimed, gpu) for r in sel]
            best = [r.speedup(r.best(gpu), gpu) for r in sel]
            worst = min(sel, key=lambda r: r.speedup(r.untimed, gpu))
            clock = "GPU time " if gpu else ""
            lines.append(f"{mode:4s} {clock}untimed {geomean(untimed):.2f}x (min "
                         f"{min(untimed):.2f}x: {worst.layer} {worst.layout} {worst.untimed}) | "
                         f"best {geomean(best):.2f}x over {len(sel)} rows")
    return lines


def _row_line(row: Row) -> str:
    top = sorted(row.ms.items(), key=lambda kv: kv[1])[:3]
    nan = float("nan")
    gpu = (f" | GPU untimed {row.speedup(row.untimed, True):5.2f}x best {row.best(True)} "
           f"{row.speedup(row.best(True), True):5.2f}x"
           if {row.untimed, planner.ATEN} <= set(row.gpu_ms) else "")
    return (f"{row.layer:28s} {row.mode:4s} {row.layout:4s} untimed {row.untimed:28s} "
            f"{row.speedup(row.untimed) if row.untimed in row.ms else nan:5.2f}x"
            f" best {row.best():28s} {row.speedup(row.best()):5.2f}x  aten "
            f"{row.ms[planner.ATEN] * 1e3:8.1f} us  top3 "
            + ", ".join(f"{v} {t * 1e3:.1f}" for v, t in top) + gpu)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--modes", default="tf32,fp32,bf16,fp16")
    parser.add_argument("--formats", default="nchw,nhwc")
    parser.add_argument("--only", default=None, help="comma-separated layer name prefixes")
    parser.add_argument("--suite", default="suite", choices=sorted(SUITES),
                        help="the layer suite, or layers the planner's rules were not read from")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--json", default=None, help="write all rows here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/candidates.py needs a CUDA GPU; none is visible.", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 * 2**20)
    layers = [l for l in SUITES[args.suite] if not args.quick or l.name in QUICK]
    if args.only:
        layers = [l for l in layers if any(l.name.startswith(p) for p in args.only.split(","))]
    rows: List[Row] = []
    for mode in args.modes.split(","):
        for layout in args.formats.split(","):
            for layer in layers:
                row = bench(layer, mode, layout, args.reps, l2)
                rows.append(row)
                print(_row_line(row), flush=True)
                if args.json:  # after every row: a run cut short keeps what it measured
                    with open(args.json, "w") as fh:
                        json.dump({"device": props.name, "torch": torch.__version__,
                                   "rows": [asdict(r) for r in rows]}, fh, indent=1)
    torch.backends.cudnn.allow_tf32 = True
    print("\n".join(summary(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
