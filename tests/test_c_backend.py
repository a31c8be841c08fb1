"""The C backend against the torch reference: reports must be identical, field for field.

Both run after the same `bind`; the comparison keeps 1, 1.0 and True apart and treats NaN as
equal to itself. Batches come from the strategies (valid and malformed, every built-in spec),
and from hand-built batches over every dtype, layout (contiguous, strided, transposed,
expanded), odd sizes and several broken fields. Also here: the compile cache across processes,
and that hostile rule text changes nothing but comments in the C source.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from report_compare import comparable

import tritoncheck as tc
from tritoncheck.spec.extends import read_spec
from tritoncheck.plan.lower import bind, compile_plan
from tritoncheck.backends import torch as _torch_backend
from tritoncheck.backends import codecache as build
from tritoncheck.codegen import c
from tritoncheck.backends import c as c_backend
from tritoncheck.kernel import ir
from tritoncheck.plan.lower import bind, compile_plan
from tritoncheck.spec.schema import spec_from_dict

pytestmark = pytest.mark.skipif(not c_backend.available(), reason="no C compiler")

PARAMS = {
    "vocab_size": 50, "max_position_embeddings": 16, "pad_token_id": 1, "type_vocab_size": 2, "num_labels": 5,
    "max_2d_position_embeddings": 1001, "num_channels": 3, "input_size": 4, "in_channels": 3, "num_classes": 4,
    "min_length": 2,
}
DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]


def both(spec: tc.BatchSpec, batch: dict) -> tuple[list, list]:
    plan = compile_plan(spec)
    bound = bind(plan, batch)
    want = comparable([v.to_dict() for v in _torch_backend.run(plan, bound)])
    got = comparable([v.to_dict() for v in c_backend.run(plan, bound)])
    return want, got


def assert_same(spec: tc.BatchSpec, batch: dict) -> list:
    want, got = both(spec, batch)
    assert got == want
    return want


def builtin(name: str) -> tc.BatchSpec:
    needed = set(read_spec(name).params)
    return tc.load_spec(name, **{k: v for k, v in PARAMS.items() if k in needed})


def small_spec(fields: dict, rules: list | None = None, **params) -> tc.BatchSpec:
    return spec_from_dict({"name": "t", "fields": fields, "rules": rules or []}, "t.yaml").with_params(**params)


# ---------------------------------------------------------------------------------------------
# Every built-in spec, valid and malformed batches from the strategies.

# Each example compiles its own kernel (its dtypes and layouts are drawn), so few examples per spec:
# every spec's kernels still meet many dtypes and layouts, and the fuzz suite draws new specs.
SETTINGS = settings(max_examples=6, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name", tc.builtin_spec_names())
def test_builtin_specs_valid_batches(name):
    spec = builtin(name)

    @SETTINGS
    @given(batch=tc.strategies.valid_batches(spec))
    def run(batch):
        assert assert_same(spec, batch) == []

    run()


@pytest.mark.parametrize("name", tc.builtin_spec_names())
def test_builtin_specs_malformed_batches(name):
    spec = builtin(name)
    data_codes = {ch.code for ch in compile_plan(spec).checks}

    @SETTINGS
    @given(case=tc.strategies.malformed_batches(spec, codes=data_codes))
    def run(case):
        batch, expected = case
        host = {v.code for v in bind(compile_plan(spec), batch).violations}  # a rule over sizes may share the code
        codes = {v["code"] for v in assert_same(spec, batch)}
        assert expected.code in codes | host

    run()


# ---------------------------------------------------------------------------------------------
# Every dtype, every layout, odd sizes, several fields broken at once.

ALL = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
ODD = {
    "fields": {
        "x": {"dtype": ALL, "shape": ["B", "L"], "min": -3, "max": 100, "allow": [-100]},
        "y": {"dtype": ALL, "shape": ["B", "L", 2], "values": [0, 1, 2, 7]},
        "z": {"dtype": ALL, "shape": ["B"], "finite": True, "max": "L"},
    },
    "rules": [
        "x[:, 0] <= x[:, -1] + 50",
        {"rule": "abs(x - 1) * 2 + (x // 3) % 5 >= -50 where z > 0", "code": "arith"},
        {"rule": "x % (z + 1) <= 200", "code": "mod_by_data"},  # z + 1 may be 0: a % 0 == a
        {"rule": "sum(y[..., 0] != 0, dim=L) <= L - 1", "code": "count"},
        {"rule": "any(x > -1000, dim=L)", "code": "anyrow"},
        {"rule": "-z < 1e30", "code": "neg"},
        {"rule": "isfinite(x * 0.5) | (y[..., 1] == 2)", "code": "finite_rule"},
    ],
}


def odd_spec() -> tc.BatchSpec:
    return spec_from_dict({"name": "odd", **ODD}, "odd.yaml")


def values(dtype: torch.dtype, shape: tuple[int, ...], g: torch.Generator, lo: int, hi: int) -> torch.Tensor:
    """Mostly in [lo, hi], some outside, and for floats NaN, +-inf, -0.0 and subnormals."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    t = torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int64)
    info = torch.iinfo(dtype) if not dtype.is_floating_point else None
    if info is not None:
        odd = torch.randint(max(info.min, -300), min(info.max, 300) + 1, shape, generator=g)
        pick = torch.rand(shape, generator=g) < 0.05
        return torch.where(pick, odd, t).clamp(info.min, info.max).to(dtype)
    f = t.to(torch.float64) + torch.rand(shape, generator=g, dtype=torch.float64) * 0.5
    specials = torch.tensor([math.nan, math.inf, -math.inf, -0.0, 1e-40, 5e-324, -2.5, 1e30, 0.1], dtype=torch.float64)
    pick = torch.rand(shape, generator=g) < 0.04
    f = torch.where(pick, specials[torch.randint(len(specials), shape, generator=g)], f)
    return f.to(dtype)


def odd_batch(dtype: torch.dtype, B: int, L: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": values(dtype, (B, L), g, -3, 100), "y": values(dtype, (B, L, 2), g, 0, 2),
            "z": values(dtype, (B,), g, 0, L)}


def relayout(t: torch.Tensor, how: str) -> torch.Tensor:
    """The same values in another memory layout."""
    if how == "contiguous" or t.dim() == 0:
        return t
    if how == "transposed":  # stored column-major
        return t.transpose(0, -1).contiguous().transpose(0, -1)
    if how == "strided":  # every other element of a larger buffer, at an offset
        big = torch.zeros((t.shape[0] * 2 + 1,) + tuple(t.shape[1:]), dtype=t.dtype)
        big[1::2] = t
        return big[1::2]
    raise ValueError(how)


# Every dtype contiguous, and in one of the other two layouts (alternating, so each layout meets
# element sizes 1, 2 and 4 or 8 bytes): a (dtype, layout) pair is one compiled kernel.
DTYPE_LAYOUTS = [(dt, "contiguous") for dt in DTYPES] + [
    (dt, "transposed" if i % 2 == 0 else "strided") for i, dt in enumerate(DTYPES)]


@pytest.mark.parametrize(("dtype", "layout"), DTYPE_LAYOUTS, ids=lambda v: str(v))
def test_every_dtype_and_layout(dtype, layout):
    spec = odd_spec()
    codes = set()
    for seed, (B, L) in enumerate([(1, 1), (1, 7), (3, 5), (4, 33), (2, 1025)]):  # B = 1, sizes no block divides
        batch = {k: relayout(v, layout) for k, v in odd_batch(dtype, B, L, seed).items()}
        codes |= {v["code"] for v in assert_same(spec, batch)}
    assert len(codes) >= (1 if dtype == torch.bool else 3), codes  # the batches break several checks at once


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.bfloat16], ids=str)
def test_expanded_inputs(dtype):
    spec = odd_spec()
    g = torch.Generator().manual_seed(7)
    row = values(dtype, (1, 9), g, -3, 100)
    batch = {"x": row.expand(6, 9), "y": values(dtype, (1, 1, 2), g, 0, 2).expand(6, 9, 2),
             "z": values(dtype, (1,), g, 0, 9).expand(6)}
    assert any(0 in t.stride() for t in batch.values())
    assert_same(spec, batch)
    batch["x"] = torch.full((), 200, dtype=dtype if dtype != torch.bool else torch.int64).expand(6, 9)
    assert {v["code"] for v in assert_same(spec, batch)} >= {"above_max"}


def test_several_fields_broken_at_once_in_a_builtin_spec():
    spec = builtin("layoutlmv3-token-classification")
    B, L = 3, 11
    g = torch.Generator().manual_seed(3)
    x0 = torch.randint(0, 500, (B, L, 1), generator=g)
    y0 = torch.randint(0, 500, (B, L, 1), generator=g)
    batch = {
        "input_ids": torch.randint(2, 50, (B, L), generator=g),
        "bbox": torch.cat([x0, y0, x0 + 5, y0 + 5], dim=-1),
        "attention_mask": torch.ones(B, L, dtype=torch.int64),
        "pixel_values": torch.rand(B, 3, 4, 4, generator=g),
        "labels": torch.randint(0, 5, (B, L), generator=g),
    }
    assert assert_same(spec, batch) == []
    batch["input_ids"][1, 4] = 50
    batch["bbox"][2, 3, 0] = 999  # x0 > x1
    batch["bbox"][0, 0, 3] = 1001
    batch["attention_mask"][2] = 0
    batch["pixel_values"][1, 2, 3, 3] = math.nan
    batch["labels"][:, :] = -100
    batch["labels"][0, 1] = -1
    codes = [v["code"] for v in assert_same(spec, batch)]
    assert {"above_max", "box_corners", "no_attended_position", "non_finite", "below_min"} <= set(codes)


# ---------------------------------------------------------------------------------------------
# Exact semantics the kernel must share with torch.


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_bits_widen_exactly(dtype):
    """Every one of the 65536 bit patterns, widened by the kernel, equals torch's float32 of it."""
    spec = small_spec({"h": {"dtype": ["float16", "bfloat16"], "shape": ["B"]},
                       "f": {"dtype": "float32", "shape": ["B"]}},
                      [{"rule": "(h == f) | ((h != h) & (f != f))", "code": "widened"},
                       {"rule": "(h < 1) == (f < 1)", "code": "ordered"}])
    h = torch.arange(-(2**15), 2**15, dtype=torch.int16).view(dtype)
    assert assert_same(spec, {"h": h, "f": h.float()}) == []
    # and the kernel would notice a one-ulp difference
    wrong = h.float()
    wrong[12345] = torch.nextafter(wrong[12345], torch.tensor(math.inf))
    assert [v["code"] for v in assert_same(spec, {"h": h, "f": wrong})] == ["widened"]


def test_integer_division_and_remainder_by_zero_and_extremes():
    spec = small_spec({"a": {"dtype": "int64", "shape": ["B"]}, "b": {"dtype": "int64", "shape": ["B"]}},
                      [{"rule": "a // b == -12345", "code": "div"}, {"rule": "a % b == -12345", "code": "rem"},
                       {"rule": "abs(a) + -a * 3 == 7", "code": "wrap"}])
    lo, hi = -(2**63), 2**63 - 1
    a = torch.tensor([7, -7, 7, -7, 0, 5, lo, lo, hi, lo, 3, -3])
    b = torch.tensor([2, 2, -2, -2, 0, 0, -1, 1, -1, 0, 5, 5])
    report = assert_same(spec, {"a": a, "b": b})
    assert [v["count"] for v in report] == [("int", 12)] * 3
    # a // 0 == 0 and a % 0 == a (so a == (a // b) * b + a % b still holds): only the last element fails
    spec_zero = small_spec({"a": {"dtype": "int64", "shape": ["B"]}, "b": {"dtype": "int64", "shape": ["B"]}},
                           [{"rule": "(a // b == 0) & (a % b == a)", "code": "zero"}])
    (v,) = assert_same(spec_zero, {"a": torch.tensor([5, -5, 0, 5]), "b": torch.tensor([0, 0, 0, 2])})
    assert (v["count"], v["index"]) == (("int", 1), [("int", 3)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_floor_division_and_remainder_follow_torch(dtype):
    spec = small_spec({"a": {"dtype": ["float32", "float64"], "shape": ["B"]},
                       "b": {"dtype": ["float32", "float64"], "shape": ["B"]}},
                      [{"rule": "a // b < -1e300", "code": "div"}, {"rule": "a % b < -1e300", "code": "rem"},
                       {"rule": "(a // b) * b + a % b != a * 3", "code": "mix"}])
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4000, generator=g, dtype=torch.float64) * 100
    b = torch.randn(4000, generator=g, dtype=torch.float64) * 10
    special = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-300, 3.0, -3.0])
    a = torch.cat([a, special.repeat_interleave(8)]).to(dtype)
    b = torch.cat([b, special.repeat(8)]).to(dtype)
    report = assert_same(spec, {"a": a, "b": b})
    assert [v["code"] for v in report] == ["div", "rem", "mix"]


X_B = {"x": {"dtype": "int64", "shape": ["B"]}}
N_TL = {"n": {"dtype": "int64", "shape": ["S", "T"]}, "tl": {"dtype": "int64", "shape": ["S", 2]}}
NESTED_RULE_X = "any((sum(x) != x) & (x <= 1))"
NESTED_RULE_TL = "any((sum(n) <= tl[:, 1]) & (tl[:, 1] > 5))"


@pytest.mark.parametrize("fields, rule, batch", [
    (X_B, NESTED_RULE_X, {"x": torch.tensor([7] * 5)}),
    (X_B, NESTED_RULE_X, {"x": torch.tensor([1, 1, 1])}),
    (X_B, NESTED_RULE_X, {"x": torch.tensor([0, 1, 5])}),
    (X_B, NESTED_RULE_X, {"x": torch.tensor([1])}),
    (N_TL, NESTED_RULE_TL, {"n": torch.tensor([[1, 2], [3, 4]]), "tl": torch.tensor([[0, 9], [0, 9]])}),
    (N_TL, NESTED_RULE_TL, {"n": torch.tensor([[1, 2], [3, 4]]), "tl": torch.tensor([[0, 3], [0, 20]])}),
    (N_TL, NESTED_RULE_TL, {"n": torch.tensor([[1, 2], [3, 4]]), "tl": torch.tensor([[0, 3], [0, 2]])}),
    (N_TL, NESTED_RULE_TL, {"n": torch.tensor([[5, 5, 5]] * 3), "tl": torch.tensor([[0, 6], [0, 7], [0, 8]])}),
    (N_TL, NESTED_RULE_TL, {"n": torch.tensor([[5, 5, 5]] * 3).t(), "tl": torch.tensor([[0, 6], [0, 99], [0, 8]])}),
], ids=["x-fails", "x-ones", "x-passes", "x-one", "tl-fails", "tl-passes", "tl-small", "tl-fails-3",
        "tl-transposed-passes"])
def test_a_reduction_of_a_broadcast_reduction(fields, rule, batch):
    """F3: a load inside a nested reduction over the same axis follows the innermost reduction
    (the decoder raised from torch.permute when the rule failed)."""
    batch_dim = next(iter(fields.values()))["shape"][0]
    spec = spec_from_dict({"name": "t", "batch_dim": batch_dim, "fields": fields, "rules": [rule]}, "t.yaml")
    want = tc.check(batch, spec, backend="torch").to_dict()
    got = tc.check(batch, spec, backend="c").to_dict()
    assert got.pop("backend") == "c" and want.pop("backend") == "torch"
    assert comparable(got) == comparable(want)


def test_a_bound_over_dims_past_int64():
    spec = small_spec({"x": {"dtype": "int64", "shape": ["B", "L"], "min": "L * L * L * L * L - 2"}})
    x = torch.tensor([[2**63 - 1] * 10000]).expand(2, -1).contiguous()
    # L**5 - 2 = 1e20 - 2 is above every int64: every element fails, INT64_MAX included
    assert assert_same(spec, {"x": x})[0]["count"] == ("int", 20000)


# ---------------------------------------------------------------------------------------------
# The program: 64-bit indexing, no recompiles, CPU only.


def test_int64_index_variant_gives_the_same_report():
    spec = odd_spec()
    batch = odd_batch(torch.float32, 3, 17, seed=5)
    plan = compile_plan(spec)
    bound = bind(plan, batch)
    prog = c_backend.program_for(plan, bound)
    assert "typedef int32_t tc_idx;" in prog.source.text
    wide = c.generate(prog.kernel, index_bits=64)
    assert "typedef int64_t tc_idx;" in wide.text
    fn = getattr(build.load(wide.text), c.FUNCTION)
    want = comparable([v.to_dict() for v in _torch_backend.run(plan, bound)])
    assert comparable([v.to_dict() for v in c_backend.Program(prog.kernel, wide, fn)(bound)]) == want
    assert want


def test_a_warm_call_reuses_the_program_and_a_new_layout_gets_its_own():
    spec = builtin("bert-sequence-classification")
    plan = compile_plan(spec)
    batch = {"input_ids": torch.randint(0, 50, (4, 9)), "attention_mask": torch.ones(4, 9, dtype=torch.int64)}
    first = c_backend.program_for(plan, bind(plan, batch))
    batch["input_ids"] = torch.randint(0, 50, (7, 5))  # other sizes: the same program
    batch["attention_mask"] = torch.ones(7, 5, dtype=torch.int64)
    assert c_backend.program_for(plan, bind(plan, batch)) is first
    batch["attention_mask"] = torch.ones(5, 7, dtype=torch.int64).t()  # non-contiguous: strides are arguments
    strided = c_backend.program_for(plan, bind(plan, batch))
    assert strided is not first and strided.kernel.int_args() != first.kernel.int_args()


def test_cpu_tensors_only():
    spec = small_spec({"x": {"dtype": "int64", "shape": ["B"], "min": 0}})
    plan = compile_plan(spec)
    bound = bind(plan, {"x": torch.zeros(3, dtype=torch.int64)})
    bound.tensors["x"] = torch.zeros(3, dtype=torch.int64, device="meta")
    with pytest.raises(ValueError, match="CPU"):
        c_backend.run(plan, bound)


def test_a_huge_expanded_view_is_walked_once_or_left_to_the_torch_backend():
    spec = small_spec({"x": {"dtype": "int64", "shape": ["B"], "min": 0}})
    plan = compile_plan(spec)
    bound = bind(plan, {"x": torch.tensor([-1]).expand(2**40)})
    [v] = c_backend.run(plan, bound)  # walked at size 1, scaled back
    assert (v.code, v.count, len(v.samples), v.index) == ("below_min", 2**40, 2**40, (0,))
    positions = small_spec({"x": {"dtype": "int64", "shape": ["B"]}}, ["x <= sum(x)"])  # sums every position
    plan = compile_plan(positions)
    bound = bind(plan, {"x": torch.tensor([-1]).expand(2**40)})
    with pytest.raises(ir.Unsupported, match="expanded"):
        c_backend.run(plan, bound)


# ---------------------------------------------------------------------------------------------
# Generated source: hostile text reaches comments only.

HOSTILE = '\nx >= 0  # */ system("id"); /* ??/ \\\n'


def test_hostile_rule_text_changes_nothing_but_comments():
    def source(rule_text: str, name: str) -> str:
        spec = spec_from_dict({"name": name, "fields": {"x": {"dtype": "int64", "shape": ["B"]}},
                               "rules": [{"rule": rule_text, "hint": rule_text}]}, "t.yaml")
        plan = compile_plan(spec)
        bound = bind(plan, {"x": torch.tensor([1, -2])})
        prog = c_backend.program_for(plan, bound)
        assert [v.code for v in prog(bound)] == ["rule_failed"]  # it compiled and runs
        return prog.source.text

    hostile = source(HOSTILE, 'evil */ #include "/etc/passwd" ??/')
    plain = source("x >= 0", "plain")
    assert "??" not in hostile and "\\" not in hostile
    for line in hostile.splitlines():  # no comment line carries a line splice or a trigraph
        assert not line.rstrip().endswith("\\")

    def code(text: str) -> str:
        return "\n".join(re.sub(r"//.*$", "", line).rstrip() for line in text.splitlines())

    assert code(hostile) == code(plain)
    assert "system" not in code(hostile) and "evil" not in code(hostile)


def test_hostile_field_and_dim_names_become_fresh_identifiers():
    fields = {"out": {"dtype": "int64", "shape": ["found", "ia"], "max": 3},
              "tc_check": {"dtype": "int64", "shape": ["found"], "min": 0},
              "int": {"dtype": "float32", "shape": ["found", "ia"], "finite": True}}
    spec = spec_from_dict({"name": "names", "batch_dim": "found", "fields": fields,
                           "rules": ["any(out > int, dim=ia)", "tc_check <= sum(out, dim=ia)"]}, "t.yaml")
    batch = {"out": torch.tensor([[0, 1, 2, 4], [0, 0, 0, 0], [1, 1, 1, 1]]), "tc_check": torch.tensor([0, -1, 100]),
             "int": torch.tensor([[0.0, math.nan, 1.0, 2.0]] * 3)}
    assert {v["code"] for v in assert_same(spec, batch)} == {"above_max", "below_min", "non_finite", "rule_failed"}


# ---------------------------------------------------------------------------------------------
# The compile cache.


def test_the_key_changes_with_the_cpu(monkeypatch):
    text = "int64_t tc_check(void) { return 0; }\n"
    key = build.cache_key(text)
    monkeypatch.setattr(build, "cpu_identity", lambda: "x86_64|other cpu|avx512f")
    assert build.cache_key(text) != key
    monkeypatch.undo()
    assert build.cache_key(text) == key
    assert build.cache_key(text + "\n") != key


def test_no_compiler_is_a_compile_error(monkeypatch):
    monkeypatch.setattr(build, "compiler", lambda: None)
    with pytest.raises(build.CompileError, match="no C compiler"):
        build.cache_key("int x;")


CHILD = textwrap.dedent("""
    import os, sys, time, torch
    import tritoncheck as tc
    from tritoncheck.backends import codecache as build
    from tritoncheck.backends import c as c_backend
    from tritoncheck.plan.lower import bind, compile_plan
    if sys.argv[1] == "load-only":
        def refuse(*a, **k):
            raise SystemExit("compiled, but the kernel was in the cache")
        build._build = refuse
    else:
        real = build._build
        def counted(*a, **k):
            print("compiled", file=sys.stderr)
            return real(*a, **k)
        build._build = counted
        start = float(sys.argv[2])
        while time.time() < start:  # both processes reach the compiler together
            pass
    spec = tc.load_spec("bert-sequence-classification", vocab_size=50, max_position_embeddings=16,
                        type_vocab_size=2, num_labels=5)
    plan = compile_plan(spec)
    batch = {"input_ids": torch.tensor([[1, 2, 70]]), "labels": torch.tensor([9])}
    print(sorted(v.code for v in c_backend.run(plan, bind(plan, batch))))
""")


def _child(args: list[str], cache: str) -> subprocess.Popen:
    env = {**os.environ, "TRITONCHECK_CACHE_DIR": cache}
    return subprocess.Popen([sys.executable, "-c", CHILD, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


# seconds of processes or compilers: the slow set, which .ci/run runs (the README command stays under 3 minutes)
@pytest.mark.slow
def test_processes_compiling_at_once_both_succeed_and_a_later_one_only_loads(tmp_path):
    import time

    cache = str(tmp_path / "cache")
    start = str(time.time() + 1.5)
    procs = [_child(["race", start], cache) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.strip() == "['above_max', 'above_max']"
    assert sum("compiled" in err for _, err in outs) == 1  # the other waited on the lock, then loaded
    libs = [f for f in os.listdir(os.path.join(cache, "c")) if f.endswith(".so")]
    assert len(libs) == 1
    assert not [f for f in os.listdir(os.path.join(cache, "c")) if f.startswith(".build-")]
    out, err = _child(["load-only"], cache).communicate(timeout=120)
    assert out.strip() == "['above_max', 'above_max']", err


def test_decoding_a_failing_batch_costs_its_violations_not_its_rows():
    """The per-sample counts were summed and listed by a Python loop over every row (0.9 s for a
    check on C at B = 2**23 with two bad rows); they are read as one int64 tensor now, with the
    same report."""
    import ctypes
    import time

    from tritoncheck.kernel import ir
    from tritoncheck.kernel.decode import decode

    spec = tc.BatchSpec.model_validate({"name": "d", "fields": {"x": {"dtype": "int64", "shape": ["B"], "max": 5}}})
    n = 2**22
    x = torch.zeros(n, dtype=torch.int64)
    x[[7, n - 1]] = 9
    plan = compile_plan(spec)
    bound = bind(plan, {"x": x})
    kernel = ir.lower(plan, tuple(bound.runnable), {"x": ir.FieldSig("x", torch.int64, ("B",), True)})
    out = (ctypes.c_int64 * kernel.layout.length(n))()
    base, row = kernel.layout.sample_base(0)
    out[base + row * n + 7] = out[base + row * n + n - 1] = 1
    out[kernel.layout.first(0)] = ir.BIG - 7
    t0 = time.perf_counter()
    got = decode(kernel, out, bound)
    took = time.perf_counter() - t0
    assert [v.to_dict() for v in got] == [v.to_dict() for v in tc.check({"x": x}, spec, backend="torch").violations]
    assert took < 0.2, took


def test_a_kept_result_buffer_carries_nothing_from_a_failing_call_to_the_next():
    """The result buffer is kept zeroed between calls (a valid batch allocates and writes nothing): a failing
    call's slots are cleared after decoding, so the next batch of the same program, smaller or larger, is
    reported as the torch backend reports it."""
    spec = small_spec({"x": {"dtype": "int64", "shape": ["B"], "min": 0, "max": 5},
                       "y": {"dtype": "float32", "shape": ["B"], "finite": True}})
    plan = compile_plan(spec)
    bad = {"x": torch.tensor([9, 0, -1, 3, 9, 1]), "y": torch.tensor([0.0, float("nan"), 1, 1, 1, 1])}
    clean = {"x": torch.tensor([1, 2, 3, 4, 5, 0, 1]), "y": torch.ones(7)}
    other = {"x": torch.tensor([1, 2, 7]), "y": torch.ones(3)}
    program = c_backend.program_for(plan, bind(plan, bad))
    for batch in (bad, clean, bad, other, clean, bad):
        assert c_backend.program_for(plan, bind(plan, batch)) is program
        assert_same(spec, batch)
    assert program.spare and not any(program.spare[0])  # kept, and all zero after a failing call


# ---------------------------------------------------------------------------------------------
# Reading less: any/all stop early, half precision on its bits, strided fields in memory order.


@pytest.mark.parametrize("L", [1, c.STRIP - 1, c.STRIP, c.STRIP + 1, 2 * c.STRIP + 3])
def test_any_and_all_that_stop_at_the_first_deciding_element_agree_with_torch(L):
    """An any/all over a row stops once decided (tested once per strip of c.STRIP elements): the deciding
    element first, last, at each strip's edge, or nowhere gives the torch backend's report."""
    spec = small_spec({"m": {"dtype": "int64", "shape": ["B", "L"]}},
                      [{"rule": "any(m != 0, dim=L)", "code": "none_set"},
                       {"rule": "all(m < 2, dim=L)", "code": "some_big"},
                       {"rule": "any((m == 3) & (arange(L) > 0))", "code": "no_three"}])
    where = sorted({0, L - 1, min(c.STRIP - 1, L - 1), min(c.STRIP, L - 1), L // 2})
    m = torch.zeros(len(where) + 1, L, dtype=torch.int64)  # the last row: nothing set
    for row, at in enumerate(where):
        m[row, at] = 1 + 2 * (row % 2)  # 1 (any holds, all holds) or 3 (all fails; the 3 found unless at 0)
    codes = {v["code"] for v in assert_same(spec, {"m": m})}
    assert "none_set" in codes and ("some_big" in codes) == any(row % 2 for row in range(len(where)))
    source = c_backend.program_for(compile_plan(spec), bind(compile_plan(spec), {"m": m})).source.text
    assert source.count("TC_STRIP ?") >= 2 * 3  # each reduction walks its row in strips, testing its accumulator


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_bounds_and_finiteness_on_the_bits_agree_with_torch(dtype):
    """Bounds, value sets, sentinels, finiteness and comparisons with constants on a float16/bfloat16 field are
    tested on its bits (an interval of `tc_key16`), never widened: on all 65536 bit patterns (NaNs, infinities,
    -0.0, subnormals) every count, first index and value equals the torch backend's."""
    rules = ["(h != 0.5) & (h != 0.1)", "(h > -2.5) | (h <= -3)", "1000 >= h", "h >= -0.0", "h < 70000.0", "(h > 1e-40) | (h < -1e30)",
             "h <= 65504", "(h == 0.3) | (h != 0.25)"]
    spec = small_spec({"h": {"dtype": ["float16", "bfloat16"], "shape": ["B"], "min": -10, "max": 10, "finite": True,
                             "allow": [-100]},
                       "m": {"dtype": ["float16", "bfloat16"], "shape": ["B"], "values": [0, 1]}},
                      [{"rule": r, "code": f"r{i}"} for i, r in enumerate(rules)])
    h = torch.arange(-(2**15), 2**15, dtype=torch.int16).view(dtype)
    batch = {"h": h, "m": h.flip(0)}
    codes = {v["code"] for v in assert_same(spec, batch)}
    assert {"below_min", "above_max", "non_finite", "not_in_set"} | {f"r{i}" for i in range(len(rules))} == codes
    plan = compile_plan(spec)
    source = c_backend.program_for(plan, bind(plan, batch)).source.text
    body = source[source.index(c.FUNCTION + "("):]
    assert "tc_key16(" in body and "isfinite(" not in body and not re.search(r"\bv\d+ (?:[<>]=?|!=|== [^0]) ", body)


def test_channels_last_fields_are_walked_in_memory_order_with_torchs_first_index():
    """Element-wise checks over fields stored as one dense block in another axis order (channels_last, a
    transposed copy) walk them as stored: one flat loop, and a locate pass nested in memory order that keeps
    the least row-major index, so the first index is torch's although memory meets another failure first. Fields
    of different orders in one group are walked row-major, as before."""
    spec = small_spec({"px": {"dtype": "float32", "shape": ["B", "C", "H", "W"], "finite": True, "min": -5, "max": 5},
                       "q": {"dtype": "float32", "shape": ["B", "C", "H", "W"], "max": 5}},
                      [{"rule": "px <= q + 20", "code": "apart"}])
    g = torch.Generator().manual_seed(4)
    px = torch.rand(2, 3, 5, 7, generator=g)
    q = torch.rand(2, 3, 5, 7, generator=g)
    px[0, 2, 0, 0] = math.nan  # first in memory (channels_last: offset 2)
    px[0, 0, 1, 0] = math.inf  # first row-major
    px[1, 1, 4, 6] = -9
    px[0, 1, 3, 3] = 99
    q[1, 2, 0, 1] = 7
    cl = {k: v.contiguous(memory_format=torch.channels_last) for k, v in (("px", px), ("q", q))}
    plan = compile_plan(spec)
    for batch in (cl, {"px": cl["px"], "q": q}, {"px": px.transpose(2, 3).contiguous().transpose(2, 3), "q": q}):
        assert_same(spec, batch)
        found = tc.check(batch, spec, backend="c").violations
        assert {(v.code, tuple(v.index)) for v in found} >= {("non_finite", (0, 0, 1, 0)), ("below_min", (1, 1, 4, 6))}
    source = c_backend.program_for(plan, bind(plan, cl)).source.text
    assert "flat < first_" in source and "px[i]" in source.replace("p_px[i]", "px[i]")  # the flat walk, as stored
    mixed = c_backend.program_for(plan, bind(plan, {"px": cl["px"], "q": q})).source.text
    assert "flat < first_" not in mixed


def test_batches_of_one_signature_share_prepared_arguments_and_refill_only_the_pointers(monkeypatch):
    """A warm call does no Python work per size, stride or host scalar: `Program.prepare` runs once per batch
    signature, and each call writes only the data pointers into a pooled argument array. Threads checking
    batches of one signature at once each get their own batch's report."""
    import threading

    spec = small_spec({"x": {"dtype": "int64", "shape": ["B", "L"], "min": 0, "max": "L"},
                       "y": {"dtype": "float32", "shape": ["B"], "finite": True}},
                      [{"rule": "x[:, -1] <= y * 100", "code": "last"}])
    prepared = []
    original = c_backend.Program.prepare
    monkeypatch.setattr(c_backend.Program, "prepare", lambda self, bound: prepared.append(1) or original(self, bound))
    batches = []
    for k in range(8):
        x = torch.randint(0, 6, (4, 6))
        x[k % 4, k % 6] = -1 - k if k % 2 else 0
        batches.append({"x": x.t().contiguous().t() if k == 7 else x, "y": torch.rand(4) * (k % 3)})
    for batch in batches:
        assert_same(spec, batch)
    assert len(prepared) == 2  # one per signature: contiguous x, and the transposed one
    want = [tc.check(b, spec, backend="torch").violations for b in batches]
    got: dict[int, list] = {}

    def run(i: int) -> None:
        for _ in range(50):
            got.setdefault(i, []).append(tc.check(batches[i], spec, backend="c").violations)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, reports in got.items():
        assert all([v.to_dict() for v in r] == [v.to_dict() for v in want[i]] for r in reports), i
