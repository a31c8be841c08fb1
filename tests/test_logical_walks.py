"""Issue 27: a batch costs what it stores, whatever its logical size, on every backend.

Rules that read positions along an expanded (zero-stride) dim (`arange`), or pair fields stored along
different axes of what they run over, would need their logical walk for an exact verdict: every backend
refuses such a batch alike (`tc.UncheckableBatchError`, raised by `bind`) past max(WALK_LIMIT, stored
values). Reads that cost the stored values only (a sum over an expanded dim, monotonic along one, a
selection) are checked, with the compiled kernels handing what they would walk in full to the torch
backend. Float sums over rows of 2**33 values or more, where the kernels' int64 folds could wrap, go to
the torch backend too, which adds them exactly.
"""

from __future__ import annotations

import time
import warnings

import pytest
import torch
from report_compare import comparable

import tritoncheck as tc
from tritoncheck.backends import torch as torch_backend
from tritoncheck.kernel import ir
from tritoncheck.plan.lower import WALK_LIMIT, bind, compile_plan
from tritoncheck.spec.schema import spec_from_dict

HUGE = 2**34  # logical size of an expanded dim: 16 Gi positions of a view that stores a few values


def spec(fields: dict, rules: list) -> tc.BatchSpec:
    return spec_from_dict({"name": "w", "fields": fields, "rules": rules}, "w.yaml")


def checked(batch: dict, s: tc.BatchSpec, backend: str) -> tuple[tc.Report, float]:
    """The report (a fallback's warning silenced) and the seconds the check took, kernel built before."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        tc.check(batch, s, backend=backend)
        t0 = time.perf_counter()
        r = tc.check(batch, s, backend=backend)
        return r, time.perf_counter() - t0


def found(r: tc.Report) -> list:
    return comparable([v.to_dict() for v in r.violations])


I64 = {"dtype": "int64"}
F32 = {"dtype": "float32"}
CTC = {"targets": {**I64, "shape": ["B", "S"]}, "lengths": {**I64, "shape": ["B"]}}


def ctc(s: int) -> dict:
    return {"targets": torch.tensor([[1], [0]]).expand(2, s), "lengths": torch.tensor([3, 5])}


# -- refused on every backend: an exact verdict would take the logical walk -------------------------

PAIR = 2**15  # x stores 2**15 values along L, y 2**15 along B: 512 KiB, a walk of 2**30
REFUSED = {
    "arange weighting a sum over it": (spec(CTC, ["sum(targets * arange(S), dim=S) < 1"]), ctc(HUGE)),
    "arange in a float sum over it": (spec(CTC, ["sum((arange(S) < lengths) * 0.5, dim=S) < 9"]), ctc(HUGE)),
    "arange through a modulo": (spec(CTC, ["targets != 0 where arange(S) % 2 == 0"]), ctc(HUGE)),
    "arange compared with arange": (spec(CTC, ["targets != 0 where arange(S) < arange(S) * 0 + lengths"]),
                                    ctc(HUGE)),
    "arange times a field": (spec(CTC, ["targets * arange(S) < 5"]), ctc(HUGE)),
    "fields stored along different axes": (
        spec({"x": {**I64, "shape": ["B", "L"]}, "y": {**I64, "shape": ["B"]}}, ["x <= y"]),
        {"x": torch.arange(PAIR).expand(PAIR, PAIR), "y": torch.arange(PAIR)}),
    # contiguous, but neither stores B x L (the spec's field that does is optional, and absent)
    "contiguous fields along different axes": (
        spec({"a": {**I64, "shape": ["B", "L"], "optional": True}, "b": {**I64, "shape": ["B"]},
              "c": {**I64, "shape": ["L"]}}, ["b + c >= 0"]),
        {"b": torch.arange(2**11), "c": torch.arange(2**11)}),
    # (lengths int64: its values could take the sum past int64, where it would wrap)
    "arange past int64 on the way": (spec(CTC, ["targets != 0 where arange(S) + lengths > 0"]), ctc(HUGE)),
    "arange times a dim past int64": (spec(CTC, ["targets != 0 where arange(S) * S > 0"]), ctc(HUGE)),
    # piecewise along S it would be: one piece per value of lengths, times the 2**20 of them
    "pieces past the limit": (spec(CTC, ["targets != 0 where arange(S) < lengths"]),
                              {"targets": torch.tensor([[1]]).expand(2**20, 4), "lengths": torch.arange(2**20)}),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_rule_that_would_walk_an_expanded_dim_is_refused_on_every_backend(backend, case):
    """The same error on torch, C and Triton, at once (it took minutes, or hours at 2**34), naming the
    rule, the walk and the stored values."""
    s, batch = REFUSED[case]
    t0 = time.perf_counter()
    with pytest.raises(tc.UncheckableBatchError) as err:
        tc.check(batch, s, backend=backend)
    assert time.perf_counter() - t0 < 1.0
    text = str(err.value)
    assert s.rules[0].rule in text and "expanded (zero-stride)" in text and ".contiguous()" in text, text
    assert f"max({WALK_LIMIT:,}" in text
    with pytest.raises(tc.UncheckableBatchError):  # validate too, and again (nothing cached lets it through)
        tc.validate(batch, s, backend=backend)


def test_the_refusal_names_the_walk_and_what_the_batch_stores():
    s, batch = REFUSED["arange through a modulo"]
    with pytest.raises(tc.UncheckableBatchError, match=r"would walk 34,359,738,368 positions \(B=2 x S=17179869184\) "
                                                       r"where the batch stores 4 values"):
        tc.check(batch, s, backend="torch")
    assert issubclass(tc.UncheckableBatchError, ValueError)
    s, batch = REFUSED["pieces past the limit"]
    with pytest.raises(tc.UncheckableBatchError, match=r"Evaluated piecewise along S \(where arange\(S\) crosses the "
                                                       r"values it is compared with\), it would still take 4,194,304\."):
        tc.check(batch, s, backend="torch")


def test_a_walk_up_to_the_limit_is_checked_and_past_it_refused():
    """WALK_LIMIT positions beyond what the batch stores are checked exactly (the torch backend's
    windows, the C kernel's loop); one more sample past it is refused."""
    s = spec(CTC, ["targets != 0 where arange(S) % 7 < lengths"])
    r, _ = checked(ctc(WALK_LIMIT // 2), s, "torch")
    assert [(v.code, v.count) for v in r.violations] == [("rule_failed", WALK_LIMIT // 2 // 7 * 5 + min(WALK_LIMIT // 2 % 7, 5))]
    with pytest.raises(tc.UncheckableBatchError):
        tc.check(ctc(WALK_LIMIT // 2 + 1), s, backend="torch")


def test_a_materialized_batch_is_never_refused(backend):
    """A walk past WALK_LIMIT over fields that store it is checked: its cost is what it stores."""
    s = spec(CTC, ["targets != 0 where arange(S) < lengths"])
    batch = {"targets": torch.tensor([[1], [0]]).repeat(1, WALK_LIMIT // 2 + 7), "lengths": torch.tensor([3, 5])}
    r, _ = checked(batch, s, backend)
    assert r.backend == backend and found(r) == found(checked(batch, s, "torch")[0])
    assert [(v.code, v.count) for v in r.violations] == [("rule_failed", 5)]


# -- arange along a dim no field stores: evaluated piecewise, on every backend ----------------------

X = {"x": {**I64, "shape": ["B"]}}
PIECEWISE = {  # (spec, batch of logical size n)
    "arange along an expanded dim": (spec(CTC, ["targets != 0 where arange(S) < lengths"]), ctc),
    "arange in a reduction over it": (spec(CTC, ["any(arange(S) > lengths, dim=S)", "all(arange(S) < lengths, dim=S)"]),
                                      ctc),
    "arange counted by a sum over it": (spec(CTC, ["sum(arange(S) < lengths, dim=S) < 4",
                                                   "sum((arange(S) >= lengths) * targets, dim=S) < 7"]), ctc),
    "arange through affine steps": (  # (lengths int32: arange(S) - lengths cannot leave int64, whatever its values)
        spec({**CTC, "lengths": {"dtype": "int32", "shape": ["B"]}},
             ["2 * arange(S) - lengths != 3 - targets", "-arange(S) + S > lengths"]),
        lambda n: {**ctc(n), "lengths": torch.tensor([3, 5], dtype=torch.int32)}),
    "arange along an expanded batch dim": (spec(X, ["x <= arange(B)", "x >= arange(B)"]),
                                           lambda n: {"x": torch.tensor([3]).expand(n)}),
    # 2**26 samples of an empty field took 700 MiB before windows, and a window at a time since
    "arange beside a reduction over an empty field": (
        spec({"r": {**F32, "shape": ["B", "out"]}}, ["all(r > 0, dim=out) & (arange(B) < 3)"]),
        lambda n: {"r": torch.zeros(n, 0)}),
}


@pytest.mark.parametrize("case", list(PIECEWISE))
def test_arange_along_a_dim_no_field_stores_is_checked_piecewise(backend, case):
    """At 2**34 positions: under 1 s on every backend (a kernel hands the walk to the torch backend),
    each report equal to torch's; at 2**21 (past WALK_LIMIT, so piecewise too), torch's report equals
    the batch's materialized, whole."""
    s, make = PIECEWISE[case]
    reference, took = checked(make(HUGE), s, "torch")
    assert took < 1.0 and reference.violations
    r, took = checked(make(HUGE), s, backend)
    assert took < 1.0 and found(r) == found(reference)
    if backend == "torch":
        batch = make(2**21)
        whole = checked({k: t.contiguous() for k, t in batch.items()}, s, "torch")[0]
        assert comparable(checked(batch, s, "torch")[0].to_dict()) == comparable(whole.to_dict())


PIECE_RULES = ["t != 0 where arange(S) < x", "arange(S) <= x", "arange(S) * 3 - 7 >= x", "-arange(S) + 5 < x",
               "x == arange(S) + 1", "x != 2 * arange(S)", "any(arange(S) * 2 > x, dim=S)",
               "all(arange(S) != x, dim=S) | (t > 5)", "(arange(S) < x) & (arange(S) >= x - 3)", "arange(S) < x * 0.5",
               "arange(S) < S - x", "t + arange(S) > x", "arange(S) - t <= sum(x)", "arange(S) - 2 == t",
               "(arange(S) + t) * -2 < x", "S - arange(S) * 2 != x", "sum(arange(S) < x, dim=S) <= t",
               "sum((arange(S) >= x) * t, dim=S) != 7", "sum(arange(S) * 0 + 1 < x) > 3"]
PIECE_VALUES = {"int64": [3, -2, 7, 0, 40, 2**62], "int16": [3, -2, 7, 0, 40, -32768],
                "float32": [2.5, float("nan"), -float("inf"), 7.0, 1e30, 16777217.0],
                "float16": [2.5, 65504.0, float("nan"), 36.0, -0.0, 0.1], "bool": [True, False, True, True, False, False],
                "float64": [2.5, 36.000000001, 1e300, -1e-300, 35.99999, 9.0]}


@pytest.mark.parametrize("dtype", list(PIECE_VALUES))
def test_a_rule_evaluated_piecewise_gives_the_report_of_its_whole_walk(monkeypatch, dtype):
    """Every rule, with x of each dtype (NaN, infinities, values past S, float16 rounding of the
    positions it is compared with) and t int32 (up to its largest: `t + arange(S)` stays in int64), evaluated piecewise along S (the torch backend made to take that
    path at S = 37) gives the report of the batch materialized, evaluated position by position."""
    fields = {"t": {"dtype": "int32", "shape": ["B", "S"]}, "x": {"dtype": dtype, "shape": ["B"]}}
    x = torch.tensor(PIECE_VALUES[dtype], dtype=getattr(torch, dtype))
    t = torch.tensor([[1], [0], [5], [-3], [2], [2**31 - 1]], dtype=torch.int32)
    batch = {"t": t.expand(6, 37), "x": x}
    whole = {k: t.contiguous() for k, t in batch.items()}
    wholes = {rule: tc.check(whole, spec(fields, [rule]), backend="torch").to_dict() for rule in PIECE_RULES}
    pieces, piecewise = [], torch_backend._piecewise

    def spy(check, ctx, along):
        pieces.append(check.text)
        return piecewise(check, ctx, along)

    monkeypatch.setattr(torch_backend, "PIECEWISE_FROM", 0)
    monkeypatch.setattr(torch_backend, "_piecewise", spy)
    for rule in PIECE_RULES:
        assert comparable(tc.check(batch, spec(fields, [rule]), backend="torch").to_dict()) == comparable(wholes[rule]), rule
    assert pieces == PIECE_RULES


def test_a_piece_of_samples_is_listed_in_constant_space():
    """`x >= arange(B)` with x = 3 stored once fails at samples 4 .. B - 1: listed as one run."""
    s, make = PIECEWISE["arange along an expanded batch dim"]
    v = checked(make(HUGE), s, "torch")[0].violations[1]
    assert (v.count, v.index, v.value, len(v.samples), v.samples[:3], v.samples[-1]) == (HUGE - 4, (4,), 3, HUGE - 4,
                                                                                         (4, 5, 6), HUGE - 1)
    assert v.to_dict()["rows_total"] == HUGE - 4 and "4, 5, 6, 7, 8, 9, 10, 11, 12, 13 ..." in v.message


# -- checked from the stored values on every backend, whatever the logical size ----------------------

CHEAP = {
    "int sum over an expanded dim": (spec({"m": {**I64, "shape": ["B", "L"]}}, ["sum(m, dim=L) <= 3"]),
                                     lambda n: {"m": torch.tensor([[7], [0]]).expand(2, n)}),
    "bool sum over an expanded dim": (spec({"m": {"dtype": "bool", "shape": ["B", "L"]}}, ["sum(m, dim=L) <= 3"]),
                                      lambda n: {"m": torch.tensor([[True], [False]]).expand(2, n)}),
    "float sum over an expanded dim": (spec({"x": {**F32, "shape": ["B", "L"]}}, ["sum(x, dim=L) < 3.5"]),
                                       lambda n: {"x": torch.tensor([[0.1], [0.0]]).expand(2, n)}),
    "a sum over the batch compared per sample": (spec({"x": {**F32, "shape": ["B"]}}, ["x * 1000 >= sum(x)"]),
                                                 lambda n: {"x": torch.tensor([1.0]).expand(n)}),
    "monotonic along an expanded dim": (spec({"p": {**I64, "shape": ["B", "L"], "monotonic": "L"}}, []),
                                        lambda n: {"p": torch.tensor([[3], [1]]).expand(2, n)}),
    "monotonic along a stored dim, expanded beside": (
        spec({"p": {**I64, "shape": ["B", "L"], "monotonic": "B"}}, []),
        lambda n: {"p": torch.tensor([[3], [1], [2]]).expand(3, n)}),
    "a selection along an expanded dim": (spec({"x": {**I64, "shape": ["B", "L"]}}, ["x[:, -1] > 0", "x[:, 3] > 0"]),
                                          lambda n: {"x": torch.tensor([[1], [0]]).expand(2, n)}),
}


@pytest.mark.parametrize("case", list(CHEAP))
def test_reads_of_stored_values_are_checked_at_any_logical_size(backend, case):
    """At 2**34 positions: under 1 s on every backend (a compiled kernel that would walk them hands
    the batch to the torch backend), each report equal to torch's; and at a small size, equal to
    the batch materialized."""
    s, make = CHEAP[case]
    reference, took = checked(make(HUGE), s, "torch")
    assert took < 1.0
    r, took = checked(make(HUGE), s, backend)
    assert took < 1.0 and found(r) == found(reference)
    small = make(37)
    assert found(checked(small, s, backend)[0]) == found(checked({k: t.contiguous() for k, t in small.items()}, s,
                                                                 "torch")[0])
    assert bool(reference.violations) == (case != "monotonic along an expanded dim")


def test_a_kernel_hands_a_walk_past_its_limit_to_the_torch_backend():
    """Beyond KERNEL_WALK_LIMIT positions through expanded views, the C kernel gives the batch to the
    torch backend (which walks it in windows); the report is the same."""
    s = spec(CTC, ["targets != 0 where arange(S) < lengths"])
    small, big = ctc(ir.KERNEL_WALK_LIMIT // 2), ctc(ir.KERNEL_WALK_LIMIT // 2 + 1)
    assert checked(small, s, "c")[0].backend == "c"
    r = checked(big, s, "c")[0]
    assert r.backend == "torch" and found(r) == found(checked(big, s, "torch")[0]) and r.violations


@pytest.mark.parametrize("backend_arg", ["torch", "c"])
def test_the_command_line_says_why_in_one_line(tmp_path, capsys, backend_arg):
    """`tritoncheck check` on a saved expanded batch (torch.save keeps the zero strides): the usage exit
    code and the refusal in one line, on the reference backend too (no traceback)."""
    from tritoncheck.cli import main

    (tmp_path / "w.yaml").write_text("name: w\nfields:\n  targets: {dtype: int64, shape: [B, S]}\n"
                                     "  lengths: {dtype: int64, shape: [B]}\nrules:\n"
                                     "  - targets != 0 where arange(S) % 2 == 0\n")
    torch.save(ctc(HUGE), tmp_path / "b.pt")
    assert main(["check", str(tmp_path / "w.yaml"), str(tmp_path / "b.pt"), "--backend", backend_arg]) == 2
    err = capsys.readouterr().err
    assert "would walk 34,359,738,368 positions" in err and "Traceback" not in err


def test_a_reduction_over_the_batch_at_each_position_goes_to_the_torch_backend(backend):
    """`y <= sum(y, dim=B)` over [B, L]: the kernels compute the sum again at each of the B * L
    positions (B * B * L: 0.2 s at B = 2**13 on C, 51 s at 2**17). A materialized 512 KiB batch checks
    in under 1 s on every backend, the kernels handing it to the torch backend (one sum per column);
    `x <= sum(x)` over [B] stays on C (its sum is computed once, before the loop)."""
    s = spec({"y": {**I64, "shape": ["B", "L"]}}, ["y <= sum(y, dim=B)", "y <= 32768"])
    y = torch.ones(2**15, 2, dtype=torch.int64)
    y[7, 1] = 2**15 + 3
    r, took = checked({"y": y}, s, backend)
    assert took < 1.0 and r.backend == "torch" and found(r) == found(checked({"y": y}, s, "torch")[0])
    assert [(v.rule, v.count) for v in r.violations] == [("y <= 32768", 1)]
    assert checked({"y": y[:16]}, s, backend)[0].backend == backend  # (16 x 2 x 17 positions)
    x = spec({"x": {**F32, "shape": ["B"]}}, ["x <= sum(x)"])
    assert checked({"x": torch.ones(2**17)}, x, "c")[0].backend == "c"


def test_x_below_its_sum_goes_to_torch_from_a_kernel_that_sums_at_each_position(backend):
    """Triton's kernel computes `sum(x)` at each of the B positions (B**2: 46 s at B = 4096 in its
    interpreter); C computes it once. 16 KiB of float32 checks in under 1 s on every backend."""
    s = spec({"x": {**F32, "shape": ["B"]}}, ["x * 4096 >= sum(x)"])
    x = torch.ones(4096)
    x[5] = 0.5
    r, took = checked({"x": x}, s, backend)
    assert took < 1.0 and found(r) == found(checked({"x": x}, s, "torch")[0])
    assert [(v.count, v.index) for v in r.violations] == [(1, (5,))]  # (the sum is 4095.5)
    assert r.backend == ("torch" if backend == "triton" else backend)


def test_fixed_axes_paired_across_fields_are_never_refused(backend):
    """Found by the differential fuzz (seed 2591307609): a rule pairing [K, C, 17] with a field of
    fixed shape [2] walks K x C x 17 x 2 positions, twice what a materialized batch stores; fixed
    axes are the spec's constants, so only the named dims' walk is bounded by what is stored."""
    s = spec({"p": {**I64, "shape": ["B", "C", 17]}, "g": {**I64, "shape": [2]}}, ["p != g"])
    batch = {"p": torch.zeros(3, 30_000, 17, dtype=torch.int64), "g": torch.tensor([0, 1])}
    if backend == "triton":  # the refusal is bind's, one for every backend; Triton's interpreter took 2 minutes here
        bind(compile_plan(s), batch)  # (raises UncheckableBatchError where it refuses)
        return
    r, _ = checked(batch, s, backend)
    assert found(r) == found(checked(batch, s, "torch")[0])
    assert [(v.code, v.count) for v in r.violations] == [("rule_failed", 3 * 30_000 * 17)]


# -- a rule over an empty field has no positions: nothing to walk ------------------------------------

EMPTY = spec({"x0": {**I64, "shape": ["B", 0, "L"]}, "y": {**I64, "shape": ["L"]}},
             ["((x0 < 1) | (arange(B) < x0)) & (x0 == x0[0]) where y == x0",  # (the fuzz's rule, seed 1560596879)
              "(arange(B) < y) | (x0 < 1)",  # a part that pairs B with L, the whole still over x0's no positions
              "any(arange(B) < x0) | (y > 0)"])  # arange in a reduction over no positions, beside a walk over L


def test_a_rule_over_an_empty_field_is_checked_expanded_or_materialized(backend):
    """Found by the differential fuzz (seed 1560596879): an empty x0 [B, 0, L] sets B, and a rule with
    arange(B) was checked with y expanded along L but refused with y materialized (B x L = 2**34 positions
    counted against 2**14 stored), though a rule over x0's 0 elements has 0 positions, and a reduction
    over them walks none. Both batches are now checked alike, on every backend, in under 1 s (the
    torch backend builds nothing for a rule over no positions: `arange(B) < y` alone is 2**34)."""
    x0 = torch.zeros(2**20, 0, 2**14, dtype=torch.int64)
    expanded = {"x0": x0, "y": torch.tensor([-4]).expand(2**14)}
    materialized = {"x0": x0, "y": expanded["y"].contiguous()}
    reference, _ = checked(materialized, EMPTY, "torch")
    assert [(v.rule, v.count, v.index) for v in reference.violations] == [(EMPTY.rules[2].rule, 2**14, (0,))]
    for batch in (expanded, materialized):
        r, took = checked(batch, EMPTY, backend)
        assert took < 1.0 and found(r) == found(reference)
