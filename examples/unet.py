"""U-Net (Ronneberger, Fischer & Brox, MICCAI 2015), as in the paper's Fig. 1.

Contracting path: repeated [3x3 conv (unpadded) + ReLU] x2 then 2x2 max-pool stride 2, doubling
channels 64 -> 1024. Expanding path: a 2x2 "up-convolution" (ConvTranspose2d k=2 s=2) halving
the channels, concatenation with the center-cropped feature map of the contracting path, then
[3x3 conv + ReLU] x2. A final 1x1 conv maps 64 features to the classes. 572x572 in -> 388x388 out.
Four ConvTranspose2d layers (k=2, s=2), no BatchNorm.

Run: python examples/unet.py [--small] [--device cuda] [--dtype bfloat16]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence, Tuple

import torch
from torch import nn

if __package__ in (None, ""):  # run as a script: make the `examples` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples._common import example_main  # noqa: E402

BENCH_BATCH = 8
TEST_BATCH = 1
FULL_SIZE = 572  # the paper's input tile; output 388
SMALL_SIZE = 188  # smallest valid tile for four unpadded levels; output 4


def double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3), nn.ReLU(inplace=True))


def center_crop(features: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The paper's "cropping": the central height x width window of `features`."""
    top = (features.shape[-2] - height) // 2
    left = (features.shape[-1] - width) // 2
    return features[..., top:top + height, left:left + width]


class UNet(nn.Module):
    """The original U-Net; `width` is the channel count of the first level (64 in the paper)."""

    def __init__(self, in_channels: int = 1, classes: int = 2, width: int = 64) -> None:
        super().__init__()
        chans = [width * 2**i for i in range(5)]  # 64, 128, 256, 512, 1024
        self.down = nn.ModuleList(
            [double_conv(in_channels, chans[0])]
            + [double_conv(chans[i], chans[i + 1]) for i in range(3)])
        self.pool = nn.MaxPool2d(2, 2)
        self.bottom = double_conv(chans[3], chans[4])
        self.up = nn.ModuleList(
            [nn.ConvTranspose2d(chans[i + 1], chans[i], kernel_size=2, stride=2)
             for i in reversed(range(4))])
        self.up_convs = nn.ModuleList(
            [double_conv(chans[i + 1], chans[i]) for i in reversed(range(4))])
        self.head = nn.Conv2d(chans[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottom(x)
        for upconv, block, skip in zip(self.up, self.up_convs, reversed(skips)):
            x = upconv(x)
            x = block(torch.cat([center_crop(skip, x.shape[-2], x.shape[-1]), x], dim=1))
        return self.head(x)


def build_model(small: bool = False) -> nn.Module:
    """The paper's U-Net; `small` makes it 4x narrower (same layers) for quick CPU tests."""
    return UNet(width=16 if small else 64)


def example_inputs(batch: int = BENCH_BATCH, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32, *, small: bool = False) -> Tuple[torch.Tensor]:
    size = SMALL_SIZE if small else FULL_SIZE
    return (torch.randn(batch, 1, size, size, device=device, dtype=dtype),)


def main(argv: Optional[Sequence[str]] = None) -> int:
    return example_main("U-Net", build_model, example_inputs, BENCH_BATCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
