"""The README's main job: patch a bundled example model and compare it with the original."""

from __future__ import annotations

import copy
from typing import List

import torch
from torch import nn

from ._version import __version__
from .swap import swap_conv_transpose2d
from .timing import time_cuda


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


def run_demo(batch: int = 64, seed: int = 0) -> int:
    """Prints layers patched, max difference and (on CUDA) time vs PyTorch. Returns an exit code."""
    torch.manual_seed(seed)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    original = DemoGenerator().to(device).eval()
    patched = copy.deepcopy(original)
    names = swap_conv_transpose2d(patched)
    print(f"deconv_patch {__version__} demo: DCGAN-style generator, batch {batch}, on {device}")
    print(f"patched {len(names)} ConvTranspose2d layers: {', '.join(names)}")
    if not cuda:
        print("CUDA is not available: the patched model runs PyTorch's own kernels on the CPU, "
              "so it matches exactly and is not faster. CUDA is needed for the speedup.")
    dtypes = [torch.float32, torch.bfloat16] if cuda else [torch.float32]
    ok = True
    for dtype in dtypes:
        orig_d = copy.deepcopy(original).to(dtype)
        patch_d = copy.deepcopy(patched).to(dtype)
        z = torch.randn(batch, 100, 1, 1, device=device, dtype=dtype)
        with torch.no_grad():
            ref64 = copy.deepcopy(original).double()(z.double())
            out_orig, out_patch = orig_d(z), patch_d(z)
            diff = (out_patch.double() - out_orig.double()).abs().max().item()
            err_orig = (out_orig.double() - ref64).abs().max().item()
            err_patch = (out_patch.double() - ref64).abs().max().item()
        line = (f"[{str(dtype).replace('torch.', '')}] max |patched - original| = {diff:.3e}; "
                f"error vs float64: original {err_orig:.3e}, patched {err_patch:.3e}")
        ok &= bool(torch.isfinite(out_patch).all()) and err_patch <= 2 * err_orig + 1e-5
        print(line)
        if cuda:
            with torch.no_grad():
                t_orig = time_cuda(lambda: orig_d(z))
                t_patch = time_cuda(lambda: patch_d(z))
            print(f"    forward: PyTorch {t_orig.median_ms:.3f} ms, deconv_patch "
                  f"{t_patch.median_ms:.3f} ms, speedup {t_orig.median_ms / t_patch.median_ms:.2f}x")
    print("result: " + ("PASS (patched output matches the original within float rounding)" if ok
                        else "FAIL (patched output differs beyond float rounding)"))
    return 0 if ok else 1
