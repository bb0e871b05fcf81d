"""The validation report: plain dataclasses, a terminal table, JSON (versioned) and Markdown.

Everything here is data: `deconv_patch.validation.validate` fills it in, this module only
formats, serialises and judges it. The JSON layout is documented in docs/report-schema.md; bump
SCHEMA_VERSION whenever a field changes meaning or disappears (adding fields is compatible).
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import torch

SCHEMA_VERSION = 1

# atol / rtol defaults per dtype: torch.testing.assert_close's, so "mismatch" means what PyTorch
# users already expect from that function.
_DEFAULT_ATOL_RTOL = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-5, 1.3e-6),
    "float16": (1e-5, 1e-3),
    "bfloat16": (1e-5, 1.6e-2),
}


def dtype_name(dtype: Union[torch.dtype, str, None]) -> str:
    """'float32' for torch.float32 (and for 'float32'); '' for None."""
    if dtype is None:
        return ""
    return str(dtype).replace("torch.", "")


def ulp(dtype: Union[torch.dtype, str], magnitude: float) -> float:
    """Spacing of `dtype` floats at `magnitude` (0 for non-float dtypes): the rounding unit."""
    name = dtype_name(dtype)
    torch_dtype = getattr(torch, name, None)
    if not isinstance(torch_dtype, torch.dtype) or not torch_dtype.is_floating_point:
        return 0.0
    info = torch.finfo(torch_dtype)
    if not math.isfinite(magnitude) or magnitude < info.tiny:
        return float(info.tiny) * float(info.eps)  # subnormal spacing
    return float(info.eps) * 2.0 ** math.floor(math.log2(magnitude))


@dataclass
class Tolerances:
    """The thresholds behind PASS/FAIL; None fields take the dtype's default (see `resolved`).

    * mismatch: |patched - original| > atol + rtol * |original| (torch.testing's rule);
    * relative diff: |patched - original| / max(|original|, rel_floor);
    * accuracy gate (needs the float64 reference): patched error vs float64
      <= fp64_factor * original error vs float64 + fp64_ulps * ulp(dtype, max |float64|);
    * max_mismatch_fraction: None gates mismatches only where no float64 reference exists
      (then none are allowed), since a more accurate kernel legitimately "mismatches" a less
      accurate PyTorch (e.g. cuDNN with TF32); a number gates every comparison;
    * min_speedup: if set, end-to-end forward speedup below it fails the report.
    """

    atol: Optional[float] = None
    rtol: Optional[float] = None
    rel_floor: Optional[float] = None
    fp64_factor: float = 2.0
    fp64_ulps: float = 1.0
    max_mismatch_fraction: Optional[float] = None
    min_speedup: Optional[float] = None

    def resolved(self, dtype: Union[torch.dtype, str]) -> "Tolerances":
        """A copy with atol/rtol/rel_floor filled in for `dtype`."""
        atol, rtol = _DEFAULT_ATOL_RTOL.get(dtype_name(dtype), (0.0, 0.0))
        atol = self.atol if self.atol is not None else atol
        rtol = self.rtol if self.rtol is not None else rtol
        floor = self.rel_floor if self.rel_floor is not None else (atol or 1e-12)
        return dataclasses.replace(self, atol=atol, rtol=rtol, rel_floor=floor)

    def describe(self) -> str:
        text = (f"mismatch if |diff| > {_sci(self.atol)} + {_sci(self.rtol)}*|orig|; "
                f"rel diff floor {_sci(self.rel_floor)}; patched err vs fp64 <= "
                f"{self.fp64_factor:g} x original's + {self.fp64_ulps:g} ulp")
        if self.max_mismatch_fraction is not None:
            text += f"; mismatches <= {self.max_mismatch_fraction:.3%}"
        if self.min_speedup is not None:
            text += f"; end-to-end speedup >= {self.min_speedup:g}x"
        return text


@dataclass
class TensorComparison:
    """One tensor of the original vs the same tensor of the patched model (and float64)."""

    path: str  # where in the (nested) output: "" for a lone tensor, "[0]['boxes']", ...
    shape: List[int]
    dtype: str
    numel: int
    max_abs_diff: Optional[float] = None  # over elements finite on both sides
    max_rel_diff: Optional[float] = None  # denominator max(|original|, rel_floor)
    rel_floor: float = 0.0
    mismatches: int = 0  # outside atol/rtol, plus every element non-finite on either side
    bit_identical: float = 0.0  # fraction of elements with identical bits
    nan_original: int = 0
    inf_original: int = 0
    nan_patched: int = 0
    inf_patched: int = 0
    max_abs_fp64: Optional[float] = None  # max |float64 reference|
    original_err_fp64: Optional[float] = None  # max |original - float64|
    # TF32 allowed: max |float64 run on TF32-rounded conv operands - float64|, the error TF32
    # itself brings (the limit uses the larger of this and original_err_fp64)
    tf32_err_fp64: Optional[float] = None
    patched_err_fp64: Optional[float] = None  # max |patched - float64|
    fp64_limit: Optional[float] = None  # the largest patched_err_fp64 that passes
    problems: List[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def mismatch_fraction(self) -> float:
        return self.mismatches / self.numel if self.numel else 0.0

    @property
    def nonfinite(self) -> bool:
        return bool(self.nan_original or self.inf_original or self.nan_patched
                    or self.inf_patched)


@dataclass
class TimingStats:
    """Milliseconds per call over `reps` timed repetitions (CUDA events)."""

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    p25_ms: float
    p75_ms: float
    stdev_ms: float
    reps: int

    @classmethod
    def from_samples(cls, samples: Sequence[float]) -> "TimingStats":
        s = sorted(float(x) for x in samples)
        n = len(s)

        def quantile(q: float) -> float:
            pos = q * (n - 1)
            lo = math.floor(pos)
            hi = min(lo + 1, n - 1)
            return s[lo] + (s[hi] - s[lo]) * (pos - lo)

        mean = sum(s) / n
        var = sum((x - mean) ** 2 for x in s) / (n - 1) if n > 1 else 0.0
        return cls(quantile(0.5), mean, s[0], s[-1], quantile(0.25), quantile(0.75),
                   math.sqrt(var), n)


@dataclass
class SpeedComparison:
    """Both sides timed in the same process, interleaved; speedup = original / patched median."""

    original: Optional[TimingStats]
    patched: Optional[TimingStats]
    mode: str = "eager"  # or "cuda_graph"
    note: str = ""

    @property
    def speedup(self) -> Optional[float]:
        if self.original is None or self.patched is None or self.patched.median_ms <= 0:
            return None
        return self.original.median_ms / self.patched.median_ms


@dataclass
class LayerResult:
    """One patched layer: accuracy on the same input in both models, and its own time."""

    name: str
    original_type: Optional[str]  # None: no module of this name in the original
    patched_type: str
    variant: Optional[str] = None  # the patched module's `backend`, if it has one
    calls: int = 0  # times the layer ran in one forward of the patched model
    fused_with: List[str] = field(default_factory=list)  # original modules folded into it
    input_shapes: List[List[int]] = field(default_factory=list)
    comparisons: List[TensorComparison] = field(default_factory=list)  # one per output tensor
    in_model_max_abs_diff: Optional[float] = None  # diff inside the full run (errors propagate)
    forward: Optional[SpeedComparison] = None
    forward_backward: Optional[SpeedComparison] = None
    notes: List[str] = field(default_factory=list)

    @property
    def matched(self) -> bool:
        return self.original_type is not None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.comparisons)


@dataclass
class OutputSet:
    """The final outputs for one set of inputs (the user's, or a fresh random draw)."""

    label: str
    comparisons: List[TensorComparison] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)  # structure: keys, lengths, non-tensors

    @property
    def passed(self) -> bool:
        return not self.problems and all(c.passed for c in self.comparisons)


@dataclass
class Environment:
    """Where and how the validation ran, so two reports can be compared fairly."""

    device: str
    dtype: str
    torch_version: str
    deconv_patch_version: str
    python_version: str
    platform: str
    cuda_version: Optional[str] = None
    cudnn_version: Optional[int] = None
    gpu_name: Optional[str] = None
    gpu_capability: Optional[str] = None
    tf32_matmul: Optional[bool] = None
    tf32_cudnn: Optional[bool] = None
    float32_matmul_precision: Optional[str] = None
    cudnn_benchmark: Optional[bool] = None
    deterministic_algorithms: Optional[bool] = None
    kernels_available: Optional[bool] = None
    input_shapes: Dict[str, List[int]] = field(default_factory=dict)
    input_dtypes: Dict[str, str] = field(default_factory=dict)
    variants: Dict[str, str] = field(default_factory=dict)  # layer -> backend
    fusion: Optional[bool] = None
    fusion_details: List[str] = field(default_factory=list)


@dataclass
class ValidationReport:
    """Accuracy and speed of `patched` against `original`, end to end and per patched layer."""

    environment: Environment
    tolerances: Tolerances
    outputs: List[OutputSet] = field(default_factory=list)
    layers: List[LayerResult] = field(default_factory=list)
    forward: Optional[SpeedComparison] = None
    forward_backward: Optional[SpeedComparison] = None
    speed_skipped_reason: Optional[str] = None
    failures: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    settings: Dict[str, Any] = field(default_factory=dict)  # warmup, reps, seed, ...
    created: str = ""
    schema_version: int = SCHEMA_VERSION

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def verdict(self) -> str:
        """One line: PASS/FAIL and why."""
        if self.failures:
            more = f" (+{len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
            return f"FAIL: {self.failures[0]}{more}"
        parts = [f"{len(self.layers)} layer(s) and {sum(len(o.comparisons) for o in self.outputs)}"
                 " output tensor(s) within tolerance, no NaN/Inf"]
        if any(c.patched_err_fp64 is not None for c in self._all_comparisons()):
            parts.append("patched is as accurate as PyTorch against float64")
        if self.forward is not None and self.forward.speedup is not None:
            parts.append(f"end-to-end forward {self.forward.speedup:.2f}x")
        return "PASS: " + "; ".join(parts)

    def _all_comparisons(self) -> List[TensorComparison]:
        comps = [c for o in self.outputs for c in o.comparisons]
        return comps + [c for layer in self.layers for c in layer.comparisons]

    # ------------------------------------------------------------------ serialisation

    def to_dict(self) -> Dict[str, Any]:
        data = dataclasses.asdict(self)
        data["passed"] = self.passed
        data["verdict"] = self.verdict
        return data

    def to_json(self, path: Union[str, Path, None] = None, indent: int = 2) -> str:
        """The report as JSON text (schema in docs/report-schema.md); also written to `path`."""
        text = json.dumps(self.to_dict(), indent=indent, allow_nan=False)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ValidationReport":
        version = data.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ValueError(f"unsupported report schema_version {version!r} "
                             f"(this deconv_patch reads up to {SCHEMA_VERSION})")
        return _from_data(cls, data)

    @classmethod
    def from_json(cls, source: Union[str, Path]) -> "ValidationReport":
        """Reads JSON text, or a file when `source` is a Path or names an existing file."""
        if isinstance(source, Path) or not str(source).lstrip().startswith("{"):
            source = Path(source).read_text(encoding="utf-8")
        return cls.from_dict(json.loads(source))

    def to_markdown(self, path: Union[str, Path, None] = None) -> str:
        """The report as Markdown text; also written to `path`."""
        text = _markdown(self)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    def to_html(self, path: Union[str, Path, None] = None) -> str:
        """One self-contained HTML page (tables + inline SVG chart); also written to `path`."""
        from .report_html import render_html

        text = render_html(self)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    def __str__(self) -> str:
        return _terminal(self)


# ---------------------------------------------------------------------- JSON -> dataclasses


def _from_data(tp: Any, data: Any) -> Any:
    """Rebuilds nested dataclasses / Optional / List / Dict values from plain JSON data."""
    if data is None:
        return None
    origin = typing.get_origin(tp)
    if origin is Union:
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        return _from_data(options[0], data) if len(options) == 1 else data
    if origin in (list, List):
        (item,) = typing.get_args(tp) or (Any,)
        return [_from_data(item, x) for x in data]
    if origin in (dict, Dict):
        _, value = typing.get_args(tp) or (Any, Any)
        return {k: _from_data(value, v) for k, v in data.items()}
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        kwargs = {f.name: _from_data(hints[f.name], data[f.name])
                  for f in dataclasses.fields(tp) if f.name in data}
        return tp(**kwargs)
    return data


# ---------------------------------------------------------------------- formatting helpers


def _sci(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    return f"{x:.2e}"


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100.0 * x:.2f}%"


def _ms(t: Optional[TimingStats]) -> str:
    return "-" if t is None else f"{t.median_ms:.4f}"


def _speedup(s: Optional[SpeedComparison]) -> str:
    return "-" if s is None or s.speedup is None else f"{s.speedup:.2f}x"


def _spread(t: Optional[TimingStats]) -> str:
    return "-" if t is None else f"{t.p75_ms - t.p25_ms:.4f}"


HEADERS = ["layer", "variant", "max|diff|", "max rel", "mismatch", "bit-ident",
           "orig-vs-fp64", "patch-vs-fp64", "limit", "acc", "orig ms", "patch ms", "speedup"]


def _row(label: str, variant: str, c: Optional[TensorComparison],
         speed: Optional[SpeedComparison]) -> List[str]:
    if c is None:
        acc = ["-"] * 8
    else:
        status = "ok" if c.passed else ("NaN/Inf" if c.nonfinite else "FAIL")
        acc = [_sci(c.max_abs_diff), _sci(c.max_rel_diff), str(c.mismatches),
               _pct(c.bit_identical), _sci(c.original_err_fp64), _sci(c.patched_err_fp64),
               _sci(c.fp64_limit), status]
    orig = speed.original if speed else None
    patch = speed.patched if speed else None
    return [label, variant, *acc, _ms(orig), _ms(patch), _speedup(speed)]


def table_rows(report: ValidationReport) -> List[List[str]]:
    """The per-layer rows, then output rows, then the end-to-end totals (terminal & Markdown)."""
    rows: List[List[str]] = []
    for layer in report.layers:
        variant = layer.variant or "-"
        if not layer.comparisons:
            rows.append(_row(layer.name + ("" if layer.matched else " (patched only)"), variant,
                             None, layer.forward))
        for i, c in enumerate(layer.comparisons):
            label = layer.name + c.path
            rows.append(_row(label, variant, c, layer.forward if i == 0 else None))
    for out in report.outputs:
        for c in out.comparisons:
            rows.append(_row(f"output{c.path} [{out.label}]", "-", c, None))
    layer_times = [layer.forward for layer in report.layers if layer.forward is not None]
    if layer_times and all(s.original and s.patched for s in layer_times):
        total_o = sum(s.original.median_ms for s in layer_times)  # type: ignore[union-attr]
        total_p = sum(s.patched.median_ms for s in layer_times)  # type: ignore[union-attr]
        rows.append(["sum of layers", "-", *["-"] * 8, f"{total_o:.4f}", f"{total_p:.4f}",
                     f"{total_o / total_p:.2f}x" if total_p > 0 else "-"])
    if report.forward is not None:
        rows.append(_row(f"end-to-end forward ({report.forward.mode})", "-", None,
                         report.forward))
    if report.forward_backward is not None:
        rows.append(_row(f"end-to-end fwd+bwd ({report.forward_backward.mode})", "-", None,
                         report.forward_backward))
    return rows


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; text left-aligned, numbers right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, (cell, w) in enumerate(zip(cells, widths)):
            out.append(cell.ljust(w) if i < 2 else cell.rjust(w))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def environment_lines(env: Environment) -> List[str]:
    gpu = env.gpu_name or "no GPU"
    if env.gpu_capability:
        gpu += f" (sm {env.gpu_capability})"
    lines = [
        f"device {env.device}, {gpu}; torch {env.torch_version}, CUDA {env.cuda_version or '-'}, "
        f"cuDNN {env.cudnn_version or '-'}; deconv_patch {env.deconv_patch_version}; "
        f"python {env.python_version}",
        f"dtype {env.dtype}; TF32 matmul {_flag(env.tf32_matmul)}, TF32 cuDNN "
        f"{_flag(env.tf32_cudnn)}, float32 matmul precision {env.float32_matmul_precision or '-'}"
        f"; cudnn.benchmark {_flag(env.cudnn_benchmark)}; deconv_patch kernels usable here: "
        f"{_yesno(env.kernels_available)}",
        "inputs: " + (", ".join(f"{k or 'input'} {env.input_dtypes.get(k, '')}{v}"
                                for k, v in env.input_shapes.items()) or "-"),
        "fusion: " + ("unknown" if env.fusion is None else ("yes" if env.fusion else "no"))
        + (f" ({'; '.join(env.fusion_details)})" if env.fusion_details else ""),
    ]
    return lines


def _yesno(x: Optional[bool]) -> str:
    return "-" if x is None else ("yes" if x else "no")


def _flag(x: Optional[bool]) -> str:
    return "-" if x is None else ("on" if x else "off")


def _terminal(report: ValidationReport) -> str:
    env = report.environment
    parts = [f"deconv_patch validation report (schema {report.schema_version}, {report.created})"]
    parts += ["  " + line for line in environment_lines(env)]
    parts.append("  tolerances: " + report.tolerances.describe())
    parts.append("")
    parts.append(format_table(HEADERS, table_rows(report)))
    parts.append("")
    if report.speed_skipped_reason:
        parts.append(f"speed not measured: {report.speed_skipped_reason}")
    for layer in report.layers:
        for note in layer.notes:
            parts.append(f"note: {layer.name}: {note}")
    for note in report.notes:
        parts.append(f"note: {note}")
    for out in report.outputs:
        for problem in out.problems:
            parts.append(f"problem [{out.label}]: {problem}")
    if len(report.failures) > 1:
        parts.append("failures:")
        parts += [f"  - {f}" for f in report.failures]
    parts.append(report.verdict)
    return "\n".join(parts)


def _markdown(report: ValidationReport) -> str:
    def md_row(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    lines = ["# deconv_patch validation report", "",
             f"**{report.verdict}**", "",
             f"Schema {report.schema_version}, created {report.created}.", "",
             "## Environment", ""]
    lines += [f"- {line}" for line in environment_lines(report.environment)]
    lines += [f"- tolerances: {report.tolerances.describe()}", "", "## Layers and outputs", "",
              md_row(HEADERS), md_row(["---"] * len(HEADERS))]
    lines += [md_row(r) for r in table_rows(report)]
    lines.append("")
    if report.speed_skipped_reason:
        lines += [f"Speed not measured: {report.speed_skipped_reason}", ""]
    notes = [f"{layer.name}: {n}" for layer in report.layers for n in layer.notes]
    notes += report.notes + [f"[{o.label}] {p}" for o in report.outputs for p in o.problems]
    if notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    if report.failures:
        lines += ["## Failures", ""] + [f"- {f}" for f in report.failures] + [""]
    return "\n".join(lines)
