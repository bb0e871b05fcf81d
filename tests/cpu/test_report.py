"""ValidationReport output: terminal table, JSON round trip + schema doc, Markdown, HTML."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from deconv_patch.cli.demo import DemoGenerator
from deconv_patch.modules import FastConvTranspose2d
from deconv_patch.validation.report import (
    SCHEMA_VERSION,
    Environment,
    LayerResult,
    OutputSet,
    SpeedComparison,
    TensorComparison,
    TimingStats,
    Tolerances,
    ValidationReport,
)
from deconv_patch.swap import swap_conv_transpose2d
from deconv_patch.validation import validate

SCHEMA_DOC = Path(__file__).resolve().parents[2] / "docs" / "report-schema.md"


class Skewed(FastConvTranspose2d):
    def forward(self, input, output_size=None):
        return super().forward(input, output_size) * 1.01


def _report(skew: bool = False) -> ValidationReport:
    original = DemoGenerator(latent=16, width=8).eval()
    patched = copy.deepcopy(original)
    swap_conv_transpose2d(patched)
    if skew:
        old = patched.net[3]
        new = Skewed.from_module(old)
        new.__class__ = Skewed
        patched.net[3] = new
    return validate(original, patched, torch.randn(4, 16, 1, 1), random_inputs=1)


def _timing(median: float) -> TimingStats:
    samples = [median * f for f in (0.9, 0.95, 1.0, 1.05, 1.3)]
    return TimingStats.from_samples(samples)


def _with_fake_speed(report: ValidationReport) -> ValidationReport:
    """The CPU report plus made-up timings, to exercise the speed fields' formatting."""
    report = copy.deepcopy(report)
    for i, layer in enumerate(report.layers):
        layer.forward = SpeedComparison(_timing(0.2 + i * 0.1), _timing(0.1 + i * 0.08))
    report.forward = SpeedComparison(_timing(1.5), _timing(1.0), mode="cuda_graph")
    report.speed_skipped_reason = None
    return report


def test_timing_stats_from_samples():
    t = TimingStats.from_samples([4.0, 1.0, 3.0, 2.0, 10.0])
    assert (t.median_ms, t.min_ms, t.max_ms, t.reps) == (3.0, 1.0, 10.0, 5)
    assert (t.p25_ms, t.p75_ms) == (2.0, 4.0)
    assert t.mean_ms == 4.0 and t.stdev_ms == pytest.approx(3.5355339, rel=1e-6)
    assert SpeedComparison(_timing(2.0), _timing(1.0)).speedup == pytest.approx(2.0)
    assert SpeedComparison(None, _timing(1.0)).speedup is None


def test_json_round_trip(tmp_path):
    report = _with_fake_speed(_report(skew=True))
    path = tmp_path / "report.json"
    text = report.to_json(path)
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION == 1
    assert data["passed"] is False and data["verdict"].startswith("FAIL")
    assert data["layers"][1]["name"] == "net.3"
    assert data["layers"][1]["comparisons"][0]["max_rel_diff"] == pytest.approx(0.01, rel=1e-3)
    loaded = ValidationReport.from_json(path)
    assert loaded == report
    assert ValidationReport.from_json(text) == report
    assert isinstance(loaded.layers[0], LayerResult)
    assert isinstance(loaded.layers[0].forward.original, TimingStats)
    assert loaded.forward.speedup == pytest.approx(1.5)
    assert loaded.passed is False and str(loaded) == str(report)


def test_json_refuses_newer_schema():
    data = json.loads(_report().to_json())
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="schema_version"):
        ValidationReport.from_dict(data)


def test_schema_doc_lists_every_field():
    doc = SCHEMA_DOC.read_text()
    assert "`schema_version`: 1" in doc
    for cls in (ValidationReport, Environment, Tolerances, OutputSet, LayerResult,
                TensorComparison, SpeedComparison, TimingStats):
        for f in dataclasses.fields(cls):
            assert f"`{f.name}`" in doc, f"{cls.__name__}.{f.name} is not documented"


def test_terminal_table_is_aligned_and_has_verdict():
    report = _with_fake_speed(_report(skew=True))
    text = str(report)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("layer "))
    table = []
    for line in lines[header:]:
        if not line:
            break
        table.append(line)
    # the dashed separator fixes the column starts; every value column ends at the same place
    ends = [m.end() for m in re.finditer(r"-+", table[1])]
    for row in table[2:]:
        for end in ends[2:]:
            assert row[end - 1] != " ", (row, end)
    names = [row.split()[0] for row in table[2:]]
    assert names[:4] == ["net.0", "net.3", "net.6", "net.9"]
    assert "end-to-end" in names and "sum" in names
    assert "1.50x" in text
    assert lines[-1].startswith("FAIL: layer net.3")
    assert "patched error vs float64" in lines[-1]


def test_markdown_has_table_and_verdict():
    md = _report().to_markdown()
    assert md.startswith("# deconv_patch validation report")
    assert "**PASS:" in md
    rows = [line for line in md.splitlines() if line.startswith("| net.")]
    assert [r.split("|")[1].strip() for r in rows] == ["net.0", "net.3", "net.6", "net.9"]
    assert "Speed not measured" in md


def test_every_format_returns_its_text_and_writes_it_to_a_path(tmp_path):
    """to_markdown, to_html and to_json share one signature: no path returns the text, a path
    also writes it there (JSON adds the final newline a text file ends with)."""
    report = _report(skew=bool(torch.rand(()) < 0.5))
    for name, end in (("to_markdown", ""), ("to_html", ""), ("to_json", "\n")):
        render = getattr(report, name)
        text = render()
        assert isinstance(text, str) and text
        path = tmp_path / f"report.{name}"
        assert render(path) == text and path.read_text(encoding="utf-8") == text + end, name
        assert render(path=str(tmp_path / "again")) == text
        assert (tmp_path / "again").read_text(encoding="utf-8") == text + end
    md = (tmp_path / "report.to_markdown").read_text(encoding="utf-8")
    assert md.startswith("# deconv_patch validation report") and report.verdict in md


def test_html_is_self_contained_and_names_every_layer(tmp_path):
    report = _report(skew=True)
    path = tmp_path / "report.html"
    text = report.to_html(path)
    assert path.read_text() == text
    for layer in report.layers:
        assert layer.name in text
    assert text.count("<svg") == 1 and "<script" not in text
    assert not re.search(r"(src|href)\s*=", text)  # nothing fetched
    assert re.findall(r"https?://[^'\"]+", text) == ["http://www.w3.org/2000/svg"]
    assert "FAIL" in text and "class='verdict fail'" in text
    assert "<title>patched" in text  # error markers
    fast = _with_fake_speed(_report()).to_html()
    assert "class='verdict pass'" in fast and "1.50x" in fast and "<rect" in fast
