"""Where a training step's time goes: the original model, optimize()'s default (recorded calls on
PyTorch's convolution but where planner.trains_on_kernel gives them ours),
`kernels_in_training=False` (every recorded call PyTorch's) and `kernels_in_training=True`,
side by side for one example model.

Per side: event time per step (the sides taking turns, each in each place equally often), host
time per step (from an idle GPU, no synchronisation inside the step, so it is the time to
enqueue the step), the Python function calls a step makes (cProfile), the GPU kernels' time per
step (torch.profiler), each conv layer's output layout and plan, the kernels whose time per step
differs most between the original and each patched side, and each transposed convolution's
forward + backward alone (on the input it gets in the step) against the step's GPU time: the
part of the step a faster layer can shorten. `benchmarks/train.py` measures the same steps; this
says why they differ. --compiled does all of it for each side's step under torch.compile.

    python benchmarks/profile_train.py [--model dcgan] [--mode tf32|bf16] [--batch N]
                                       [--steps 10] [--top 15] [--benchmark] [--compiled]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import copy
import pstats
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `examples`

from benchmarks.train import _autocast, _first_tensor, _layer_pass, _train_step  # noqa: E402
from deconv_patch import FastConvTranspose2d  # noqa: E402
from deconv_patch.optimize import optimize  # noqa: E402
from deconv_patch.timing import time_interleaved  # noqa: E402
from examples.registry import EXAMPLES  # noqa: E402


LAUNCHES = "(kernels per step)"


def host_ms_per_step(step: Callable[[], None], steps: int) -> float:
    """Median wall ms to enqueue one step, each started on an idle GPU."""
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def python_calls_per_step(step: Callable[[], None], steps: int) -> float:
    """Python function calls (cProfile's count, built-ins included) one step makes."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    profiler.disable()
    torch.cuda.synchronize()
    return pstats.Stats(profiler).total_calls / steps


def kernel_us_per_step(step: Callable[[], None], steps: int) -> Dict[str, float]:
    """GPU microseconds per step of each kernel name (torch.profiler's device events; the key
    LAUNCHES holds the number of kernels per step)."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    per_name: Dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per_name[event.name] += event.time_range.elapsed_us() / steps
            per_name[LAUNCHES] += 1 / steps
    return dict(per_name)


@contextlib.contextmanager
def _conv_hooks(model: torch.nn.Module, hook_for: Callable[[str], Callable[..., None]]
                ) -> Iterator[None]:
    """hook_for(name) as a forward hook on each transposed convolution of `model` (by qualified
    name) inside the block."""
    handles = [m.register_forward_hook(hook_for(name)) for name, m in model.named_modules()
               if isinstance(m, torch.nn.ConvTranspose2d)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def layer_rows(model: torch.nn.Module, inputs: Sequence[object], mode: str) -> List[str]:
    """Each transposed convolution's output layout and dtype in one training-mode forward, and
    for patched layers the plan and the autograd node that recorded the call."""
    rows: List[str] = []

    def hook(module: torch.nn.Module, args: object, out: torch.Tensor) -> None:
        fmt = ("NHWC" if out.dim() == 4 and out.is_contiguous(memory_format=torch.channels_last)
               and not out.is_contiguous() else "NCHW")
        node = out.grad_fn.name() if out.grad_fn is not None else "-"
        plan = module.backend if isinstance(module, FastConvTranspose2d) else "-"
        rows.append(f"  {module.in_channels}>{module.out_channels} {tuple(out.shape[-2:])} "
                    f"{fmt} {str(out.dtype).replace('torch.', '')}  plan {plan}  node {node}")

    with _conv_hooks(model, lambda name: hook):
        with _autocast(mode):
            _first_tensor(model(*inputs))
    return rows


def layer_inputs(model: torch.nn.Module, inputs: Sequence[object],
                 mode: str) -> Dict[str, torch.Tensor]:
    """Each transposed convolution's input in one training-mode forward, by qualified name."""
    seen: Dict[str, torch.Tensor] = {}

    def keep(name: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: Sequence[torch.Tensor], out: object) -> None:
            seen.setdefault(name, args[0].detach().clone())
        return hook

    with _conv_hooks(model, keep), torch.no_grad(), _autocast(mode):
        model(*inputs)
    return seen


def gpu_ms(kernels: Dict[str, float]) -> float:
    """Milliseconds of GPU kernel time in kernel_us_per_step's result."""
    return sum(v for k, v in kernels.items() if k != LAUNCHES) / 1e3


def layer_gpu_ms(sides: Dict[str, torch.nn.Module], inputs: Sequence[object], mode: str,
                 steps: int) -> Dict[str, Dict[str, float]]:
    """Per side, each transposed convolution's forward + backward alone (gradients of its input
    and parameters, a fresh random output gradient): its GPU kernels' ms (torch.profiler; a
    layer alone is host-bound, so its event time would say little of its share of a step)."""
    modules = {side: dict(model.named_modules()) for side, model in sides.items()}
    first = next(iter(sides))
    xs = layer_inputs(sides[first], inputs, mode)
    times: Dict[str, Dict[str, float]] = {side: {} for side in sides}
    for name, x in xs.items():
        x = x.requires_grad_(True)
        with torch.no_grad(), _autocast(mode):
            grad = torch.randn_like(modules[first][name](x).float())
        for side in sides:
            run = _layer_pass(modules[side][name], x, grad, mode, "all")
            for _ in range(3):  # plans, packed weights, cuDNN's choices
                run()
            times[side][name] = gpu_ms(kernel_us_per_step(run, steps))
    return times


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="dcgan")
    p.add_argument("--mode", default="tf32", choices=("tf32", "bf16"))
    p.add_argument("--batch", type=int, default=None,
                   help="default: half the model's inference benchmark batch, as train.py")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--benchmark", action="store_true", help="cudnn.benchmark on")
    p.add_argument("--compiled", action="store_true",
                   help="time and profile each side's step under torch.compile")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("profile_train.py needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = args.benchmark
    example = {e.name: e for e in EXAMPLES}[args.model]
    batch = args.batch or max(1, example.bench_batch // 2)
    torch.manual_seed(0)
    original = example.build(small=False).cuda().train()
    inputs = example.inputs(batch, "cuda", torch.float32)
    sides = {
        "original": original,
        "default": optimize(copy.deepcopy(original), inputs, progress=False),
        "off": optimize(copy.deepcopy(original), inputs, progress=False,
                        kernels_in_training=False),
        "kernels_in_training": optimize(copy.deepcopy(original), inputs, progress=False,
                                        kernels_in_training=True),
    }
    with torch.no_grad():
        target = torch.randn_like(_first_tensor(original(*inputs)).float())
    steps = {name: _train_step(torch.compile(model) if args.compiled else model, inputs, target,
                               args.mode) for name, model in sides.items()}
    for step in steps.values():  # (compiles outside the timed region)
        step()
    # (every side in every place of the turn equally often: a host-bound step's event time
    # depends on what the GPU still runs from the step before it)
    events = time_interleaved(list(steps.values()), warmup=5, reps=args.reps, rotate=True)
    event_ms = {name: statistics.median(t) for name, t in zip(steps, events)}
    host_ms = {name: host_ms_per_step(step, args.steps) for name, step in steps.items()}
    kernels = {name: kernel_us_per_step(step, args.steps) for name, step in steps.items()}
    calls = {name: python_calls_per_step(step, args.steps) for name, step in steps.items()}

    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, {args.model} "
          f"b{batch}, {args.mode}, cudnn.benchmark {args.benchmark}"
          f"{', compiled steps' if args.compiled else ''}")
    for name, model in sides.items():
        print(f"{name}: output of each transposed convolution")
        print("\n".join(layer_rows(model, inputs, args.mode)))
    theirs = kernels["original"]
    for side in ("default", "kernels_in_training"):
        ours = kernels[side]
        deltas = sorted((set(ours) | set(theirs)) - {LAUNCHES},
                        key=lambda k: -abs(ours.get(k, 0.0) - theirs.get(k, 0.0)))
        print(f"\nkernels whose us per step differ most (original -> {side}):")
        for key in deltas[:args.top]:
            print(f"  {theirs.get(key, 0.0):9.1f} -> {ours.get(key, 0.0):9.1f}  {key[:110]}")
    print(f"\n{'side':<22} {'event ms':>9} {'host ms':>8} {'GPU kernels ms':>15} "
          f"{'kernels':>8} {'Python calls':>13}")
    for name in sides:
        print(f"{name:<22} {event_ms[name]:9.3f} {host_ms[name]:8.3f} "
              f"{gpu_ms(kernels[name]):15.3f} "
              f"{kernels[name].get(LAUNCHES, 0.0):8.0f} {calls[name]:13.0f}")
    alone = layer_gpu_ms(sides, inputs, args.mode, args.steps)
    gpu_original = gpu_ms(kernels["original"])
    print("\ntransposed convolutions alone, forward + backward (GPU kernel ms):")
    width = max(len(name) for name in ["layer", *alone["original"]])
    print(f"  {'layer':<{width}}" + "".join(f"{side:>22}" for side in sides))
    for name in alone["original"]:
        print(f"  {name:<{width}}" + "".join(f"{alone[side][name]:22.3f}" for side in sides))
    total = {side: sum(t.values()) for side, t in alone.items()}
    print(f"  {'all':<{width}}" + "".join(f"{total[side]:22.3f}" for side in sides))
    share = total["original"] / gpu_original if gpu_original else float("nan")
    ours = gpu_original - total["original"] + total["kernels_in_training"]
    bound = "host" if host_ms["original"] > gpu_original else "GPU"
    print(f"share of the original step's GPU time: {100 * share:.0f}%; a GPU-bound step with "
          f"these layers at no cost would run {1 / max(1e-9, 1 - share):.2f}x, with "
          f"kernels_in_training's layers {gpu_original / max(1e-9, ours):.2f}x; this step is "
          f"{bound}-bound (host {host_ms['original']:.3f} ms, GPU kernels {gpu_original:.3f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
