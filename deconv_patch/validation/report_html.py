"""The validation report as one self-contained HTML page: inline CSS and inline SVG, no scripts,
no fonts or images fetched, so it can be mailed, attached to CI runs and opened offline."""

from __future__ import annotations

import html
import math
from typing import List, Optional, Sequence

from .report import (
    HEADERS,
    LayerResult,
    SpeedComparison,
    TimingStats,
    ValidationReport,
    environment_lines,
    table_rows,
)

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px;color:#1d2330;
     background:#fafbfc}
h1{font-size:22px;margin:0 0 6px}h2{font-size:17px;margin:26px 0 8px}
.verdict{display:inline-block;padding:8px 14px;border-radius:6px;font-weight:600;margin:8px 0}
.pass{background:#e3f6e8;color:#17602c;border:1px solid #9fd8ae}
.fail{background:#fde8e8;color:#8a1c1c;border:1px solid #f0a8a8}
.meta{color:#5b6475;font-size:13px}
table{border-collapse:collapse;font-size:13px;background:#fff}
th,td{border:1px solid #dde1e8;padding:4px 8px;text-align:right;white-space:nowrap}
th{background:#eef1f6}td.l,th.l{text-align:left}
tr.bad td{background:#fdeeee}tr.total td{font-weight:600;background:#f3f5f9}
ul{margin:4px 0 0 18px;padding:0;font-size:13px}
.chart{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:8px}
.legend{font-size:12px;color:#5b6475;margin:4px 0}
"""

_OK, _BAD, _GREY, _BAR = "#2e8b57", "#c0392b", "#8a93a5", "#4a78c2"


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def render_html(report: ValidationReport) -> str:
    """The whole page as a string."""
    cls = "pass" if report.passed else "fail"
    parts = [
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        "<title>deconv_patch validation report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>deconv_patch validation report</h1>",
        f"<div class='meta'>schema {report.schema_version} &middot; created "
        f"{_esc(report.created)}</div>",
        f"<div class='verdict {cls}'>{_esc(report.verdict)}</div>",
        "<h2>Per-layer chart</h2>",
        _chart(report),
        "<h2>Layers and outputs</h2>",
        _main_table(report),
    ]
    timing = _timing_table(report)
    if timing:
        parts += ["<h2>Timing detail (ms per call)</h2>", timing]
    parts += ["<h2>Environment</h2>", "<ul>"]
    parts += [f"<li>{_esc(line)}</li>" for line in environment_lines(report.environment)]
    parts += [f"<li>tolerances: {_esc(report.tolerances.describe())}</li>",
              f"<li>settings: {_esc(report.settings)}</li>", "</ul>"]
    notes = _notes(report)
    if notes:
        parts += ["<h2>Notes</h2>", "<ul>"] + [f"<li>{_esc(n)}</li>" for n in notes] + ["</ul>"]
    if report.failures:
        parts += ["<h2>Failures</h2>", "<ul>"]
        parts += [f"<li>{_esc(f)}</li>" for f in report.failures] + ["</ul>"]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _notes(report: ValidationReport) -> List[str]:
    notes = []
    if report.speed_skipped_reason:
        notes.append(f"speed not measured: {report.speed_skipped_reason}")
    notes += [f"{layer.name}: {n}" for layer in report.layers for n in layer.notes]
    notes += [f"[{o.label}] {p}" for o in report.outputs for p in o.problems]
    return notes + list(report.notes)


def _main_table(report: ValidationReport) -> str:
    rows = table_rows(report)
    out = ["<table><thead><tr>"]
    out += [f"<th class='{'l' if i < 2 else ''}'>{_esc(h)}</th>" for i, h in enumerate(HEADERS)]
    out.append("</tr></thead><tbody>")
    status_col = HEADERS.index("acc")
    for row in rows:
        css = "bad" if row[status_col] not in ("ok", "-") else (
            "total" if row[0].startswith(("sum of", "end-to-end")) else "")
        out.append(f"<tr class='{css}'>")
        out += [f"<td class='{'l' if i < 2 else ''}'>{_esc(c)}</td>" for i, c in enumerate(row)]
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _timing_table(report: ValidationReport) -> str:
    entries = [(f"{layer.name} forward", layer.forward) for layer in report.layers]
    entries += [(f"{layer.name} fwd+bwd", layer.forward_backward) for layer in report.layers]
    entries += [("end-to-end forward", report.forward),
                ("end-to-end fwd+bwd", report.forward_backward)]
    entries = [(k, v) for k, v in entries if v is not None]
    if not entries:
        return ""
    head = ["what", "mode", "side", "median", "p25", "p75", "min", "max", "stdev", "reps"]
    out = ["<table><thead><tr>"] + [f"<th class='l'>{h}</th>" if i < 3 else f"<th>{h}</th>"
                                    for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for label, speed in entries:
        for side, t in (("original", speed.original), ("patched", speed.patched)):
            if t is None:
                continue
            cells = [f"{x:.4f}" for x in (t.median_ms, t.p25_ms, t.p75_ms, t.min_ms, t.max_ms,
                                          t.stdev_ms)]
            out.append("<tr>" + "".join(f"<td class='l'>{_esc(c)}</td>"
                                        for c in (label, speed.mode, side))
                       + "".join(f"<td>{c}</td>" for c in cells) + f"<td>{t.reps}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


# ---------------------------------------------------------------------- the SVG chart


def _worst_error(layer: LayerResult) -> tuple:
    """(original err vs fp64, patched err vs fp64, limit, passed) over the layer's tensors."""
    comps = [c for c in layer.comparisons if c.patched_err_fp64 is not None]
    if not comps:
        return None, None, None, layer.passed
    worst = max(comps, key=lambda c: (c.patched_err_fp64 or 0) - (c.fp64_limit or 0))
    return worst.original_err_fp64, worst.patched_err_fp64, worst.fp64_limit, layer.passed


def _chart(report: ValidationReport) -> str:
    """Rows of: layer name | speedup bar (1x line) | error markers on a log axis."""
    rows = [(layer.name, layer.forward, _worst_error(layer)) for layer in report.layers]
    if report.outputs or report.forward is not None:
        rows.append(("model output (end to end)", report.forward, _output_error(report)))
    if not rows:
        return "<p class='meta'>No patched layers found.</p>"
    name_w, bar_w, err_w, row_h, top = 190, 330, 330, 26, 34
    bar_x, err_x = name_w + 10, name_w + 10 + bar_w + 40
    width, height = err_x + err_w + 20, top + row_h * len(rows) + 30
    speedups = [s.speedup for _, s, _ in rows if s is not None and s.speedup is not None]
    smax = max([1.5] + [x * 1.1 for x in speedups])
    errors = [e for _, _, errs in rows for e in errs[:3] if e is not None and e > 0]
    lo, hi = _log_range(errors)
    svg: List[str] = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"font-family='system-ui,sans-serif' font-size='12'>",
        f"<text x='{bar_x}' y='14' font-weight='600'>speedup (original / patched, median)</text>",
        f"<text x='{err_x}' y='14' font-weight='600'>max error vs float64 (log scale)</text>",
    ]
    one_x = bar_x + bar_w * 1.0 / smax
    for i, (name, speed, errs) in enumerate(rows):
        y = top + i * row_h
        svg.append(f"<text x='{name_w}' y='{y + 16}' text-anchor='end'>{_esc(_short(name))}"
                   "</text>")
        svg.append(_speed_bar(speed, bar_x, y, bar_w, smax, report.speed_skipped_reason))
        svg.append(_error_markers(errs, err_x, y, err_w, lo, hi))
    bottom = top + row_h * len(rows)
    if speedups:
        svg.append(f"<line x1='{one_x:.1f}' y1='{top - 4}' x2='{one_x:.1f}' y2='{bottom}' "
                   "stroke='#333' stroke-dasharray='3,3'/>")
        svg.append(f"<text x='{one_x:.1f}' y='{bottom + 14}' text-anchor='middle'>1x</text>")
    decades = round(math.log10(hi) - math.log10(lo))
    for d in range(1, decades):
        gx = err_x + err_w * d / decades
        svg.insert(3, f"<line x1='{gx:.1f}' y1='{top}' x2='{gx:.1f}' y2='{bottom}' "
                      "stroke='#eef0f4'/>")
    svg.append(f"<text x='{err_x}' y='{bottom + 14}'>{lo:.0e}</text>")
    svg.append(f"<text x='{err_x + err_w}' y='{bottom + 14}' text-anchor='end'>{hi:.0e}</text>")
    svg.append("</svg>")
    legend = ("<div class='legend'>Bars: speedup of each layer run alone on its captured input "
              "(green &ge; 1x, red &lt; 1x). Markers: <b>&#9675;</b> original error vs float64, "
              "<b style='color:#2e8b57'>&#9670;</b> patched error (red when over the limit), "
              "<b>|</b> the limit.</div>")
    return f"<div class='chart'>{''.join(svg)}{legend}</div>"


def _output_error(report: ValidationReport) -> tuple:
    comps = [c for o in report.outputs for c in o.comparisons if c.patched_err_fp64 is not None]
    if not comps:
        return None, None, None, all(o.passed for o in report.outputs)
    worst = max(comps, key=lambda c: (c.patched_err_fp64 or 0) - (c.fp64_limit or 0))
    return (worst.original_err_fp64, worst.patched_err_fp64, worst.fp64_limit,
            all(o.passed for o in report.outputs))


def _short(name: str, limit: int = 28) -> str:
    return name if len(name) <= limit else "\u2026" + name[-(limit - 1):]


def _log_range(values: Sequence[float]) -> tuple:
    if not values:
        return 1e-9, 1e-3
    lo = 10.0 ** math.floor(math.log10(min(values)))
    hi = 10.0 ** math.ceil(math.log10(max(values)))
    return (lo, hi * 10.0) if hi <= lo else (lo, hi)


def _speed_bar(speed: Optional[SpeedComparison], x: float, y: float, width: float,
               smax: float, skipped: Optional[str]) -> str:
    if speed is None or speed.speedup is None:
        text = "speed not measured" if skipped else "no timing"
        return f"<text x='{x}' y='{y + 16}' fill='{_GREY}'>{text}</text>"
    s = speed.speedup
    w = max(1.0, width * min(s, smax) / smax)
    color = _OK if s >= 1.0 else _BAD
    spread = _spread_text(speed.patched)
    return (f"<rect x='{x}' y='{y + 4}' width='{w:.1f}' height='{16}' fill='{color}' "
            f"opacity='0.85'><title>{s:.3f}x {spread}</title></rect>"
            f"<text x='{x + w + 4:.1f}' y='{y + 16}'>{s:.2f}x</text>")


def _spread_text(t: Optional[TimingStats]) -> str:
    return "" if t is None else f"(patched median {t.median_ms:.4f} ms, IQR " \
        f"{t.p25_ms:.4f}-{t.p75_ms:.4f})"


def _error_markers(errs: tuple, x: float, y: float, width: float, lo: float, hi: float) -> str:
    orig, patched, limit, passed = errs
    if patched is None:
        return f"<text x='{x}' y='{y + 16}' fill='{_GREY}'>no float64 reference</text>"

    def pos(v: float) -> float:
        v = min(max(v, lo), hi)
        return x + width * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    mid = y + 12
    parts = [f"<line x1='{x}' y1='{mid}' x2='{x + width}' y2='{mid}' stroke='#e1e4ea'/>"]
    if limit is not None and limit > 0:
        lx = pos(limit)
        parts.append(f"<line x1='{lx:.1f}' y1='{y + 3}' x2='{lx:.1f}' y2='{y + 21}' "
                     f"stroke='#333' stroke-width='2'><title>limit {limit:.3e}</title></line>")
    if orig is not None:
        ox = pos(orig) if orig > 0 else x
        parts.append(f"<circle cx='{ox:.1f}' cy='{mid}' r='6' fill='none' stroke='{_GREY}' "
                     f"stroke-width='2'><title>original {orig:.3e}</title></circle>")
    px = pos(patched) if patched > 0 else x
    color = _OK if passed else _BAD
    parts.append(f"<path d='M {px:.1f} {mid - 6} L {px + 6:.1f} {mid} L {px:.1f} {mid + 6} "
                 f"L {px - 6:.1f} {mid} Z' fill='{color}'><title>patched {patched:.3e}</title>"
                 "</path>")
    return "".join(parts)
