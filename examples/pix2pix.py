"""pix2pix U-Net generator (Isola, Zhu, Zhou & Efros, CVPR 2017), 256x256, paper appendix 6.1.2.

Encoder  C64-C128-C256-C512-C512-C512-C512-C512 (4x4 conv stride 2, BatchNorm except on the first
layer, LeakyReLU 0.2); decoder CD512-CD1024-CD1024-C1024-C1024-C512-C256-C128 (ReLU, 4x4
ConvTranspose2d stride 2, BatchNorm, Dropout 0.5 on the first three), each decoder output
concatenated with the mirrored encoder feature map, a last ConvTranspose2d to 3 channels + Tanh.
The innermost layer has no BatchNorm (its 1x1 map would make batch-1 statistics degenerate).
Eight ConvTranspose2d layers, seven followed by BatchNorm.

Run: python examples/pix2pix.py [--small] [--device cuda] [--dtype bfloat16]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence, Tuple

import torch
from torch import nn

if __package__ in (None, ""):  # run as a script: make the `examples` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples._common import example_main, randomize_running_stats  # noqa: E402


BENCH_BATCH = 16
TEST_BATCH = 1
SIZE = 256  # eight stride-2 levels: 256 -> 1 at the bottleneck


class UNetLevel(nn.Module):
    """One encoder/decoder level around `inner` (None at the bottleneck), with its skip."""

    def __init__(self, outer: int, inner: int, inner_block: Optional[nn.Module] = None, *,
                 in_channels: Optional[int] = None, outermost: bool = False,
                 dropout: bool = False) -> None:
        super().__init__()
        in_channels = outer if in_channels is None else in_channels
        innermost = inner_block is None
        down = [nn.Conv2d(in_channels, inner, 4, 2, 1, bias=False)]
        if not outermost:
            down.insert(0, nn.LeakyReLU(0.2, inplace=True))
        if not outermost and not innermost:
            down.append(nn.BatchNorm2d(inner))
        up_in = inner if innermost else inner * 2  # the inner level returns [skip, output]
        up: list = [nn.ReLU(inplace=True)]
        if outermost:
            up += [nn.ConvTranspose2d(up_in, outer, 4, 2, 1), nn.Tanh()]
        else:
            up += [nn.ConvTranspose2d(up_in, outer, 4, 2, 1, bias=False), nn.BatchNorm2d(outer)]
            if dropout:
                up.append(nn.Dropout(0.5))
        self.outermost = outermost
        self.down = nn.Sequential(*down)
        self.inner = inner_block if inner_block is not None else nn.Identity()
        self.up = nn.Sequential(*up)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up(self.inner(self.down(x)))
        return y if self.outermost else torch.cat([x, y], dim=1)


class Pix2PixGenerator(nn.Module):
    """The U-Net generator with `downs` stride-2 levels (8 for 256x256 inputs)."""

    def __init__(self, in_channels: int = 3, out_channels: int = 3, ngf: int = 64,
                 downs: int = 8) -> None:
        super().__init__()
        level = UNetLevel(ngf * 8, ngf * 8)  # bottleneck
        for index in range(downs - 5):
            level = UNetLevel(ngf * 8, ngf * 8, level, dropout=index < 3)
        level = UNetLevel(ngf * 4, ngf * 8, level)
        level = UNetLevel(ngf * 2, ngf * 4, level)
        level = UNetLevel(ngf, ngf * 2, level)
        self.model = UNetLevel(out_channels, ngf, level, in_channels=in_channels, outermost=True)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.normal_(m.weight, 0.0, 0.02)  # the paper's Gaussian init
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.normal_(m.weight, 1.0, 0.02)
                randomize_running_stats(m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


def build_model(small: bool = False) -> nn.Module:
    """The paper's 256x256 generator; `small` makes it 8x narrower (same layers)."""
    return Pix2PixGenerator(ngf=8 if small else 64)


def example_inputs(batch: int = BENCH_BATCH, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32, *, small: bool = False) -> Tuple[torch.Tensor]:
    return (torch.rand(batch, 3, SIZE, SIZE, device=device, dtype=dtype) * 2 - 1,)


def main(argv: Optional[Sequence[str]] = None) -> int:
    return example_main("pix2pix U-Net generator", build_model, example_inputs, BENCH_BATCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
