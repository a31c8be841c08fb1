"""The torch reference backend: semantics of each check kind, and how often it reads each tensor."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tritoncheck as tc
from tritoncheck.spec.schema import spec_from_dict

LV3 = dict(vocab_size=50, max_position_embeddings=20, pad_token_id=1, type_vocab_size=1, max_2d_position_embeddings=1024,
           num_channels=3, input_size=8, num_labels=3)


def spec(fields, rules=(), params=None, **extra):
    return spec_from_dict({"name": "t", "fields": fields, "rules": list(rules), "params": params or {}, **extra}, "t")


def found(report):
    return [(v.location, v.code, v.count, v.samples, v.value) for v in report.violations]


def test_range_with_allowed_sentinel():
    s = spec({"y": {"dtype": "int64", "shape": ["B", "L"], "min": 0, "max": 4, "allow": [-100]}})
    y = torch.tensor([[0, -100, 4], [5, -1, -100]])
    assert found(tc.check({"y": y}, s)) == [("y[1, 1]", "below_min", 1, (1,), -1), ("y[1, 0]", "above_max", 1, (1,), 5)]


def test_fractional_bound_is_refused_on_an_integer_field_and_rounds_inward_on_a_mixed_one():
    with pytest.raises(tc.SpecError, match="fields.y.min: 0.5 is not an integer, but y holds integers"):
        spec({"y": {"dtype": "int64", "shape": ["B"], "min": 0.5, "max": 2.5}})
    s = spec({"y": {"dtype": ["int64", "float32"], "shape": ["B"], "min": 0.5, "max": 2.5}})
    assert tc.check({"y": torch.tensor([1, 2])}, s).ok
    assert [v.code for v in tc.check({"y": torch.tensor([0, 3])}, s).violations] == ["below_min", "above_max"]
    assert [v.code for v in tc.check({"y": torch.tensor([0.5, 2.6])}, s).violations] == ["above_max"]


def test_float_bounds_compare_in_float32_like_the_kernel():
    s = spec({"p": {"dtype": "float", "shape": ["B"], "max": 0.1}})
    at_bound = torch.tensor([0.1], dtype=torch.float32)  # float32(0.1) > 0.1 as a double, equal in float32
    assert tc.check({"p": at_bound}, s).ok
    assert not tc.check({"p": torch.nextafter(at_bound, torch.tensor(1.0))}, s).ok


def test_value_set_and_bool_masks():
    s = spec({"m": {"dtype": ["int64", "bool", "float"], "shape": ["B"], "values": [0, 1]}})
    assert tc.check({"m": torch.tensor([True, False])}, s).ok
    assert tc.check({"m": torch.tensor([0.0, 1.0])}, s).ok
    assert found(tc.check({"m": torch.tensor([1, 2, 0, 2])}, s)) == [("m[1]", "not_in_set", 2, (1, 3), 2)]
    assert found(tc.check({"m": torch.tensor([1.0, 0.5])}, s)) == [("m[1]", "not_in_set", 1, (1,), 0.5)]


def test_finite_finds_nan_and_inf_in_half_precision():
    s = spec({"x": {"dtype": "float", "shape": ["B", "D"], "finite": True}})
    x = torch.zeros(3, 4, dtype=torch.bfloat16)
    x[1, 2], x[2, 0] = float("inf"), float("nan")
    v = tc.check({"x": x}, s).violations[0]
    assert (v.location, v.count, v.samples, v.value) == ("x[1, 2]", 2, (1, 2), float("inf"))


def test_rules_with_where_arange_and_reductions():
    s = tc.load_spec("ctc")
    batch = {"log_probs": torch.randn(6, 3, 4).log_softmax(-1), "targets": torch.tensor([[1, 0, 9], [2, 3, 0], [1, 1, 1]]),
             "input_lengths": torch.tensor([6, 6, 2]), "target_lengths": torch.tensor([1, 2, 3])}
    # row 0: blank past its length (fine), 9 past its length (fine); row 2: length 3 > input 2
    assert found(tc.check(batch, s)) == [("target_lengths[2]", "rule_failed", 1, (2,), 3)]
    batch["targets"][1, 1] = 0
    assert ("targets[1, 1]", "rule_failed", 1, (1,), 0) in found(tc.check(batch, s))


def test_per_sample_rules_report_samples(tmp_path):
    s = tc.load_spec("layoutlmv3-token-classification", **LV3)
    ids = torch.full((3, 20), 7)
    ids[1, 18:] = 1  # 18 non-pad tokens: the longest allowed row
    ids[2, 19:] = 1  # 19: one too many
    report = tc.check({"input_ids": ids, "bbox": torch.zeros(3, 20, 4, dtype=torch.long)}, s)
    assert [(v.location, v.code, v.samples, v.value) for v in report.violations] == [
        ("input_ids[0]", "sequence_too_long", (0, 2), 20)]


def test_locate_on_a_transposed_view_gives_logical_indices():
    s = spec({"x": {"dtype": "int64", "shape": ["B", "L"], "max": 5}})
    x = torch.zeros(4, 3, dtype=torch.long)
    x[2, 1] = 9  # x.t()[1, 2]
    assert found(tc.check({"x": x.t()}, s)) == [("x[1, 2]", "above_max", 1, (1,), 9)]


def test_axes_are_matched_by_name_not_position():
    s = spec({"a": {"dtype": "int64", "shape": ["L", "B"]}, "n": {"dtype": "int64", "shape": ["B"]}},
             rules=["a < n"])
    a = torch.tensor([[0, 0], [1, 5]])  # a[l, b] < n[b]; n = [2, 5]
    assert found(tc.check({"a": a, "n": torch.tensor([2, 5])}, s)) == [("a[1, 1]", "rule_failed", 1, (1,), 5)]


class _Reads(TorchDispatchMode):
    """Records every non-view aten op that takes one of the watched tensors."""

    VIEWS = ("aten.select", "aten.view", "aten.slice", "aten.expand", "aten.permute", "aten.reshape", "aten._to_copy")

    def __init__(self, watch):
        super().__init__()
        self.ptrs = {t.untyped_storage().data_ptr(): name for name, t in watch.items()}
        self.reads: dict[str, list[str]] = {name: [] for name in watch}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not str(func).startswith(self.VIEWS):
            seen = set()
            for a in args:
                if isinstance(a, torch.Tensor):
                    name = self.ptrs.get(a.untyped_storage().data_ptr())
                    if name and name not in seen:
                        seen.add(name)
                        self.reads[name].append(str(func).split(".")[1])
        return func(*args, **(kwargs or {}))


def test_a_valid_batch_reads_each_tensor_once_plus_its_rules():
    s = tc.load_spec("layoutlmv3-token-classification", **LV3)
    batch = {"input_ids": torch.full((2, 6), 7), "bbox": torch.tensor([10, 20, 30, 40]).repeat(2, 6, 1),
             "labels": torch.zeros(2, 6, dtype=torch.long), "attention_mask": torch.ones(2, 6, dtype=torch.long),
             "pixel_values": torch.randn(2, 3, 8, 8)}
    tc.check(batch, s)  # compile the plan outside the count
    with _Reads(batch) as mode:
        assert tc.check(batch, s, backend="torch").ok
    assert mode.reads == {
        "input_ids": ["aminmax"],  # range checks; the non-pad count per row is settled by L <= bound
        "bbox": ["aminmax", "le", "le"],  # range checks, then the two corner rules
        "labels": ["aminmax"],  # range checks; any(labels != -100) is settled by the min/max
        "attention_mask": ["aminmax"],  # value set; the per-row any() is settled by min >= 1
        "pixel_values": ["aminmax"],  # finiteness from the min/max alone
    }


def test_the_exact_pass_runs_only_where_the_summary_cannot_clear():
    s = tc.load_spec("cross-entropy")
    batch = {"input": torch.randn(4, 3), "target": torch.tensor([0, -100, 2, 1])}
    with _Reads(batch) as mode:
        assert tc.check(batch, s, backend="torch").ok
    # -100 is below min, so the exact pass must look; the input needs only its summary
    assert mode.reads["input"] == ["aminmax"]
    assert mode.reads["target"][0] == "aminmax" and "lt" in mode.reads["target"]


def test_nan_is_left_to_the_finite_check_and_inf_breaks_a_bound():
    s = spec({"x": {"dtype": "float", "shape": ["B"], "min": -1, "max": 1}})
    assert tc.check({"x": torch.tensor([0.0, float("nan")])}, s).ok  # the summary's NaN falls through to the exact pass
    assert found(tc.check({"x": torch.tensor([0.0, float("inf")])}, s)) == [("x[1]", "above_max", 1, (1,), float("inf"))]
    s = spec({"x": {"dtype": "float", "shape": ["B"], "min": -1, "max": 1, "finite": True}})
    assert tc.check({"x": torch.tensor([0.0, float("nan")])}, s).codes == {"non_finite"}


def test_a_selected_value_does_not_promote_a_dimensioned_operand(backend):
    """`program_id - arange[0]`: the 0-d float64 selection leaves the float32 field's type, as in torch
    (long-fuzz finding: the reference computed it in float64, the compiled backends in float32)."""
    from tritoncheck.spec.schema import spec_from_dict

    spec = spec_from_dict({"name": "t", "batch_dim": "T", "fields": {
        "program_id": {"dtype": "float32", "shape": ["T"]}, "arange": {"dtype": "float64", "shape": ["L"]}},
        "rules": ["(program_id - arange[0]) == 5"]}, "t.yaml")
    a = torch.tensor([2.910159111022949, 2.123459577560425], dtype=torch.float32)
    b = torch.tensor([970.0530018065531, 707.819864399788], dtype=torch.float64)
    report = tc.check({"program_id": a, "arange": b}, spec, backend=backend)
    assert [v.value for v in report.violations] == [(a - b[0])[0].item()]  # torch's own float32 difference
