"""What `deconv_patch.optimize` did to a model: one row per patched layer, printable as a table,
and every layer or fusion it left out, with why.

The summary travels with the patched model (attribute `_deconv_patch_summary`, copied and
pickled with it), so `deconv_patch.summary(model)` works on whatever `optimize` returned.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, TextIO, Tuple

from torch import nn

SUMMARY_ATTR = "_deconv_patch_summary"

PATH_PATCHED = "in-place"
PATH_NONE = "none"

# Shown under summaries with fusion on, so nobody expects more (or less) than what fusion does.
FUSION_NOTE = (
    "fused chains run fused only in eval mode without gradients: the BatchNorm2d folded into a "
    "copy of the conv weights/bias, the activation in the conv kernel's epilogue; parameters and "
    "state_dict stay the model's own."
)

# Shown under every summary with patched layers: where PyTorch's own convolution still runs,
# by optimize's kernels_in_training (None, the default; False; True).
_RECORDED_CALLS = ("calls that autograd records (training steps, or inference outside "
                   "torch.no_grad() / torch.inference_mode()) run the convolution "
                   "nn.ConvTranspose2d runs")
_UNRECORDED_CALLS = "deconv_patch's kernels run the calls without gradients."
TRAINING_DEFAULT_NOTE = (
    f"{_RECORDED_CALLS}, except in depthwise and grouped layers planned on the grouped kernel, "
    "in layers cuDNN has no kernel for (output_padding >= stride) unless cuBLAS may use TF32, "
    "in layers with 1-4 output channels and no groups (16-bit, or under CUDA autocast), "
    "and on Hopper in fp32 without TF32 in layers without groups whose input gradient runs on "
    "gemm_phase_tma's kernel (NCHW calls from about 10^9 multiply-adds or sums of 4,096 "
    "products on), which train faster on ours: their recorded calls run the planned kernels, "
    "forward and backward; TF32 calls from 2^33 (8.6 x 10^9) multiply-adds on (kernel == "
    "stride; other layers from 1.5 x 2^33) and 16-bit kernel == stride calls from 2^32 on run "
    "our forward with PyTorch's backward; "
    f"{_UNRECORDED_CALLS}"
)
TRAINING_NOTE = f"{_RECORDED_CALLS}; {_UNRECORDED_CALLS}"
TRAINING_KERNELS_NOTE = (
    "kernels_in_training: calls that autograd records run deconv_patch's forward kernels with "
    "the planned backward, except in layers with a fused activation and routed "
    "F.conv_transpose2d calls (PyTorch's convolution)."
)


class PatchWarning(UserWarning):
    """optimize() left a transposed convolution on PyTorch or declined a fusion (the summary
    lists each with its reason)."""

IntPair = Tuple[int, int]


@dataclass(frozen=True)
class LayerPatch:
    """One patched transposed convolution.

    `kind` is "module" (an nn.ConvTranspose2d became a FastConvTranspose2d; `name` is its
    qualified name) or "function" (F.conv_transpose2d calls in a module's forward now call our
    op; `name` is "<module>.forward"). Shape fields are None for functional calls whose weight is computed at run time.
    """

    name: str
    kind: str
    in_channels: Optional[int]
    out_channels: Optional[int]
    kernel_size: Optional[IntPair]
    stride: Optional[IntPair]
    padding: Optional[IntPair]
    output_padding: Optional[IntPair]
    dilation: Optional[IntPair]
    groups: Optional[int]
    bias: Optional[bool]
    fused: str = "-"
    backend: str = "?"
    calls: int = 1
    # what a call autograd records runs (FastConvTranspose2d.training_backend)
    training: str = "?"


@dataclass(frozen=True)
class PatchSummary:
    """How a model was patched: `path` is "in-place" (the model's own modules were patched) or
    "none"; `reason` says why in one line. `skipped`: layers `filter_fn` kept on PyTorch;
    `left`: (layer, reason) for transposed convolutions that stay on PyTorch; `declined`:
    (layer, reason) for fusions not made."""

    path: str
    reason: str
    layers: Tuple[LayerPatch, ...] = ()
    skipped: Tuple[str, ...] = ()
    notes: Tuple[str, ...] = ()
    validation: Any = None
    left: Tuple[Tuple[str, str], ...] = ()
    declined: Tuple[Tuple[str, str], ...] = ()

    @property
    def num_patched(self) -> int:
        return len(self.layers)

    @property
    def num_fused(self) -> int:
        return sum(1 for layer in self.layers if layer.fused != "-")

    def table(self) -> str:
        """The summary as a fixed-width text table with a header and notes."""
        return format_table(self)

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> dict:
        """Plain data (for JSON); the validation report is stringified."""
        data = dataclasses.asdict(dataclasses.replace(self, validation=None))
        data["validation"] = None if self.validation is None else str(self.validation)
        return data


def _pair(value: Optional[Sequence[int]]) -> str:
    if value is None:
        return "?"
    a, b = value
    return str(a) if a == b else f"{a}x{b}"


def _cell(value: Any) -> str:
    return "?" if value is None else str(value)


_COLUMNS = ("layer", "kind", "in", "out", "k", "s", "p", "op", "d", "g", "bias", "calls", "fused",
            "backend", "training")


def _row(layer: LayerPatch) -> List[str]:
    return [
        layer.name, layer.kind, _cell(layer.in_channels), _cell(layer.out_channels),
        _pair(layer.kernel_size), _pair(layer.stride), _pair(layer.padding),
        _pair(layer.output_padding), _pair(layer.dilation), _cell(layer.groups),
        _cell(layer.bias), str(layer.calls), layer.fused, layer.backend, layer.training,
    ]


def format_table(summary: PatchSummary) -> str:
    """Header line, one row per layer, then skipped layers and notes."""
    lines = [f"deconv_patch: path={summary.path} ({summary.reason}); "
             f"{summary.num_patched} layer(s) patched, {summary.num_fused} with BN/activation fused"]
    if summary.layers:
        rows = [list(_COLUMNS)] + [_row(layer) for layer in summary.layers]
        widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
        for index, row in enumerate(rows):
            lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
            if index == 0:
                lines.append("  ".join("-" * width for width in widths))
    if summary.skipped:
        lines.append(f"skipped by filter_fn: {', '.join(summary.skipped)}")
    for name, why in summary.left:
        lines.append(f"left on PyTorch: {name}: {why}")
    for name, why in summary.declined:
        lines.append(f"not fused: {name}: {why}")
    for note in summary.notes:
        lines.append(f"note: {note}")
    if summary.validation is not None:
        lines.append(f"validation: {summary.validation}")
    return "\n".join(lines)


def attach(model: nn.Module, summary: PatchSummary) -> None:
    """Stores `summary` on `model`."""
    object.__setattr__(model, SUMMARY_ATTR, summary)


def get_summary(model: nn.Module) -> Optional[PatchSummary]:
    """The summary `optimize` attached to `model`, or None."""
    found = model.__dict__.get(SUMMARY_ATTR)
    return found if isinstance(found, PatchSummary) else None


def refreshed(summary: PatchSummary, model: nn.Module) -> PatchSummary:
    """`summary` with each module layer's backend re-read from the model's current device/dtype.

    The backend depends on where the weights live now, not where they were when patching.
    """
    layers = []
    for layer in summary.layers:
        backend, training = layer.backend, layer.training
        if layer.kind == "module":
            try:
                module = model.get_submodule(layer.name)
                backend = str(module.backend)
                training = str(getattr(module, "training_backend", training))
            except AttributeError:
                pass
        layers.append(dataclasses.replace(layer, backend=backend, training=training))
    return dataclasses.replace(summary, layers=tuple(layers))


def summary(model: nn.Module, *, file: Optional[TextIO] = None, quiet: bool = False) -> PatchSummary:
    """Prints the patch table of a model returned by `deconv_patch.optimize` and returns it.

    Backends are re-read from the model, so the table is right after `.to("cuda")` too.
    """
    found = get_summary(model)
    if found is None:
        raise ValueError(
            "this model carries no deconv_patch summary; it was not returned by "
            "deconv_patch.optimize"
        )
    current = refreshed(found, model)
    if not quiet:
        print(current.table(), file=file if file is not None else sys.stdout)
    return current


def layer_from_module(name: str, module: nn.ConvTranspose2d, fused: str = "-",
                      calls: int = 1) -> LayerPatch:
    """The summary row for a (Fast)ConvTranspose2d module."""
    backend = getattr(module, "backend", "?")
    training = getattr(module, "training_backend", "?")
    return LayerPatch(
        name=name, kind="module", in_channels=module.in_channels,
        out_channels=module.out_channels, kernel_size=tuple(module.kernel_size),
        stride=tuple(module.stride), padding=tuple(module.padding),
        output_padding=tuple(module.output_padding), dilation=tuple(module.dilation),
        groups=module.groups, bias=module.bias is not None, fused=fused, backend=str(backend),
        calls=calls, training=str(training),
    )


def with_notes(summary: PatchSummary, *notes: str) -> PatchSummary:
    """A copy with extra notes appended (dataclasses are frozen)."""
    return dataclasses.replace(summary, notes=tuple(summary.notes) + tuple(notes))


__all__ = [
    "FUSION_NOTE", "LayerPatch", "PATH_NONE", "PATH_PATCHED", "PatchSummary", "PatchWarning",
    "TRAINING_DEFAULT_NOTE", "TRAINING_KERNELS_NOTE", "TRAINING_NOTE", "attach",
    "format_table", "get_summary", "layer_from_module", "refreshed", "summary", "with_notes",
]
