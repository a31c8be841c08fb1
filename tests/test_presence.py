"""`present(field)`: rules over which optional fields a batch holds, checked on the host."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import tritoncheck as tc
from tritoncheck.spec.schema import spec_from_dict

SPEC = {
    "name": "seq2seq",
    "params": {"max_len": 8},
    "fields": {
        "input_ids": {"dtype": "int64", "shape": ["B", "L"], "min": 0},
        "labels": {"dtype": "int64", "shape": ["B", "T"], "optional": True},
        "decoder_input_ids": {"dtype": "int64", "shape": ["B", "T"], "optional": True},
        "pixel_values": {"dtype": "float32", "shape": ["B", 3], "optional": True},
    },
    "rules": [
        {"rule": "present(labels) | present(decoder_input_ids)", "code": "missing_field", "field": "labels",
         "hint": "the decoder inputs are built from labels: give one of them"},
        {"rule": "L <= max_len where not present(pixel_values)", "code": "sequence_too_long"},
    ],
}


def ids(*shape):
    return torch.zeros(*shape, dtype=torch.int64)


@pytest.fixture(scope="module")
def spec():
    return spec_from_dict(SPEC, "seq2seq.yaml")


def test_neither_of_two_optional_fields_is_an_error_naming_the_field(spec, backend):
    report = tc.check({"input_ids": ids(2, 4)}, spec, backend=backend)
    assert [(v.field, v.code) for v in report.violations] == [("labels", "missing_field")]
    assert "present(labels)=False" in report.violations[0].rule
    assert report.violations[0].hint.startswith("the decoder inputs")
    assert tc.check({"input_ids": ids(2, 4), "decoder_input_ids": ids(2, 3)}, spec, backend=backend).ok
    assert tc.check({"input_ids": ids(2, 4), "labels": ids(2, 3)}, spec, backend=backend).ok


def test_a_size_bound_that_holds_only_without_a_field(spec, backend):
    long = {"input_ids": ids(2, 12), "labels": ids(2, 3)}
    report = tc.check(long, spec, backend=backend)
    assert [(v.field, v.code, v.value) for v in report.violations] == [("input_ids", "sequence_too_long", 12)]
    assert tc.check({**long, "pixel_values": torch.zeros(2, 3)}, spec, backend=backend).ok


def test_an_explicit_none_is_absent(spec):
    report = tc.check({"input_ids": ids(2, 4), "labels": None, "decoder_input_ids": None}, spec)
    assert report.codes == {"missing_field"}


def test_a_data_rule_that_applies_only_without_a_field(backend):
    spec = spec_from_dict({**SPEC, "rules": [
        {"rule": "sum(input_ids != 1, dim=L) <= 3 where not present(pixel_values)", "code": "sequence_too_long"}]}, "r.yaml")
    long = {"input_ids": torch.tensor([[5, 5, 5, 5, 1], [5, 1, 1, 1, 1]]), "labels": ids(2, 3)}
    report = tc.check(long, spec, backend=backend)
    assert [(v.code, v.samples, v.value) for v in report.violations] == [("sequence_too_long", (0,), 4)]
    assert not tc.check({**long, "pixel_values": torch.zeros(2, 3)}, spec, backend=backend).violations
    assert not tc.check({**long, "pixel_values": torch.zeros(2, 3)}, spec, backend=backend).skipped


@pytest.mark.parametrize("where, change", [
    ("rules.0", {"rules": ["input_ids >= 0 where present(labels) | (input_ids > 3)"]}),
    ("rules.0", {"rules": ["input_ids >= present(labels)"]}),
    ("fields.input_ids.max", {"fields": {**SPEC["fields"], "input_ids": {"dtype": "int64", "shape": ["B", "L"], "max": "present(labels)"}}}),
    ("rules.0", {"rules": ["present(nothing)"]}),
    ("rules.0", {"rules": ["present(L)"]}),
])
def test_present_outside_a_host_rule_or_of_no_field_is_a_spec_error(where, change):
    with pytest.raises(tc.SpecError, match=where):
        tc.check({"input_ids": ids(1, 2)}, spec_from_dict({**SPEC, **change}, "bad.yaml"))


def test_present_takes_a_name():
    with pytest.raises(tc.SpecError, match="present\\(\\) takes a field name"):
        spec_from_dict({**SPEC, "rules": ["present(1)"]}, "bad.yaml")


SEQ2SEQ = spec_from_dict(SPEC, "seq2seq.yaml")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=tc.strategies.valid_batches(SEQ2SEQ))
def test_valid_batches_hold_a_presence_rule(batch):
    assert "labels" in batch or "decoder_input_ids" in batch
    assert not tc.check(batch, SEQ2SEQ).violations


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=tc.strategies.malformed_batches(SEQ2SEQ))
def test_malformed_batches_break_what_they_say(case):
    batch, expected = case
    report = tc.check(batch, SEQ2SEQ)
    assert {(v.field, v.code) for v in report.violations} == {(expected.field, expected.code)}


WHEN = spec_from_dict({**SPEC, "params": {"max_len": 8}, "rules": [
    {"rule": "sum(input_ids != 1, dim=L) <= 3 where not present(pixel_values)", "code": "sequence_too_long"}]}, "w.yaml")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=tc.strategies.malformed_batches(WHEN))
def test_malformed_batches_of_a_rule_that_applies_only_without_a_field(case):
    batch, expected = case
    report = tc.check(batch, WHEN)
    assert {(v.field, v.code) for v in report.violations} == {(expected.field, expected.code)}
