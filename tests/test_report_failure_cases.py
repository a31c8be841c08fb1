"""`tc.failure_cases(report, batch, spec, limit=...)` (issue 21): every failing element of each violated check, as
records and as a DataFrame; its counts, first index and value agree with the report of every backend."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tritoncheck as tc
from tritoncheck.plan.lower import compile_plan
from tritoncheck.spec.extends import read_spec

pd = pytest.importorskip("pandas", reason="FailureCases.to_pandas: pip install pandas (in the test extra)")

# Small parameters: every built-in contract takes what it needs from this (as in test_strategies.py).
SMALL = dict(vocab_size=11, max_position_embeddings=12, pad_token_id=1, type_vocab_size=2,
             max_2d_position_embeddings=1024, num_channels=3, input_size=4, num_labels=5, in_channels=3,
             num_classes=4, min_length=3)

SPEC = {
    "name": "boxes",
    "params": {"vocab_size": 50},
    "fields": {
        "input_ids": {"dtype": "int64", "shape": ["B", "L"], "min": 0, "max": "vocab_size - 1"},
        "mask": {"dtype": "int64", "shape": ["B", "L"], "values": [0, 1], "severity": {"not_in_set": "warning"}},
        "bbox": {"dtype": "int64", "shape": ["B", "L", 4]},
        "score": {"dtype": "float", "shape": ["B"], "finite": True},
    },
    "rules": [{"rule": "bbox[..., 0] <= bbox[..., 2]", "code": "box_corners"}],
}


def small_spec(name: str) -> tc.BatchSpec:
    params = read_spec(name).params
    return tc.load_spec(name, **{k: v for k, v in SMALL.items() if k in params})


def bad_batch(device: str) -> dict[str, torch.Tensor]:
    ids = torch.tensor([[1, 60, 3], [4, 99, 70]])
    bbox = torch.zeros(2, 3, 4, dtype=torch.long)
    bbox[1, 2, 0] = 9  # x0 > x2
    batch = {"input_ids": ids, "mask": torch.tensor([[1, 1, 2], [1, 1, 1]]), "bbox": bbox,
             "score": torch.tensor([0.5, float("nan")])}
    return {k: v.to(device) for k, v in batch.items()}


def test_every_failing_element_with_its_row_index_and_value():
    spec = tc.BatchSpec.model_validate(SPEC)
    batch = bad_batch("cpu")
    cases = tc.failure_cases(tc.check(batch, spec, backend="torch"), batch, spec)
    assert [(c["field"], c["code"], c["severity"], c["row"], c["index"], c["value"]) for c in cases] == [
        ("input_ids", "above_max", "error", 0, [0, 1], 60),
        ("input_ids", "above_max", "error", 1, [1, 1], 99),
        ("input_ids", "above_max", "error", 1, [1, 2], 70),
        ("mask", "not_in_set", "warning", 0, [0, 2], 2),
        ("score", "non_finite", "error", 1, [1], "nan"),
        ("bbox", "box_corners", "error", 1, [1, 2], 9),
    ]
    assert cases[0]["rule"] == "input_ids <= vocab_size - 1 = 49"
    frame = cases.to_pandas()
    assert isinstance(frame, pd.DataFrame) and list(frame.columns) == ["field", "code", "severity", "rule", "row",
                                                                      "index", "value"]
    assert frame["row"].tolist() == [0, 1, 1, 0, 1, 1]
    assert len(tc.failure_cases(tc.check(batch, spec), batch, spec, limit=1)) == 4  # one per violated check


def test_counts_first_index_and_value_agree_with_every_backend(backend, device):
    spec = tc.BatchSpec.model_validate(SPEC)
    batch = bad_batch("cpu" if backend == "c" else device)
    report = tc.check(batch, spec, backend=backend)
    cases = tc.failure_cases(report, batch, spec, limit=None)
    for v in report.violations:
        mine = [c for c in cases if (c["field"], c["code"]) == (v.field, v.code)]
        assert len(mine) == v.count
        assert mine[0]["index"] == list(v.index)
        assert mine[0]["value"] == ("nan" if v.value != v.value else v.value)
        assert sorted({c["row"] for c in mine}) == list(v.samples)


def test_metadata_violations_and_expanded_views():
    spec = tc.BatchSpec.model_validate(SPEC)
    batch = {**bad_batch("cpu"), "score": torch.tensor([1, 2])}  # int score: a dtype violation, no elements
    cases = tc.failure_cases(tc.check(batch, spec), batch, spec)
    (dtype,) = [c for c in cases if c["field"] == "score"]
    assert (dtype["code"], dtype["row"], dtype["index"]) == ("dtype", None, None)
    big = {**bad_batch("cpu"), "input_ids": torch.tensor([99]).expand(2, 3)}  # one stored value, every element bad
    cases = tc.failure_cases(tc.check(big, spec), big, spec, limit=None)
    assert [c["index"] for c in cases if c["field"] == "input_ids"] == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    assert tc.failure_cases(tc.check(big, spec), big, spec, limit=4)[3]["index"] == [1, 0]


def test_a_batch_level_rule_is_one_case_without_a_row():
    batch = {"input": torch.randn(2, 3), "target": torch.tensor([-100, -100])}
    spec = tc.load_spec("cross-entropy")
    assert tc.failure_cases(tc.check(batch, spec), batch, spec) == [
        {"field": "target", "code": "all_ignored", "severity": "error", "rule": "any(target != -100)", "row": None,
         "index": [], "value": False}]


def test_a_valid_report_has_no_failure_cases_and_no_second_pass():
    spec = tc.BatchSpec.model_validate(SPEC)
    good = {"input_ids": torch.ones(2, 3, dtype=torch.long), "mask": torch.ones(2, 3, dtype=torch.long),
            "bbox": torch.zeros(2, 3, 4, dtype=torch.long), "score": torch.zeros(2)}
    assert tc.failure_cases(tc.check(good, spec), None, None) == []  # the batch is never read again
    with pytest.raises(ValueError, match="limit must be >= 0"):
        tc.failure_cases(tc.check(bad_batch("cpu"), spec), bad_batch("cpu"), spec, limit=-1)


@pytest.mark.parametrize("name", tc.builtin_spec_names())
@settings(max_examples=3)  # the strategies draw slowly; test_strategies.py draws the full profile
@given(data=st.data())
def test_failure_cases_of_every_builtin_contract_count_what_the_report_counts(name, data):
    """Malformed batches of every built-in contract: a data check's records are as many as its count, the
    first at its first index; any other violation is one record of its own."""
    from tritoncheck.strategies import malformed_batches

    spec = small_spec(name)
    batch, _ = data.draw(malformed_batches(spec))
    report = tc.check(batch, spec, backend="torch")
    cases = tc.failure_cases(report, batch, spec, limit=None)
    data_checks = {(c.field, c.code) for c in compile_plan(spec).checks}
    for key in {(v.field, v.code) for v in report.violations}:
        violations = [v for v in report.violations if (v.field, v.code) == key]
        mine = [c for c in cases if (c["field"], c["code"]) == key]
        first = violations[0].index
        assert mine[0]["index"] == (None if first is None else list(first)), (key, str(report))
        expected = sum(v.count for v in violations) if key in data_checks and first else len(violations)
        assert len(mine) == expected, (key, str(report))


def test_a_check_cut_at_the_limit_says_so_with_its_total():
    """`limit` caps the records per check; `capped` says which checks were cut and how many elements fail in all
    (an expanded view's stored entry counted over its whole axis), so a capped list never passes for the whole."""
    spec = tc.BatchSpec.model_validate(SPEC)
    batch = {**bad_batch("cpu"), "input_ids": torch.tensor([99]).expand(2, 3)}
    report = tc.check(batch, spec)
    (ids,) = [v for v in report.violations if v.field == "input_ids"]
    cases = tc.failure_cases(report, batch, spec, limit=4)
    assert cases.capped == [{"field": "input_ids", "code": "above_max", "rule": "input_ids <= vocab_size - 1 = 49",
                             "listed": 4, "total": 6}] and ids.count == 6
    assert tc.failure_cases(report, batch, spec, limit=None).capped == []
    assert tc.failure_cases(report, batch, spec, limit=6).capped == []
