"""The autograd node of a recorded kernel call (cuda/binding/recorded_call.cpp), built on the CPU
around PyTorch's own convolution as the forward: its backward must be the transposed
convolution's (gradcheck and gradgradcheck in float64) for whichever of input, weight and bias
need gradients, batched or not, with every hyperparameter; the forward runs outside autograd.
The GPU side (the node around our kernels) is tests/gpu/test_grad_calls.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.extended  # one small extension build: about a minute on 2 cores

CUDA_SOURCES = Path(__file__).resolve().parents[2] / "cuda"

# The node around at::conv_transpose2d; `forward_saw_grad` says whether the forward ran with
# grad mode on (it must not: the node records the call, not the forward's own ops).
PROBE = """
#include <torch/extension.h>
#include "binding/recorded_call.hpp"

static bool forward_saw_grad = false;

at::Tensor recorded(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& b,
                    std::vector<int64_t> stride, std::vector<int64_t> padding,
                    std::vector<int64_t> output_padding, int64_t groups,
                    std::vector<int64_t> dilation) {
  const deconv_patch::ConvTransposeHyper hyper{stride, padding, output_padding, dilation, groups};
  const deconv_patch::ConvForward forward = [&](const at::Tensor& xi, const at::Tensor& wi,
                                                const c10::optional<at::Tensor>& bi) {
    forward_saw_grad = at::GradMode::is_enabled();
    return at::conv_transpose2d(xi, wi, bi, stride, padding, output_padding, groups, dilation);
  };
  return deconv_patch::recorded_conv_transpose2d(forward, x, w, b, hyper);
}

bool saw_grad() { return forward_saw_grad; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("recorded", &recorded);
  m.def("saw_grad", &saw_grad);
}
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    from torch.utils.cpp_extension import load

    folder = tmp_path_factory.mktemp("recorded_call")
    probe = folder / "probe.cpp"
    probe.write_text(PROBE)
    return load(name="recorded_call_probe", sources=[str(probe),
                                                     str(CUDA_SOURCES / "binding" /
                                                         "recorded_call.cpp")],
                extra_include_paths=[str(CUDA_SOURCES)], build_directory=str(folder),
                extra_cflags=["-O1"], verbose=False)


HYPER = {  # (stride, padding, output_padding, groups, dilation), weight (Cin, Cout/g, kh, kw)
    "k==s": (([2, 2], [0, 0], [0, 0], 1, [1, 1]), (4, 3, 2, 2)),
    "k4s2p1": (([2, 2], [1, 1], [0, 0], 1, [1, 1]), (4, 3, 4, 4)),
    "every hyperparameter": (([2, 3], [1, 0], [1, 2], 2, [2, 1]), (4, 3, 3, 2)),
}


def _tensors(shape, groups: int, bias: bool, wants: str, unbatched: bool):
    torch.manual_seed(5)
    x = torch.randn(*(() if unbatched else (2,)), shape[0], 5, 4, dtype=torch.float64)
    w = torch.randn(shape, dtype=torch.float64)
    b = torch.randn(shape[1] * groups, dtype=torch.float64) if bias else None
    for t, name in ((x, "x"), (w, "w"), (b, "b")):
        if t is not None and name in wants:
            t.requires_grad_()
    return x, w, b


@pytest.mark.parametrize("hyper", sorted(HYPER))
@pytest.mark.parametrize("wants", ["xwb", "x", "w", "wb", "b"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("unbatched", [False, True])
def test_gradients_are_the_transposed_convolutions(node, hyper, wants, bias, unbatched):
    if wants == "b" and not bias:
        pytest.skip("nothing requires a gradient")
    args, shape = HYPER[hyper]
    x, w, b = _tensors(shape, args[3], bias, wants if bias else wants.replace("b", ""),
                       unbatched)
    y = node.recorded(x, w, b, *args)
    assert "ConvTransposeFunction" in y.grad_fn.name() and not node.saw_grad()
    want = F.conv_transpose2d(x, w, b, *args)
    assert torch.equal(y, want) and y.shape == want.shape
    leaves = [t for t in (x, w, b) if t is not None and t.requires_grad]
    grad = torch.randn_like(y)
    got = torch.autograd.grad(y, leaves, grad)
    expected = torch.autograd.grad(want, leaves, grad)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)

    def fn(*inputs):
        it = iter(inputs)
        xi, wi, bi = (next(it) if t is not None and t.requires_grad else t for t in (x, w, b))
        return node.recorded(xi, wi, bi, *args)

    assert torch.autograd.gradcheck(fn, leaves)
    assert torch.autograd.gradgradcheck(fn, leaves)


def test_no_gradient_wanted_records_nothing(node):
    args, shape = HYPER["k4s2p1"]
    x, w, b = _tensors(shape, args[3], True, "", False)
    y = node.recorded(x, w, b, *args)
    assert y.grad_fn is None and torch.equal(y, F.conv_transpose2d(x, w, b, *args))
