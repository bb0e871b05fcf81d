"""The README's main job: patch a bundled example model and compare it with the original."""

from __future__ import annotations

import copy
from typing import List

import torch
from torch import nn

from .._version import __version__


class DemoGenerator(nn.Module):
    """A DCGAN-style generator (Radford et al. 2016) at 32x32: four ConvTranspose2d layers."""

    def __init__(self, latent: int = 100, width: int = 64, channels: int = 3) -> None:
        super().__init__()

        def up(cin: int, cout: int) -> List[nn.Module]:
            return [nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout),
                    nn.ReLU(True)]

        self.net = nn.Sequential(
            nn.ConvTranspose2d(latent, width * 4, 4, 1, 0, bias=False),
            nn.BatchNorm2d(width * 4),
            nn.ReLU(True),
            *up(width * 4, width * 2),
            *up(width * 2, width),
            nn.ConvTranspose2d(width, channels, 4, 2, 1, bias=True),
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


def _trained_batchnorm(model: nn.Module, seed: int) -> None:
    """BatchNorm statistics and affine parameters as a trained generator has them (fresh ones
    are the identity, which would make folding them into the convolutions trivially exact)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                n = module.num_features
                module.running_mean.copy_(torch.randn(n, generator=gen) * 0.3)
                module.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
                module.weight.copy_(torch.rand(n, generator=gen) + 0.5)
                module.bias.copy_(torch.randn(n, generator=gen) * 0.2)


def run_demo(batch: int = 64, seed: int = 0, autotune: bool = False) -> int:
    """The README's main job, through the public API: optimize() patches the bundled generator
    (each BatchNorm folded into its deconvolution and each activation into its epilogue,
    proved on the example input), validate() compares it with the original (accuracy against float64 and, on
    CUDA, time per layer and end to end) in fp32 and bf16 (bf16 on the CPU too: it runs there,
    and its accuracy check is as meaningful as on CUDA). It runs at PyTorch's default settings,
    as most users do (cudnn.benchmark off: cuDNN's heuristics for the original, deconv_patch's
    untimed plan, and a first run compiles only the kernels that plan uses). `autotune` turns
    cudnn.benchmark on for the run: cuDNN times its algorithms for the original and
    deconv_patch's autotune times its kernels, so each side runs its fastest. Prints the
    reports; returns an exit code."""
    from ..modules import FastConvTranspose2d, compile_together
    from ..optimize import optimize
    from ..validation.report import HEADERS, format_table, table_rows
    from ..validation import validate

    torch.manual_seed(seed)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    original = DemoGenerator()
    _trained_batchnorm(original, seed)
    original = original.to(device).eval()
    print(f"deconv_patch {__version__} demo: DCGAN-style generator, batch {batch}, on {device}")
    if not cuda:
        print("CUDA is not available: the patched model runs PyTorch's own kernels on the CPU, "
              "so it is not faster. CUDA is needed for the speedup.")
    dtypes = [torch.float32, torch.bfloat16]
    ok = True
    benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = cuda and autotune
    print("settings: " + ("cudnn.benchmark on (autotune)" if cuda and autotune else
                          "PyTorch's defaults (cudnn.benchmark off)"))
    try:
        runs = []
        with compile_together():  # both dtypes' kernels build in one step
            for dtype in dtypes:
                model = copy.deepcopy(original).to(dtype)
                z = torch.randn(batch, 100, 1, 1, device=device, dtype=dtype)
                runs.append((dtype, model, optimize(model, (z,)), z))
        names = [name for name, module in runs[0][2].named_modules()
                 if isinstance(module, FastConvTranspose2d)]
        print(f"patched {len(names)} ConvTranspose2d layers: {', '.join(names)}")
        for dtype, model, patched, z in runs:
            report = validate(model, patched, (z,), progress=False)
            print(f"\n[{str(dtype).replace('torch.', '')}]")
            print(format_table(HEADERS, table_rows(report)))
            print(report.verdict)
            ok &= report.passed
    finally:
        torch.backends.cudnn.benchmark = benchmark
    print("\nresult: " + ("PASS (patched output matches the original within float rounding)"
                          if ok else "FAIL (patched output differs beyond float rounding)"))
    return 0 if ok else 1
