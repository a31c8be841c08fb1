"""Hostile and odd specs and inputs (issue 10, items 2, 4, 5, 6): each is a SpecError at load that
names the file and the key path, or a violation in the report -- never an internal traceback --
and every backend gives the same report. Expanded (zero-stride) views are checked without
allocating their logical size."""

from __future__ import annotations

import json
import math
import re
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import tritoncheck as tc
from tritoncheck.spec.schema import spec_from_dict
from tritoncheck.plan.lower import compile_plan


def load(tmp_path, text: str, **params):
    path = tmp_path / "hostile.yaml"
    path.write_text(textwrap.dedent(text))
    return tc.load_spec(path, **params)


def spec(fields, rules=(), params=None):
    return spec_from_dict({"name": "t", "fields": fields, "rules": list(rules), "params": params or {}}, "t.yaml")


def found(report):
    """The report as comparable tuples (NaN values compare by their repr)."""
    return [(v.field, v.code, v.count, v.samples, v.index, repr(v.value)) for v in report.violations]


FIELD = "name: hostile\nparams: {{n: 3}}\nfields:\n  labels: {{dtype: {dtype}, shape: [B, L]{extra}}}\nrules: {rules}\n"


@pytest.mark.parametrize(
    "dtype, extra, rules, params, where, what",
    [
        ("int64", ", allow: [0.5]", [], {}, "fields.labels.allow.0", "0.5 is not an integer, but labels holds integers"),
        ("int", ", min: -.inf", [], {}, "fields.labels.min", "-inf is not an integer, but labels holds integers"),
        ("int64", ", max: .nan", [], {}, "fields.labels.max", "nan is not an integer, but labels holds integers"),
        ("int64", ", max: 1e20", [], {}, "fields.labels.max", "1e+20 is outside the int64 range"),  # YAML reads 1e20 as text
        ("int64", ", max: 100000000000000000000.0", [], {}, "fields.labels.max", "1e+20 is outside the int64 range"),
        ("int64", ", values: [0, 10000000000000000000000000000000000000000]", [], {}, "fields.labels.values.1",
         "10000000000000000000000000000000000000000 is outside the int64 range, but labels holds integers"),
        ("bool", ", values: [0, 0.5]", [], {}, "fields.labels.values.1", "0.5 is not an integer"),
        ("int64", ", max: n", [], {"n": 2.5}, "fields.labels.max", "2.5 is not an integer"),
        ("float32", ", min: .nan", [], {}, "fields.labels.min", "nan never compares equal, less or greater; to reject NaN use finite: true"),
        ("float", ", allow: [.nan]", [], {}, "fields.labels.allow.0", "use finite: true"),
        ("float", ", max: n", [], {"n": float("nan")}, "parameter n", "must be a finite number, got nan"),
        ("int64", "", ["arange(L) < L"], {}, "rules.0", "reads no field"),
        ("int64", "", ["all(arange(L) >= 0)"], {}, "rules.0", "reads no field"),
        ("int64", "", ["L <= 5 where arange(L) > 0"], {}, "rules.0", "reads no field"),
        ("int64", "", ["0 > 1"], {}, "rules.0", "'0 > 1' is false for every batch"),
        ("int64", "", ["n > 5"], {}, "rules.0", "'n > 5' is false for every batch (with these parameters)"),
    ],
)
def test_refused_at_load_naming_file_and_key_path(tmp_path, dtype, extra, rules, params, where, what):
    with pytest.raises(tc.SpecError) as err:
        load(tmp_path, FIELD.format(dtype=dtype, extra=extra, rules=json.dumps(rules)), **params)
    msg = str(err.value)
    assert "hostile.yaml" in msg and where in msg and what in msg


def test_a_size_past_the_integer_range_is_refused_at_load(tmp_path):
    with pytest.raises(tc.SpecError) as err:
        load(tmp_path, """\
            name: hostile
            params: {n: 1099511627776}
            fields:
              x: {dtype: int64, shape: [B, 'n * n * n * n']}
            """)
    assert "hostile.yaml" in str(err.value) and "fields.x.shape: 'n * n * n * n': constant expression is out of range" in str(err.value)


def test_bounds_and_rules_past_int64_over_dims(backend):
    """`L * 2**62` is past int64 for L >= 2: it compares as the number it is, never wrapped."""
    big = "L * 4611686018427387904"
    s = spec({"x": {"dtype": "int64", "shape": ["B", "L"]}, "p": {"dtype": "float32", "shape": ["B", "L"]}},
             [f"x < {big}", f"p < {big}", f"x > -{big}", f"x + {big} > 0"])
    batch = {"x": torch.tensor([[0, 2**63 - 1, -(2**63)]]), "p": torch.tensor([[0.0, 1e19, -1.0]])}
    assert found(tc.check(batch, s, backend=backend)) == []
    s = spec({"x": {"dtype": "int64", "shape": ["B", "L"]}}, [f"x > {big}"])
    assert [(v.count, v.index) for v in tc.check({"x": batch["x"]}, s, backend=backend).violations] == [(3, (0, 0))]


def test_constant_true_rules_are_dropped_and_infinite_float_bounds_are_no_ops(tmp_path, backend):
    s = load(tmp_path, """\
        name: hostile
        params: {n: 3}
        fields:
          p: {dtype: float32, shape: [B], min: -.inf, max: .inf}
        rules: ['1 == 1', 'n >= 3', 'all(1 > 0)']
        """)
    assert "  host " not in compile_plan(s).pretty()  # nothing left to check on the host
    assert tc.check({"p": torch.tensor([1.0, -3e38, float("inf"), float("nan")])}, s, backend=backend).ok


def test_constant_parts_of_a_rule_over_data(backend):
    """A constant expression fails wherever its `where` holds; a constant `where` applies nowhere or everywhere."""
    s = spec({"x": {"dtype": "float16", "shape": ["B"]}},
             ["0 where x > 0", "any(abs(-(0))) where x > 2", "x > 0 where 0", "x > -1 where 1", "all(x > 5) where any(1)",
              "1 where x > 0"])
    assert "x > 0 where 0" not in compile_plan(s).pretty() and "1 where x > 0" not in compile_plan(s).pretty()
    report = tc.check({"x": torch.tensor([3.0, 0.0, -1.0], dtype=torch.float16)}, s, backend=backend)
    assert [(v.rule, v.count, v.samples, v.index, v.value) for v in report.violations] == [
        ("0 where x > 0", 1, (0,), (0,), 0), ("any(abs(-(0))) where x > 2", 1, (0,), (0,), False),
        ("x > -1 where 1", 1, (2,), (2,), -1.0), ("all(x > 5) where any(1)", 1, (), (), False)]


def test_a_rule_over_dims_keeps_its_where(backend):
    s = spec({"x": {"dtype": "int64", "shape": ["B", "L"]}}, ["L <= 2 where B > 1", "sum(L) <= 9", "any(L - 5)"])
    assert tc.check({"x": torch.zeros(1, 4, dtype=torch.long)}, s, backend=backend).ok
    report = tc.check({"x": torch.zeros(2, 10, dtype=torch.long)}, s, backend=backend)
    assert [(v.code, v.rule, v.value) for v in report.violations] == [
        ("dim_bound", "L <= 2 where B > 1 fails with B=2 (from x), L=10 (from x)", 10),
        ("dim_bound", "sum(L) <= 9 fails with L=10 (from x)", 10)]


def test_a_where_over_dims_only(backend):
    s = spec({"x": {"dtype": "int64", "shape": ["B"]}}, ["x > 0 where B - 1", "x where B"])
    report = tc.check({"x": torch.tensor([0, 2, -1])}, s, backend=backend)
    assert [(v.rule, v.count, v.samples, v.value) for v in report.violations] == [
        ("x > 0 where B - 1", 2, (0, 2), 0), ("x where B", 1, (0,), 0)]
    assert tc.check({"x": torch.tensor([-1])}, spec({"x": {"dtype": "int64", "shape": ["B"]}}, ["x > 0 where B - 1"]),
                    backend=backend).ok


def test_floor_division_and_modulo_by_zero(backend):
    """Integers: a // 0 == 0 and a % 0 == a (so a == (a // b) * b + a % b); floats: IEEE, as torch."""
    s = spec({"x": {"dtype": "int64", "shape": ["B", "L"]}, "y": {"dtype": "int64", "shape": ["B", "L"]},
              "p": {"dtype": "float32", "shape": ["B"]}, "q": {"dtype": "float32", "shape": ["B"]}},
             ["x == (x // y) * y + x % y", "x // y == 0 where y == 0", "x % y == x where y == 0",
              "L % (L - 2) == L", "L // (L - 2) == 0",
              "p // q > 1e30 where (q == 0) & (p > 0)", "p // q < -1e30 where (q == 0) & (p < 0)",
              "p % q != p % q where q == 0"])
    batch = {"x": torch.tensor([[7, -7], [5, 0]]), "y": torch.tensor([[0, 0], [2, -3]]),
             "p": torch.tensor([1.5, -2.0]), "q": torch.tensor([0.0, 0.0])}
    assert found(tc.check(batch, s, backend=backend)) == []
    failing = spec({"x": {"dtype": "int64", "shape": ["B"]}, "y": {"dtype": "int64", "shape": ["B"]}}, ["x // y >= 1"])
    report = tc.check({"x": torch.tensor([3, 7, 4]), "y": torch.tensor([0, 2, 0])}, failing, backend=backend)
    assert found(report) == [("x", "rule_failed", 2, (0, 2), (0,), "0")]


def test_bools_count_as_integers_in_arithmetic(backend):
    s = spec({"x": {"dtype": "float32", "shape": ["B"]}},
             ["isfinite(x) % 2 == 1", "isfinite(x) + isfinite(x) == 2", "-isfinite(x) == -1", "abs(x > 0) <= 1",
              "isfinite(x) // 1 == 1", "sum(isfinite(x)) == B"])
    assert tc.check({"x": torch.tensor([1.0, 2.0])}, s, backend=backend).ok
    report = tc.check({"x": torch.tensor([1.0, float("nan"), 3.0])}, s, backend=backend)
    assert [(v.rule, v.count, v.index, v.value) for v in report.violations] == [
        ("isfinite(x) % 2 == 1", 1, (1,), 0), ("isfinite(x) + isfinite(x) == 2", 1, (1,), 0),
        ("-isfinite(x) == -1", 1, (1,), 0), ("isfinite(x) // 1 == 1", 1, (1,), 0), ("sum(isfinite(x)) == B", 1, (), 2)]


def test_a_newline_inside_a_rule(backend):
    s = spec({"x": {"dtype": "int64", "shape": ["B"]}}, ["(x >=\n 0)  # and a comment\n"])
    assert found(tc.check({"x": torch.tensor([1, -2])}, s, backend=backend)) == [("x", "rule_failed", 1, (1,), (1,), "-2")]
    with pytest.raises(tc.SpecError, match="rules.0.rule: not a valid expression"):
        spec({"x": {"dtype": "int64", "shape": ["B"]}}, ["x >=\n 0"])


def test_a_zero_d_field(backend):
    s = spec({"x": {"dtype": "int64", "shape": ["B"]}, "s": {"dtype": "int64", "shape": [], "min": 0}}, ["x <= s"])
    assert found(tc.check({"x": torch.tensor([1]), "s": torch.tensor(-1)}, s, backend=backend)) == [
        ("s", "below_min", 1, (), (), "-1"), ("x", "rule_failed", 1, (0,), (0,), "1")]
    assert found(tc.check({"x": torch.tensor([1, 7]), "s": torch.tensor(5)}, s, backend=backend)) == [
        ("x", "rule_failed", 1, (1,), (1,), "7")]


def test_a_dim_bound_by_a_field_that_failed_its_own_check(backend):
    s = spec({"x": {"dtype": "int64", "shape": ["B", "L", 4]}, "y": {"dtype": "int64", "shape": ["B"]}}, ["arange(L) < y"])
    y = torch.tensor([1, 5])
    for bad_x, code in ((torch.zeros(2, 3, 4), "dtype"), (torch.zeros(2, 3, 5, dtype=torch.long), "shape")):
        report = tc.check({"x": bad_x, "y": y}, s, backend=backend)
        assert [(v.field, v.code, v.count, v.samples) for v in report.violations] == [
            ("x", code, 1, ()), ("y", "rule_failed", 2, (0,))]


def test_indexing_past_a_dim_is_found_on_the_host(backend):
    s = spec({"x": {"dtype": "int64", "shape": ["B", "L"]}}, ["x[:, 0] <= x[:, 1]", "x[..., -2] >= 0", "x[:, 2] >= 0"])
    report = tc.check({"x": torch.tensor([[1], [2]])}, s, backend=backend)
    assert [(v.field, v.code, v.rule) for v in report.violations] == [
        ("x", "dim_bound", "x[:, 2] needs L >= 3, got L=1 (from x)")]
    assert report.skipped == ("x[:, 0] <= x[:, 1]", "x[..., -2] >= 0", "x[:, 2] >= 0")
    report = tc.check({"x": torch.tensor([[1, 0], [-1, 2]])}, s, backend=backend)
    assert [(v.code, v.rule, v.samples) for v in report.violations] == [
        ("dim_bound", "x[:, 2] needs L >= 3, got L=2 (from x)", ()),
        ("rule_failed", "x[:, 0] <= x[:, 1]", (0,)), ("rule_failed", "x[..., -2] >= 0", (1,))]
    assert report.skipped == ("x[:, 2] >= 0",)
    empty = tc.check({"x": torch.zeros(2, 0, dtype=torch.long)}, spec({"x": {"dtype": "int64", "shape": ["B", "L"]}},
                                                                  ["x[:, -1] >= 0"]), backend=backend)
    assert [v.rule for v in empty.violations] == ["x[:, -1] needs L >= 1, got L=0 (from x)"]


def _fake():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return torch.zeros(2, 3)


@pytest.mark.parametrize("make", [
    lambda: torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)]),
    _fake,
], ids=["nested-strided", "fake"])
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_tensors_without_checkable_values_are_reported(backend, make):
    s = spec({"x": {"dtype": "float32", "shape": ["B", "L"], "max": 1, "finite": True}})
    report = tc.check({"x": make()}, s, backend=backend)
    assert [(v.field, v.code) for v in report.violations] == [("x", "not_a_tensor")]
    assert report.skipped == ("x <= 1", "x is finite (no NaN or Inf)")


def test_value_sets_and_sentinels_compare_exactly_in_the_tensors_dtype(backend):
    """A field that accepts ints and floats: 0.5 never equals an int (no truncation to 0)."""
    s = spec({"m": {"dtype": ["int64", "float32"], "shape": ["B"], "values": [0.5, 1], "allow": [-0.5]},
              "e": {"dtype": ["int64", "float32"], "shape": ["B"], "values": [0.5]},
              "h": {"dtype": ["float32", "bfloat16"], "shape": ["B"], "values": [0, 10**40]}})
    ok = {"m": torch.tensor([0.5, -0.5]), "e": torch.tensor([0.5, 0.5]), "h": torch.tensor([0.0, float("inf")])}
    assert tc.check(ok, s, backend=backend).ok
    bad = {"m": torch.tensor([1, 0]), "e": torch.tensor([0, 0]),
           "h": torch.tensor([0.0, 1e-40], dtype=torch.bfloat16)}  # a bfloat16 denormal is not 0
    assert [(v.field, v.count, v.index) for v in tc.check(bad, s, backend=backend).violations] == [
        ("m", 1, (1,)), ("e", 2, (0,)), ("h", 1, (1,))]


# ---------------------------------------------------------------------------------------------
# Expanded views: checked on their stored values, reported as if the whole view had been read.

EXPANDED = """
import json, sys, time, torch
import tritoncheck as tc
from tritoncheck.spec.schema import spec_from_dict
backend, n = sys.argv[1], int(sys.argv[2])
s = spec_from_dict({"name": "e", "fields": {
    "x": {"dtype": "float32", "shape": ["B", "L"], "max": 1, "finite": True},
    "ids": {"dtype": "int64", "shape": ["B", "L"], "min": 0, "values": [0, 1, 2, 7]}},
    "rules": ["x[:, 0] <= x[:, -1]", "sum(ids != 0, dim=L) <= 3", "ids <= 2 where x > 0", "any(ids == 0, dim=L)"]}, "e")
x = torch.tensor([[0.5], [2.0], [float("nan")]]).expand(3, n)
ids = torch.tensor([[0], [5], [-1]]).expand(3, n)
if n <= 8:
    x, ids = x.contiguous(), ids.contiguous()
start = time.perf_counter()
r = tc.check({"x": x, "ids": ids}, s, backend=backend)
print(json.dumps({"seconds": time.perf_counter() - start, "found": [
    [v.field, v.code, v.count, list(v.samples), list(v.index or ()), repr(v.value)] for v in r.violations]}))
"""


def run_isolated(code: str, *args, timeout: float = 120) -> dict:
    """Run `code` in a fresh interpreter (a runaway allocation or loop cannot take the test run down)."""
    proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def expanded_report(n: int) -> list:
    return [
        ["x", "above_max", n, [1], [1, 0], "2.0"],
        ["x", "non_finite", n, [2], [2, 0], "nan"],
        ["ids", "below_min", n, [2], [2, 0], "-1"],
        ["ids", "not_in_set", 2 * n, [1, 2], [1, 0], "5"],
        ["x", "rule_failed", 1, [2], [2], "nan"],
        ["ids", "rule_failed", 2, [1, 2], [1], str(n)],
        ["ids", "rule_failed", n, [1], [1, 0], "5"],
        ["ids", "rule_failed", 2, [1, 2], [1], "False"],
    ]


@pytest.mark.slow  # fresh interpreters (run_isolated), per backend
def test_expanded_views_report_as_the_materialised_batch_would(backend):
    assert run_isolated(EXPANDED, backend, 4)["found"] == expanded_report(4)
    big = run_isolated(EXPANDED, backend, 2**40, timeout=60)
    assert big["found"] == expanded_report(2**40)
    assert big["seconds"] < 10


EXPANDED_BATCH = """
import json, sys, torch
import tritoncheck as tc
from tritoncheck.spec.schema import spec_from_dict
backend, n = sys.argv[1], int(sys.argv[2])
s = spec_from_dict({"name": "e", "fields": {"y": {"dtype": "int32", "shape": ["B"], "max": 5}}}, "e")
y = torch.tensor([7, 1], dtype=torch.int32)[:1].expand(n)
r = tc.check({"y": y if n > 8 else y.contiguous()}, s, backend=backend)
v = r.violations[0]
print(json.dumps([v.code, v.count, len(v.samples), list(v.samples[:5]), list(v.index), v.value]))
"""


@pytest.mark.slow  # fresh interpreters (run_isolated), per backend
def test_an_expanded_batch_axis_lists_every_sample(backend):
    assert run_isolated(EXPANDED_BATCH, backend, 5) == ["above_max", 5, 5, [0, 1, 2, 3, 4], [0], 7]
    assert run_isolated(EXPANDED_BATCH, backend, 2**40, timeout=60) == [
        "above_max", 2**40, 2**40, [0, 1, 2, 3, 4], [0], 7]


PEAK_RSS = """
import json, resource, sys, torch
import tritoncheck as tc
from tritoncheck.spec.schema import spec_from_dict
backend = sys.argv[1]
s = spec_from_dict({"name": "e", "fields": {
    "a": {"dtype": "int32", "shape": ["B", "L"], "max": 0, "values": [0, 2], "allow": [-100]},
    "b": {"dtype": "float32", "shape": ["B", "L"], "finite": True, "max": 0}},
    "rules": ["a <= b", "sum(a, dim=L) <= 1", "a[:, -1] == a[:, 0] + 1"]}, "e")
small = {"a": torch.ones(2, 3, dtype=torch.int32), "b": torch.full((2, 3), float("inf"))}
tc.check(small, s, backend=backend)  # warm up: imports, plan, kernels
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
big = {"a": torch.ones(1, 1, dtype=torch.int32).expand(2, 2**27), "b": torch.full((2, 1), float("inf")).expand(2, 2**27)}
r = tc.check(big, s, backend=backend)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_kib": after - before, "codes": sorted(v.code for v in r.violations)}))
"""


@pytest.mark.slow  # fresh interpreters (run_isolated), per backend
def test_checking_an_expanded_view_does_not_allocate_its_logical_size(backend):
    out = run_isolated(PEAK_RSS, backend)
    assert out["codes"] == ["above_max", "above_max", "non_finite", "not_in_set", "rule_failed", "rule_failed"]
    assert out["grew_kib"] < 64 * 1024  # a materialised 2 x 2**27 view would be 1 GiB (int32) or 256 MiB (bools)


# ---------------------------------------------------------------------------------------------
# A small fuzz: random specs (odd numbers, odd rules) on random batches (odd dtypes, strides,
# sizes, values). Loading either works or raises SpecError; checking never raises.

NUMBERS = [0, 1, -1, 2, -100, 3.0]
ODD_NUMBERS = [0.5, -0.5, 1e20, 10**40, 2**63 - 1, -(2**63), 2**63, math.inf, -math.inf, math.nan]
DTYPES = ["bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "int", "float"]
TORCH_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
                torch.float32, torch.float64]
VALUES = [0, 1, -1, 2, 3, -100, 127, 0.5, 1e-40, 65504.0, 1e30, math.inf, -math.inf, math.nan]


@st.composite
def rule_text(draw, fields: dict, dims: list[str]) -> str:
    def leaf():
        options = [st.sampled_from([str(v) for v in (0, 1, 2, -1, 0.5, 100, 4611686018427387904)] + ["n"])]
        if dims:
            options.append(st.sampled_from(dims))
            options.append(st.sampled_from([f"arange({d})" for d in dims]))
        for name, f in fields.items():
            rank = len(f["shape"])
            items = st.lists(st.sampled_from([":", "0", "1", "-1", "-2", "2"]), min_size=0, max_size=rank)
            options.append(items.map(lambda it, name=name: f"{name}[{', '.join(it)}]" if it else name))
            if rank:
                options.append(st.sampled_from([f"{name}[..., -1]", f"{name}[..., 0]"]))
        return st.one_of(*options)

    def extend(inner):
        binary = st.tuples(inner, st.sampled_from(["+", "-", "*", "//", "%", "==", "!=", "<", "<=", ">", ">=", "&", "|"]),
                           inner).map(lambda t: f"({t[0]} {t[1]}\n {t[2]})")
        unary = st.tuples(st.sampled_from(["-", "abs", "isfinite", "~"]), inner).map(
            lambda t: f"{t[0]}({t[1]})" if t[0] in ("abs", "isfinite") else f"{t[0]}({t[1]})")
        reduce = st.tuples(st.sampled_from(["any", "all", "sum"]), inner, st.sampled_from(["", ", dim=-1", *(f", dim={d}" for d in dims)])).map(
            lambda t: f"{t[0]}({t[1]}{t[2]})")
        return st.one_of(binary, unary, reduce)

    text = draw(st.recursive(leaf(), extend, max_leaves=5))
    if draw(st.booleans()):
        text += " where " + draw(st.recursive(leaf(), extend, max_leaves=3))
    return text


@st.composite
def number(draw):
    """Mostly ordinary numbers, one in five odd (fractional, huge, infinite, NaN)."""
    return draw(st.sampled_from(ODD_NUMBERS if draw(st.integers(0, 4)) == 0 else NUMBERS))


@st.composite
def fuzz_spec(draw) -> dict:
    fields = {}
    for i in range(draw(st.integers(1, 3))):
        shape = ["B"] + draw(st.lists(st.sampled_from(["L", 2, 1, 0]), max_size=2, unique=True))
        if draw(st.integers(0, 5)) == 0:
            shape = []
        f = {"dtype": draw(st.lists(st.sampled_from(DTYPES), min_size=1, max_size=2, unique=True)), "shape": shape}
        for key in ("min", "max"):
            if draw(st.booleans()):
                f[key] = draw(st.one_of(number(), st.sampled_from(["B - 1", "B // 2", "B * 0.5", "n", "B % 0"])))
        if draw(st.booleans()):
            f["allow"] = draw(st.lists(number(), max_size=2))
        if draw(st.booleans()):
            f["values"] = draw(st.lists(number(), max_size=3))
        f["finite"] = draw(st.booleans())
        fields[f"f{i}"] = f
    if not any("B" in f["shape"] for f in fields.values()):
        fields["f0"]["shape"] = ["B"]
    dims = sorted({d for f in fields.values() for d in f["shape"] if isinstance(d, str)})
    rules = draw(st.lists(rule_text(fields, dims), max_size=3))
    return {"name": "fuzz", "params": {"n": draw(st.sampled_from([3, 0.5, math.nan, math.inf]))}, "fields": fields,
            "rules": rules}


@st.composite
def fuzz_batch(draw, data: dict) -> dict:
    sizes = {"B": draw(st.integers(1, 3)), "L": draw(st.integers(0, 3))}
    batch = {}
    for name, f in data["fields"].items():
        if draw(st.integers(0, 9)) == 0:
            continue  # missing
        shape = [sizes[d] if isinstance(d, str) else d for d in f["shape"]]
        if draw(st.integers(0, 9)) == 0:
            shape = shape + [2]  # a wrong rank
        dtype = draw(st.sampled_from(TORCH_DTYPES))
        n = math.prod(shape)
        vals = draw(st.lists(st.sampled_from(VALUES), min_size=n, max_size=n))
        t = torch.tensor([float(v) for v in vals], dtype=torch.float64)
        if not dtype.is_floating_point:
            t = torch.nan_to_num(t, nan=0.0, posinf=1.0, neginf=-1.0).clamp(-100, 127).round()
        t = t.to(dtype).reshape(shape)
        layout = draw(st.sampled_from(["plain", "expanded", "transposed"]))
        if layout == "expanded" and t.dim() and t.numel():
            axis = draw(st.integers(0, t.dim() - 1))
            t = t.narrow(axis, 0, 1).expand(shape)
        elif layout == "transposed" and t.dim() >= 2:
            t = t.transpose(0, 1).contiguous().transpose(0, 1)
        batch[name] = t
    return batch


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                                HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzz_specs_load_or_refuse_and_check_never_raises(backend, data):
    """On Triton the report must also equal the torch reference's."""
    raw = data.draw(fuzz_spec())
    try:
        s = spec_from_dict(raw, "fuzz.yaml")
        tc.check({}, s, backend="torch")  # compiles the plan: a SpecError here is a refusal too
    except tc.SpecError as exc:
        event(f"refused: {str(exc).splitlines()[-1].split(': ', 2)[-1][:40]}")
        return
    batch = data.draw(fuzz_batch(raw))
    report = tc.check(batch, s, backend="torch")
    event(f"checked: {len(report.violations)} violation(s), {len(report.skipped)} skipped")
    for v in report.violations:
        assert v.code in tc.VIOLATION_CODES
    if backend != "torch":
        other = tc.check(batch, s, backend=backend)
        assert (found(other), other.skipped) == (found(report), report.skipped)


@pytest.mark.parametrize("given, says", [
    ({"name": "s", "fields": {}}, "not a value of type dict (a dict: tc.BatchSpec.model_validate"),
    ("name: s\nfields: {}\n", "not YAML text"),
    ("x" * 5000, "no built-in spec named"),  # past the OS's longest file name: OSError had escaped
    ("a\x00b", "no built-in spec named"),
    (3, "not a value of type int"),
])
def test_load_spec_says_what_it_takes_for_anything_else(given, says):
    with pytest.raises(tc.SpecError, match=re.escape(says)):
        tc.load_spec(given)
