"""Every mistake a spec's lowering finds comes back in one SpecError (issue 21's leftover: an index past
a rank and a reduction over a dim the field lacks came one run at a time)."""

from __future__ import annotations

import pytest

import tritoncheck as tc
from tritoncheck.plan.lower import compile_plan
from tritoncheck.spec.schema import spec_from_dict

FIELDS = {"x": {"dtype": "int64", "shape": ["B", "L"]}, "y": {"dtype": "float32", "shape": ["B"]}}
INDEX_PAST_RANK = "x[:, 0, 1] >= 0"
MISSING_DIM = "sum(y, dim=L) <= 3"
ALWAYS_FALSE = "1 > 2"


def lower(rules: list[str]):
    return compile_plan(spec_from_dict({"name": "m", "fields": FIELDS, "rules": [{"rule": r} for r in rules]}, "m.yaml"))


@pytest.mark.parametrize("rule", [INDEX_PAST_RANK, MISSING_DIM, ALWAYS_FALSE])
def test_each_mistake_alone_is_refused_with_its_own_message(rule):
    with pytest.raises(tc.SpecError) as one:
        lower([rule])
    assert "error(s) in spec" not in str(one.value) and "rules.0" in str(one.value)


def test_every_mistake_of_a_spec_comes_back_in_one_error():
    alone = []
    for rule in (INDEX_PAST_RANK, MISSING_DIM, ALWAYS_FALSE):
        with pytest.raises(tc.SpecError) as one:
            lower([rule])
        alone.append(str(one.value).removeprefix("m: ").replace("rules.0", "rules.{}"))
    with pytest.raises(tc.SpecError) as every:
        lower(["x >= 0", INDEX_PAST_RANK, MISSING_DIM, "y <= 1", ALWAYS_FALSE])
    text = str(every.value)
    assert text.splitlines()[0] == "m: 3 error(s) in spec"
    assert text.splitlines()[1:] == ["  " + alone[0].format(1), "  " + alone[1].format(2), "  " + alone[2].format(4)]


def test_a_spec_file_with_several_plan_mistakes_names_the_file_once(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: m\nfields:\n  x: {dtype: int64, shape: [B, L]}\n  y: {dtype: float32, shape: [B]}\n"
                    f"rules:\n  - rule: '{INDEX_PAST_RANK}'\n  - rule: '{MISSING_DIM}'\n")
    with pytest.raises(tc.SpecError) as every:
        tc.load_spec(str(path))
    lines = str(every.value).splitlines()
    assert lines[0] == f"{path}: m: 2 error(s) in spec" and len(lines) == 3
    assert lines[1].startswith("  rules.0: ") and lines[2].startswith("  rules.1: ")
