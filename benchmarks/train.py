"""Training benchmark: a patched model's (and layer's) training step against the original's.

Per example model (examples/registry.py, dense-output ones) and mode (tf32: fp32 with TF32
allowed; bf16: bf16 autocast over fp32 weights), one training step (forward, MSE loss against a
fixed random target, backward, SGD step), original vs `deconv_patch.optimize(model)` in train
mode, eager and under torch.compile (with --graphs also captured whole in a CUDA graph and
replayed: the step without its host cost); per layer of benchmarks/layers.py's suite (NCHW,
or channels_last with --channels-last), forward + backward, the training forward alone and
each of grad_input and grad_weight alone (with the forward), each pass followed by the
optimizer's in-place update of the parameters, nn.ConvTranspose2d vs the layer as optimize() installs it. Every pair is timed in the same
process, the two sides taking turns call by call (CUDA events, median). Ratio = original time
/ patched time. With --control a copy of the original takes turns with them too (every order
equally often), and its ratio (original / copy: two identical paths, "A/A") shows how far the
timer alone moves a ratio in that run. cudnn.benchmark is PyTorch's default (off) unless
--benchmark. Prints a table last; --out writes JSON.

    python benchmarks/train.py [--models dcgan,unet] [--modes tf32,bf16] [--layers quick|all|none]
                               [--channels-last] [--benchmark] [--no-compile] [--graphs]
                               [--kernels-in-training] [--control] [--out train.json]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import sys
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `examples`

from benchmarks.layers import QUICK, SUITE, SUITES, Layer, geomean  # noqa: E402
from deconv_patch import FastConvTranspose2d  # noqa: E402
from deconv_patch.optimize import optimize  # noqa: E402
from deconv_patch.timing import capture_graph, control_copy, median_interleaved  # noqa: E402
from examples.registry import EXAMPLES, Example  # noqa: E402

# tf32: TF32 allowed for convolutions and matmuls; fp32: off for both; defaults: PyTorch's
# (convolutions TF32, cuBLAS fp32: the precision of the layers PyTorch runs on its native kernels)
MODES = ("tf32", "bf16", "fp32", "defaults")
# (cuDNN's, cuBLAS's TF32 flag) per fp32 mode; bf16 runs under autocast with TF32 allowed
_TF32_FLAGS = {"fp32": (False, False), "defaults": (True, False)}
# --kernels-in-training's values: optimize(kernels_in_training=...)
KERNELS_IN_TRAINING = {"default": None, "on": True, "off": False}


@dataclass
class Row:
    """One measurement pair: median ms per step of the original and of the patched side."""

    kind: str  # "model" or "layer"
    name: str
    mode: str
    what: str  # "step", "compiled step", "graphed step", "fwd+bwd", "forward", "grad_input",
    #            "grad_weight"
    original_ms: Optional[float] = None
    patched_ms: Optional[float] = None
    control_ms: Optional[float] = None  # a copy of the original (--control)
    notes: List[str] = field(default_factory=list)

    @property
    def ratio(self) -> Optional[float]:
        if self.original_ms is None or not self.patched_ms:
            return None
        return self.original_ms / self.patched_ms

    @property
    def control_ratio(self) -> Optional[float]:
        """original / its copy: what the timer makes of two identical paths."""
        if self.original_ms is None or not self.control_ms:
            return None
        return self.original_ms / self.control_ms

    def to_dict(self) -> Dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "control_ratio": self.control_ratio}


def _paired(row: Row, fn_a: Callable[[], Any], fn_b: Callable[[], Any], args: argparse.Namespace,
            control: Optional[Callable[[], Any]] = None) -> None:
    """Median ms per call of a (the original), b (patched) and the control, if any, over
    rounds * reps calls each, taking turns call by call (identical steps timed in blocks
    measured 0.95-1.09x), into `row`."""
    fns = [fn_a, fn_b] + ([control] if control is not None else [])
    times = median_interleaved(fns, args.warmup, args.rounds * args.reps, rotate=True)
    row.original_ms, row.patched_ms = times[0], times[1]
    row.control_ms = times[2] if control is not None else None


def _autocast(mode: str, cache: bool = True):
    """bf16 autocast for mode "bf16"; cache=False inside CUDA graph capture (autocast's cast
    cache would keep casts made by the capture)."""
    if mode == "bf16":
        return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=cache)
    return contextlib.nullcontext()


def _first_tensor(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    values = out.values() if isinstance(out, dict) else out
    return next(_first_tensor(v) for v in values)


def _train_step(model: torch.nn.Module, inputs: Sequence[Any], target: torch.Tensor,
                mode: str, autocast_cache: bool = True) -> Callable[[], None]:
    """One SGD step of `model` (its own optimizer, gradients set to None each step)."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with _autocast(mode, autocast_cache):
            out = _first_tensor(model(*inputs))
        F.mse_loss(out.float(), target).backward()
        opt.step()

    return step


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


def bench_model(example: Example, mode: str, args: argparse.Namespace) -> List[Row]:
    """The training step of one example, eager, graphed (--graphs) and compiled; failures become
    notes."""
    batch = args.batch or max(1, example.bench_batch // 2)
    name = f"{example.name} b{batch}"
    eager = Row("model", name, mode, "step")
    rows = [eager]
    torch.manual_seed(0)
    try:
        original = example.build(small=False).cuda().train()
        inputs = example.inputs(batch, "cuda", torch.float32)
        patched = optimize(copy.deepcopy(original), inputs, progress=False,
                           kernels_in_training=args.kernels_in_training)
        control = control_copy(original) if args.control else None
        with torch.no_grad(), _autocast(mode):
            target = torch.randn_like(_first_tensor(original(*inputs)).float())
        _paired(eager, _train_step(original, inputs, target, mode),
                _train_step(patched, inputs, target, mode), args,
                None if control is None else _train_step(control, inputs, target, mode))
    except Exception as exc:
        eager.notes.append(_one_line(exc))
        return rows
    if args.graphs:
        graphed = Row("model", name, mode, "graphed step")
        rows.append(graphed)
        try:  # PyTorch's whole-network capture: warm-up on a side stream, then one step captured
            a, _ = capture_graph(_train_step(original, inputs, target, mode, autocast_cache=False))
            b, _ = capture_graph(_train_step(patched, inputs, target, mode, autocast_cache=False))
            _paired(graphed, a, b, args)
        except Exception as exc:
            graphed.notes.append(_one_line(exc))
    if not args.no_compile:
        compiled = Row("model", name, mode, "compiled step")
        rows.append(compiled)
        try:
            torch._dynamo.reset()
            a = _train_step(torch.compile(original), inputs, target, mode)
            b = _train_step(torch.compile(patched), inputs, target, mode)
            c = None if control is None else _train_step(torch.compile(control), inputs,
                                                         target, mode)
            for step in (a, b, c):  # compile outside the timed region
                if step is not None:
                    step()
            _paired(compiled, a, b, args, c)
        except Exception as exc:
            compiled.notes.append(_one_line(exc))
    del original, patched, control
    torch.cuda.empty_cache()
    return rows


def _layer_pass(module: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor, mode: str,
                wrt: str) -> Callable[[], None]:
    """Forward + backward of one layer: gradients of the input and parameters ("all"), of the
    input only ("grad_input") or of the parameters only ("grad_weight"), or the training
    forward alone, autograd recording it ("forward"); then the parameters' in-place update an
    optimizer step makes, so that a layer whose forward reads a re-laid-out weight pays for
    re-laying it out every pass, as in a training loop (values kept: x 1.0)."""
    params = [p for p in module.parameters()]
    leaves = {"all": [x, *params], "grad_input": [x], "grad_weight": params, "forward": []}[wrt]

    def run() -> None:
        with _autocast(mode):
            out = module(x)
        if leaves:
            torch.autograd.grad(out, leaves, grad.to(out.dtype))
        with torch.no_grad():
            torch._foreach_mul_(params, 1.0)

    return run


def bench_layer(layer: Layer, mode: str, args: argparse.Namespace) -> List[Row]:
    conv, x = layer.module_and_input(torch.float32, channels_last=args.channels_last)
    conv.train()
    patched = FastConvTranspose2d.from_module(copy.deepcopy(conv))
    patched.kernels_in_training = args.kernels_in_training
    control = copy.deepcopy(conv) if args.control else None
    x.requires_grad_(True)
    with torch.no_grad(), _autocast(mode):
        grad = torch.randn_like(conv(x).float())  # (randn_like keeps the output's layout)
    rows = []
    for wrt, what in (("all", "fwd+bwd"), ("forward", "forward"), ("grad_input", "grad_input"),
                      ("grad_weight", "grad_weight")):
        row = Row("layer", layer.name, mode, what)
        try:
            _paired(row, _layer_pass(conv, x, grad, mode, wrt),
                    _layer_pass(patched, x, grad, mode, wrt), args,
                    None if control is None else _layer_pass(control, x, grad, mode, wrt))
        except Exception as exc:
            row.notes.append(_one_line(exc))
        rows.append(row)
    return rows


def _fmt(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(rows: Sequence[Row]) -> str:
    header = ["kind", "name", "mode", "what", "original ms", "patched ms", "ratio", "A/A"]
    body = [[r.kind, r.name, r.mode, r.what, _fmt(r.original_ms, ".3f"),
             _fmt(r.patched_ms, ".3f"), _fmt(r.ratio, ".2f") + ("x" if r.ratio else ""),
             _fmt(r.control_ratio, ".2f") + ("x" if r.control_ratio else "")]
            for r in rows]
    widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in
                       enumerate(zip(line, widths))) for line in [header] + body]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in rows:
        for note in r.notes:
            lines.append(f"note [{r.name} {r.mode} {r.what}]: {note}")
    for mode in sorted({r.mode for r in rows}):
        ratios = [r.ratio for r in rows if r.kind == "layer" and r.mode == mode
                  and r.what == "fwd+bwd" and r.ratio]
        if ratios:
            lines.append(f"layers {mode} fwd+bwd: geomean {geomean(ratios):.2f}x, min "
                         f"{min(ratios):.2f}x over {len(ratios)}")
        bound = _forward_bound(rows, mode)
        if bound is not None:
            lines.append(bound)
        controls = [r.control_ratio for r in rows if r.mode == mode and r.control_ratio]
        if controls:
            lines.append(f"A/A {mode} (original / its copy, every row): geomean "
                         f"{geomean(controls):.2f}x, {min(controls):.2f}-{max(controls):.2f}x "
                         f"over {len(controls)}")
    return "\n".join(lines)


def _forward_bound(rows: Sequence[Row], mode: str) -> Optional[str]:
    """How much of the original layers' fwd + bwd their training forward is, and the fwd + bwd
    ratio a patched forward costing nothing would reach with the original's backward (the
    ceiling of a faster forward alone)."""
    both = {r.name: r.original_ms for r in rows if r.kind == "layer" and r.mode == mode
            and r.what == "fwd+bwd" and r.original_ms}
    forward = {r.name: r.original_ms for r in rows if r.kind == "layer" and r.mode == mode
               and r.what == "forward" and r.original_ms}
    names = [n for n in both if n in forward and forward[n] < both[n]]
    if not names:
        return None
    shares = sorted(forward[n] / both[n] for n in names)
    ceiling = geomean([both[n] / (both[n] - forward[n]) for n in names])
    return (f"layers {mode}: the original's forward is {shares[len(shares) // 2]:.0%} of its "
            f"fwd+bwd (median, {shares[0]:.0%}-{shares[-1]:.0%}); a forward at no cost would "
            f"make fwd+bwd {ceiling:.2f}x (geomean over {len(names)})")


def _progress(rows: List[Row]) -> List[Row]:
    """Each row as it is measured (stderr), so a run cut short by a time limit still reports."""
    for r in rows:
        print(f"[{r.kind} {r.name} {r.mode} {r.what}] original {_fmt(r.original_ms, '.3f')} ms, "
              f"patched {_fmt(r.patched_ms, '.3f')} ms, ratio {_fmt(r.ratio, '.2f')}"
              + (f", A/A {r.control_ratio:.2f}" if r.control_ratio else ""),
              file=sys.stderr, flush=True)
    return rows


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    dense = [e.name for e in EXAMPLES if e.dense_output]
    parser.add_argument("--models", default=",".join(dense),
                        help="comma-separated example names (default: the dense-output ones)")
    parser.add_argument("--modes", default="tf32,bf16",
                        help="comma-separated: tf32, bf16, fp32, defaults")
    parser.add_argument("--layers", default="quick",
                        choices=("quick", "all", "none", *sorted(set(SUITES) - {"suite"})),
                        help="all: the suite; or another layer set of benchmarks/layers.py")
    parser.add_argument("--channels-last", action="store_true",
                        help="layer rows: module and input channels_last (default NCHW)")
    parser.add_argument("--only", default=None,
                        help="comma-separated layer name prefixes, from the --layers set")
    parser.add_argument("--batch", type=int, default=None,
                        help="every model's batch (default: half its inference benchmark batch)")
    parser.add_argument("--benchmark", action="store_true",
                        help="cudnn.benchmark on (cuDNN and deconv_patch autotune their choices)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=4,
                        help="timed calls per side = rounds x reps")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled steps")
    parser.add_argument("--graphs", action="store_true",
                        help="also each model's step captured whole in a CUDA graph, replayed")
    parser.add_argument("--kernels-in-training", nargs="?", const="on", default="default",
                        choices=sorted(KERNELS_IN_TRAINING),
                        help="optimize(kernels_in_training=...): default (None: "
                             "planner.trains_on_kernel's layers), on (True; the bare flag) or "
                             "off (False)")
    parser.add_argument("--control", action="store_true",
                        help="also time a copy of the original in turn with both sides (A/A: "
                             "the timer's own spread; eager and compiled steps, layer rows)")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    args.kernels_in_training = KERNELS_IN_TRAINING[args.kernels_in_training]
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/train.py needs a CUDA GPU (on the CPU a patched model runs PyTorch's "
              "own kernels: nothing to measure).", file=sys.stderr)
        return 2
    known = {e.name: e for e in EXAMPLES}
    names = [n for n in args.models.split(",") if n]
    modes = [m for m in args.modes.split(",") if m]
    if any(n not in known for n in names) or any(m not in MODES for m in modes):
        print(f"models among {', '.join(known)}; modes among {', '.join(MODES)}", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = args.benchmark
    layers = {"quick": [layer for layer in SUITE if layer.name in QUICK], "all": SUITE,
              "none": [], **SUITES}[args.layers]
    if args.only:
        layers = [layer for layer in layers
                  if any(layer.name.startswith(prefix) for prefix in args.only.split(","))]
    rows: List[Row] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fallback and patch warnings: the table says it all
        for mode in modes:
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = \
                _TF32_FLAGS.get(mode, (True, True))
            for name in names:
                rows += _progress(bench_model(known[name], mode, args))
            for layer in layers:
                rows += _progress(bench_layer(layer, mode, args))
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn_benchmark": args.benchmark,
           "kernels_in_training": args.kernels_in_training, "control": args.control,
           "layers_channels_last": args.channels_last,
           "warmup": args.warmup, "reps": args.reps, "rounds": args.rounds}
    if args.out is not None:
        args.out.write_text(json.dumps({"environment": env,
                                        "rows": [r.to_dict() for r in rows]}, indent=2))
    print(f"{env['gpu']}, torch {env['torch']}, CUDA {env['cuda']}, cudnn.benchmark "
          f"{args.benchmark}, kernels_in_training {args.kernels_in_training}, layers "
          f"{'channels_last' if args.channels_last else 'NCHW'}; ratio = original "
          f"/ patched; median of {args.rounds * args.reps} calls per side, the sides taking "
          f"turns")
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
