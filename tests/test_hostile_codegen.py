"""Hostile specs against the Triton code generator (issue 10, items 1, 2, and the Triton side of 4, 5).

A spec file is untrusted: its text may reach the generated kernel only as comments, its names
only through the name space, and whatever it says, the Triton report equals the torch report.
Runs on CUDA tensors where a GPU exists, else on CPU under TRITON_INTERPRET=1 (see conftest).
"""

from __future__ import annotations

import io
import math
import os
import re
import tokenize

import pytest
import torch
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tritoncheck as tc
from tritoncheck.kernel import ir
from tritoncheck.plan.lower import bind, compile_plan

pytest.importorskip("triton", reason="pip install triton (in the test extra)")

from tritoncheck.codegen import triton as codegen  # noqa: E402


@pytest.fixture
def device() -> str:
    """CUDA tensors where a GPU runs the compiled kernel; else CPU tensors and Triton's interpreter."""
    return "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"


def load(tmp_path, data: dict, **params) -> tc.BatchSpec:
    """A spec as a user's YAML file would arrive."""
    path = tmp_path / f"spec_{len(list(tmp_path.glob('spec_*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return tc.load_spec(path, **params)


def source_of(spec: tc.BatchSpec, dtypes: dict[str, torch.dtype]) -> str:
    plan = compile_plan(spec)
    fields = {f.name: ir.FieldSig(f.name, dtypes[f.name], f.axes, True) for f in plan.fields}
    return codegen.generate(ir.lower(plan, plan.checks, fields)).source


def key(v: tc.Violation):
    value = "nan" if isinstance(v.value, float) and math.isnan(v.value) else v.value
    return (v.field, v.code, v.rule, v.samples, v.count, v.index, value, v.hint)


def assert_same(batch: dict, spec: tc.BatchSpec) -> tc.Report:
    ref = tc.check(batch, spec, backend="torch")
    got = tc.check(batch, spec, backend="triton")
    assert got.backend == "triton"
    assert [key(v) for v in got.violations] == [key(v) for v in ref.violations]
    assert got.skipped == ref.skipped and got.dims == ref.dims
    return ref


def code_tokens(source: str) -> list[tuple[int, str, int]]:
    """Every token but comments, with its line: what Python runs when it imports the module."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(t.type, t.string, t.start[0]) for t in tokens if t.type != tokenize.COMMENT]


# -- (a) the three injection vectors -----------------------------------------------------------


def _payload(marker, env: str) -> str:
    """Closes a docstring, then sets `env` and writes `marker` if it ever runs."""
    return f'"""; __import__("os").environ.__setitem__("{env}", "1"); open(r"{marker}", "w").close(); _="""'


VECTORS = {
    "rule": lambda p: {"fields": {"x": {"dtype": "int64", "shape": ["B"]}}, "rules": [f"x >= 0  # {p}"]},
    "max": lambda p: {"fields": {"x": {"dtype": "int64", "shape": ["B"], "max": f"5  # {p}"}}},
    "shape": lambda p: {"params": {"n": 2}, "fields": {"x": {"dtype": "int64", "shape": ["B", f"n  # {p}"], "min": 0}}},
}


@pytest.mark.parametrize("vector", sorted(VECTORS))
def test_spec_text_that_closes_a_docstring_runs_nothing(vector, tmp_path, monkeypatch, device):
    env = f"TRITONCHECK_PWNED_{vector.upper()}"
    monkeypatch.setenv(env, "0")  # restored after the test, whatever happens
    marker = tmp_path / "pwned"
    payload = _payload(marker, env)
    spec = load(tmp_path, {"name": f"evil {payload}", **VECTORS[vector](payload)})
    shape = (3, 2) if vector == "shape" else (3,)
    good = torch.ones(shape, dtype=torch.int64, device=device)
    bad = good.clone()
    bad.view(-1)[-1] = -7 if vector != "max" else 9

    source = source_of(spec, {"x": torch.int64})
    assert '"' not in "".join(s for t, s, _ in code_tokens(source) if t != tokenize.STRING)
    assert payload not in source and "__import__(" + '"' not in source
    assert all("__import__" not in s for t, s, _ in code_tokens(source))  # only in comments, escaped
    assert "__import__" in source  # the text is still there, as a comment, for a reader

    assert assert_same({"x": good}, spec).ok
    assert not assert_same({"x": bad}, spec).ok
    assert not marker.exists()
    assert os.environ[env] == "0"


# -- (b) hostile text changes nothing but comments ----------------------------------------------

_SPECIAL = ['"""', "'''", '"', "'", "*/", "/*", "??/", "\\", "\n", "\r\n", "\r", "#", "\u2028", "\x85", "\x0c",
            "\t", "\x1b[31m", "{", "}", "${x}", "%s", "é", "\U0001f600", "\\n", ") + (", "where"]
_TEXT = st.lists(
    st.one_of(st.sampled_from(_SPECIAL),
              st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12)),
    max_size=6,
).map("".join)


def _commented(expr: str, text: str) -> str:
    """`expr` with `text` as Python comments inside parentheses: still one valid expression."""
    lines = re.split(r"\r\n|\r|\n", text)
    return "(" + expr + "".join(f"  #{line}\n" for line in lines) + ")"


def _structured_spec(t: dict[str, str]) -> dict:
    """One spec with text from `t` in every slot that takes text, over a fixed structure."""
    return {
        "name": t["name"],
        "description": t["description"],
        "params": {"n": 2},
        "fields": {
            "x": {"dtype": ["int64", "float32"], "shape": ["B", _commented("L", t["dim"])],
                  "min": _commented("-5", t["min"]), "max": _commented("L + 3", t["max"]),
                  "allow": [-100], "hints": {"above_max": t["hint"]}, "description": t["description"]},
            "m": {"dtype": "bool", "shape": ["B", "L"], "values": [0, 1]},
            "w": {"dtype": "float32", "shape": [_commented("n", t["shape"])], "finite": True},
        },
        "rules": [
            {"rule": _commented("x <= x", t["rule"]), "hint": t["hint"]},
            _commented("x >= 0", t["where"]) + " where m",
            _commented("any(m, dim=L)", t["reduce"]),
            _commented("x[:, 0] + w[1] >= -9", t["index"]),
        ],
    }


_SLOTS = ("name", "description", "dim", "min", "max", "hint", "shape", "rule", "where", "reduce", "index")
_DTYPES = {"x": torch.float32, "m": torch.bool, "w": torch.float32}


@settings(max_examples=40, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.fixed_dictionaries({slot: _TEXT for slot in _SLOTS}))
def test_hostile_text_changes_only_comment_lines(tmp_path_factory, texts):
    tmp = tmp_path_factory.mktemp("hostile")
    try:
        hostile = load(tmp, _structured_spec(texts))
    except tc.SpecError:
        assume(False)  # e.g. a ' where ' that splits the rule: the loader refuses it, nothing is generated
    benign = load(tmp, _structured_spec({slot: "c" for slot in _SLOTS}))
    src, ref = source_of(hostile, _DTYPES), source_of(benign, _DTYPES)
    compile(src, "<generated>", "exec")
    assert code_tokens(src) == code_tokens(ref)
    assert src.count("\n") == ref.count("\n")
    assert all(ch.isascii() and (ch.isprintable() or ch == "\n") for ch in src)


def test_newline_and_quotes_in_a_rule_give_a_working_kernel(tmp_path, device):
    """A rule may span lines inside parentheses; the kernel must still compile and agree with torch."""
    rule = '(x\n  >= 0  # """ \\\n  # \'\'\' ??/ */\n)'
    spec = load(tmp_path, {"name": 'n"""\nl', "fields": {"x": {"dtype": "int64", "shape": ["B"]}}, "rules": [rule]})
    assert spec.rules[0].rule == rule
    x = torch.tensor([3, -1, 2, -4], device=device)
    report = assert_same({"x": x}, spec)
    assert [(v.code, v.count, v.index) for v in report.violations] == [("rule_failed", 2, (1,))]


# -- (c) names that collide with the kernel's own ----------------------------------------------


def _batch(shapes: dict[str, tuple[int, ...]], device: str, fill: int = 1) -> dict[str, torch.Tensor]:
    return {f: torch.full(s, fill, dtype=torch.int64, device=device) for f, s in shapes.items()}


def _check_valid_and_broken(spec, shapes, device, breaks):
    batch = _batch(shapes, device)
    assert assert_same(batch, spec).ok
    for field, index, value in breaks:
        broken = _batch(shapes, device)
        broken[field][index] = value
        report = assert_same(broken, spec)
        assert not report.ok and field in {v.field for v in report.violations}


def test_field_i_with_dim_stride0_reads_the_right_elements(tmp_path, device):
    """The index over dim stride0 is `i_stride0`: it must not shadow field i's stride argument."""
    spec = load(tmp_path, {"name": "t", "fields": {"i": {"dtype": "int64", "shape": ["B", "stride0"], "max": 5}},
                           "rules": ["i >= 0"]})
    shapes = {"i": (3, 4)}
    _check_valid_and_broken(spec, shapes, device, [("i", (2, 3), 9), ("i", (1, 2), -1), ("i", (0, 3), 6)])


def test_field_out_and_field_size_with_dim_ptr_and_dims_named_like_kernel_names(tmp_path, device):
    """`out` would give a second `out_ptr` argument, `size` with dim `ptr` a second `size_ptr`."""
    spec = load(tmp_path, {"name": "t", "batch_dim": "pid",
                           "fields": {"out": {"dtype": "int64", "shape": ["pid"], "max": 5},
                                      "size": {"dtype": "int64", "shape": ["pid", "ptr"], "min": 0},
                                      "a": {"dtype": "int64", "shape": ["pid", "offs", "IDX", "tl"],
                                            "max": "tl + offs"}},
                           "rules": ["size[:, -1] <= out", "any(a >= 0, dim=offs)"]})
    shapes = {"out": (3,), "size": (3, 2), "a": (3, 2, 1, 2)}
    _check_valid_and_broken(spec, shapes, device, [("out", (2,), 7), ("size", (1, 0), -3), ("size", (0, 1), 4),
                                                   ("a", (2, 1, 0, 1), 9), ("a", (1, slice(None), 0, 0), -1)])


# Names the generated kernel uses itself (arguments, locals, helpers, the module's imports), in
# three kernels, each with a family of names that one renaming could carry into another: one kernel
# of all 31 fields took 78 CPU seconds to compile for sm_90 (past the GPU run's 60 s per test), these
# three 28 together. Every part also has the fields the last rules name.
KERNEL_PARTS = [["out", "out_ptr", "tl", "triton", "pid", "tile", "offs", "live", "live2", "rest", "first", "n_bad", "IDX",
                 "tritoncheck_kernel"],
                ["acc", "t", "r", "r0", "bad_0", "x_x", "float", "range", "math"],
                ["i_B", "j_L", "size_B", "size_L", "numel_0", "end_0", "limit_0", "rnumel_0"]]
KERNEL_WORDS = [w for part in KERNEL_PARTS for w in part]


@pytest.mark.parametrize("part", range(len(KERNEL_PARTS)))
def test_fields_named_like_the_kernels_own_names(tmp_path, device, part):
    words = list(dict.fromkeys(KERNEL_PARTS[part] + ["tl", "IDX", "pid", "offs"]))
    fields = {w: {"dtype": "int64", "shape": ["B", "L"], "max": "L + 1", "min": 0} for w in words}
    fields["x"] = {"dtype": "int64", "shape": ["B", "L"], "allow": [-100], "max": 3}
    rules = [f"{a} + {b} <= 2 * L + 2" for a, b in zip(words, words[1:], strict=False)]
    rules += ["any(x != -100, dim=L)", "sum(tl >= 0, dim=L) == L", "x // IDX <= pid where offs > 0"]
    spec = load(tmp_path, {"name": "t", "fields": fields, "rules": rules})
    shapes = {f: (2, 3) for f in fields}
    breaks = [(w, (1, 2), 9) for w in words[::3]] + [("x", (0, 0), 4)]
    _check_valid_and_broken(spec, shapes, device, breaks)
    batch = _batch(shapes, device)
    batch["x"][1] = -100  # every label of sample 1 ignored: the reduction fails
    assert [v.samples for v in assert_same(batch, spec).violations] == [(1,)]


# -- item 4: value sets and sentinels compare as comparable_values says ------------------------


def test_fractional_sentinels_never_equal_an_integer(tmp_path, device):
    """`allow: [0.5]` does not allow 0; `values: [0.5, 1]` is {1} for an int tensor; `[0.5]` is empty."""
    spec = load(tmp_path, {"name": "t", "fields": {
        "a": {"dtype": ["int64", "float32"], "shape": ["B"], "min": 1, "allow": [0.5]},
        "v": {"dtype": ["int64", "float32"], "shape": ["B"], "values": [0.5, 1]},
        "e": {"dtype": ["int64", "float32"], "shape": ["B"], "values": [0.5]}}})
    batch = {"a": torch.tensor([0, 1, 2], device=device), "v": torch.tensor([1, 0, 1], device=device),
             "e": torch.tensor([0, 1, 0], device=device)}
    got = tc.check(batch, spec, backend="triton")
    assert [(v.field, v.count, v.index) for v in got.violations] == [("a", 1, (0,)), ("v", 1, (1,)), ("e", 3, (0,))]
    assert_same(batch, spec)


def test_denormals_are_not_zero_and_negative_zero_is(tmp_path, device):
    """Exact IEEE values as torch compares them: no flush to zero (the interpreter flushed bfloat16)."""
    spec = load(tmp_path, {"name": "t", "fields": {"z": {"dtype": "float", "shape": ["B"], "values": [0]},
                                                   "p": {"dtype": "float", "shape": ["B"], "min": 0, "allow": [-1]}}})
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        tiny = torch.finfo(dtype).smallest_normal / 4  # a denormal of the field's own dtype
        z = torch.tensor([0.0, -0.0, tiny, -tiny], dtype=dtype, device=device)
        assert z[2] != 0  # the test needs a real denormal
        batch = {"z": z, "p": torch.tensor([0.0, -0.0, -1.0, -tiny], dtype=dtype, device=device)}
        report = assert_same(batch, spec)
        assert [(v.field, v.count, v.index) for v in report.violations] == [("z", 2, (2,)), ("p", 1, (3,))], dtype


# -- item 5: specs that load must check --------------------------------------------------------


def test_a_0d_field_checks_on_triton(tmp_path, device):
    spec = load(tmp_path, {"name": "t", "fields": {"s": {"dtype": "int64", "shape": [], "min": 0, "values": [0, 1, 3]},
                                                   "y": {"dtype": "int64", "shape": ["B"]}},
                           "rules": ["y <= s + 1", "any(y == s)"]})
    for s, ok in ((1, True), (-1, False), (2, False)):
        batch = {"s": torch.tensor(s, device=device), "y": torch.tensor([0, 1, 2], device=device)}
        assert assert_same(batch, spec).ok == ok


def test_integer_division_by_zero_on_triton(tmp_path, device):
    """The decided semantics for every backend: a // 0 == 0 and a % 0 == a for integers."""
    fields = {"x": {"dtype": "int", "shape": ["B"]}, "y": {"dtype": "int", "shape": ["B"]}}
    spec = load(tmp_path, {"name": "t", "fields": fields,
                           "rules": ["x // y == 0 where y == 0", "x % y == x where y == 0", "x == (x // y) * y + x % y",
                                     "x // 0 == 0", "x % 0 == x"]})
    for dtype in (torch.int64, torch.int32, torch.int8):
        batch = {"x": torch.tensor([5, -5, 7, 0, -128], dtype=dtype, device=device),
                 "y": torch.tensor([0, 0, -2, 0, 3], dtype=dtype, device=device)}
        report = tc.check(batch, spec, backend="triton")
        assert report.ok, report


@pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")  # the interpreter's numpy, on x / 0.0
def test_division_by_zero_agrees_with_torch(tmp_path, device):
    """Integers: a // 0 == 0 and a % 0 == a; floats: IEEE (inf or nan), as torch.

    Needs the torch backend's integer-division-by-zero fix (another change for issue 10): until
    then the torch backend raises ZeroDivisionError on the integer cases.
    """
    spec = load(tmp_path, {"name": "t", "fields": {"x": {"dtype": ["int64", "int32", "float"], "shape": ["B"]},
                                                   "y": {"dtype": ["int64", "int32", "float"], "shape": ["B"]}},
                           "rules": ["x // y != 1", "x % y != 5", "x // y >= -1", "x % y == x % y",
                                     "any(x // y == 0)"]})
    for dtype in (torch.int64, torch.int32, torch.float32, torch.float64):
        batch = {"x": torch.tensor([5, -5, 7, 0, 6, 3], device=device).to(dtype),
                 "y": torch.tensor([0, 0, -2, 0, 4, 2], device=device).to(dtype)}
        assert not assert_same(batch, spec).ok


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.float64])
def test_bools_in_arithmetic_are_int64(tmp_path, device, dtype):
    """`isfinite(x) % 2`, `(x > 0) + ...`: a bool takes part in arithmetic as int64 (0 or 1)."""
    spec = load(tmp_path, {"name": "t", "fields": {"x": {"dtype": ["int64", "float"], "shape": ["B"]},
                                                   "y": {"dtype": ["int64", "float"], "shape": ["B"]}},
                           "rules": ["isfinite(x) % 2 == 1", "(x > 0) + (y > 0) * 2 <= 2", "x - (y > 1) >= -1",
                                     "sum(isfinite(y) // 1) >= 3", "-(x < y) * 3 != -3"]})
    batch = {"x": torch.tensor([5, -5, 7, 0, 6, 3], device=device).to(dtype),
             "y": torch.tensor([0, 0, -2, 0, 4, 2], device=device).to(dtype)}
    if dtype.is_floating_point:
        batch["x"][1] = float("nan")
    assert not assert_same(batch, spec).ok


def test_bounds_no_int64_literal_states_compare_exactly(tmp_path, device):
    """On a field that takes ints and floats, an int tensor meets 0.5, inf, 1e20 and dims * 2**62."""
    inf, big = math.inf, "L * 4611686018427387904"  # 2**62 * L: past int64 for L >= 2
    bounds = {"a": {"min": 0.5, "max": inf}, "b": {"min": -inf, "max": 1e20}, "c": {"min": -1e20, "max": big},
              "d": {"min": big}, "e": {"max": -inf}, "f": {"max": f"-{big}"}}
    fields = {name: {"dtype": ["int64", "float32"], "shape": ["B", "L"], **b} for name, b in bounds.items()}
    spec = load(tmp_path, {"name": "t", "fields": fields})
    x = torch.tensor([[0, 1, 2**63 - 1], [-(2**63), 5, -3]], device=device)
    report = assert_same({name: x.clone() for name in fields}, spec)
    found = {v.field: (v.code, v.count) for v in report.violations}
    assert found == {"a": ("below_min", 3), "d": ("below_min", 6), "e": ("above_max", 6), "f": ("above_max", 6)}
