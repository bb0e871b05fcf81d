"""FSRCNN (Dong, Loy & Tang, ECCV 2016): fast super-resolution with a deconvolution at the end.

FSRCNN(d=56, s=12, m=4), the paper's main configuration, on the luminance channel:
  feature extraction Conv(5x5, 1 -> d) + PReLU;  shrinking Conv(1x1, d -> s) + PReLU;
  mapping m x [Conv(3x3, s -> s) + PReLU];       expanding Conv(1x1, s -> d) + PReLU;
  deconvolution ConvTranspose2d(9x9, d -> 1, stride = upscaling factor).
Padding 4 and output_padding = scale - 1 make the output exactly `scale` times the input.
One ConvTranspose2d (with output_padding for scale > 1), not followed by a norm.

Run: python examples/fsrcnn.py [--small] [--device cuda] [--dtype bfloat16]
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

BENCH_BATCH = 32
TEST_BATCH = 2
FULL_SIZE = 128  # low-resolution input side; x3 gives 384x384
SMALL_SIZE = 24


class FSRCNN(nn.Module):
    """FSRCNN(d, s, m) for an upscaling factor `scale`."""

    def __init__(self, scale: int = 3, channels: int = 1, d: int = 56, s: int = 12,
                 m: int = 4) -> None:
        super().__init__()
        layers: List[nn.Module] = [nn.Conv2d(channels, d, 5, padding=2), nn.PReLU(d),
                                   nn.Conv2d(d, s, 1), nn.PReLU(s)]
        for _ in range(m):
            layers += [nn.Conv2d(s, s, 3, padding=1), nn.PReLU(s)]
        layers += [nn.Conv2d(s, d, 1), nn.PReLU(d)]
        self.body = nn.Sequential(*layers)
        self.deconv = nn.ConvTranspose2d(d, channels, 9, stride=scale, padding=4,
                                         output_padding=scale - 1)
        for layer in self.body:
            if isinstance(layer, nn.Conv2d):  # the paper's init for PReLU networks (He et al.)
                nn.init.kaiming_normal_(layer.weight, a=0.25, nonlinearity="leaky_relu")
                nn.init.zeros_(layer.bias)
        nn.init.normal_(self.deconv.weight, 0.0, 0.001)
        nn.init.zeros_(self.deconv.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.deconv(self.body(x))


def build_model(small: bool = False) -> nn.Module:
    """FSRCNN(56, 12, 4) for x3 (already small: `small` only shrinks the input)."""
    return FSRCNN(scale=3)


def example_inputs(batch: int = BENCH_BATCH, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32, *, small: bool = False) -> Tuple[torch.Tensor]:
    size = SMALL_SIZE if small else FULL_SIZE
    return (torch.rand(batch, 1, size, size, device=device, dtype=dtype),)


def main(argv: Optional[Sequence[str]] = None) -> int:
    return example_main("FSRCNN x3", build_model, example_inputs, BENCH_BATCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
