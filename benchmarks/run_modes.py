"""Every way a user runs a patched model, on the three cases the training and compile targets
were first measured on: DCGAN's generator at batch 64, U-Net at batch 8, and a grouped,
dilated layer with unequal strides (16 x 32 x 128 x 256 in; k3x5, s2x3, d2x1, groups 4; 64
output channels) as a one-layer model.

Per case and mode, in one process, `deconv_patch.optimize(model)` against the original (ratio
= original time / patched time; with --control also a copy of the original, "A/A"):
  * train: one training step (forward, MSE loss, backward, SGD), eager;
  * compiled train: the same step of torch.compile(model);
  * eval: a forward under torch.no_grad, the model in eval mode;
  * compiled eval: the same forward of torch.compile(model).
Modes: tf32 (fp32 weights, TF32 allowed for convolutions and matmuls; training in fp32) and
bf16 (training under bf16 autocast over fp32 weights; eval with the model and input cast to
bf16). cudnn.benchmark is PyTorch's default (off) unless --benchmark. The sides take turns
call by call (benchmarks/train.py's timing). Prints a table last; --out writes JSON.

    python benchmarks/run_modes.py [--cases dcgan,unet,grouped] [--modes tf32,bf16]
                                   [--ways train,compiled-train,eval,compiled-eval]
                                   [--control] [--out run_modes.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `examples`

from benchmarks.train import Row, _autocast, _first_tensor, _one_line, _paired, _progress, \
    _train_step, format_table  # noqa: E402
from deconv_patch.optimize import optimize  # noqa: E402
from deconv_patch.timing import control_copy  # noqa: E402
from examples.registry import get as get_example  # noqa: E402

WAYS = ("train", "compiled-train", "eval", "compiled-eval")


@dataclass(frozen=True)
class Case:
    """A model to run and how to make its inputs in a dtype, on the GPU."""

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[torch.dtype], Tuple[torch.Tensor, ...]]


def _grouped_layer() -> nn.Module:
    return nn.Sequential(nn.ConvTranspose2d(32, 64, (3, 5), stride=(2, 3), padding=(1, 2),
                                            output_padding=(1, 1), groups=4, dilation=(2, 1)))


def _example_case(name: str, batch: int) -> Case:
    example = get_example(name)
    return Case(f"{name} b{batch}", lambda: example.build(small=False),
                lambda dtype: tuple(example.inputs(batch, "cuda", dtype)))


CASES: Dict[str, Case] = {
    "dcgan": _example_case("dcgan", 64),
    "unet": _example_case("unet", 8),
    "grouped": Case("grouped k3x5 s2x3 d2x1 g4 b16", _grouped_layer,
                    lambda dtype: (torch.randn(16, 32, 128, 256, device="cuda", dtype=dtype),)),
}


def _timed(case: Case, mode: str, way: str, models: Sequence[nn.Module],
           make_call: Callable[[nn.Module], Callable[[], None]],
           args: argparse.Namespace) -> Row:
    """One row: the original, patched and (--control) copy, compiled for the compiled ways,
    each run once untimed (compiling there), then timed taking turns."""
    row = Row("model", case.name, mode, way)
    try:
        compiled = way.startswith("compiled")
        if compiled:
            torch._dynamo.reset()
        calls = [make_call(torch.compile(m) if compiled else m) for m in models]
        for call in calls:  # compile outside the timed region
            call()
        _paired(row, calls[0], calls[1], args, calls[2] if len(calls) > 2 else None)
    except Exception as exc:
        row.notes.append(_one_line(exc))
    _progress([row])
    return row


def bench_training(case: Case, mode: str, ways: Sequence[str],
                   args: argparse.Namespace) -> List[Row]:
    torch.manual_seed(0)
    original = case.build().cuda().train()
    inputs = case.inputs(torch.float32)
    patched = optimize(copy.deepcopy(original), inputs, progress=False)
    control = control_copy(original) if args.control else None
    with torch.no_grad(), _autocast(mode):
        target = torch.randn_like(_first_tensor(original(*inputs)).float())
    models = [m for m in (original, patched, control) if m is not None]
    return [_timed(case, mode, way, models,
                   lambda m: _train_step(m, inputs, target, mode), args)
            for way in ("train", "compiled-train") if way in ways]


def bench_eval(case: Case, mode: str, ways: Sequence[str], args: argparse.Namespace) -> List[Row]:
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    torch.manual_seed(0)
    original = case.build().to(device="cuda", dtype=dtype).eval()
    inputs = case.inputs(dtype)
    patched = optimize(copy.deepcopy(original), inputs, progress=False)
    control = control_copy(original) if args.control else None
    models = [m for m in (original, patched, control) if m is not None]

    def forward(model: nn.Module) -> Callable[[], None]:
        def call() -> None:
            with torch.no_grad():
                model(*inputs)
        return call

    return [_timed(case, mode, way, models, forward, args)
            for way in ("eval", "compiled-eval") if way in ways]


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"comma-separated among {', '.join(CASES)}")
    parser.add_argument("--modes", default="tf32,bf16", help="comma-separated: tf32, bf16")
    parser.add_argument("--ways", default=",".join(WAYS),
                        help=f"comma-separated among {', '.join(WAYS)}")
    parser.add_argument("--benchmark", action="store_true", help="cudnn.benchmark on")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4,
                        help="timed calls per side = rounds x reps")
    parser.add_argument("--control", action="store_true",
                        help="also time a copy of the original in turn with both sides (A/A)")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    modes = [m for m in args.modes.split(",") if m]
    ways = [w for w in args.ways.split(",") if w]
    if any(c not in CASES for c in cases) or any(m not in ("tf32", "bf16") for m in modes) \
            or any(w not in WAYS for w in ways):
        print(f"cases among {', '.join(CASES)}; modes tf32, bf16; ways among {', '.join(WAYS)}",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("benchmarks/run_modes.py needs a CUDA GPU (on the CPU a patched model runs "
              "PyTorch's own kernels: nothing to measure).", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = args.benchmark
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    rows: List[Row] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fallback and patch warnings: the table says it all
        for name in cases:
            for mode in modes:
                for bench in (bench_training, bench_eval):
                    try:
                        rows += bench(CASES[name], mode, ways, args)
                    except Exception as exc:  # e.g. out of memory building a side
                        row = Row("model", CASES[name].name, mode, bench.__name__)
                        row.notes.append(_one_line(exc))
                        rows.append(row)
                    torch.cuda.empty_cache()
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn_benchmark": args.benchmark,
           "control": args.control, "warmup": args.warmup, "reps": args.reps,
           "rounds": args.rounds}
    if args.out is not None:
        args.out.write_text(json.dumps({"environment": env,
                                        "rows": [r.to_dict() for r in rows]}, indent=2))
    print(f"{env['gpu']}, torch {env['torch']}, CUDA {env['cuda']}, cudnn.benchmark "
          f"{args.benchmark}; ratio = original / patched; median of {args.rounds * args.reps} "
          "calls per side, the sides taking turns")
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
