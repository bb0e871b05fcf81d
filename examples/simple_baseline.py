"""SimpleBaseline pose estimation (Xiao, Wu & Wei, ECCV 2018): ResNet-50 + deconvolution head.

torchvision's ResNet-50 without its pooling/classifier (random init, nothing downloaded), then
three deconvolution layers, each ConvTranspose2d(k=4, s=2, p=1, 256 filters, no bias) +
BatchNorm + ReLU, then a 1x1 conv to 17 COCO keypoint heatmaps. 256x192 input -> 64x48
heatmaps. Three ConvTranspose2d layers, all followed by BatchNorm (folded in eval mode).

Run: python examples/simple_baseline.py [--small] [--device cuda] [--dtype bfloat16]
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

BENCH_BATCH = 32
TEST_BATCH = 1
FULL_SIZE = (256, 192)
SMALL_SIZE = (128, 96)
JOINTS = 17


class SimpleBaseline(nn.Module):
    """ResNet-50 backbone, 3 x (deconv 4x4 s2 + BN + ReLU), 1x1 conv to `joints` heatmaps."""

    def __init__(self, joints: int = JOINTS, deconv_filters: int = 256) -> None:
        super().__init__()
        from torchvision.models import resnet50

        resnet = resnet50(weights=None)
        self.backbone = nn.Sequential(resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool,
                                      resnet.layer1, resnet.layer2, resnet.layer3, resnet.layer4)
        layers: List[nn.Module] = []
        channels = 2048
        for _ in range(3):
            layers += [nn.ConvTranspose2d(channels, deconv_filters, 4, stride=2, padding=1,
                                          output_padding=0, bias=False),
                       nn.BatchNorm2d(deconv_filters), nn.ReLU(inplace=True)]
            channels = deconv_filters
        self.deconv_layers = nn.Sequential(*layers)
        self.final_layer = nn.Conv2d(deconv_filters, joints, 1)
        for m in self.deconv_layers:
            if isinstance(m, nn.ConvTranspose2d):
                nn.init.normal_(m.weight, std=0.001)  # the paper's head init
            elif isinstance(m, nn.BatchNorm2d):
                randomize_running_stats(m)
        nn.init.normal_(self.final_layer.weight, std=0.001)
        nn.init.zeros_(self.final_layer.bias)
        for m in self.backbone.modules():
            if isinstance(m, nn.BatchNorm2d):
                randomize_running_stats(m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.final_layer(self.deconv_layers(self.backbone(x)))


def build_model(small: bool = False) -> nn.Module:
    """The ResNet-50 256x192 model (`small` only shrinks the input)."""
    return SimpleBaseline()


def example_inputs(batch: int = BENCH_BATCH, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32, *, small: bool = False) -> Tuple[torch.Tensor]:
    height, width = SMALL_SIZE if small else FULL_SIZE
    return (torch.randn(batch, 3, height, width, device=device, dtype=dtype),)


def main(argv: Optional[Sequence[str]] = None) -> int:
    return example_main("SimpleBaseline (ResNet-50) pose head", build_model, example_inputs,
                        BENCH_BATCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
