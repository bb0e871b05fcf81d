"""The fused activations the kernels apply in their epilogue: name -> code of the CUDA
`Activation` enum (cuda/common/params.h)."""

from __future__ import annotations

from typing import Dict

ACTIVATIONS: Dict[str, int] = {
    "none": 0,
    "relu": 1,
    "leaky_relu": 2,
    "silu": 3,
    "gelu": 4,
    "gelu_tanh": 5,
    "tanh": 6,
    "sigmoid": 7,
    "hardswish": 8,
}
