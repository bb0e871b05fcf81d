"""kept_buffers.may_keep_buffers: no device tensor is kept past a call while a CUDA graph is
captured or while Inductor's CUDA-graph trees warm one up (the flag they turn off then)."""

import pytest
import torch

from deconv_patch.kernels import kept_buffers


@pytest.fixture
def not_capturing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)


def _with_flag(value: bool) -> bool:
    before = torch._C._cuda_get_conv_benchmark_empty_cache()
    torch._C._cudnn_set_conv_benchmark_empty_cache(value)
    try:
        return kept_buffers.may_keep_buffers(torch.device("cuda", 0))
    finally:
        torch._C._cudnn_set_conv_benchmark_empty_cache(before)


def test_kept_outside_graph_work(not_capturing):
    assert _with_flag(True) is True


def test_not_kept_in_a_graph_trees_warm_up(not_capturing):
    assert _with_flag(False) is False


def test_not_kept_while_capturing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert _with_flag(True) is False


def test_other_devices_keep(monkeypatch):
    def capturing():
        raise AssertionError("asked about CUDA capture for a CPU tensor")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", capturing)
    assert kept_buffers.may_keep_buffers(torch.device("cpu")) is True
