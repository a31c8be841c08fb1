"""A last shape entry '1?': labels [B] or [B, 1], as the classification heads take them."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import tritoncheck as tc
from tritoncheck.spec.schema import spec_from_dict

SPEC = {
    "name": "cls",
    "fields": {
        "input_ids": {"dtype": "int64", "shape": ["B", "L"], "min": 0},
        "labels": {"dtype": "int64", "shape": ["B", "1?"], "min": 0, "max": 2},
    },
    "rules": [{"rule": "labels != 1", "code": "no_ones"}],
}
CLS = spec_from_dict(SPEC, "cls.yaml")


def batch(labels):
    return {"input_ids": torch.zeros(len(labels), 3, dtype=torch.int64), "labels": torch.tensor(labels)}


@pytest.mark.parametrize("labels", [[0, 2, 2], [[0], [2], [2]]], ids=["[B]", "[B, 1]"])
def test_both_forms_pass(labels, backend):
    assert not tc.check(batch(labels), CLS, backend=backend).violations


@pytest.mark.parametrize("labels", [[0, 5, 1], [[0], [5], [1]]], ids=["[B]", "[B, 1]"])
def test_both_forms_are_checked_the_same_way(labels, backend):
    report = tc.check(batch(labels), CLS, backend=backend)
    assert [(v.code, v.samples, v.value) for v in report.violations] == [("above_max", (1,), 5), ("no_ones", (2,), 1)]
    # the second form again: the cached signature must drop the axis as well
    again = tc.check(batch(labels), CLS, backend=backend)
    assert [v.to_dict() for v in again.violations] == [v.to_dict() for v in report.violations]


def test_a_wider_last_axis_or_a_third_axis_is_flagged():
    report = tc.check(batch([[0, 1], [2, 2], [1, 1]]), CLS)
    assert [(v.code, v.index, v.value) for v in report.violations] == [("shape", (1,), 2)]
    report = tc.check(batch([[[0]], [[1]], [[2]]]), CLS)
    assert report.codes == {"rank"}
    assert "must have 1 dim [B] (or 2, [B, 1])" in report.violations[0].rule


@pytest.mark.parametrize("shape", [["1?"], ["1?", "B"]])
def test_1_query_only_as_the_last_of_several_axes(shape):
    with pytest.raises(tc.SpecError, match="must be the last of several axes"):
        spec_from_dict({"name": "bad", "fields": {"x": {"dtype": "int64", "shape": shape}}}, "bad.yaml")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(b=tc.strategies.valid_batches(CLS))
def test_valid_batches_come_in_both_forms(b):
    assert b["labels"].dim() in (1, 2)
    assert not tc.check(b, CLS).violations


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=tc.strategies.malformed_batches(CLS, codes=["rank"]))
def test_a_rank_mutation_is_still_a_rank_error(case):
    b, expected = case
    assert {(v.field, v.code) for v in tc.check(b, CLS).violations} == {(expected.field, "rank")}
