"""GPU test of the binding's NCHW -> channels_last re-layout
(cuda/relayout/relayout_channels_last.cu), which the row-reading kernels (gemm_phase_tma,
gemm_kxs_sm90, 16-bit gemm_phase) run on NCHW input: bit-identical to PyTorch's own copy, every
element, over odd sizes, element sizes, batches past the grid's z limit, and layouts it hands to
PyTorch's copy instead; and the reused buffer a call re-lays its input into
(cuda/binding/relayout_workspace.cpp): back-to-back calls, two streams, graph capture."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.cuda

SHAPES = [(1, 1, 1, 1), (2, 3, 5, 7), (3, 32, 8, 4), (2, 33, 31, 3), (4, 256, 14, 14),
          (1, 1000, 1, 40), (5, 17, 64, 64), (70_000, 2, 1, 3),
          # 16-bit pairs (C and H*W even): partial 64 x 64 tiles, Keypoint R-CNN's input
          (3, 70, 10, 9), (2, 130, 12, 11), (100, 512, 14, 14), (70_000, 2, 1, 2)]


def _relayout(x: torch.Tensor) -> torch.Tensor:
    from deconv_patch.kernels.extension import load_extension
    return load_extension().channels_last_copy(x)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_relayout_matches_pytorch_bit_for_bit(shape, dtype):
    gen = torch.Generator(device="cuda").manual_seed(sum(shape))
    x = torch.randn(*shape, device="cuda", generator=gen).to(dtype)
    got = _relayout(x)
    expected = x.contiguous(memory_format=torch.channels_last)
    torch.cuda.synchronize()
    assert got.shape == expected.shape and got.stride() == expected.stride()
    assert got.data_ptr() != x.data_ptr()
    assert torch.equal(got.view(torch.int16 if x.element_size() == 2 else torch.int32),
                       expected.view(torch.int16 if x.element_size() == 2 else torch.int32))


def test_relayout_of_other_layouts_is_pytorchs_copy():
    x = torch.randn(4, 8, 10, 12, device="cuda")[:, ::2]  # neither NCHW- nor NHWC-dense
    got = _relayout(x)
    assert torch.equal(got, x) and got.is_contiguous(memory_format=torch.channels_last)
    y = torch.randn(2, 6, 5, 5, device="cuda", dtype=torch.float64)  # 8-byte elements
    assert torch.equal(_relayout(y), y)


# ---- the reused re-layout buffer (cuda/binding/relayout_workspace.cpp) -----------------------
# A kernel that reads 16-byte channel rows re-lays NCHW input into one buffer kept per (thread,
# device, stream). Its results must equal the same kernel on channels_last input (no re-layout:
# the same data, the same strides, so bit for bit) however calls interleave.

def _row_reader() -> str:
    """A variant that re-lays NCHW bf16 input: gemm_phase_tma on Hopper, gemm_phase elsewhere."""
    return "gemm_phase_tma" if torch.cuda.get_device_capability() == (9, 0) else "gemm_phase"


def _layer(seed: int):
    from deconv_patch.arguments import ConvTransposeArgs
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(64, 32, 4, 4, device="cuda", generator=gen).bfloat16()
    return w, ConvTransposeArgs.from_values(stride=2, padding=1)


def _inputs(shapes, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(*s, device="cuda", generator=gen).bfloat16() for s in shapes]


def _channels_last_result(variant, x, w, args):
    from deconv_patch.ops import run_variant
    return run_variant(variant, x.contiguous(memory_format=torch.channels_last), w, None, args)


def test_reused_buffer_gives_each_call_its_own_input():
    """Back-to-back calls, no synchronisation between them, inputs growing (the buffer is
    replaced) and shrinking (a prefix of it is used)."""
    from deconv_patch.ops import run_variant
    variant = _row_reader()
    w, args = _layer(1)
    xs = _inputs([(2, 64, 8, 8), (4, 64, 32, 32), (1, 64, 5, 7), (8, 64, 64, 64), (3, 64, 9, 9)],
                 2)
    outs = [run_variant(variant, x, w, None, args) for x in xs]
    for x, out in zip(xs, outs):
        assert x.is_contiguous() and not x.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(out, _channels_last_result(variant, x, w, args))


def test_reused_buffers_on_two_streams_do_not_mix():
    from deconv_patch.ops import run_variant
    variant = _row_reader()
    w, args = _layer(3)
    xs = _inputs([(4, 64, 32, 32)] * 6, 4)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    outs = []
    for i, x in enumerate(xs):  # alternate streams, nothing waits in between
        with torch.cuda.stream(streams[i % 2]):
            outs.append(run_variant(variant, x, w, None, args))
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    for x, out in zip(xs, outs):
        assert torch.equal(out, _channels_last_result(variant, x, w, args))


def test_graph_capture_keeps_its_own_buffer():
    """Under capture the re-layout gets a fresh buffer: an eager call between replays (which
    re-lays its input into the reused buffer) does not change what the graph computes."""
    from deconv_patch.ops import run_variant
    variant = _row_reader()
    w, args = _layer(5)
    static_x, other = _inputs([(4, 64, 16, 16), (4, 64, 16, 16)], 6)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up outside capture: extension, plan, packed weight
            run_variant(variant, static_x, w, None, args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = run_variant(variant, static_x, w, None, args)
    for step in range(3):
        static_x.copy_(torch.randn_like(static_x))
        eager = run_variant(variant, other, w, None, args)  # the reused buffer: `other`
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out, _channels_last_result(variant, static_x, w, args)), step
        assert torch.equal(eager, _channels_last_result(variant, other, w, args)), step
