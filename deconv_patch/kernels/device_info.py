"""What the planner asks of a CUDA device: its index, compute capability and SM count (cached:
asked when a call is planned)."""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=None)
def capability(index: int) -> tuple:
    """Compute capability of a CUDA device."""
    return torch.cuda.get_device_capability(index)


@functools.lru_cache(maxsize=None)
def multiprocessors(index: int) -> int:
    """A CUDA device's SM count."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def device_index(device: torch.device) -> int:
    """A CUDA device's index (the current device for a bare "cuda")."""
    return device.index if device.index is not None else torch.cuda.current_device()


def device_capability(device: torch.device) -> tuple:
    return capability(device_index(device))


def is_sm90(device: torch.device) -> bool:
    """Compute capability 9.0 (Hopper): where the sm_90a build's wgmma kernels can run."""
    return device_capability(device) == (9, 0)
