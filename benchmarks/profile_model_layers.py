"""Where a patched example model's time goes: CUDA kernels per patched layer, in the model.

    python benchmarks/profile_model_layers.py --model dcgan --dtype bf16 [--variants aten,gemm_phase_tma:128x64s8pp]

Runs optimize() with autotune on (cudnn.benchmark), records each patched layer's input inside
the model, then for every layer and each variant (the planner's choice first) profiles a few
calls (torch.profiler, CUDA activity) and prints the kernels with their mean time per call, and
the module's own time per call (CUDA events). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `examples`

import deconv_patch  # noqa: E402
from deconv_patch.kernels import autotune, planner  # noqa: E402
from deconv_patch.epilogue import IDENTITY  # noqa: E402
from deconv_patch.ops import _candidate_runner  # noqa: E402
from deconv_patch.timing import time_interleaved  # noqa: E402
from examples.registry import get  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _kernels(module: torch.nn.Module, x: torch.Tensor, calls: int) -> str:
    with torch.no_grad():
        for _ in range(3):
            module(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                module(x)
            torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            module(x)
        end.record()
        torch.cuda.synchronize()
    lines = [f"    {start.elapsed_time(end) / 20 * 1000:8.1f} us per call (events, 20 calls)"]
    for e in sorted(prof.key_averages(), key=lambda e: -e.self_device_time_total)[:6]:
        if e.self_device_time_total > 0:
            lines.append(f"    {e.self_device_time_total / calls:8.1f} us  x{e.count / calls:.0f}  "
                         f"{e.key[:110]}")
    return "\n".join(lines)


def _as_autotune_times(module, x: torch.Tensor, variants) -> str:
    """Medians (us per call) of bursts of calls timed as autotune.pick times candidates, through
    autotune's own runner (ops._candidate_runner) and bursts: PyTorch's path, and each kernel
    variant without and with the module's epilogue."""
    args = module._args(module.output_padding)
    w, b = module.weight, module.bias
    bare, fused = (_candidate_runner(x, w, b, args, epi) for epi in (IDENTITY, module._epilogue()))
    candidates = [(f"{planner.ATEN} (no activation)", bare, planner.ATEN)]
    candidates += [(f"{v} act={epi}", run, v) for v in variants
                   for epi, run in (("none", bare), (module.activation, fused))]
    names, bursts = [], []
    for name, run, variant in candidates:
        try:
            run(variant)  # a kernel refusing this layer drops out, as in autotune.pick
        except (RuntimeError, ValueError) as e:
            names.append(f"{name}: {str(e)[:60]}")
            bursts.append(None)
            continue
        names.append(name)
        bursts.append(autotune._burst(run, variant))
    with torch.no_grad():
        times = iter(time_interleaved([f for f in bursts if f is not None], 3, 15))
    out = []
    for burst, name in zip(bursts, names):
        if burst is None:
            out.append(f"    {'-':>8}     {name}")
        else:
            median = statistics.median(next(times))
            out.append(f"    {median / autotune._BURST * 1000:8.1f} us  {name}")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="dcgan")
    parser.add_argument("--dtype", default="bf16", choices=tuple(DTYPES))
    parser.add_argument("--variants", default="aten", help="comma-separated, forced in turn")
    parser.add_argument("--layers", default="", help="comma-separated layer names (default all)")
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    example = get(args.model)
    dtype = DTYPES[args.dtype]
    torch.manual_seed(0)
    model = example.build(small=False).to(device="cuda", dtype=dtype).eval()
    inputs = example.inputs(example.bench_batch, "cuda", dtype)
    patched = deconv_patch.optimize(model, inputs, progress=False)
    seen: dict = {}
    layers = {n: m for n, m in patched.named_modules()
              if isinstance(m, deconv_patch.FastConvTranspose2d)}
    def keep_input(name: str):
        def hook(module, inputs, output) -> None:  # returns None: the output stays as it is
            seen.setdefault(name, inputs[0])
        return hook

    hooks = [m.register_forward_hook(keep_input(n)) for n, m in layers.items()]
    with torch.no_grad():
        patched(*inputs)
    for h in hooks:
        h.remove()
    wanted = [n for n in args.layers.split(",") if n] or list(layers)
    for name in wanted:
        module, x = layers[name], seen[name]
        print(f"{name}: {module.in_channels}>{module.out_channels} k{module.kernel_size} "
              f"s{module.stride} act={module.activation}; input {tuple(x.shape)} "
              f"strides {x.stride()}; backend {module.backend}")
        plan = module.plan_for(x)
        print(f"  plan: {plan.variant} ({plan.reason[:80]}); candidates {len(plan.candidates)}")
        kernels = [v for v in args.variants.split(",") if v and v != planner.ATEN]
        if plan.uses_kernel and plan.variant not in kernels:
            kernels.insert(0, plan.variant)
        with torch.no_grad():
            print("  timed as autotune times candidates (bursts):")
            print(_as_autotune_times(module, x, kernels))
        for variant in [None] + [v for v in args.variants.split(",") if v]:
            ctx = deconv_patch.use_variant(variant) if variant else contextlib.nullcontext()
            with ctx:
                print(f"  {variant or 'planner/autotune choice'}:")
                try:
                    print(_kernels(module, x, args.calls))
                except RuntimeError as e:  # a forced kernel refusing this layer
                    print(f"    {str(e)[:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
