"""Shared test configuration: GPU tests carry @pytest.mark.cuda and skip without a usable GPU."""

from __future__ import annotations

import pytest
import torch


def _cuda_usable() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability(0) >= (8, 0)


def pytest_collection_modifyitems(config, items):
    if _cuda_usable():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU of compute capability >= 8.0")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
