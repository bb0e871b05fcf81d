"""Every example model, so tests and benchmarks iterate over all of them."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Tuple

import torch
from torch import nn


@dataclass(frozen=True)
class Example:
    """One example architecture: its module in `examples/` and how it is exercised.

    `dense_output` is False for detection models (data-dependent graphs, detections compared
    on their own rather than as one tensor output); `conv_transpose`
    is how many nn.ConvTranspose2d modules it has (each must end up patched).
    """

    name: str
    title: str
    module_name: str
    dense_output: bool
    conv_transpose: int

    @property
    def module(self) -> ModuleType:
        return importlib.import_module(self.module_name)

    def build(self, small: bool = False) -> nn.Module:
        return self.module.build_model(small=small)

    def inputs(self, batch: int, device: Any = "cpu", dtype: torch.dtype = torch.float32,
               small: bool = False) -> Tuple[Any, ...]:
        return self.module.example_inputs(batch, device, dtype, small=small)

    @property
    def bench_batch(self) -> int:
        return int(self.module.BENCH_BATCH)

    @property
    def test_batch(self) -> int:
        return int(self.module.TEST_BATCH)


EXAMPLES: Tuple[Example, ...] = (
    Example("dcgan", "DCGAN generator", "examples.dcgan", True, 5),
    Example("unet", "U-Net", "examples.unet", True, 4),
    Example("pix2pix", "pix2pix U-Net generator", "examples.pix2pix", True, 8),
    Example("cyclegan", "CycleGAN ResNet generator", "examples.cyclegan", True, 2),
    Example("simple_baseline", "SimpleBaseline ResNet-50 pose", "examples.simple_baseline", True,
            3),
    Example("fsrcnn", "FSRCNN x3", "examples.fsrcnn", True, 1),
    Example("mask_rcnn", "Mask R-CNN R50-FPN", "examples.mask_rcnn", False, 1),
)


def get(name: str) -> Example:
    """The example called `name` (KeyError listing the names otherwise)."""
    for example in EXAMPLES:
        if example.name == name:
            return example
    raise KeyError(f"unknown example {name!r}; known: {', '.join(e.name for e in EXAMPLES)}")
