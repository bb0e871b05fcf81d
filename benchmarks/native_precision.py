"""Error against float64 of the calls PyTorch runs on its native kernels (output_padding >=
stride; cuDNN disabled), at PyTorch's default TF32 settings (convolutions TF32, cuBLAS fp32):
PyTorch's own error, ours, and ours with cuBLAS allowed TF32 too (the TF32 form of the same
call), per layer, eval, NCHW. Prints a table.

    python3 benchmarks/native_precision.py
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import deconv_patch  # noqa: E402
from deconv_patch.reference import conv_transpose2d_float64  # noqa: E402
from layers import NO_CUDNN, SUITE, Layer  # noqa: E402

# Layers cuDNN runs, timed here with cuDNN disabled
_WITH_CUDNN = ("dcgan.g3", "unet.up4", "vae.dec")


def _errors(layer: Layer, cudnn: bool) -> tuple:
    torch.manual_seed(0)
    conv, x = layer.module_and_input(torch.float32, False)
    with torch.backends.cudnn.flags(enabled=cudnn, allow_tf32=True), torch.no_grad():
        fast = deconv_patch.FastConvTranspose2d.from_module(conv).cuda().eval()
        ref = conv_transpose2d_float64(x.double(), conv.weight.double(),
                                       None if conv.bias is None else conv.bias.double(),
                                       layer.args)
        pytorch = (conv(x).double() - ref).abs().max().item()
        ours = (fast(x).double() - ref).abs().max().item()
        plan = fast.plan_for(x)
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = (fast(x).double() - ref).abs().max().item()
        torch.backends.cuda.matmul.allow_tf32 = False
    return pytorch, ours, tf32, plan.variant


def main() -> int:
    torch.backends.cuda.matmul.allow_tf32 = False  # (PyTorch's default)
    rows = [(layer, True) for layer in SUITE if layer.args.without_cudnn] + \
        [(layer, True) for layer in NO_CUDNN] + \
        [(layer, False) for layer in SUITE if layer.name.startswith(_WITH_CUDNN)]
    print(f"{'layer':32} {'cuDNN':6} {'PyTorch':>9} {'ours':>9} {'ratio':>6} "
          f"{'TF32 form':>9}  plan")
    for layer, cudnn in rows:
        pytorch, ours, tf32, variant = _errors(layer, cudnn)
        print(f"{layer.name:32} {'on' if cudnn else 'off':6} {pytorch:9.2e} {ours:9.2e} "
              f"{ours / pytorch:6.2f} {tf32:9.2e}  {variant}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
