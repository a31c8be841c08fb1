"""Severity: errors stop a run, warnings (data bugs the model runs through) are shown and counted."""

from __future__ import annotations

import logging

import pytest
import torch
import yaml

import tritoncheck as tc
from tritoncheck.spec.schema import spec_from_dict

SPEC_YAML = """
name: boxes
params: {max_len: 4}
fields:
  bbox: {dtype: int64, shape: [B, L, 4], min: 0, max: 1023, severity: {}}
  labels:
    dtype: int64
    shape: [B]
    min: 0
    max: 6
    severity: {above_max: warning}
rules:
  - rule: bbox <= 1000
    severity: warning
    hint: the documented grid is 0..1000
  - rule: L <= max_len
    severity: warning
"""


@pytest.fixture
def spec():
    return spec_from_dict(yaml.safe_load(SPEC_YAML), "boxes.yaml")


def batch(B=3, L=2):
    return {"bbox": torch.zeros(B, L, 4, dtype=torch.int64), "labels": torch.zeros(B, dtype=torch.int64)}


def test_warnings_leave_the_report_ok_on_every_backend(spec, backend):
    b = batch(L=5)
    b["bbox"][1, 0, 2] = 1010  # past the grid, inside the table: a warning
    b["labels"][2] = 9  # above_max marked warning
    report = tc.check(b, spec, backend=backend)
    assert report.ok and not report.errors
    assert sorted((v.code, v.field, v.severity) for v in report.warnings) == [
        ("above_max", "labels", "warning"), ("dim_bound", "bbox", "warning"), ("rule_failed", "bbox", "warning")]
    reference = tc.check(b, spec, backend="torch")
    assert [v.to_dict() for v in report.violations] == [v.to_dict() for v in reference.violations]


def test_an_error_beside_warnings_fails_and_the_headline_counts_both(spec, backend):
    b = batch()
    b["bbox"][0, 0, 0] = 2000  # past the table: an error, and past the grid: a warning
    report = tc.check(b, spec, backend=backend)
    assert not report.ok
    assert [(v.code, v.severity) for v in report.errors] == [("above_max", "error")]
    assert [(v.code, v.severity) for v in report.warnings] == [("rule_failed", "warning")]
    assert str(report).splitlines()[0].startswith("1 error, 1 warning for boxes")
    assert report.to_dict()["errors"] == 1 and report.to_dict()["warnings"] == 1
    assert [v["severity"] for v in report.to_dict()["violations"]] == ["error", "warning"]


def test_strict_counts_warnings_as_errors(spec):
    b = batch()
    b["labels"][0] = 7
    assert tc.check(b, spec).ok
    strict = tc.check(b, spec, strict=True)
    assert not strict.ok and [v.severity for v in strict.violations] == ["error"]
    assert str(strict).splitlines()[0].startswith("1 violation for boxes")
    with pytest.raises(tc.BatchValidationError):
        tc.validate(b, spec, strict=True)


def test_validate_passes_warnings_and_logs_each_field_and_code_once(spec, caplog):
    b = batch()
    b["labels"][0] = 7
    with caplog.at_level(logging.DEBUG, logger="tritoncheck"):
        assert tc.validate(b, spec) is b
        assert tc.validate(b, spec) is b
    records = [r for r in caplog.records if "labels" in r.getMessage()]
    assert [r.levelno for r in records] == [logging.WARNING, logging.DEBUG]
    assert "labels <= 6" in records[0].getMessage()


def test_a_passing_report_shows_its_warnings(spec):
    b = batch()
    b["bbox"][1, 1, 3] = 1001
    report = tc.check(b, spec)
    text = str(report)
    assert text.splitlines()[0] == "batch is valid for boxes, with 1 warning (B=3 (from bbox), L=2 (from bbox))"
    assert "  warning: bbox[1, 1, 3]: bbox <= 1000 (found 1001)" in text
    assert "(warning)" in report._repr_html_()
    from rich.console import Console

    console = Console(width=80, record=True, color_system=None)
    console.print(report)
    assert "(warning)" in console.export_text()


def test_a_clean_report_is_unchanged(spec):
    report = tc.check(batch(), spec)
    assert report.ok and not report.violations and str(report).startswith("batch is valid for boxes (")


@pytest.mark.parametrize("field_yaml, match", [
    ("{dtype: int64, shape: [B], max: 6, severity: {dtype: warning}}", "severity: 'dtype' is not a code"),
    ("{dtype: int64, shape: [B], max: 6, severity: {above_max: fatal}}", "fields.labels.severity.above_max"),
])
def test_a_bad_field_severity_is_a_spec_error_naming_the_key(tmp_path, field_yaml, match):
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: bad\nfields:\n  labels: {field_yaml}\n")
    with pytest.raises(tc.SpecError, match=match):
        tc.load_spec(path)


def test_a_bad_rule_severity_is_a_spec_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nfields:\n  x: {dtype: int64, shape: [B]}\nrules:\n  - {rule: x >= 0, severity: info}\n")
    with pytest.raises(tc.SpecError, match=r"rules\.0\.severity"):
        tc.load_spec(path)


class Rows(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


@pytest.mark.parametrize("strict", [False, True])
def test_skip_drops_errors_only_unless_strict(spec, tmp_path, strict):
    rows = [{"bbox": torch.zeros(2, 4, dtype=torch.int64), "labels": torch.tensor(label)} for label in (0, 8, -1, 1)]
    collate = tc.ValidatingCollate(spec, on_error="skip", log_dir=tmp_path, strict=strict)
    out = collate(rows)  # row 1: a warning (label 8); row 2: an error (label -1)
    kept = [0, 3] if strict else [0, 1, 3]
    assert out["labels"].tolist() == [rows[i]["labels"].item() for i in kept]
    assert len(list(tmp_path.glob("*.json"))) == (2 if strict else 1)
