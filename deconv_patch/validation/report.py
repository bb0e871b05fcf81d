"""The validation report: plain dataclasses, a terminal table, JSON (versioned) and Markdown.

Everything here is data: `deconv_patch.validation.validate` fills it in, this module only
formats, serialises and judges it. The JSON layout is documented in docs/report-schema.md; bump
SCHEMA_VERSION whenever a field changes meaning or disappears (adding fields is compatible).

The records the report is made of (Tolerances, TensorComparison, LayerResult, ...) live in
report_records, the terminal table and Markdown in report_text, the HTML page in report_html;
this module holds ValidationReport and its JSON round trip, and every name is still importable
from here.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from .report_records import (
    _DEFAULT_ATOL_RTOL, Environment, LayerResult, OutputSet, SpeedComparison, TensorComparison,
    TimingStats, Tolerances, _sci, dtype_name, ulp,
)
from .report_text import (
    HEADERS, _flag, _markdown, _ms, _pct, _row, _speedup, _spread, _terminal, _yesno,
    environment_lines, format_table, table_rows,
)

# every name this module held before it was split into report_records (the dataclasses) and
# report_text (terminal and Markdown), private helpers included
__all__ = [
    "SCHEMA_VERSION", "_DEFAULT_ATOL_RTOL", "dtype_name", "ulp", "Tolerances", "TensorComparison",
    "TimingStats", "SpeedComparison", "LayerResult", "OutputSet", "Environment",
    "ValidationReport", "_from_data", "_sci", "_pct", "_ms", "_speedup", "_spread", "HEADERS",
    "_row", "table_rows", "format_table", "environment_lines", "_yesno", "_flag", "_terminal",
    "_markdown",
]

SCHEMA_VERSION = 1


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
