"""Float sums: one value on every backend and in any order (docs/semantics.md, "Sums").

`defined_sum` is the page's definition in exact Python arithmetic (fractions), independent of
the backends' int64 folds. Random rows of every float dtype, with exponents spread over the
dtype's range, non-finite values, permutations and strided, transposed and expanded layouts,
must give that value, bit for bit, on torch, C and Triton (its interpreter without a GPU).
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
import warnings
from fractions import Fraction

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from report_compare import comparable

import tritoncheck as tc
from tritoncheck.backends import torch as torch_backend
from tritoncheck.kernel import ir, sums
from tritoncheck.plan.lower import compile_plan
from tritoncheck.spec.schema import spec_from_dict

BACKENDS = ("torch", "c", "triton")


def defined_sum(values: list[float]) -> float:
    """The sum docs/semantics.md defines, step by step, in exact arithmetic."""
    values = [float(v) for v in values]
    odd = [v for v in values if not math.isfinite(v)]
    if odd:
        return math.nan if any(math.isnan(v) for v in odd) or {math.inf, -math.inf} <= set(odd) else odd[0]
    biased = max((struct.unpack("<q", struct.pack("<d", abs(v)))[0] >> 52 for v in values), default=0)
    step = Fraction(2) ** max(biased - 1082, -1074)
    total = sum(int(Fraction(v) / step) for v in values) * step  # int() cuts towards zero
    try:
        return float(total)  # rounded once, to nearest
    except OverflowError:
        return math.copysign(math.inf, total)


# exponents (of 2) a dtype's values span, its smallest subnormal up
RANGE = {torch.float64: (-1074, 1023), torch.float32: (-149, 127), torch.float16: (-24, 15),
         torch.bfloat16: (-133, 127)}
LAYOUTS = ["contiguous", "strided", "transposed", "expanded", "batch_expanded"]


@st.composite
def rows(draw) -> tuple[torch.dtype, list[float], list[int], str]:
    """(dtype, stored values of a row, a permutation of it, layout)."""
    dtype = draw(st.sampled_from(list(RANGE)), label="dtype")
    low, high = RANGE[dtype]
    top = draw(st.integers(low, high), label="top exponent")
    spread = draw(st.sampled_from([0, 8, 30, 70, 300]), label="exponent spread")
    layout = draw(st.sampled_from(LAYOUTS), label="layout")
    n = 1 if layout == "expanded" else draw(st.integers(2, 40), label="n")
    values = []
    for _ in range(n):
        mantissa = draw(st.integers(1, 2**53 - 1)) / 2**53
        exponent = draw(st.integers(max(low, top - spread), top))
        values.append(draw(st.sampled_from([1.0, -1.0])) * math.ldexp(mantissa, exponent + 1))
    odd = draw(st.sampled_from([None] * 6 + [0.0, math.inf, -math.inf, math.nan]), label="odd value")
    if odd is not None:  # one zero, infinity or NaN in the row
        values[draw(st.integers(0, n - 1))] = odd
    stored = torch.tensor(values, dtype=torch.float64).to(dtype)  # rounded into the dtype (maybe to inf)
    if layout == "expanded":
        return dtype, stored.tolist() * draw(st.integers(2, 40), label="length"), [], layout
    return dtype, stored.tolist(), draw(st.permutations(range(n)), label="permutation"), layout


def batch(dtype: torch.dtype, values: list[float], perm: list[int], layout: str) -> torch.Tensor:
    """Two rows, the second the first permuted (or the same stored row, expanded), in `layout`."""
    n = len(values)
    if layout == "expanded":  # one stored value per row, expanded along L
        return torch.tensor([[values[0]]], dtype=torch.float64).to(dtype).expand(2, n)
    row = torch.tensor(values, dtype=torch.float64).to(dtype)
    if layout == "batch_expanded":  # one stored row, expanded along B
        return row[None].expand(2, n)
    x = torch.stack([row, row[perm]])
    if layout == "strided":
        wide = torch.zeros(2, 2 * n, dtype=dtype)
        wide[:, ::2] = x
        return wide[:, ::2]
    if layout == "transposed":
        return x.T.contiguous().T
    return x


def report(x: torch.Tensor, rules: list[str], backend: str, **more: torch.Tensor) -> list:
    """The violations of `rules` over x ([B, L]) and float64 fields `more` ([B]), as tuples."""
    fields = {"x": {"dtype": str(x.dtype).removeprefix("torch."), "shape": ["B", "L"]}}
    fields.update({name: {"dtype": "float64", "shape": ["B"]} for name in more})
    r = tc.check({"x": x, **more}, spec_from_dict({"name": "sums", "fields": fields, "rules": rules}, "s.yaml"),
                 backend=backend)
    assert r.backend == backend, r.backend
    return [(v.rule, v.count, tuple(v.samples), v.value) for v in r.violations]


# `!=` fails exactly where the sum equals the expected value (a field, so that one kernel serves every
# example); `< inf` fails where it is NaN or inf
RULES = ["sum(x, dim=L) != row", "sum(x) != total", "sum(x, dim=L) < 1e999"]


@settings(deadline=None, max_examples=max(12, settings.default.max_examples // 2))  # (3 backends an example)
@given(case=rows())
@example(case=(torch.float64, [0.1] * 10, list(range(9, -1, -1)), "contiguous"))  # C's loop: 0.9999999999999999
@example(case=(torch.float32, [1e8] + [1.0] * 40 + [-1e8], list(range(41, -1, -1)), "strided"))  # in order: 0
@example(case=(torch.float64, [2.0**-52, 2.0**-52, 1 - 2.0**-52], [2, 0, 1], "transposed"))  # order decides
def test_a_float_sum_is_the_defined_sum_on_every_backend_in_any_order(case):
    """Each row's sum (the second row is the first permuted) and the sum over both rows equal the
    exact reference, bit for bit, on every backend: as verdicts and as the values reports show."""
    pytest.importorskip("triton", reason="pip install triton (in the test extra)")
    dtype, values, perm, layout = case
    x = batch(dtype, values, perm, layout)
    row, total = defined_sum(values), defined_sum(x.reshape(-1).tolist())
    given_ = {name: torch.full((2,), 0.0 if math.isnan(v) else v, dtype=torch.float64)
              for name, v in (("row", row), ("total", total))}
    want = [(RULES[0], 2, (0, 1), row)] * (not math.isnan(row)) + [(RULES[1], 2, (0, 1), total)] * (
        not math.isnan(total)) + [(RULES[2], 2, (0, 1), row)] * (math.isnan(row) or row == math.inf)
    for backend in BACKENDS:
        assert comparable(report(x, RULES, backend, **given_)) == comparable(want), (backend, values, perm, layout)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_ten_tenths_sum_to_the_defined_value_on_every_backend(backend, dtype):
    """Ten float64 0.1 sum to 1.0 everywhere (C's loop in order gave 0.9999999999999999)."""
    x = torch.full((1, 10), 0.1, dtype=dtype)
    want = 1.0 if dtype == torch.float64 else 1.0000000149011612
    assert defined_sum(x[0].tolist()) == want
    assert report(x, [f"sum(x, dim=L) != {want!r}"], backend) == [(f"sum(x, dim=L) != {want!r}", 1, (0,), want)]


def test_an_expanded_row_sums_as_it_materialized(backend):
    """Stride 0 along the summed axis: torch counts the stored value's folds once per position,
    C and Triton walk the row; each gives the materialized row's sum (C's loop in order gave
    0.9999999999999999 for 10 x 0.1 where torch's value x count gave 1.0)."""
    x = torch.tensor([[0.1], [1e8]], dtype=torch.float64).expand(2, 10)
    got = report(x, ["sum(x, dim=L) != 1.0"], backend)
    assert got == report(x.contiguous(), ["sum(x, dim=L) != 1.0"], "torch")
    assert got == [("sum(x, dim=L) != 1.0", 1, (0,), 1.0)]  # (a rule fails where it is false)


def test_a_long_row_sums_in_chunks_to_the_same_bits(backend):
    """Rows longer than sums.CHUNK: the torch backend adds their folds chunk by chunk on the CPU
    (Triton walks many steps, C one loop); every backend still gives the defined sum."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3 * sums.CHUNK // 2, generator=g) * torch.exp2(torch.randint(-40, 40, (2, 3 * sums.CHUNK // 2),
                                                                                     generator=g).float())
    want = [defined_sum(r) for r in x.tolist()]
    got = report(x, ["sum(x, dim=L) < -1e999"], backend)
    assert got == [("sum(x, dim=L) < -1e999", 2, (0, 1), want[0])]
    assert report(x[1:], ["sum(x, dim=L) < -1e999"], backend)[0][3] == want[1]


def test_a_row_past_the_int64_folds_is_added_in_python_integers(monkeypatch):
    """A row of 2**33 values or more (an expanded view) sums in Python integers; the int64 folds
    and the Python integers give the same bits wherever both can."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(16, 7, generator=g, dtype=torch.float64) * torch.logspace(-20, 20, 7, dtype=torch.float64))
    folds = sums.float_sum(x, (1,), 3)
    monkeypatch.setattr(sums, "MAX_TERMS", 2)
    assert torch.equal(sums.float_sum(x, (1,), 3), folds)
    assert folds.tolist() == [defined_sum(r * 3) for r in x.tolist()]
    huge = sums.float_sum(torch.tensor([[0.1, 1e300]], dtype=torch.float64), (1,), 2**50)
    assert huge.item() == math.inf
    big = torch.tensor([[0.1]], dtype=torch.float32)
    assert sums.float_sum(big, (1,), 2**40).item() == defined_sum([big.item()]) * 2**40


def test_a_float_sum_in_windows_equals_it_whole(monkeypatch):
    """The torch backend evaluates a long body over positions (`arange`) in windows: a float sum
    then walks the windows twice, for the row's grid first, and gives the same bits."""
    s = spec_from_dict({"name": "w", "fields": {"x": {"dtype": "float32", "shape": ["B", "L"]}},
                        "rules": ["sum(x * arange(L), dim=L) < 0"]}, "w.yaml")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 37, generator=g)
    x[:, 1], x[:, 32] = 2.0**100, -(2.0**95)  # times 1 and 32: they cancel, and the row's grid 2**41 cuts
    # its small terms (windows without them would keep those)
    whole = tc.check({"x": x}, s, backend="torch").violations
    monkeypatch.setattr(torch_backend, "MAX_MASK", 8)
    windowed = tc.check({"x": x}, s, backend="torch").violations
    assert [v.to_dict() for v in windowed] == [v.to_dict() for v in whole]
    assert whole[0].value == defined_sum((x[0] * torch.arange(37)).tolist())
    assert whole[0].value == 0.0


_PTX = r"""
import json, sys, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import create_function_from_signature
from tritoncheck.backends import triton as backend
from tritoncheck.plan.lower import bind, compile_plan
from tritoncheck.spec.schema import spec_from_dict
TARGET = GPUTarget("cuda", 90, 32)  # an H100
spec = spec_from_dict({"name": "s", "fields": {"x": {"dtype": "float32", "shape": ["B", "L"]}},
                       "rules": ["sum(x, dim=L) < 5"]}, "s")
plan = compile_plan(spec)
bound = bind(plan, {"x": torch.zeros(3, 5)})
program = backend.program_for(plan, bound)
out = torch.zeros(backend.launch_for(program, bound).length, dtype=torch.int64)
args, kwargs, _ = backend.launch_args(program, bound, out)
fn, target_backend = program.fn, make_backend(TARGET)
bound_args, specialization, options = create_function_from_signature(fn.signature, fn.params, target_backend)(
    *args, **kwargs)
options, signature, constexprs, attrs = fn._pack_args(target_backend, options, bound_args, specialization, options)
compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=TARGET, options=options.__dict__)
print(json.dumps(compiled.asm["ptx"]))
"""


def test_a_float_sum_compiles_to_the_same_steps_for_a_gpu(tmp_path):
    """The interpreter runs numpy; a GPU runs PTX. Compiled for an H100 (no GPU needed), the folds
    shift right arithmetically (floor, as C and torch), float64 -> int64 truncates and int64 ->
    float64 rounds to nearest, as the steps need."""
    pytest.importorskip("triton.backends.compiler", reason="pip install triton (in the test extra)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITONCHECK_CACHE_DIR"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", _PTX], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ptx = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "shr.s64" in ptx and "cvt.rzi.s64.f64" in ptx and "cvt.rn.f64.s64" in ptx


# -- rows of 2**33 values or more: never the kernels' int64 folds (issue 27) --------------------------

def checked(x: torch.Tensor, rule: str, backend: str) -> tc.Report:
    """The report of `rule` over x ([B, L]), a compiled backend's fallback warning silenced."""
    s = spec_from_dict({"name": "sums", "fields": {"x": {"dtype": str(x.dtype).removeprefix("torch."),
                                                         "shape": ["B", "L"]}}, "rules": [rule]}, "s.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return tc.check({"x": x}, s, backend=backend)


def test_a_float_row_of_2_33_values_is_refused_by_the_kernels():
    """A materialized row that long (32 GiB of float32) cannot be allocated here: the walk a kernel
    would take says it, and `check_result_backed` (both kernels call it before a launch) refuses it."""
    s = spec_from_dict({"name": "sums", "fields": {"x": {"dtype": "float32", "shape": ["B", "L"]}},
                        "rules": ["sum(x, dim=L) < 3.5"]}, "s.yaml")
    plan = compile_plan(s)
    kernel = ir.lower(plan, plan.checks, {"x": ir.FieldSig("x", torch.float32, ("B", "L"), True)})
    x = torch.zeros(2, 3)
    with pytest.raises(ir.Unsupported, match="would walk 17,179,869,184 positions"):  # 2 + 2 x (2**33 - 1)
        ir.check_result_backed(kernel, {"x": x}, {"B": 2, "L": sums.MAX_TERMS - 1})
    with pytest.raises(ir.Unsupported, match=r"2\*\*33 or more: the kernel's int64 folds could wrap"):
        ir.check_result_backed(kernel, {"x": x}, {"B": 2, "L": sums.MAX_TERMS})


def test_an_expanded_row_of_2_34_values_is_its_defined_sum_on_every_backend(backend):
    """2**34 copies of float32 0.1 (a view storing one value per row): the defined sum, on every
    backend (the kernels hand such a row to the torch backend), in well under a second."""
    x = torch.tensor([[0.1], [0.0]]).expand(2, 2**34)
    r = checked(x, "sum(x, dim=L) < 3.5", backend)
    assert [(v.count, v.value) for v in r.violations] == [(1, defined_sum([x[0, 0].item()]) * 2**34)]
    assert r.backend == "torch" or backend == "torch"


@pytest.mark.parametrize("kernel_backend", ["c", "triton"])
def test_a_long_float_row_goes_to_the_torch_backend_which_adds_it_in_runs(monkeypatch, kernel_backend):
    """With MAX_TERMS lowered to 64, a materialized row of 200 values counts as long: C and Triton
    hand it to the torch backend, whose runs of fewer values add up as Python integers to the
    defined sum (as 2**33 values would: the int64 folds of one sum wrapped there)."""
    if kernel_backend == "triton":
        pytest.importorskip("triton", reason="pip install triton (in the test extra)")
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(3, 200, generator=g) * torch.tensor([1e-3, 1.0, 1e6])[:, None]).to(torch.float32)
    x[0, 5], x[0, 6] = 1e30, -1e30  # (its grid cuts the small values)
    rule = "sum(x, dim=L) > 1e300"  # fails in every row, showing row 0's sum
    before = comparable([v.to_dict() for v in checked(x, rule, "torch").violations])
    assert checked(x[:, :100], rule, kernel_backend).backend == kernel_backend  # (another signature)
    monkeypatch.setattr(sums, "MAX_TERMS", 64)
    r = checked(x, rule, kernel_backend)
    assert r.backend == "torch" and comparable([v.to_dict() for v in r.violations]) == before
    assert sums.float_sum(x, (1,)).tolist() == [defined_sum(row) for row in x.tolist()]


def test_a_windowed_float_sum_of_a_long_row_adds_its_windows_per_row(monkeypatch):
    """A float sum whose body reads positions goes in windows; a long row's windows are Python
    integers, added per row (they were joined as lists)."""
    s = spec_from_dict({"name": "w", "fields": {"x": {"dtype": "float32", "shape": ["B", "S"]}},
                        "rules": ["sum(x + arange(S) * 0, dim=S) > 1e300"]}, "w.yaml")
    x = torch.tensor([[0.1, 0.3, 1e8, 1.0, -1e8] * 8, [0.01] * 40], dtype=torch.float32)
    whole = [(v.count, v.value) for v in tc.check({"x": x}, s, backend="torch").violations]
    assert whole == [(2, defined_sum(x[0].tolist()))]
    monkeypatch.setattr(torch_backend, "MAX_MASK", 16)  # windows of 8 positions
    monkeypatch.setattr(sums, "MAX_TERMS", 8)
    assert [(v.count, v.value) for v in tc.check({"x": x}, s, backend="torch").violations] == whole
