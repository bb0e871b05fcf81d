"""Probe: how fast would "one GEMM over every tap, then col2im" run the suite's layers?

conv_transpose2d(x, w) = fold(W^T X): a GEMM [N*H*W x Cin] . [Cin x Cout*KH*KW] computes every
tap's contribution of every input pixel once (each input element read once, all of Cout*KH*KW
as the GEMM's N), and fold (col2im) sums the contributions that land on the same output pixel.
The stride-phase GEMMs instead gather each input pixel once per tap of each phase and have only
Cout columns: for few output channels (Keypoint R-CNN's 17, FSRCNN's 1, FCN's 21) their
tensor-core tiles are mostly padding. This times PyTorch's own two ops (cuBLAS + F.fold, an
unfused upper bound for such a variant) against cuDNN's conv_transpose2d, GPU time from CUDA
graphs, each layer checked against cuDNN's result.

Run: python3 benchmarks/fold_probe.py [--modes bf16,tf32] [--only keypoint,fsrcnn]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layers import MODES, SUITE, Layer, graph_ms  # noqa: E402


def gemm_only(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The GEMM over every tap: [N*H*W, Cout*KH*KW] (channels_last x: its operand is a view)."""
    n, cin, h, wd = x.shape
    return x.permute(0, 2, 3, 1).reshape(n * h * wd, cin) @ w.reshape(cin, -1)


def matmul_fold(x: torch.Tensor, w: torch.Tensor, b, layer: Layer) -> torch.Tensor:
    """conv_transpose2d as gemm_only + fold (col2im)."""
    n, _, h, wd = x.shape
    cols = gemm_only(x, w).view(n, h * wd, -1).transpose(1, 2)  # [N, Cout*KH*KW, L]
    out = F.fold(cols, layer.out_hw, layer.kernel, dilation=layer.dilation,
                 padding=layer.padding, stride=layer.stride)
    return out if b is None else out + b.view(1, -1, 1, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="bf16,tf32")
    ap.add_argument("--only", default="")
    opts = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    only = [s for s in opts.only.split(",") if s]
    print(f"{'layer':28s} {'mode':5s} {'cuDNN':>8s} {'mm+fold':>8s} {'mm':>8s} {'ratio':>6s}"
          f" {'err/cuDNN err':>14s}")
    for layer in SUITE:
        # (fold has no output_padding: such layers are skipped)
        if layer.groups != 1 or layer.output_padding != (0, 0) or \
                (only and not any(layer.name.startswith(o) for o in only)):
            continue
        for mode in opts.modes.split(","):
            dtype, tf32 = MODES[mode]
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(layer.batch, layer.cin, *layer.hw, generator=gen)
            w = torch.randn(layer.cin, layer.cout, *layer.kernel, generator=gen) / layer.cin ** 0.5
            b = torch.randn(layer.cout, generator=gen) if layer.bias else None
            ref = F.conv_transpose2d(x.double(), w.double(), None if b is None else b.double(),
                                     layer.stride, layer.padding, layer.output_padding, 1,
                                     layer.dilation)
            x = x.cuda().to(dtype).contiguous(memory_format=torch.channels_last)
            w, b = w.cuda().to(dtype), None if b is None else b.cuda().to(dtype)
            inputs = [x.clone() for _ in range(8)]

            def cudnn(t):
                return F.conv_transpose2d(t, w, b, layer.stride, layer.padding,
                                          layer.output_padding, 1, layer.dilation)

            err_c = (cudnn(x).double().cpu() - ref).abs().max().item()
            err_f = (matmul_fold(x, w, b, layer).double().cpu() - ref).abs().max().item()
            t_c = graph_ms(cudnn, inputs) * 1e3
            t_f = graph_ms(lambda t: matmul_fold(t, w, b, layer), inputs) * 1e3
            t_m = graph_ms(lambda t: gemm_only(t, w), inputs) * 1e3
            print(f"{layer.name:28s} {mode:5s} {t_c:8.1f} {t_f:8.1f} {t_m:8.1f} "
                  f"{t_c / t_f:5.2f}x {err_f / max(err_c, 1e-30):14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
