"""Every mistake of a spec file in one run (issue 21): a mistake pydantic finds in one part (a misspelled key,
an unknown function) no longer hides the whole-spec ones (unknown names in bounds and rules), nor does one
whole-spec mistake hide the next; and a part that is refused adds no mistake of its own to the others."""

from __future__ import annotations

import pytest
import torch

import tritoncheck as tc
from tritoncheck.cli import main

FUNCTIONS = "only the functions any, all, sum, abs, arange, isfinite, present may be called"
DTYPES = "bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, int, float"
KEYS = "dtype, shape, optional, min, max, allow, values, finite, hints, severity, description, monotonic, multiple_of"

FOUR = """\
name: four
params: {vocab_size: 50, num_labels: 3}
fields:
  input_ids: {dtype: int64, shape: [B, L], max: vocab_sise - 1}
  attention_mask: {dtype: int64, shape: [B, L], optinal: true}
  labels: {dtype: int64, shape: [B], max: num_labels - 1}
rules:
  - any(attention_mask != 0, dim=L)
  - isfnite(labels)
  - lables >= 0
"""


def test_the_cli_lists_four_mistakes_of_four_kinds_in_one_run(tmp_path, capsys):
    (tmp_path / "four.yaml").write_text(FOUR)
    torch.save({"input_ids": torch.zeros(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 3, dtype=torch.long),
                "labels": torch.zeros(2, dtype=torch.long)}, tmp_path / "b.pt")
    assert main(["check", str(tmp_path / "four.yaml"), str(tmp_path / "b.pt")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"tritoncheck: error: {tmp_path / 'four.yaml'}: 4 error(s) in spec",
        f"  fields.attention_mask.optinal: unknown key (did you mean 'optional'?); known: {KEYS}",
        f"  rules.1.rule: unknown function 'isfnite' (did you mean 'isfinite'?); {FUNCTIONS}",
        "  fields.input_ids.max: unknown name(s) ['vocab_sise'] (did you mean 'vocab_size'?); a bound may use "
        "parameters (vocab_size, num_labels) and dims",
        "  rules.2: unknown name(s) ['lables'] in 'lables >= 0' (did you mean 'labels'?)",
    ]


def spec_error(tmp_path, text: str) -> list[str]:
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(tc.SpecError) as info:
        tc.load_spec(tmp_path / "s.yaml")
    return str(info.value).splitlines()[1:]


def test_several_whole_spec_mistakes_are_reported_together(tmp_path):
    assert spec_error(tmp_path, """\
name: names
params: {n: 4}
fields:
  x: {dtype: int64, shape: [B], min: m, max: k, allow: [0.5]}
  y: {dtype: [int64, dtyp], shape: [B]}
rules: [{rule: x <= w, field: z}]
""") == [
        "  fields.x.allow.0: 0.5 is not an integer, but x holds integers",
        "  fields.y.dtype: unknown dtype 'dtyp', and no parameter of that name; known: " + DTYPES,
        "  fields.x.min: unknown name(s) ['m']; a bound may use parameters (n) and dims",
        "  fields.x.max: unknown name(s) ['k']; a bound may use parameters (n) and dims",
        "  rules.0: unknown name(s) ['w'] in 'x <= w'",
        "  rules.0: field 'z' is not in the spec",
    ]


def test_a_refused_part_keeps_its_names_and_checks_nothing_twice(tmp_path):
    # y's misspelled key and its -1 refuse the field, but y is still a field and B and L dims of its shape; the rule
    # that does not parse is reported once, by pydantic, not again for its names; x's allow of 0.5 is not
    # judged against a dtype nobody knows
    assert spec_error(tmp_path, """\
name: parts
fields:
  x: {dtype: int65, shape: [B], allow: [0.5]}
  y: {dtype: int64, shape: [B, L, -1], optinal: true, max: L}
rules: ["y[..., 0] <= x", "x ** 2 > 0", "zz > 0"]
""") == [
        "  fields.y.shape: a fixed size must be >= 0, got -1",
        f"  fields.y.optinal: unknown key (did you mean 'optional'?); known: {KEYS}",
        "  rules.1.rule: operator Pow is not allowed",
        "  fields.x.dtype: unknown dtype 'int65', and no parameter of that name (did you mean 'int64'?); "
        "known: " + DTYPES,
        "  rules.2: unknown name(s) ['zz'] in 'zz > 0'",
    ]
    # a refused part that may have defined names (params not a mapping, a shape not a list): no name is
    # called unknown for it, and a spec with no field says only that
    assert spec_error(tmp_path, """\
name: parts
params: [n]
fields:
  x: {dtype: int64, shape: B L, max: n}
  y: {dtype: int64, shape: [B], optinal: true}
rules: [x < L, isfnite(y)]
""") == [
        "  params: Input should be a valid dictionary",
        "  fields.x.shape: Input should be a valid list",
        f"  fields.y.optinal: unknown key (did you mean 'optional'?); known: {KEYS}",
        f"  rules.1.rule: unknown function 'isfnite' (did you mean 'isfinite'?); {FUNCTIONS}",
    ]
    assert spec_error(tmp_path, "name: none\nfields: {}\nrules: [x > 0]\n") == ["  a spec needs at least one field"]


def test_other_kinds_of_pydantic_errors_come_through_with_the_whole_spec_ones(tmp_path):
    assert spec_error(tmp_path, """\
fields:
  x: {dtype: int64, shape: [B], optional: maybe, max: nope}
unexpected_fields: sometimes
rules: [{rule: x > 0, severity: loud}]
""") == [
        "  name: Field required",
        "  fields.x.optional: Input should be a valid boolean, unable to interpret input",
        "  rules.0.severity: Input should be 'error' or 'warning'",
        "  unexpected_fields: Input should be 'error' or 'ignore'",
        "  fields.x.max: unknown name(s) ['nope']; a bound may use parameters (none) and dims",
    ]


def test_a_spec_built_in_python_reports_every_mistake_too():
    with pytest.raises(tc.SpecError) as info:
        tc.BatchSpec(name="py", fields={"x": {"dtype": "int64", "shape": ["B"], "max": "n", "optinal": True}},
                     rules=["x < m"])
    assert str(info.value).splitlines() == [
        "py: 3 error(s) in spec",
        f"  fields.x.optinal: unknown key (did you mean 'optional'?); known: {KEYS}",
        "  fields.x.max: unknown name(s) ['n']; a bound may use parameters (none) and dims",
        "  rules.0: unknown name(s) ['m'] in 'x < m'",
    ]
