"""deconv_patch: faster transposed convolutions for PyTorch models, same results.

    import deconv_patch
    fast_model = deconv_patch.optimize(model, example_inputs)      # the model itself, patched; BN + activation fused
    report = deconv_patch.validate(model, fast_model, example_inputs)
    print(report)                                                # accuracy + speed, per layer
    fast = deconv_patch.FastConvTranspose2d.from_module(nn.ConvTranspose2d(64, 32, 4, 2, 1))
    y = torch.ops.deconv_patch.conv_transpose2d(x, w, b, stride, padding, output_padding,
                                                groups, dilation)
    y = deconv_patch.conv_transpose2d_fused(x, w, b, 2, 1, scale=s, shift=t, activation="relu")
"""

from ._version import __version__
from .checkpoint import load
from .exit_codes import ExitCode
from .kernels.extension import ExtensionUnavailableError
from .modules import FastConvTranspose2d, compile_together
from .ops import FallbackWarning, conv_transpose2d, conv_transpose2d_fused
from .optimize import optimize
from .kernels.planner import use_variant
from .validation.report import (
    Environment,
    LayerResult,
    OutputSet,
    SpeedComparison,
    TensorComparison,
    TimingStats,
    Tolerances,
    ValidationReport,
)
from .summary import LayerPatch, PatchSummary, summary
from .swap import swap_conv_transpose2d
from .validation import validate

__all__ = [
    "__version__",
    "Environment",
    "ExitCode",
    "ExtensionUnavailableError",
    "FallbackWarning",
    "FastConvTranspose2d",
    "LayerPatch",
    "LayerResult",
    "OutputSet",
    "PatchSummary",
    "SpeedComparison",
    "TensorComparison",
    "TimingStats",
    "Tolerances",
    "ValidationReport",
    "compile_together",
    "conv_transpose2d",
    "conv_transpose2d_fused",
    "load",
    "optimize",
    "summary",
    "swap_conv_transpose2d",
    "use_variant",
    "validate",
]
