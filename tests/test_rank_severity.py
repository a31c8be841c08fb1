"""`severity: {rank: warning}` on a field: a wrong number of axes the model runs through (GPT-2 views a [B]
mask as [B, 1]) is a warning, the same on every backend; the field's checks are listed as not checked,
never run on a layout they were not written for (issue 19)."""

from __future__ import annotations

import pytest
import torch

import tritoncheck as tc
from tritoncheck.spec.schema import SpecError, spec_from_dict


def spec(rank_severity: str | None):
    mask = {"dtype": "int64", "shape": ["B", "L"], "values": [0, 1]}
    if rank_severity:
        mask["severity"] = {"rank": rank_severity}
    return spec_from_dict({"name": "ranked", "fields": {"ids": {"dtype": "int64", "shape": ["B", "L"], "min": 0},
                                                         "mask": mask}}, "ranked.yaml")


def test_a_rank_warning_is_a_warning_on_every_backend_and_its_checks_are_listed_as_not_checked(backend, device):
    batch = {"ids": torch.zeros(2, 3, dtype=torch.long, device=device), "mask": torch.ones(2, dtype=torch.long, device=device)}
    report = tc.check(batch, spec("warning"), backend=backend)
    assert report.ok
    assert [(v.field, v.code, v.severity) for v in report.violations] == [("mask", "rank", "warning")]
    assert report.skipped == ("mask in [0, 1]",)
    text = str(report)
    assert "warning: mask: mask must have 2 dims [B, L], got shape (2,)" in text
    assert "not checked because of the above: mask in [0, 1]" in text
    assert tc.validate(batch, spec("warning"), backend=backend) is batch
    with pytest.raises(tc.BatchValidationError):
        tc.validate(batch, spec("warning"), backend=backend, strict=True)
    with pytest.raises(tc.BatchValidationError):  # the default: a wrong rank is an error
        tc.validate(batch, spec(None), backend=backend)
    assert tc.check(batch, spec(None), backend="torch").violations[0].severity == "error"


def test_a_rank_warning_leaves_the_other_fields_checked(backend, device):
    batch = {"ids": torch.tensor([[0, -1, 2]], device=device), "mask": torch.ones(1, dtype=torch.long, device=device)}
    report = tc.check(batch, spec("warning"), backend=backend)
    assert not report.ok
    assert [(v.field, v.code, v.severity) for v in report.violations] == [("mask", "rank", "warning"),
                                                                          ("ids", "below_min", "error")]


def test_a_misspelled_rank_severity_is_a_spec_error_that_suggests_it():
    with pytest.raises(SpecError, match=r"'rnak' is not a code .*did you mean 'rank'"):
        spec_from_dict({"name": "t", "fields": {"x": {"dtype": "int64", "shape": ["B"], "severity": {"rnak": "warning"}}}},
                       "t.yaml")


def test_the_yaml_round_trip_keeps_a_rank_severity(tmp_path):
    path = tmp_path / "ranked.yaml"
    path.write_text(spec("warning").to_yaml())
    again = tc.load_spec(str(path))
    assert again.fields["mask"].severity == {"rank": "warning"}
