"""find_problem must flag exactly the calls PyTorch rejects (the op then lets ATen raise)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from deconv_patch.arguments import ConvTransposeArgs, find_problem, fits_int32, pair
from tests.cases import INVALID, random_case

r = torch.randn


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_call_is_flagged_and_pytorch_rejects_it(name):
    x, w, b, kw = INVALID[name]
    with pytest.raises(RuntimeError):
        F.conv_transpose2d(x, w, b, **kw)
    args = ConvTransposeArgs.from_values(**kw)
    assert find_problem(x, w, b, args) is not None


@pytest.mark.parametrize("seed", range(150))
def test_valid_random_config_is_not_flagged(seed):
    case = random_case(seed, dtypes=(torch.float32,))
    x, w, b = case.make("cpu", seed)
    assert find_problem(x, w, b, case.args) is None, str(case)
    out = F.conv_transpose2d(x, w, b, case.args.stride, case.args.padding,
                             case.args.output_padding, case.args.groups, case.args.dilation)
    assert tuple(out.shape[-2:]) == case.args.output_hw(case.hw, case.kernel)


def test_output_padding_below_dilation_is_valid():
    x, w = r(2, 4, 4, 4), r(4, 3, 3, 3)
    args = ConvTransposeArgs.from_values(stride=2, output_padding=2, dilation=3)
    assert find_problem(x, w, None, args) is None
    F.conv_transpose2d(x, w, None, 2, 0, 2, 1, 3)


def test_pair_and_int32_limits():
    assert pair(3) == (3, 3) and pair([2]) == (2, 2) and pair((1, 4)) == (1, 4)
    with pytest.raises(RuntimeError):
        pair((1, 2, 3))
    x, w = r(1, 2, 4, 4), r(2, 2, 3, 3)
    assert fits_int32(x, w, ConvTransposeArgs.from_values(stride=2))
    assert not fits_int32(x, w, ConvTransposeArgs.from_values(stride=2**31))


@pytest.mark.parametrize("stride", [1, 2, 4, 7, (1, 3)])
@pytest.mark.parametrize("kernel", [(4, 4), (3, 5), (1, 1)])
def test_kernel_view_of_a_1x1_input_takes_the_kernel_as_stride(stride, kernel):
    """A 1 x 1 input never uses its stride: the view runs the layer as k == stride, with the
    same output size and the same values as PyTorch computes with the stride as given."""
    args = ConvTransposeArgs.from_values(stride=stride)
    view = args.kernel_view((1, 1), kernel)
    assert view.stride == kernel
    assert (view.padding, view.output_padding, view.dilation, view.groups) == \
        (args.padding, args.output_padding, args.dilation, args.groups)
    assert view.output_hw((1, 1), kernel) == args.output_hw((1, 1), kernel)
    x, w = r(3, 4, 1, 1, dtype=torch.float64), r(4, 5, *kernel, dtype=torch.float64)
    b = r(5, dtype=torch.float64)
    assert torch.equal(F.conv_transpose2d(x, w, b, view.stride),
                       F.conv_transpose2d(x, w, b, args.stride))


@pytest.mark.parametrize("in_hw, kwargs", [
    ((2, 1), {}), ((1, 2), {}), ((1, 1), {"padding": 1}), ((1, 1), {"dilation": 2}),
    ((1, 1), {"stride": 2, "output_padding": 1}), ((1, 1), {"padding": (0, 1)})])
def test_kernel_view_keeps_arguments_that_the_stride_matters_for(in_hw, kwargs):
    args = ConvTransposeArgs.from_values(**kwargs)
    assert args.kernel_view(in_hw, (4, 4)) is args
