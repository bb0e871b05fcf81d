"""How far the training steps of models that make the same calls spread in one process, against
how far the patched models sit from them.

Several copies of each side in one process: the original and copies of it
(`timing.control_copy`), `optimize()`'s default, and `kernels_in_training=False`; every
model's step takes turns with all the others' (each in each place equally often), and the
whole timing repeats `--rounds` times over the same models. Per model and round: the median ms
per step. Per side: the mean over its copies, their range, and original mean / side mean. A
copy that is slower in every round says the spread belongs to the model object (where its
tensors and Python objects sit), not to the timer; a side whose mean sits inside the
originals' range is at parity by what this host can tell.

    python benchmarks/step_spread.py [--model dcgan] [--modes tf32,bf16] [--copies 4]
                                     [--reps 240] [--rounds 3] [--batch N] [--out spread.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `examples`

from benchmarks.train import _TF32_FLAGS, _autocast, _first_tensor, _train_step  # noqa: E402
from deconv_patch.optimize import optimize  # noqa: E402
from deconv_patch.timing import control_copy, time_interleaved  # noqa: E402
from examples.registry import EXAMPLES  # noqa: E402

SIDES = ("original", "default", "off")


def build_models(example_name: str, batch: Optional[int], copies: int):
    """The models of every side, made in turns (copy k of each side one after the other), so
    that no side's tensors all come first; the original itself is the originals' copy 0."""
    example = next(e for e in EXAMPLES if e.name == example_name)
    batch = batch or max(1, example.bench_batch // 2)
    torch.manual_seed(0)
    original = example.build(small=False).cuda().train()
    inputs = example.inputs(batch, "cuda", torch.float32)
    models: Dict[str, List[torch.nn.Module]] = {side: [] for side in SIDES}
    for k in range(copies):
        models["original"].append(original if k == 0 else control_copy(original))
        models["default"].append(optimize(copy.deepcopy(original), inputs, progress=False))
        models["off"].append(optimize(copy.deepcopy(original), inputs, progress=False,
                                      kernels_in_training=False))
    return f"{example.name} b{batch}", original, inputs, models


def measure(example_name: str, mode: str, args: argparse.Namespace) -> Dict[str, object]:
    name, original, inputs, models = build_models(example_name, args.batch, args.copies)
    with torch.no_grad(), _autocast(mode):
        target = torch.randn_like(_first_tensor(original(*inputs)).float())
    order = [(side, k) for k in range(args.copies) for side in SIDES]
    steps = [_train_step(models[side][k], inputs, target, mode) for side, k in order]
    rounds: List[Dict[str, List[float]]] = []
    for _ in range(args.rounds):
        times = time_interleaved(steps, args.warmup, args.reps, rotate=True)
        per_model: Dict[str, List[float]] = {side: [0.0] * args.copies for side in SIDES}
        for (side, k), t in zip(order, times):
            per_model[side][k] = statistics.median(t)
        rounds.append(per_model)
    return {"model": name, "mode": mode, "copies": args.copies, "reps": args.reps,
            "rounds": rounds}


def summarize(result: Dict[str, object]) -> List[str]:
    lines = []
    rounds: List[Dict[str, List[float]]] = result["rounds"]  # type: ignore[assignment]
    for r, per_model in enumerate(rounds):
        base = statistics.mean(per_model["original"])
        cells = []
        for side, ms in per_model.items():
            mean = statistics.mean(ms)
            cells.append(f"{side} {mean:.3f} ms ({min(ms):.3f}-{max(ms):.3f}) "
                         f"{base / mean:.3f}x")
        lines.append(f"{result['model']} {result['mode']} round {r}: " + "; ".join(cells))
    # Each copy's offset from its round's originals' mean, round by round: the same sign in
    # every round says the copy itself is slower or faster.
    for side in SIDES:
        offsets = []
        for k in range(int(result["copies"])):  # type: ignore[call-overload]
            per_round = [per_model[side][k] / statistics.mean(per_model["original"]) - 1
                         for per_model in rounds]
            offsets.append("/".join(f"{100 * o:+.1f}" for o in per_round))
        lines.append(f"  {side} copies, % from the originals' mean per round: "
                     + "  ".join(offsets))
    return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="dcgan")
    parser.add_argument("--modes", default="tf32,bf16")
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--reps", type=int, default=240,
                        help="timed steps per model per round (a multiple of twice the "
                             "number of models keeps every place equally often)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--benchmark", action="store_true", help="cudnn.benchmark on")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/step_spread.py needs a CUDA GPU: torch.cuda.is_available() is False "
              "here.", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = args.benchmark
    results = []
    for mode in args.modes.split(","):
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = \
            _TF32_FLAGS.get(mode, (True, True))  # (as train.py sets them)
        result = measure(args.model, mode, args)
        results.append(result)
        for line in summarize(result):
            print(line, flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
