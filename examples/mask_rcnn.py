"""Mask R-CNN (He, Gkioxari, Dollar & Girshick, ICCV 2017), torchvision's ResNet-50-FPN build.

`torchvision.models.detection.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None)`:
random init, nothing downloaded. Its mask head upsamples 14x14 RoI features to 28x28 with one
ConvTranspose2d(256, 256, k=2, s=2), followed by a ReLU that `optimize` runs in the same call
in eval mode (the detection model's data-dependent control flow runs as written).

`box_score_thresh=0` keeps detections from a random-init model, so the mask head does run.

Run: python examples/mask_rcnn.py [--small] [--device cuda]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

if __package__ in (None, ""):  # run as a script: make the `examples` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples._common import example_main  # noqa: E402

BENCH_BATCH = 2
TEST_BATCH = 1
FULL_SIZE = (800, 1088)  # torchvision resizes to min side 800 anyway
SMALL_SIZE = (128, 160)


def build_model(small: bool = False) -> nn.Module:
    """torchvision's Mask R-CNN; `small` lowers the internal resize to 128-160 px for CPU tests."""
    from torchvision.models.detection import maskrcnn_resnet50_fpn

    sizes: Dict[str, Any] = {"min_size": SMALL_SIZE[0], "max_size": SMALL_SIZE[1]} if small else {}
    return maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, box_score_thresh=0.0,
                                 **sizes)


def example_inputs(batch: int = BENCH_BATCH, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32, *,
                   small: bool = False) -> Tuple[List[torch.Tensor]]:
    """One positional argument: the list of 3xHxW images in [0, 1] that detection models take."""
    height, width = SMALL_SIZE if small else FULL_SIZE
    return ([torch.rand(3, height, width, device=device, dtype=dtype) for _ in range(batch)],)


def mask_head_input(model: nn.Module, images: List[torch.Tensor]) -> torch.Tensor:
    """The RoI features that reach the mask predictor on `images` (captured with a hook).

    The ConvTranspose2d sits in the predictor, so accuracy checks compare predictors on this
    exact input: a float64 run of the whole detector would select different boxes.
    """
    captured: List[torch.Tensor] = []
    predictor = model.roi_heads.mask_predictor  # type: ignore[union-attr]
    handle = predictor.register_forward_pre_hook(lambda _m, args: captured.append(args[0]))
    try:
        with torch.no_grad():
            model(images)
    finally:
        handle.remove()
    if not captured:
        raise RuntimeError("the mask head did not run (no detections)")
    return captured[0]


def main(argv: Optional[Sequence[str]] = None) -> int:
    return example_main("Mask R-CNN ResNet-50-FPN", build_model, example_inputs, BENCH_BATCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
