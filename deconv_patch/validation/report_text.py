"""The validation report as text: the table shared by every rendering (HEADERS, table_rows,
format_table, environment_lines; report_html uses them too), the terminal text (str(report))
and the Markdown page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence

from .report_records import Environment, SpeedComparison, TensorComparison, TimingStats, _sci

if TYPE_CHECKING:  # annotations only: deconv_patch.validation.report imports this module
    from .report import ValidationReport


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
