"""One verdict on every backend for batches torch reads differently from their raw memory.

Lazy negation/conjugation bits, bool bytes other than 0/1, signed zeros in rules and dims past
2**31 with empty fields: each backend's report must equal the torch reference's, and the
reference's must equal the same batch materialized (as torch shows its values).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from report_compare import comparable

import tritoncheck as tc
from tritoncheck.plan.lower import compile_plan
from tritoncheck.spec.schema import spec_from_dict


def spec(fields: dict, rules: list | None = None) -> tc.BatchSpec:
    return spec_from_dict({"name": "t", "fields": fields, "rules": rules or []}, "t.yaml")


def report(batch: dict, s: tc.BatchSpec, backend: str) -> list:
    r = tc.check(batch, s, backend=backend)
    assert r.backend == backend, r.backend
    return comparable([v.to_dict() for v in r.violations])


def materialized(batch: dict) -> dict:
    """The batch as torch shows it: every lazy bit resolved, bools canonical, contiguous copies."""
    out = {}
    for k, t in batch.items():
        t = torch.as_tensor(t).resolve_neg().resolve_conj()
        out[k] = t.clone() if t.dtype != torch.bool else (t.view(torch.uint8) != 0).contiguous()
    return out


def agree(batch: dict, s: tc.BatchSpec, backend: str) -> list:
    got = report(batch, s, backend)
    assert got == report(materialized(batch), s, "torch")
    return got


# -- lazy negation / conjugation bits --------------------------------------------------------------

def neg_views():
    z = torch.complex(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, -1.0]))
    return {
        "neg_view": torch._neg_view(torch.tensor([2.0, 4.0, -1.0])),
        "conj_imag": z.conj().imag,  # a strided float view with the negation bit
        "expanded": torch._neg_view(torch.tensor([2.0]).expand(3)),
    }


@pytest.mark.parametrize("name", list(neg_views()))
def test_a_negation_bit_is_read_as_torch_reads_it(backend, name):
    x = neg_views()[name]
    assert x.is_neg()
    s = spec({"x": {"dtype": "float32", "shape": ["B"], "min": 0}})
    agree({"x": x}, s, backend)
    v = tc.check({"x": x}, s, backend=backend).violations
    shown = x.tolist()  # as torch reads it: [-2, -4, 1] or [-2, -2, -2]
    assert [(u.code, u.count, u.value) for u in v] == [("below_min", sum(e < 0 for e in shown), shown[0])]


def test_a_negation_bit_survives_torch_save_and_is_still_resolved(backend):
    buf = io.BytesIO()
    torch.save({"x": torch._neg_view(torch.tensor([2.0, 4.0]))}, buf)
    buf.seek(0)
    batch = torch.load(buf)
    assert batch["x"].is_neg()
    s = spec({"x": {"dtype": "float32", "shape": ["B"], "min": 0}})
    r = tc.check(batch, s, backend=backend)
    assert not r.ok and r.violations[0].count == 2 and r.violations[0].value == -2.0
    agree(batch, s, backend)


def test_a_negation_bit_on_an_expanded_view_costs_its_stored_values_only():
    x = torch._neg_view(torch.tensor([3.0]).expand(2**30))  # resolving the whole view: 4 GiB
    s = spec({"x": {"dtype": "float32", "shape": ["B"], "max": 0}})
    r = tc.check({"x": x}, s, backend="torch")
    assert r.ok


def test_a_neg_view_after_its_plain_neighbour_is_not_served_from_the_signature_cache(backend):
    s = spec({"x": {"dtype": "float32", "shape": ["B"], "min": 0}})
    assert tc.check({"x": torch.tensor([2.0, 4.0])}, s, backend=backend).ok
    assert not tc.check({"x": torch._neg_view(torch.tensor([2.0, 4.0]))}, s, backend=backend).ok


# -- bool bytes other than 0/1 ----------------------------------------------------------------------

def odd_bools():
    return {
        "view": torch.tensor([[0, 2, 255, 1]], dtype=torch.uint8).view(torch.bool),
        "numpy": np.frombuffer(bytes([0, 2, 255, 1]), dtype=np.bool_).reshape(1, 4),
        "strided": torch.tensor([[0, 7, 2, 9, 255, 3, 1, 0]], dtype=torch.uint8).view(torch.bool)[:, ::2],
    }


BOOL_SPECS = {
    "values": ({"m": {"dtype": "bool", "shape": ["B", "L"], "values": [0, 1]}}, []),
    "max": ({"m": {"dtype": "bool", "shape": ["B", "L"], "max": 1}}, []),
    "sum": ({"m": {"dtype": "bool", "shape": ["B", "L"]}}, [{"rule": "sum(m, dim=L) <= 3"}]),
    "eq": ({"m": {"dtype": "bool", "shape": ["B", "L"]}}, [{"rule": "m * 3 != 3"}]),
    "any": ({"m": {"dtype": "bool", "shape": ["B", "L"]}}, [{"rule": "all(m == 0, dim=L)"}]),
}


@pytest.mark.parametrize("layout", list(odd_bools()))
@pytest.mark.parametrize("case", list(BOOL_SPECS))
def test_a_bool_byte_means_nonzero_on_every_backend(backend, layout, case):
    s = spec(*BOOL_SPECS[case])
    m = odd_bools()[layout]
    got = agree({"m": m}, s, backend)
    r = tc.check({"m": m}, s, backend=backend)
    if case in ("values", "max", "sum"):
        assert r.ok  # every byte reads as 0 or 1: three True in the row
    else:
        assert not r.ok
        assert r.violations[0].value in (0, 1, 3, False, True) and got


# -- signed zeros ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("rule", "fails"), [("x // -0.0 <= 0", [2]), ("x // 0.0 >= 0", [2]),
                                             ("(x // -0.0) * (x // 0.0) < 0", [])])
def test_zero_and_negative_zero_are_two_constants(backend, rule, fails):
    s = spec({"x": {"dtype": "float32", "shape": ["B"]}}, [{"rule": rule}])
    x = torch.tensor([1.0, 2.0, -3.0])
    agree({"x": x}, s, backend)
    assert [list(v.samples) for v in tc.check({"x": x}, s, backend=backend).violations] == ([fails] if fails else [])
# -- a dim past 2**31 whose only field is empty -----------------------------------------------------

def test_a_dim_past_2_31_with_an_empty_field_keeps_its_size(backend):
    big = 2**32 + 3
    x = torch.zeros(2, 0, 1).expand(2, 0, big)
    s = spec({"x": {"dtype": "float32", "shape": ["B", "K", "L"]}}, [{"rule": "sum(x, dim=K) != 0", "field": "x"}])
    got = agree({"x": x}, s, backend)
    assert got and got[0]["count"] == ("int", 2 * big)


# -- expanded (zero-stride) axes cost what they store -------------------------------------------------

EXPANDED = {
    "x": {"dtype": "float32", "shape": ["B", "L"], "max": 1, "finite": True},
    "ids": {"dtype": "int64", "shape": ["B"], "min": 0, "values": [0, 1, 2]},
}
EXPANDED_RULES = [{"rule": "x <= ids", "field": "x"}, {"rule": "any(x > 0, dim=L)"}, {"rule": "ids != 1"}]


def expanded_batch(b: int, ll: int, expand: str) -> dict:
    x = torch.tensor([[0.5, 3.0, float("nan")]])
    ids = torch.tensor([1])
    if expand == "batch":
        return {"x": x.expand(b, 3), "ids": ids.expand(b)}
    if expand == "length":
        return {"x": torch.tensor([[2.0], [0.0]]).expand(2, ll), "ids": torch.tensor([1, 5])}
    return {"x": torch.tensor([[2.0]]).expand(b, ll), "ids": ids.expand(b)}


@pytest.mark.parametrize("expand", ["batch", "length", "both"])
def test_an_expanded_batch_equals_it_materialized(backend, expand):
    s = spec(EXPANDED, EXPANDED_RULES)
    assert agree(expanded_batch(6, 5, expand), s, backend)


@pytest.mark.slow
def test_an_expanded_batch_past_65536_samples_lists_every_sample(backend):
    s = spec(EXPANDED, EXPANDED_RULES)
    got = agree(expanded_batch(70_000, 5, "batch"), s, backend)
    assert [len(v["rows"]) for v in got] == [70_000] * len(got)


RSS = """
import json, resource, sys, time, torch
import tritoncheck as tc
from tritoncheck.spec.schema import spec_from_dict
backend, n = sys.argv[1], int(sys.argv[2])
s = spec_from_dict({"name": "e", "fields": {"y": {"dtype": "int64", "shape": ["B"], "max": 0},
                                            "m": {"dtype": "bool", "shape": ["B", "L"], "values": [1]}},
                    "rules": ["y + m <= 1"]}, "e")
tc.check({"y": torch.ones(2, dtype=torch.int64), "m": torch.ones(2, 3, dtype=torch.bool)}, s, backend=backend)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
r = tc.check({"y": torch.tensor([1]).expand(n), "m": torch.ones(1, 1, dtype=torch.bool).expand(n, 4)}, s, backend=backend)
took = time.perf_counter() - t0
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_kib": after - before, "took": took, "backend": r.backend,
                  "found": [(v.code, v.count, len(v.samples), list(v.samples[:3]), list(v.index)) for v in r.violations]}))
"""


def run_isolated(code: str, *args) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("n", [2**27, 2**40])
def test_an_expanded_batch_axis_costs_its_storage_not_its_logical_size(backend, n):
    out = run_isolated(RSS, backend, n)
    assert out["backend"] == backend
    assert out["found"] == [["above_max", n, n, [0, 1, 2], [0]], ["rule_failed", 4 * n, n, [0, 1, 2], [0, 0]]]
    assert out["grew_kib"] < 64 * 1024 and out["took"] < 1.0, out


# -- a rule's work is linear in its data ------------------------------------------------------------

SIX = {f"x{i}": {"dtype": "int64", "shape": ["B", f"L{i}"]} for i in range(6)}


@pytest.mark.parametrize("rule", ["x0 + x1 + x2 + x3 + x4 + x5 < 100", "x0 <= sum(x1, dim=L1)", "x0 < arange(L1)",
                                  "any(x0 != x1)"])
def test_a_rule_over_unrelated_dims_is_refused_at_load(rule):
    with pytest.raises(tc.SpecError, match=r"rules\.0: .* walks the dims .*no one field spans"):
        compile_plan(spec(SIX, [{"rule": rule}]))


@pytest.mark.parametrize("rule", ["x0 + x0[:, 0] < 100", "sum(x0, dim=L0) <= sum(x1, dim=L1)", "x0 < arange(L0)",
                                  "x1 != 3 where arange(L1) < x0[:, 0]", "any(x0 != 1)"])
def test_a_rule_within_one_fields_dims_loads(rule):
    plan = compile_plan(spec(SIX, [{"rule": rule}]))
    assert len(plan.checks) == 1


# -- positions (arange) along a long dim: evaluated in windows on the torch backend ------------------

CTC_LIKE = {
    "targets": {"dtype": "int64", "shape": ["B", "S"]},
    "lengths": {"dtype": "int64", "shape": ["B"]},
}
WINDOW_RULES = ["targets != 0 where arange(S) < lengths", "targets + arange(S) < 30",
                "(arange(S) % 3 != 1) | (targets > 2)"]


@pytest.mark.parametrize("rule", WINDOW_RULES)
@pytest.mark.parametrize("expand", [False, True])
def test_a_rule_over_positions_gives_the_same_report_in_windows(monkeypatch, rule, expand):
    from tritoncheck.backends import torch as _torch_backend
    s = spec(CTC_LIKE, [rule])
    g = torch.Generator().manual_seed(len(rule))
    stored = torch.randint(0, 5, (3, 1 if expand else 37), generator=g)
    stored[:, 0] = torch.tensor([0, 0, 1])
    targets = stored.expand(3, 37)
    batch = {"targets": targets, "lengths": torch.tensor([0, 30, 37])}
    whole = report(batch, s, "torch")
    monkeypatch.setattr(_torch_backend, "MAX_MASK", 8)  # 3 x 37 positions in windows of 2 or 8
    assert report(batch, s, "torch") == whole and whole
    assert report(materialized(batch), s, "torch") == whole


CTC_RSS = """
import json, resource, sys, time, torch
import tritoncheck as tc
spec = tc.load_spec("ctc")
backend, S = sys.argv[1], int(sys.argv[2])
def batch(s, whole=False):
    b = {"log_probs": torch.zeros(5, 2, 4), "targets": torch.tensor([[1], [0]]).expand(2, s),
         "input_lengths": torch.tensor([5, 5]), "target_lengths": torch.tensor([3, 5])}
    return {k: v.contiguous() for k, v in b.items()} if whole else b
def found(r):
    return [(v.code, v.count, list(v.samples), list(v.index), v.value) for v in r.violations]
tc.check(batch(8), spec, backend=backend)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
big = tc.check(batch(S), spec, backend=backend)
took = time.perf_counter() - t0
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
same = found(tc.check(batch(2**21), spec, backend=backend)) == found(tc.check(batch(2**21, True), spec, backend="torch"))
print(json.dumps({"grew_kib": after - before, "took": took, "found": found(big), "same": same}))
"""


def test_arange_over_an_expanded_dim_is_checked_from_the_stored_values_on_every_backend(backend):
    """Issue 27 cause 8: the built-in CTC spec with `targets` expanded to S = 2**26 took +1,156 MiB
    and 8-13 s on torch, its time growing with S on every backend. `targets != blank where arange(S) <
    target_lengths` changes along S only where arange(S) passes a length, so the torch backend
    evaluates it at those positions (tests/test_logical_walks.py), and the kernels hand it the walk:
    under 1 s and 64 MiB on every backend, and at S = 2**21 the report of the batch materialized."""
    out = run_isolated(CTC_RSS, backend, 2**26)
    assert out["found"] == [["rule_failed", 5, [1], [1, 0], 0]] and out["same"], out
    assert out["grew_kib"] < 64 * 1024 and out["took"] < 1.0, out


# -- a reduction over the batch axis that each element is compared with: computed once ---------------

BATCH_REDUCE = {"x": {"dtype": "float32", "shape": ["B"]}, "y": {"dtype": "int64", "shape": ["B", "L"]}}
BATCH_REDUCE_RULES = ["x * 1000 <= sum(x)", "y * 4 <= sum(y[:, 0]) + arange(L)", "any(y > sum(x), dim=L)"]


def batch_reduce(b: int) -> dict:
    g = torch.Generator().manual_seed(b)
    return {"x": torch.rand(b, generator=g), "y": torch.randint(0, b, (b, 3), generator=g)}


def test_a_rule_against_a_batch_reduction_agrees(backend):
    """(Triton lowers no reduction inside a reduction: the third rule runs on torch there.)"""
    got = agree(batch_reduce(6), spec(BATCH_REDUCE, BATCH_REDUCE_RULES[:2]), backend)
    assert [v["rule"] for v in got] == BATCH_REDUCE_RULES[:2]


def test_a_rule_against_a_batch_reduction_reads_the_batch_twice_on_c():
    """Issue 27 cause 5: the sum was recomputed per element (B**2: 5.1 s at B = 2**17 for `x <= sum(x)`)."""
    import time

    s = spec(BATCH_REDUCE, BATCH_REDUCE_RULES)
    tc.check(batch_reduce(4), s, backend="c")  # build the kernel
    batch = batch_reduce(2**17)
    t0 = time.perf_counter()
    got = report(batch, s, "c")
    took = time.perf_counter() - t0
    assert got == report(batch, s, "torch")
    assert took < 0.5, took


# -- docs/semantics.md: every example of the page, on every backend -----------------------------------

def semantics_examples() -> list:
    """(dtype, values, rule, passes) from the tables of docs/semantics.md ("v (xN)" repeats v)."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).parents[1] / "docs" / "semantics.md").read_text(encoding="utf-8")
    out = []
    table_row = r"^\| (int64|float16|float32|float64) \| ([^|]+) \| `([^`]+)` \| (passes|fails) \|"
    for row in re.findall(table_row, text, re.M):
        dtype, values, rule, verdict = row
        vals = []
        for item in values.split(", "):
            m = re.fullmatch(r"(\S+)(?: \(x(\d+)\))?", item.strip())
            vals += [int(m.group(1)) if dtype == "int64" else float(m.group(1))] * int(m.group(2) or 1)
        out.append(pytest.param(dtype, vals, rule, verdict == "passes", id=rule))
    return out


@pytest.mark.parametrize(("dtype", "values", "rule", "passes"), semantics_examples())
def test_semantics_examples(backend, dtype, values, rule, passes):
    s = spec({"x": {"dtype": dtype, "shape": ["B", "L"]}}, [rule])
    x = torch.tensor([values], dtype=getattr(torch, dtype))
    batches = [{"x": x}] + ([{"x": x[:, :1].expand(2, len(values))}] if len(set(values)) == 1 else [])
    for batch in batches:
        agree(batch, s, backend)
        assert tc.check(batch, s, backend=backend).ok == passes


def test_semantics_page_has_its_examples():
    assert len(semantics_examples()) >= 10
    assert {p.values[0] for p in semantics_examples()} == {"int64", "float16", "float32", "float64"}
