"""Spec files as untrusted input: alias bombs, trailing newlines in names, non-finite parameters."""

from __future__ import annotations

import time

import pytest

import tritoncheck as tc

BOMB = """
a: &a ["x","x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
name: [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]
fields: {x: {dtype: int64, shape: [B]}}
"""


@pytest.mark.parametrize("as_base", [False, True])
def test_a_yaml_alias_bomb_is_refused_before_anything_walks_it(tmp_path, as_base):
    (tmp_path / "bomb.yaml").write_text(BOMB)
    path = tmp_path / "bomb.yaml"
    if as_base:
        path = tmp_path / "child.yaml"
        path.write_text("extends: bomb.yaml\nname: child\n")
    start = time.process_time()
    with pytest.raises(tc.SpecError, match="YAML nodes once aliases are expanded"):
        tc.load_spec(path)
    assert time.process_time() - start < 5


def test_yaml_errors_in_the_spec_file_name_a_line_not_the_content(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nfields: {a: [\n  password: hunter2\n")
    with pytest.raises(tc.SpecError, match=r"bad.yaml: not valid YAML at line \d+") as info:
        tc.load_spec(path)
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("kind", ["field", "code"])
def test_a_name_with_a_trailing_newline_is_not_an_identifier(kind):
    data = {"name": "s", "fields": {"x": {"dtype": "int64", "shape": ["B"]}}}
    if kind == "field":
        data["fields"]["x\n"] = {"dtype": "int64", "shape": ["B"]}
    else:
        data["rules"] = [{"rule": "x >= 0", "code": "bad\n"}]
    with pytest.raises(tc.SpecError):
        _load(data)


def _load(data):
    from tritoncheck.spec.schema import spec_from_dict

    return spec_from_dict(data, "<test>")


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_parameters_are_refused_from_python_too(value):
    with pytest.raises(tc.SpecError, match="must be a finite number"):
        tc.load_spec("bert-sequence-classification", vocab_size=value, num_labels=2)
