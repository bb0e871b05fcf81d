"""Compiled training steps of one example model, the sides compiled in more than one order.

`train.py` times a compiled original, patched model and control once per process. Host-bound
compiled steps drift between processes by more than the sides differ, and which side compiles
first decides which of them Dynamo's cache meets first. This times, in one process and for each
compile order: the original, optimize()'s model (optimized on the GPU, as `train.py` does), the
A/A control (`timing.control_copy`) and, with --cpu-recorded, a patched model recorded on the
CPU, each order timed interleaved `--passes` times (original / side, median of `--steps` steps
per side). It also prints how many compiled entries Dynamo's cache holds on the model's forward.

    python benchmarks/compiled_steps.py [--models pix2pix,dcgan] [--mode tf32|bf16]
                                        [--steps 60] [--passes 2] [--cpu-recorded]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `examples`

from benchmarks.train import _first_tensor, _train_step  # noqa: E402
from deconv_patch.optimize import optimize  # noqa: E402
from deconv_patch.timing import control_copy, time_interleaved  # noqa: E402
from examples.registry import EXAMPLES  # noqa: E402


def _cache_entries(model: torch.nn.Module) -> int:
    """Dynamo's compiled entries on the model's forward, whichever model made them."""
    code = type(model).forward.__code__
    return len(torch._C._dynamo.eval_frame._debug_get_cache_entry_list(code))


def _sides(name: str, batch: int,
           cpu_recorded: bool) -> Tuple[Dict[str, torch.nn.Module], Sequence[Any]]:
    example = {e.name: e for e in EXAMPLES}[name]
    torch.manual_seed(0)
    original = example.build(small=False).train()
    models: Dict[str, torch.nn.Module] = {}
    if cpu_recorded:
        cpu_inputs = example.inputs(batch, "cpu", torch.float32)
        models["cpu-recorded"] = optimize(copy.deepcopy(original), cpu_inputs,
                                          progress=False).cuda()
    original = original.cuda()
    inputs = example.inputs(batch, "cuda", torch.float32)
    models = {"original": original,
              "patched": optimize(copy.deepcopy(original), inputs, progress=False),
              "control": control_copy(original), **models}
    return models, inputs


def _orders(names: Sequence[str]) -> List[List[str]]:
    """The names as given and rotated by half: each side compiles early once and late once."""
    half = len(names) // 2
    return [list(names), list(names[half:]) + list(names[:half])]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="pix2pix,dcgan")
    parser.add_argument("--mode", choices=("tf32", "bf16"), default="tf32")
    parser.add_argument("--batch", type=int, default=None,
                        help="default: half the model's inference benchmark batch, as train.py")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--cpu-recorded", action="store_true",
                        help="also a patched model whose optimize() ran on the CPU")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/compiled_steps.py needs a CUDA GPU: torch.cuda.is_available() is "
              "False here.", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.mode}, "
          f"benchmark off; original / side, median of {args.steps} steps, sides interleaved")
    for name in args.models.split(","):
        example = {e.name: e for e in EXAMPLES}[name]
        batch = args.batch or max(1, example.bench_batch // 2)
        models, inputs = _sides(name, batch, args.cpu_recorded)
        with torch.no_grad():
            target = torch.randn_like(_first_tensor(models["original"](*inputs)).float())
        names = list(models)
        for order in _orders(names):
            torch._dynamo.reset()
            steps: Dict[str, Callable[[], None]] = {}
            for side in order:  # compiled here, in this order, outside the timed region
                steps[side] = _train_step(torch.compile(models[side]), inputs, target, args.mode)
                steps[side]()
            print(f"{name} b{batch}, compiled in the order {', '.join(order)}: "
                  f"{_cache_entries(models['original'])} compiled entries on forward")
            for _ in range(args.passes):
                times = time_interleaved([steps[n] for n in names], warmup=5, reps=args.steps,
                                         rotate=True)
                medians = [statistics.median(t) for t in times]
                print("  " + "  ".join(f"{n} {m:.3f} ms ({medians[0] / m:.3f}x)"
                                       for n, m in zip(names, medians)))
        del models, steps
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
