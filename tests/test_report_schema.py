"""One versioned JSON report (issue 21): what `check --json` prints is `Report.to_dict()`, every violation
carries field, code, severity, rule, hint, count, value, index and rows, and "errors" always means the
violations of severity error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import tritoncheck as tc
from tritoncheck.report import REPORT_SCHEMA, report_json

VIOLATION_KEYS = ["field", "code", "severity", "rule", "hint", "count", "value", "index", "rows", "rows_total",
                  "message"]
WARNED = {"name": "warned", "fields": {"x": {"dtype": "int64", "shape": ["B"], "min": 0, "max": 3,
                                             "severity": {"above_max": "warning"}}},
          "rules": [{"rule": "x != 2", "code": "no_two"}]}


def warned_report() -> tc.Report:
    return tc.check({"x": torch.tensor([0, 7, 2, -1])}, tc.BatchSpec.model_validate(WARNED), backend="torch")


def test_report_to_dict_is_the_versioned_schema():
    d = warned_report().to_dict()
    assert list(d) == ["schema", "kind", "spec", "ok", "errors", "warnings", "backend", "dims", "skipped",
                       "violations", "unchecked"]
    assert (d["schema"], d["kind"], d["ok"], d["errors"], d["warnings"]) == (REPORT_SCHEMA, "check", False, 2, 1)
    by_code = {v["code"]: v for v in d["violations"]}
    assert all(list(v) == VIOLATION_KEYS for v in d["violations"])
    assert {k: by_code["above_max"][k] for k in VIOLATION_KEYS[:-1]} == {
        "field": "x", "code": "above_max", "severity": "warning", "rule": "x <= 3", "hint": None, "count": 1,
        "value": 7, "index": [1], "rows": [1], "rows_total": 1}
    assert by_code["no_two"]["rows"] == [2] and by_code["below_min"]["rows"] == [3]


def test_an_expanded_batch_of_2_40_bad_samples_lists_the_first_rows_and_says_how_many(backend):
    """2**40 bad samples stored as one: the JSON lists MAX_JSON_ROWS of them (never 2**40 ints) and the true total."""
    import torch

    import tritoncheck as tc
    from tritoncheck.report import MAX_JSON_ROWS

    spec = tc.BatchSpec.model_validate({"name": "e", "fields": {"y": {"dtype": "int32", "shape": ["B"], "max": 5}}})
    y = torch.tensor([7], dtype=torch.int32).expand(2**40)
    if backend == "triton":  # the interpreter walks a logical axis in full (see the Triton launcher's note)
        y = torch.tensor([7], dtype=torch.int32).expand(2**20)
    v = tc.check({"y": y}, spec, backend=backend).to_dict()["violations"][0]
    n = y.shape[0]
    assert (v["count"], v["rows_total"], len(v["rows"])) == (n, n, min(n, MAX_JSON_ROWS))
    assert v["rows"][:3] == [0, 1, 2] and v["rows"][-1] == min(n, MAX_JSON_ROWS) - 1


def test_errors_means_the_violations_of_severity_error_everywhere():
    report = warned_report()
    with pytest.raises(tc.BatchValidationError) as info:
        tc.validate({"x": torch.tensor([0, 7, 2, -1])}, tc.BatchSpec.model_validate(WARNED), backend="torch")
    assert [e["code"] for e in info.value.errors()] == [v.code for v in report.errors] == ["below_min", "no_two"]
    assert report.to_dict()["errors"] == len(report.errors) == 2


def test_a_report_with_unchecked_batches_is_not_ok():
    """What `scan` builds with the same function: a batch it could not check makes the report not ok."""
    failed = {"source": "a.pt", "offset": 0, "error": "RuntimeError", "message": "boom"}
    d = report_json("scan", "s", [], unchecked=[failed], data="dir")
    assert (d["schema"], d["kind"], d["ok"], d["errors"], d["unchecked"], d["data"]) == (
        REPORT_SCHEMA, "scan", False, 0, [failed], "dir")


@pytest.mark.slow  # starts the command
def test_check_json_and_output_file_are_report_to_dict(tmp_path):
    batch = {"input": torch.randn(2, 3), "target": torch.tensor([0, 5])}
    torch.save(batch, tmp_path / "b.pt")
    done = subprocess.run([sys.executable, "-m", "tritoncheck.cli", "check", "cross-entropy", "b.pt", "--json",
                           "--backend", "torch", "-o", "r.json"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    expected = tc.check(batch, tc.load_spec("cross-entropy"), backend="torch").to_dict()
    assert json.loads(done.stdout) == json.loads((tmp_path / "r.json").read_text()) == expected
    assert expected["schema"] == "tritoncheck.report/1" and list(expected["violations"][0]) == VIOLATION_KEYS
