"""CycleGAN ResNet generator (Zhu, Park, Isola & Efros, ICCV 2017; after Johnson et al. 2016).

Paper appendix 7.2, 256x256 variant: c7s1-64, d128, d256, R256 x9, u128, u64, c7s1-3.
  c7s1-k: 7x7 conv stride 1 (reflection padding) + InstanceNorm + ReLU;
  dk:     3x3 conv stride 2 + InstanceNorm + ReLU;
  Rk:     residual block of two 3x3 convs (reflection padding, InstanceNorm);
  uk:     3x3 fractionally-strided conv stride 1/2, i.e. ConvTranspose2d(k=3, s=2, padding=1,
          output_padding=1) so the size exactly doubles, + InstanceNorm + ReLU.
The last c7s1-3 ends in Tanh. Two ConvTranspose2d layers with output_padding; their
InstanceNorm is not folded (only BatchNorm with running statistics can be).

Run: python examples/cyclegan.py [--small] [--device cuda] [--dtype bfloat16]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn

if __package__ in (None, ""):  # run as a script: make the `examples` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples._common import example_main  # noqa: E402

BENCH_BATCH = 8
TEST_BATCH = 1
FULL_SIZE = 256
SMALL_SIZE = 64


class ResidualBlock(nn.Module):
    """Two reflection-padded 3x3 convs with InstanceNorm; input added back."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.ReflectionPad2d(1), nn.Conv2d(channels, channels, 3), nn.InstanceNorm2d(channels),
            nn.ReLU(inplace=True),
            nn.ReflectionPad2d(1), nn.Conv2d(channels, channels, 3), nn.InstanceNorm2d(channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class CycleGANGenerator(nn.Module):
    """The ResNet generator with `blocks` residual blocks (9 for 256x256 images)."""

    def __init__(self, channels: int = 3, ngf: int = 64, blocks: int = 9) -> None:
        super().__init__()
        layers: List[nn.Module] = [
            nn.ReflectionPad2d(3), nn.Conv2d(channels, ngf, 7), nn.InstanceNorm2d(ngf),
            nn.ReLU(inplace=True),
        ]
        for mult in (1, 2):  # d128, d256
            layers += [nn.Conv2d(ngf * mult, ngf * mult * 2, 3, stride=2, padding=1),
                       nn.InstanceNorm2d(ngf * mult * 2), nn.ReLU(inplace=True)]
        layers += [ResidualBlock(ngf * 4) for _ in range(blocks)]
        for mult in (4, 2):  # u128, u64
            layers += [nn.ConvTranspose2d(ngf * mult, ngf * mult // 2, 3, stride=2, padding=1,
                                          output_padding=1),
                       nn.InstanceNorm2d(ngf * mult // 2), nn.ReLU(inplace=True)]
        layers += [nn.ReflectionPad2d(3), nn.Conv2d(ngf, channels, 7), nn.Tanh()]
        self.model = nn.Sequential(*layers)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.normal_(m.weight, 0.0, 0.02)  # the paper's Gaussian init

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


def build_model(small: bool = False) -> nn.Module:
    """The paper's 9-block generator; `small` makes it 4x narrower (same layers)."""
    return CycleGANGenerator(ngf=16 if small else 64)


def example_inputs(batch: int = BENCH_BATCH, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32, *, small: bool = False) -> Tuple[torch.Tensor]:
    size = SMALL_SIZE if small else FULL_SIZE
    return (torch.rand(batch, 3, size, size, device=device, dtype=dtype) * 2 - 1,)


def main(argv: Optional[Sequence[str]] = None) -> int:
    return example_main("CycleGAN ResNet generator", build_model, example_inputs, BENCH_BATCH,
                        argv)


if __name__ == "__main__":
    raise SystemExit(main())
