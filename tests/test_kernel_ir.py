"""The kernel IR: grouping, one load per field and group, typing, host scalars, the buffer layout,
the ops handlers (every backend implements every op), and exact C literals."""

from __future__ import annotations

import math
import struct

import pytest
import torch

import tritoncheck as tc
from tritoncheck.dtypes import INT64_MAX, INT64_MIN, int_limit
from tritoncheck.plan.lower import compile_plan
from tritoncheck.spec.schema import spec_from_dict
from tritoncheck.codegen import c
from tritoncheck.kernel import ir
from tritoncheck.kernel.decode import PointOps
from tritoncheck.codegen.triton import TritonCodegen

BERT = dict(vocab_size=50, max_position_embeddings=16, type_vocab_size=2, num_labels=5)


def kernel_for(spec: tc.BatchSpec, dtypes: dict[str, torch.dtype] | None = None, contiguous: bool = True) -> ir.Kernel:
    plan = compile_plan(spec)
    dtypes = dtypes or {}
    fields = {f.name: ir.FieldSig(f.name, dtypes.get(f.name, f.dtypes[0]), f.axes, contiguous) for f in plan.fields}
    return ir.lower(plan, plan.checks, fields)


def small_spec(fields: dict, rules: list | None = None, **params) -> tc.BatchSpec:
    """An in-memory spec (as a YAML file would give it), parameters filled."""
    return spec_from_dict({"name": "t", "fields": fields, "rules": rules or []}, "t.yaml").with_params(**params)


def ops_of(ops, name=None):
    out = []
    for op in ops:
        if op.name == "reduction":
            out += ops_of(op.args[2], name)
        if name is None or op.name == name:
            out.append(op)
    return out


def test_every_backend_handler_implements_every_op():
    assert ir.missing_ops(c.CCodegen) == []
    assert ir.missing_ops(PointOps) == []
    assert ir.missing_ops(TritonCodegen) == []  # (it needs no triton to import)


def test_walk_names_the_op_a_handler_lacks():
    class NoLess:
        def load(self, op, field, index):
            return "x"

        def const(self, op, value):
            return "1"

    k = kernel_for(tc.load_spec("bert-sequence-classification", **BERT))
    with pytest.raises(NotImplementedError, match="'lt'"):
        ir.walk(k.groups[0].ops, NoLess(), {})


def test_bert_groups_by_iteration_space_and_loads_each_field_once():
    k = kernel_for(tc.load_spec("bert-sequence-classification", **BERT))
    assert [(g.axes, g.reduce) for g in k.groups] == [(("B", "L"), False), (("B",), False), (("B",), True)]
    # every check has exactly one predicate, in exactly one group
    assert sorted(c for g in k.groups for c, _ in g.checks) == list(range(len(k.checks)))
    for g in k.groups:
        loads = [(op.args[0], op.args[1]) for op in ops_of(g.ops, "load")]
        assert len(loads) == len(set(loads)), f"a field is loaded twice in group {g.axes}"
    assert k.groups[0].elementwise and not k.groups[2].elementwise
    assert k.sizes == ("B", "L") and k.fixed == {}


def test_a_sentinel_compare_is_computed_once_for_min_and_max():
    spec = small_spec({"y": {"dtype": "int64", "shape": ["B"], "min": 0, "max": 4, "allow": [-100]}})
    k = kernel_for(spec)
    (g,) = k.groups
    sentinel = [op for op in g.ops if op.name == "const" and op.args == (-100,)]
    assert len(sentinel) == 1
    assert len([op for op in g.ops if op.name == "ne"]) == 1


def test_layout_is_one_buffer_for_counts_firsts_and_samples():
    k = kernel_for(tc.load_spec("bert-sequence-classification", **BERT))
    n = len(k.checks)
    lay = k.layout
    assert lay.first(3) == 3 and lay.count(3) == n + 3
    assert lay.sample_base(0) == (2 * n, 0)
    assert lay.length(batch=7) == 2 * n + n * 7  # every BERT check runs over B
    ce = kernel_for(tc.load_spec("cross-entropy"))
    rows = [r for r in ce.layout.batch_rows]
    assert rows[-1] == -1  # any(target != -100) is over the whole batch: a count slot, no sample row
    assert ce.layout.length(5) == 2 * len(ce.checks) + (len(ce.checks) - 1) * 5


def _compare_kinds(k: ir.Kernel) -> list[str]:
    compares = ("lt", "le", "gt", "ge", "eq", "ne")
    return [op.args[0].kind for g in k.groups for op in ops_of(g.ops) if op.name in compares]


@pytest.mark.parametrize(
    ("rule", "dtypes", "kind"),
    [
        ("x < 0.5", {"x": torch.int64}, "i"),  # int tensor vs a constant: exactly, as x < 1 (docs/semantics.md)
        ("x < 2", {"x": torch.float32}, "f"),
        ("x < 0.1", {"x": torch.float64}, "d"),
        ("x < y", {"x": torch.float32, "y": torch.float64}, "d"),
        ("x < sum(y)", {"x": torch.float32, "y": torch.float64}, "f"),  # a 0-d float64 does not lift a float32 tensor
        ("x < sum(y)", {"x": torch.int64, "y": torch.float64}, "d"),  # but does lift an int tensor
        ("(x > 0) < (y > 0)", {"x": torch.int64, "y": torch.int64}, "i"),  # bools compare as int64
    ],
)
def test_comparisons_meet_in_torchs_promoted_kind(rule, dtypes, kind):
    spec = small_spec({"x": {"dtype": ["int64", "float32", "float64"], "shape": ["B"]},
                       "y": {"dtype": ["int64", "float32", "float64"], "shape": ["B"]}}, [rule])
    k = kernel_for(spec, dtypes)
    assert _compare_kinds(k)[0] == kind


def test_floordiv_by_a_python_float_is_float64_as_torchs_backend_divides():
    spec = small_spec({"x": {"dtype": "int64", "shape": ["B"]}}, ["x // 2.5 >= 0", "x // 2 >= 0", "x * 2.5 >= 0"])
    k = kernel_for(spec)
    kinds = [op.kind for op in ops_of(k.groups[0].ops) if op.name in ("floordiv", "mul")]
    assert kinds == ["d", "i", "f"]


def test_bools_enter_arithmetic_as_int64():
    spec = small_spec({"m": {"dtype": "bool", "shape": ["B"]}}, ["(m > 0) + (m > 0) >= 0"])
    k = kernel_for(spec)
    add = ops_of(k.groups[0].ops, "add")[0]
    assert add.kind == "i" and all(a.kind == "i" for a in add.args)


def test_bounds_over_dims_are_host_scalars_with_an_exact_always_flag():
    spec = small_spec({"x": {"dtype": "int64", "shape": ["B", "L"], "max": "L * L - 1"}})
    k = kernel_for(spec)
    limit, always = k.scalars
    assert (limit.side, limit.part, always.part) == ("max", "limit", "always")
    assert limit.value({"L": 4}) == 15 and always.value({"L": 4}) == 0
    assert limit.value({"L": 2**40}) == INT64_MAX and always.value({"L": 2**40}) == 0  # no int64 is above it
    names = [op.name for op in k.groups[0].ops if op.name in ("scalar", "or_", "gt")]
    assert names == ["scalar", "scalar", "gt", "or_"]
    assert k.int_args()[-2:] == [("scalar", 0), ("scalar", 1)]
    low = kernel_for(small_spec({"x": {"dtype": "int64", "shape": ["B", "L"], "min": "L * L"}}))
    assert [h.value({"L": 2**40}) for h in low.scalars] == [INT64_MIN, 1]  # every int64 is below it


def test_int_limit_is_exact_where_an_int64_cannot_say_it():
    assert ir.int_limit is int_limit  # one definition, shared with the torch backend
    assert int_limit(0.5, "min") == 1 and int_limit(0.5, "max") == 0
    assert int_limit(-0.5, "min") == 0 and int_limit(-0.5, "max") == -1
    assert int_limit(math.nan, "min") == "never" and int_limit(math.nan, "max") == "never"
    assert int_limit(math.inf, "min") == "always" and int_limit(math.inf, "max") == "never"
    assert int_limit(2**64, "min") == "always" and int_limit(-(2**64), "max") == "always"
    assert int_limit(INT64_MIN, "min") == "never" and int_limit(INT64_MAX, "max") == "never"
    assert int_limit(INT64_MAX, "min") == INT64_MAX


def test_sentinels_an_int_tensor_cannot_equal_are_dropped():
    # a field that accepts ints and floats may carry a fractional sentinel; an int64 batch never equals it
    spec = small_spec({"y": {"dtype": ["int64", "float32"], "shape": ["B"], "min": 0, "allow": [0.5, -100]}})
    consts = [op.args[0] for op in kernel_for(spec).groups[0].ops if op.name == "const"]
    assert consts == [0, -100]
    consts_f = [op.args[0] for op in kernel_for(spec, {"y": torch.float32}).groups[0].ops if op.name == "const"]
    assert consts_f == [0.0, 0.5, -100.0]


def test_an_unknown_check_kind_is_refused():
    plan = compile_plan(tc.load_spec("mse"))
    fields = {f.name: ir.FieldSig(f.name, torch.float32, f.axes, True) for f in plan.fields}

    class Monotonic:  # a check kind nobody registered
        axes = ("N", "D")

    with pytest.raises(ir.Unsupported, match="Monotonic"):
        ir.lower(plan, (Monotonic(),), fields)


def test_a_subject_is_lowered_for_the_decoder():
    k = kernel_for(tc.load_spec("layoutlmv3-token-classification", vocab_size=50, max_position_embeddings=16,
                                pad_token_id=1, type_vocab_size=2, max_2d_position_embeddings=1001,
                                num_channels=3, input_size=4, num_labels=5))
    rules = [i for i, ch in enumerate(k.checks) if ch.kind == "rule"]
    assert set(k.subjects) == set(rules)
    seq = next(i for i in rules if k.checks[i].code == "sequence_too_long")
    assert k.subjects[seq].value.kind == "i"  # sum(input_ids != pad, dim=L)


@pytest.mark.parametrize("v", [0.0, -0.0, 0.1, -2.5, 1e-45, 5e-324, 3.4028234663852886e38, 1e308, 2.0**-149, 1234567.0])
def test_float_literals_are_exact(v):
    for kind in ("f", "d"):
        x = ir.convert(v, kind)
        if not math.isfinite(x):
            continue  # 1e308 as float32 is inf: a macro (next test)
        text = c.literal(x, kind)
        body = text.strip("()").lstrip("-").removesuffix("f")
        back = float.fromhex(body) * (-1 if text.startswith("(-") else 1)
        assert struct.pack("<d", back) == struct.pack("<d", float(x)), text
        if kind == "f":
            assert text.endswith("f") or text.endswith("f)")


def test_special_literals_use_macros_and_int64_extremes_are_spelled_safely():
    assert c.literal(math.inf, "f") == "(INFINITY)" and c.literal(-math.inf, "d") == "(-(double)INFINITY)"
    assert c.literal(math.nan, "f") == "(NAN)"
    assert c.literal(INT64_MIN, "i") == "(-INT64_C(9223372036854775807) - 1)"
    assert c.literal(INT64_MAX, "i") == "INT64_C(9223372036854775807)" and c.literal(-5, "i") == "(-INT64_C(5))"
    assert c.literal(True, "b") == "1"


def test_pretty_lists_groups_ops_and_predicates():
    text = kernel_for(tc.load_spec("cross-entropy")).pretty()
    assert "group 0 over [N, C]" in text and "any over [N]" in text and "check 3 fails where" in text


def test_an_int_host_scalar_past_int64_is_left_to_the_torch_backend():
    """torch's backend computes `L * 2**62` past int64 as a float (float32 against an int field):
    a kernel lowered for int64 cannot say that, so evaluating it raises Unsupported (-> torch)."""
    k = kernel_for(small_spec({"x": {"dtype": "int64", "shape": ["B", "L"]}}, ["x < L * 4611686018427387904"]))
    (h,) = k.scalars
    assert h.value({"L": 1}) == 2**62
    with pytest.raises(ir.Unsupported, match="past int64"):
        h.value({"L": 2})


def test_the_truth_of_a_host_number_is_decided_on_the_host():
    k = kernel_for(small_spec({"x": {"dtype": "int64", "shape": ["B"]}}, ["x > 0 where B - 1"]))
    (h,) = k.scalars
    assert h.py == "bool" and h.value({"B": 1}) == 0 and h.value({"B": 2**70}) == 1
