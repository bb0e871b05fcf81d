"""What every example's `main()` does: build, patch with `deconv_patch.optimize`, compare.

Kept separate from the models so each example file is just its paper's architecture.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, List, Optional, Sequence

import torch
from torch import nn

from deconv_patch.optimize import optimize
from deconv_patch.summary import summary


def flatten_tensors(value: Any) -> List[torch.Tensor]:
    """Every tensor in a nested output (tensors, lists, tuples, dicts), in a stable order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for key in sorted(value, key=str) for t in flatten_tensors(value[key])]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in flatten_tensors(item)]
    return []


def max_abs_difference(a: Any, b: Any) -> float:
    """Largest |a - b| over all tensors of two outputs of the same structure."""
    ta, tb = flatten_tensors(a), flatten_tensors(b)
    if len(ta) != len(tb) or any(x.shape != y.shape for x, y in zip(ta, tb)):
        raise AssertionError("outputs differ in structure or shape")
    diffs = [(x.double() - y.double()).abs().max().item() for x, y in zip(ta, tb) if x.numel()]
    return max(diffs, default=0.0)


def example_main(
    title: str,
    build: Callable[..., nn.Module],
    inputs: Callable[..., Any],
    default_batch: int,
    argv: Optional[Sequence[str]] = None,
) -> int:
    """Shared CLI: `--batch`, `--small`, `--device`, `--dtype`; prints the summary and max diff."""
    parser = argparse.ArgumentParser(description=f"deconv_patch example: {title}")
    parser.add_argument("--batch", type=int, default=default_batch)
    parser.add_argument("--small", action="store_true", help="reduced resolution (fast on CPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch.manual_seed(0)
    model = build(small=args.small).to(device=device, dtype=dtype).eval()
    example = inputs(args.batch, device, dtype, small=args.small)
    patched = optimize(model, example)
    summary(patched)
    with torch.no_grad():
        reference = model(*example)
        result = patched(*example)
    print(f"{title}: batch {args.batch} on {device} ({args.dtype}); "
          f"max |patched - original| = {max_abs_difference(result, reference):.3e}")
    return 0



def randomize_running_stats(bn: nn.BatchNorm2d) -> None:
    """Plausible non-trivial running mean/var, as a trained model would carry.

    With fresh statistics (mean 0, var 1) eval-mode BatchNorm is nearly the identity and BN
    folding would go untested.
    """
    with torch.no_grad():
        assert bn.running_mean is not None and bn.running_var is not None
        bn.running_mean.normal_(0.0, 0.1)
        bn.running_var.uniform_(0.5, 2.0)
