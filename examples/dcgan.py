"""DCGAN generator (Radford, Metz & Chintala, ICLR 2016), 64x64 output, as in the paper's Fig. 1.

z (100) -> 1024 @4x4 -> 512 @8x8 -> 256 @16x16 -> 128 @32x32 -> 3 @64x64: the "project and
reshape" step is a 4x4 ConvTranspose2d on a 1x1 input, then fractionally-strided 4x4 stride-2
convolutions, BatchNorm + ReLU after every layer but the last (Tanh). Five ConvTranspose2d
layers, four followed by BatchNorm (folded by `optimize` in eval mode).

Run: python examples/dcgan.py [--small] [--device cuda] [--dtype bfloat16]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn

if __package__ in (None, ""):  # run as a script: make the `examples` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples._common import example_main, randomize_running_stats  # noqa: E402

LATENT = 100
BENCH_BATCH = 128
TEST_BATCH = 4


class DCGANGenerator(nn.Module):
    """The DCGAN generator; `ngf` is the width of the last hidden layer."""

    def __init__(self, latent: int = LATENT, ngf: int = 128, channels: int = 3) -> None:
        super().__init__()

        def block(cin: int, cout: int, stride: int, padding: int) -> List[nn.Module]:
            return [nn.ConvTranspose2d(cin, cout, 4, stride, padding, bias=False),
                    nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        self.main = nn.Sequential(
            *block(latent, ngf * 8, 1, 0),
            *block(ngf * 8, ngf * 4, 2, 1),
            *block(ngf * 4, ngf * 2, 2, 1),
            *block(ngf * 2, ngf, 2, 1),
            nn.ConvTranspose2d(ngf, channels, 4, 2, 1, bias=False),
            nn.Tanh(),
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The paper's init: N(0, 0.02) weights, BN gamma N(1, 0.02); random running stats so
        eval-mode BatchNorm is not the identity (as after training)."""
        for m in self.modules():
            if isinstance(m, nn.ConvTranspose2d):
                nn.init.normal_(m.weight, 0.0, 0.02)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.normal_(m.weight, 1.0, 0.02)
                nn.init.zeros_(m.bias)
                randomize_running_stats(m)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.main(z)


def build_model(small: bool = False) -> nn.Module:
    """The paper's 64x64 generator; `small` narrows it 4x (same layers) for quick CPU tests."""
    return DCGANGenerator(ngf=32 if small else 128)


def example_inputs(batch: int = BENCH_BATCH, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32, *, small: bool = False) -> Tuple[torch.Tensor]:
    return (torch.randn(batch, LATENT, 1, 1, device=device, dtype=dtype),)


def main(argv: Optional[Sequence[str]] = None) -> int:
    return example_main("DCGAN generator", build_model, example_inputs, BENCH_BATCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
