"""End-to-end model benchmark: eager vs `deconv_patch.optimize`, and torch.compile of both.

For every example model (examples/registry.py) at its paper resolution and a realistic batch,
in fp32 (TF32 allowed, PyTorch's default for convolutions) and bf16:
  * eager original vs eager patched, timed in the same process with CUDA events (warm-up,
    median over repetitions, the two sides taking turns forward by forward so drift hits both);
  * torch.compile(original) vs torch.compile(patched): the deconv_patch op is a custom op with a
    fake kernel, so Inductor keeps it as an extern call and compiles around it.
With --control a copy of the original takes turns with each pair, eager and compiled (every
order equally often); its ratio (original / copy, "A/A") is the timer's own spread in that run.
Prints a table last; `--out results.json` also writes every row as JSON. Needs a CUDA GPU.

    python benchmarks/models.py [--models dcgan,unet] [--dtypes fp32,bf16] [--no-compile]
                                [--no-benchmark] [--compile-mode reduce-overhead] [--control]
                                [--data-parallel]

cudnn.benchmark is on (cuDNN and deconv_patch's autotune time their choices) unless
--no-benchmark, PyTorch's default: cuDNN's heuristic against the planner's untimed rule.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `examples`

from deconv_patch.optimize import optimize  # noqa: E402
from deconv_patch.summary import summary  # noqa: E402
from deconv_patch.timing import control_copy, median_interleaved  # noqa: E402
from examples._common import max_abs_difference  # noqa: E402
from examples.registry import EXAMPLES, Example  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass
class Row:
    """One (model, dtype) measurement; times are median milliseconds per forward."""

    model: str
    dtype: str
    batch: int
    path: str = "-"
    layers: int = 0
    folded: int = 0
    eager_ms: Optional[float] = None
    patched_ms: Optional[float] = None
    control_ms: Optional[float] = None  # an eager copy of the original (--control)
    compiled_ms: Optional[float] = None
    compiled_patched_ms: Optional[float] = None
    compiled_control_ms: Optional[float] = None  # the copy, compiled (--control)
    max_abs_diff: Optional[float] = None
    fallback_warnings: int = 0
    notes: List[str] = field(default_factory=list)

    @property
    def speedup(self) -> Optional[float]:
        return _ratio(self.eager_ms, self.patched_ms)

    @property
    def compiled_speedup(self) -> Optional[float]:
        return _ratio(self.compiled_ms, self.compiled_patched_ms)

    @property
    def control_ratio(self) -> Optional[float]:
        """eager original / its copy: what the timer makes of two identical models."""
        return _ratio(self.eager_ms, self.control_ms)

    @property
    def compiled_control_ratio(self) -> Optional[float]:
        return _ratio(self.compiled_ms, self.compiled_control_ms)

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data.update(speedup=self.speedup, compiled_speedup=self.compiled_speedup,
                    control_ratio=self.control_ratio,
                    compiled_control_ratio=self.compiled_control_ratio)
        return data


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b is not None and b > 0 else None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


def bench(example: Example, dtype_name: str, batch: int, args: argparse.Namespace) -> Row:
    """Measures one example in one dtype; failures become notes, never abort the run."""
    dtype = DTYPES[dtype_name]
    device = torch.device("cuda")
    row = Row(example.name, dtype_name, batch)
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model = example.build(small=False).to(device=device, dtype=dtype).eval()
            inputs = example.inputs(batch, device, dtype)
            patched = optimize(model, inputs, progress=False)
            control = control_copy(model) if args.control else None  # (eager and compiled)
            info = summary(patched, quiet=True)
            row.path, row.layers, row.folded = info.path, info.num_patched, info.num_fused
            run = [nn.DataParallel(m) if args.data_parallel else m
                   for m in (model, patched, control) if m is not None]
            with torch.no_grad():
                row.max_abs_diff = max_abs_difference(run[1](*inputs), run[0](*inputs))
                # (partials, not lambdas: the names are deleted at the end)
                sides = [functools.partial(m, *inputs) for m in run]
                times = median_interleaved(sides, args.warmup, args.rounds * args.reps,
                                           rotate=True)
                row.eager_ms, row.patched_ms = times[:2]
                row.control_ms = times[2] if args.control else None
        except Exception as exc:  # e.g. a detection op without a bf16 kernel
            row.notes.append(f"eager: {_one_line(exc)}")
            return row
        if args.data_parallel:
            row.notes.append(f"eager under nn.DataParallel over {torch.cuda.device_count()} "
                             "GPU(s); compile skipped")
        elif args.no_compile:
            row.notes.append("compile skipped (--no-compile)")
        elif not example.dense_output and not args.compile_all:
            row.notes.append("compile skipped for the detection model (data-dependent graph "
                             "breaks; --compile-all to force)")
        else:
            try:
                torch._dynamo.reset()
                sides = [torch.compile(m, mode=args.compile_mode)
                         for m in (model, patched, control) if m is not None]
                with torch.no_grad():
                    for side in sides:  # compile outside the timed region
                        side(*inputs)
                    times = median_interleaved([functools.partial(s, *inputs) for s in sides],
                                               args.warmup, args.rounds * args.reps, rotate=True)
                row.compiled_ms, row.compiled_patched_ms = times[:2]
                row.compiled_control_ms = times[2] if args.control else None
            except Exception as exc:
                row.notes.append(f"compile: {_one_line(exc)}")
    row.fallback_warnings = sum(1 for w in caught if "deconv_patch" in str(w.message))
    del model, patched, control, run
    torch.cuda.empty_cache()
    return row


def _fmt(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _fmt_x(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_table(rows: Sequence[Row]) -> str:
    header = ["model", "dtype", "batch", "path", "layers", "folded", "eager ms", "patched ms",
              "speedup", "A/A", "compiled ms", "compiled+patched ms", "speedup", "A/A",
              "max|diff|"]
    body = [[r.model, r.dtype, str(r.batch), r.path, str(r.layers), str(r.folded),
             _fmt(r.eager_ms, ".3f"), _fmt(r.patched_ms, ".3f"), _fmt_x(r.speedup),
             _fmt_x(r.control_ratio), _fmt(r.compiled_ms, ".3f"),
             _fmt(r.compiled_patched_ms, ".3f"), _fmt_x(r.compiled_speedup),
             _fmt_x(r.compiled_control_ratio), _fmt(r.max_abs_diff, ".2e")] for r in rows]
    widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in [header] + body]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in rows:
        for note in r.notes:
            lines.append(f"note [{r.model} {r.dtype}]: {note}")
        if r.fallback_warnings:
            lines.append(f"note [{r.model} {r.dtype}]: {r.fallback_warnings} deconv_patch "
                         "fallback warning(s): some calls ran on PyTorch")
    return "\n".join(lines)


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(e.name for e in EXAMPLES),
                        help="comma-separated example names (default: all)")
    parser.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16")
    parser.add_argument("--batch", type=int, default=None,
                        help="override every model's realistic batch size")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3,
                        help="timed forwards per side = rounds x reps")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile columns")
    parser.add_argument("--compile-mode", default="default",
                        help="torch.compile's mode for both sides (e.g. reduce-overhead)")
    parser.add_argument("--compile-all", action="store_true",
                        help="also torch.compile the detection model (slow)")
    parser.add_argument("--no-benchmark", action="store_true",
                        help="cudnn.benchmark off on both sides (PyTorch's default)")
    parser.add_argument("--control", action="store_true",
                        help="also time a copy of the original in turn with each pair, eager and "
                             "compiled (A/A: the timer's own spread)")
    parser.add_argument("--data-parallel", action="store_true",
                        help="eager sides under nn.DataParallel over every visible GPU (the "
                             "batch is split between them; no compiled columns)")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/models.py needs a CUDA GPU: torch.cuda.is_available() is False here, "
              "and on the CPU the patched model runs PyTorch's own kernels (nothing to measure).",
              file=sys.stderr)
        return 2
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    known = {e.name: e for e in EXAMPLES}
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"unknown model(s) {unknown}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if any(d not in DTYPES for d in dtypes):
        print(f"--dtypes must be among {', '.join(DTYPES)}", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = True  # "fp32" here means fp32 with TF32 allowed
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = not args.no_benchmark
    rows: List[Row] = []
    for name in names:
        example = known[name]
        for dtype_name in dtypes:
            batch = args.batch or example.bench_batch
            print(f"[{name} {dtype_name} batch {batch}] ...", file=sys.stderr, flush=True)
            rows.append(bench(example, dtype_name, batch, args))
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cuda": torch.version.cuda, "tf32": True,
           "cudnn_benchmark": not args.no_benchmark, "control": args.control,
           "warmup": args.warmup, "reps": args.reps, "rounds": args.rounds}
    if args.out is not None:
        args.out.write_text(json.dumps({"environment": env,
                                        "rows": [r.to_dict() for r in rows]}, indent=2))
        print(f"wrote {args.out}", file=sys.stderr)
    print(f"{env['gpu']}, torch {env['torch']}, CUDA {env['cuda']}; fp32 = TF32 allowed; "
          f"cudnn.benchmark {not args.no_benchmark}; median of {args.rounds * args.reps} "
          f"forwards per side, the sides taking turns")
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
