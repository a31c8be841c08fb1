"""`multiple_of: k`: every value of an integer field is a multiple of k (lengths padded to 8).

The kind is one module, tritoncheck/checks/multiple_of.py: every backend, the strategies, the scan, the
message, the hint and the spec option come from its registration (tests/test_registry.py proves that no
other file of the package names it). Compiled backends are compared with the torch backend for equality.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tritoncheck as tc
from report_compare import checked_like_torch, only
from tritoncheck.checks.multiple_of import MultipleOfCheck
from tritoncheck.plan.lower import compile_plan
from tritoncheck.strategies import malformed_batches, valid_batches


def spec(k=8, dtype="int64", shape=("B", "L"), **extra) -> tc.BatchSpec:
    return tc.BatchSpec(name="padded", fields={"x": {"dtype": dtype, "shape": list(shape), "multiple_of": k, **extra}})


@pytest.fixture
def where(backend, device) -> str:
    """The batch's device for `backend`: the C backend reads CPU tensors, the others `device`'s (CUDA on a GPU)."""
    return "cpu" if backend == "c" else device


def test_option_lowers_to_one_check():
    (c,) = compile_plan(spec()).checks
    assert isinstance(c, MultipleOfCheck) and (c.field, c.k, c.axes, c.code) == ("x", 8, ("B", "L"), "not_a_multiple")
    assert "x is a multiple of 8" in compile_plan(spec()).pretty()
    assert "multiple_of: 8" in spec().to_yaml()


# --- verdicts: every backend equal to the torch backend -------------------------------------------------------------


def test_reports_first_index_count_samples_and_value(backend, where):
    x = torch.tensor([[0, 8, 16, -8], [8, 12, 24, 5], [64, 64, 64, 64], [3, 0, 0, 0]], device=where)
    v = only(checked_like_torch({"x": x}, spec(), backend))
    assert (v.field, v.code, v.index, v.value, v.count, v.samples) == ("x", "not_a_multiple", (1, 1), 12, 3, (1, 3))
    assert v.rule == "x is a multiple of 8"


def test_valid_batches_pass(backend, where):
    for x in (torch.arange(0, 96, 8).reshape(3, 4), torch.full((2, 5), -40), torch.zeros(1, 0, dtype=torch.int64),
              torch.tensor([[2**62, -(2**62), 0]])):
        assert checked_like_torch({"x": x.to(where)}, spec(), backend).ok


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "bool"])
def test_dtypes(backend, where, dtype):
    k = 1 if dtype == "bool" else 4  # (a bool field: 0 and 1 are both multiples of 1 only)
    x = torch.tensor([[0, 4, 8, 1], [4, 4, 0, 4]]).to(getattr(torch, dtype)).to(where)
    report = checked_like_torch({"x": x}, spec(k, dtype), backend)
    if dtype == "bool":
        assert report.ok
    else:
        v = only(report)
        assert (v.index, v.count, v.samples, v.value) == ((0, 3), 1, (0,), 1)


def test_a_bool_field_fails_where_true_under_k_above_one(backend, where):
    x = torch.tensor([[False, True], [False, False]], device=where)
    v = only(checked_like_torch({"x": x}, spec(2, "bool"), backend))
    assert (v.index, v.count, v.samples) == ((0, 1), 1, (0,))


def test_negative_values_and_k_past_the_dtype(backend, where):
    # -3 is no multiple of 8 whatever the sign convention of a remainder; 200 does not fit int8: only 0 passes
    v = only(checked_like_torch({"x": torch.tensor([[-16, -3, 8]], device=where)}, spec(), backend))
    assert (v.index, v.value) == ((0, 1), -3)
    x = torch.tensor([[0, 100, -100]], dtype=torch.int8, device=where)
    v = only(checked_like_torch({"x": x}, spec(200, "int8"), backend))
    assert (v.index, v.count) == ((0, 1), 2)
    big = 2**63 - 1  # the largest k a spec may give
    v = only(checked_like_torch({"x": torch.tensor([[0, big, 5]], device=where)}, spec(big), backend))
    assert (v.index, v.value) == ((0, 2), 5)


def test_allow_sentinels_are_exempt(backend, where):
    x = torch.tensor([[8, -100, 16], [-100, 7, -100]], device=where)
    v = only(checked_like_torch({"x": x}, spec(allow=[-100]), backend))
    assert (v.index, v.count, v.value, v.rule) == ((1, 1), 1, 7, "x is a multiple of 8 or one of [-100]")


def test_non_contiguous_and_expanded_fields(backend, where):
    x = torch.tensor([[0, 8, 3], [16, 5, 24]], device=where).t()  # shape [3, 2] as [B, L], a transposed view
    assert not x.is_contiguous()
    v = only(checked_like_torch({"x": x}, spec(), backend))
    assert (v.index, v.count, v.samples) == ((1, 1), 2, (1, 2))
    row = torch.tensor([8, 9, 16], device=where).expand(4, 3)  # every sample breaks at 9, stored once
    v = only(checked_like_torch({"x": row}, spec(), backend))
    assert (v.index, v.count, v.samples) == ((0, 1), 4, (0, 1, 2, 3))


def test_beside_a_range_on_the_same_field(backend, where):
    s = spec(min=0, max=64)
    report = checked_like_torch({"x": torch.tensor([[8, 72, 3, 80]], device=where)}, s, backend)
    assert [(v.code, v.index, v.count) for v in report.violations] == [("above_max", (0, 1), 2),
                                                                        ("not_a_multiple", (0, 2), 1)]


# --- message and hint -------------------------------------------------------------------------------------------------


def test_message_and_hint_read_well():
    report = tc.check({"x": torch.tensor([[16, 12]])}, spec())
    v = only(report)
    assert v.hint == "12 lies between the multiples 8 and 16"
    assert v.message.splitlines()[0] == "x[0, 1]: x is a multiple of 8 (found 12); 1 element(s) in sample(s) 0"
    text = str(report)
    assert "hint: 12 lies between the multiples 8 and 16" in text and "[code=not_a_multiple, count=1, value=12]" in text
    v = only(tc.check({"x": torch.tensor([[-3]])}, spec()))
    assert v.hint == "-3 lies between the multiples -8 and 0"


def test_a_spec_hint_and_severity_apply_by_code():
    s = spec(hints={"not_a_multiple": "pad with pad_to_multiple_of=8"}, severity={"not_a_multiple": "warning"})
    report = tc.check({"x": torch.tensor([[16, 12]])}, s)
    assert report.ok and [(v.code, v.severity, v.hint) for v in report.warnings] == [
        ("not_a_multiple", "warning", "pad with pad_to_multiple_of=8")]


# --- the spec: k and the field it is given to are checked at load ---------------------------------------------------


@pytest.mark.parametrize("k, problem", [("0", "must be a positive integer such as 8 (at most 2**63 - 1), got 0"),
                                        ("-8", "must be a positive integer such as 8 (at most 2**63 - 1), got -8"),
                                        ("2.5", "must be a positive integer such as 8, got 2.5"),
                                        ("8.0", "must be a positive integer such as 8, got 8.0"),
                                        ("true", "must be a positive integer such as 8, got True"),
                                        ("'8'", "must be a positive integer such as 8, got '8'"),
                                        (str(2**63), "at most 2**63 - 1")])
def test_a_k_that_is_not_a_positive_integer_is_a_spec_error(tmp_path, k, problem):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nfields:\n  x: {{dtype: int64, shape: [B], multiple_of: {k}}}\n")
    with pytest.raises(tc.SpecError, match="fields.x.multiple_of") as info:
        tc.load_spec(path)
    assert problem in str(info.value) and str(path) in str(info.value)
    assert "Traceback" not in str(info.value)


def test_a_float_field_is_a_spec_error_at_load(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nfields:\n  x: {dtype: [int64, float32], shape: [B], multiple_of: 8}\n")
    with pytest.raises(tc.SpecError, match="fields.x.multiple_of: needs an integer field, but x accepts float32"):
        tc.load_spec(path)


# --- the strategies and the scan -------------------------------------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_strategies_build_valid_and_singly_broken_batches(data):
    s = tc.BatchSpec(name="padded", fields={
        "x": {"dtype": ["int64", "int8", "uint8"], "shape": ["B", "L"], "multiple_of": 8, "min": 0, "max": 100,
              "allow": [-100]},
        "y": {"dtype": "int32", "shape": ["B"], "multiple_of": 3, "values": [0, 2, 3, 9, 10]}})
    batch = data.draw(valid_batches(s, B=(1, 3), L=(1, 6)))
    assert tc.check(batch, s, backend="torch").ok
    assert all(int(v) % 8 == 0 or int(v) == -100 for v in batch["x"].flatten())
    assert set(batch["y"].tolist()) <= {0, 3, 9}
    broken, expected = data.draw(malformed_batches(s, codes=["not_a_multiple"], B=(1, 3), L=(1, 6)))
    v = only(tc.check(broken, s, backend="torch"))
    assert (v.field, v.code, v.samples, v.count) == (expected.field, "not_a_multiple", expected.samples, 1)


def test_a_scan_checks_it_element_by_element(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="scans read Parquet: pip install pyarrow (in the test extra)")
    pq = pytest.importorskip("pyarrow.parquet", reason="scans read Parquet: pip install pyarrow (in the test extra)")
    from tritoncheck.scanning.engine import _per_sample, scan

    s = spec(shape=("B", "L"))
    assert _per_sample(compile_plan(s))
    ids = [[8, 16], [0], [], [8, 9, 24], [40], [3, 5]]  # ragged: rows 3 and 5 hold values off their multiple
    pq.write_table(pa.table({"x": pa.array(ids, pa.list_(pa.int32()))}), tmp_path / "x.parquet")
    report = scan(s, tmp_path / "x.parquet", backend="torch")
    assert [(e["sample"], e["code"], e["value"]) for e in report["violations"]] == [
        (3, "not_a_multiple", 9), (5, "not_a_multiple", 3)]
