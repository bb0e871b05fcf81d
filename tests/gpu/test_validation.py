"""validate() on the GPU: speedups and float64 columns for every layer, CUDA-graph timing in
bf16, and optimize(validate=True) timing fused layers against conv + BatchNorm."""

from __future__ import annotations

import copy

import pytest
import torch

from deconv_patch.cli.demo import DemoGenerator
from deconv_patch.swap import swap_conv_transpose2d
from deconv_patch.validation import validate
from tests.helpers import randomize_bn

pytestmark = pytest.mark.cuda


def test_gpu_report_has_speedups_and_fp64_for_every_layer(tmp_path):
    torch.manual_seed(0)
    original = DemoGenerator().cuda().eval()
    patched = copy.deepcopy(original)
    swap_conv_transpose2d(patched)
    z = torch.randn(64, 100, 1, 1, device="cuda")
    report = validate(original, patched, z, warmup=3, reps=15, backward=True)
    assert report.speed_skipped_reason is None
    assert report.environment.gpu_name and report.environment.cuda_version
    modules = dict(patched.named_modules())
    assert [layer.variant for layer in report.layers] == [
        modules[layer.name].backend for layer in report.layers]
    for layer in report.layers:
        assert layer.forward.speedup is not None and layer.forward.speedup > 0
        assert layer.forward.original.reps == 15
        assert layer.forward_backward is not None and layer.forward_backward.speedup > 0
        c = layer.comparisons[0]
        assert c.original_err_fp64 is not None and c.patched_err_fp64 is not None
        assert c.fp64_limit is not None
    assert report.forward.speedup > 0 and report.forward_backward.speedup > 0
    assert report.passed, report.failures
    text = str(report)
    assert "end-to-end forward" in text and "sum of layers" in text
    report.to_html(tmp_path / "r.html")
    assert "x</text>" in (tmp_path / "r.html").read_text()


def test_gpu_cuda_graph_timing_and_bf16():
    original = DemoGenerator().cuda().eval()
    patched = copy.deepcopy(original)
    swap_conv_transpose2d(patched)
    z = torch.randn(16, 100, 1, 1, device="cuda")
    report = validate(original, patched, z, dtype=torch.bfloat16, warmup=2, reps=10,
                      cuda_graphs=True)
    assert report.environment.dtype == "bfloat16"
    assert report.forward.mode == "cuda_graph", report.forward.note
    assert all(layer.forward.mode == "cuda_graph" for layer in report.layers)
    assert all(layer.comparisons[0].patched_err_fp64 is not None for layer in report.layers)
    assert report.passed, report.failures
    assert next(original.parameters()).dtype == torch.float32


def test_gpu_optimize_validate_fused_layers_timed_against_conv_plus_bn():
    optimize = pytest.importorskip("deconv_patch.optimize").optimize
    summary = pytest.importorskip("deconv_patch.summary")
    original = DemoGenerator().cuda().eval()
    randomize_bn(original)
    z = torch.randn(32, 100, 1, 1, device="cuda")
    patched = optimize(original, z, validate=True,
                       validate_kwargs={"warmup": 2, "reps": 10, "random_inputs": 1})
    report = summary.get_summary(patched).validation
    assert report.passed, report.failures
    assert [layer.fused_with for layer in report.layers] == [["net.1", "net.2"], ["net.4", "net.5"],
                                                             ["net.7", "net.8"], ["net.10"]]
    assert all(layer.forward.speedup > 0 for layer in report.layers)
    assert report.environment.fusion is True
