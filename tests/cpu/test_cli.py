"""The `deconv-patch` console script, run as users run it (a subprocess)."""

from __future__ import annotations

import pytest
import torch

import deconv_patch
from deconv_patch.exit_codes import ExitCode
from tests.helpers import run_cli as run, run_cli_concurrently


def test_version_and_help():
    out, helped = run_cli_concurrently([["--version"], ["--help"]])
    assert out.returncode == 0 and deconv_patch.__version__ in out.stdout
    assert helped.returncode == 0 and "build" in helped.stdout and "demo" in helped.stdout


def test_demo_runs_and_passes():
    out = run("demo", "--batch", "4")
    assert out.returncode == 0, out.stderr
    assert "patched 4 ConvTranspose2d layers" in out.stdout and "PASS" in out.stdout
    # The public API's report: every layer compared with float64 (BatchNorms folded).
    assert "patched is as accurate as PyTorch against float64" in out.stdout
    assert out.stdout.count("   ok ") >= 5, out.stdout  # 4 layers + the output, each "ok"
    # fp32 and bf16 on every machine: bf16 runs on the CPU too, and its accuracy check holds
    assert "\n[float32]\n" in out.stdout and "\n[bfloat16]\n" in out.stdout, out.stdout
    assert out.stdout.count("PASS: ") == 2, out.stdout
    # PyTorch's default settings unless asked (--autotune: cudnn.benchmark on, on CUDA)
    assert "settings: PyTorch's defaults (cudnn.benchmark off)" in out.stdout
    if not torch.cuda.is_available():
        assert "CUDA is needed for the speedup" in out.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's wording")
def test_demo_autotune_without_cuda_runs_at_the_defaults(capsys):
    """--autotune times kernels on CUDA (tests/gpu/test_op.py); without CUDA there is nothing
    to time: the run says so and leaves cudnn.benchmark as it was."""
    from deconv_patch.cli import demo

    before = torch.backends.cudnn.benchmark
    assert demo.run_demo(batch=2, autotune=True) == 0
    assert "settings: PyTorch's defaults" in capsys.readouterr().out
    assert torch.backends.cudnn.benchmark is before


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error path")
def test_build_without_cuda_fails_with_a_clear_message():
    out = run("build")
    assert out.returncode == ExitCode.CUDA_UNAVAILABLE == 9
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: deconv_patch cannot use its CUDA "
                                                   "kernels"), out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
