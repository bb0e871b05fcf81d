"""deconv_patch: faster transposed convolutions for PyTorch models, same results.

    import deconv_patch
    fast = deconv_patch.FastConvTranspose2d.from_module(nn.ConvTranspose2d(64, 32, 4, 2, 1))
    y = torch.ops.deconv_patch.conv_transpose2d(x, w, b, stride, padding, output_padding,
                                                groups, dilation)
"""

from ._version import __version__
from .extension import ExtensionUnavailableError
from .modules import FastConvTranspose2d
from .ops import FallbackWarning, conv_transpose2d
from .swap import swap_conv_transpose2d

__all__ = [
    "__version__",
    "ExtensionUnavailableError",
    "FallbackWarning",
    "FastConvTranspose2d",
    "conv_transpose2d",
    "swap_conv_transpose2d",
]
