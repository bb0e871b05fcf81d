"""Shared test configuration.

GPU tests carry @pytest.mark.cuda and skip without a usable GPU (`-m cuda` selects them).
Tests marked `extended` (the kernel emulations of tests/emulation/, also marked `emulation`, and
other checks that take minutes on a small CPU) skip unless --extended is given, so the default
run stays short; CI runs them in a step of their own (`python -m pytest -q --extended -m
extended`). --run-emulation is the same switch (`python -m pytest -q --run-emulation -m
emulation` runs the emulations alone).

Without a GPU, torch runs one intra-op thread (unless OMP_NUM_THREADS says otherwise), and so do
the console-script subprocesses the CLI tests start (tests/helpers.py: run_cli): the CPU tests'
tensors are small, and on a 2-core machine OpenMP's waiting threads cost more than they save
(the Mask R-CNN corpus model and the gradchecks took about 5x the CPU time with two threads).
"""

from __future__ import annotations

import os

import pytest
import torch


def pytest_addoption(parser):
    parser.addoption("--extended", "--run-emulation", action="store_true", default=False,
                     dest="extended",
                     help="also run the tests marked extended (the kernel emulations and other "
                          "long CPU checks; several minutes on a small machine)")


def _cuda_usable() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability(0) >= (8, 0)


def pytest_configure(config):
    if "OMP_NUM_THREADS" not in os.environ and not _cuda_usable():
        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    skips = []
    if not _cuda_usable():
        skips.append(("cuda", pytest.mark.skip(
            reason="needs a CUDA GPU of compute capability >= 8.0")))
    if not config.getoption("extended"):
        skips.append(("extended", pytest.mark.skip(
            reason="an extended check: run with --extended")))
    for item in items:
        for marker, skip in skips:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def chains_fold_on_cpu():
    """Fused chains fold and hand over on the CPU too: by default they do so only on CUDA (on
    the CPU a patched model's outputs stay bit-identical to the original's), so tests of the
    chains' own logic without a GPU ask for it."""
    from deconv_patch.fused_chain import folding_on_any_device

    with folding_on_any_device():
        yield
