"""`monotonic: <dim>`: a field never decreases along a named axis (position_ids along L).

The kind is one section of tritoncheck/checks/registry.py; every backend runs it natively and reports the
first position i where x[i] < x[i-1], the number of such positions, and the samples holding one.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tritoncheck as tc
from report_compare import checked_like_torch, only
from tritoncheck.plan.lower import MonotonicCheck, compile_plan
from tritoncheck.strategies import malformed_batches, valid_batches


def spec(dtype="int64", shape=("B", "L"), axis="L", **extra) -> tc.BatchSpec:
    return tc.BatchSpec(name="pos", fields={"position_ids": {"dtype": dtype, "shape": list(shape), "monotonic": axis,
                                                              **extra}})


def test_option_lowers_to_one_check():
    (c,) = compile_plan(spec()).checks
    assert isinstance(c, MonotonicCheck) and (c.field, c.axis, c.axes, c.code) == ("position_ids", "L", ("B", "L"),
                                                                                  "not_monotonic")
    assert "position_ids is non-decreasing along L" in compile_plan(spec()).pretty()


@pytest.mark.parametrize("axis, problem", [("T", "'T' is not a named axis of position_ids"),
                                           ("pos", "'pos' is not a named axis")])
def test_an_axis_the_field_lacks_is_a_spec_error_naming_the_key(tmp_path, axis, problem):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nfields:\n  position_ids: {{dtype: int64, shape: [B, L, 2], monotonic: {axis}}}\n")
    with pytest.raises(tc.SpecError, match="fields.position_ids.monotonic") as info:
        tc.load_spec(path)
    assert problem in str(info.value) and str(path) in str(info.value)


def test_a_non_string_axis_is_a_spec_error(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nfields:\n  position_ids: {dtype: int64, shape: [B, L], monotonic: [L]}\n")
    with pytest.raises(tc.SpecError, match="fields.position_ids.monotonic"):
        tc.load_spec(path)


def test_yaml_round_trip_keeps_the_option():
    s = spec()
    assert "monotonic: L" in s.to_yaml()


def test_reports_first_position_count_and_samples(backend):
    x = torch.tensor([[0, 1, 2, 3, 4], [0, 1, 0, 1, 0], [7, 7, 7, 7, 7], [3, 2, 1, 0, 0]])
    v = only(checked_like_torch({"position_ids": x}, spec(), backend))
    assert (v.field, v.code, v.index, v.value, v.count, v.samples) == ("position_ids", "not_monotonic", (1, 2), 0, 5,
                                                                       (1, 3))
    assert v.rule == "position_ids is non-decreasing along L"


def test_valid_and_constant_batches_pass(backend):
    for x in (torch.arange(12).reshape(3, 4), torch.full((2, 6), 5), torch.zeros(2, 1, dtype=torch.int64),
              torch.tensor([[0, 0, 1, 1, 2]])):
        assert checked_like_torch({"position_ids": x}, spec(), backend).ok


@pytest.mark.parametrize("dtype", ["int32", "float32", "float16", "bfloat16", "float64"])
def test_dtypes(backend, dtype):
    x = torch.tensor([[0.0, 2.0, 1.0, 3.0], [0.0, 0.0, 1.0, 2.0]]).to(getattr(torch, dtype))
    v = only(checked_like_torch({"position_ids": x}, spec(dtype), backend))
    assert (v.index, v.count, v.samples, v.value) == ((0, 2), 1, (0,), 1.0)


def test_nan_breaks_nothing(backend):
    x = torch.tensor([[0.0, float("nan"), 1.0, 2.0]])  # NaN compares false: `finite: true` is what rejects it
    assert checked_like_torch({"position_ids": x}, spec("float32"), backend).ok


def test_along_a_leading_axis_of_a_non_contiguous_field(backend):
    # shape [L, B] given as a transposed view: monotonic along L, the first axis
    x = torch.tensor([[0, 1, 2], [1, 0, 3], [2, 2, 1]]).t().contiguous().t()
    assert not x.is_contiguous()
    v = only(checked_like_torch({"position_ids": x}, spec(shape=("L", "B")), backend))
    assert (v.index, v.count, v.samples) == ((1, 1), 2, (1, 2))


def test_expanded_views(backend):
    row = torch.tensor([0, 1, 3, 2])
    v = only(checked_like_torch({"position_ids": row.expand(5, 4)}, spec(), backend))  # every sample breaks at 3
    assert (v.index, v.count, v.samples) == ((0, 3), 5, (0, 1, 2, 3, 4))
    col = torch.tensor([[4], [1]]).expand(2, 6)  # constant along L: holds
    assert checked_like_torch({"position_ids": col}, spec(), backend).ok


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_strategies_build_valid_and_singly_broken_batches(data):
    s = spec(min=0, max=30)
    batch = data.draw(valid_batches(s, B=(1, 3), L=(1, 8)))
    assert tc.check(batch, s, backend="torch").ok
    broken, expected = data.draw(malformed_batches(s, codes=["not_monotonic"], B=(1, 3), L=(2, 8)))
    v = only(tc.check(broken, s, backend="torch"))
    assert (v.field, v.code, v.samples, v.count) == (expected.field, "not_monotonic", expected.samples, 1)
