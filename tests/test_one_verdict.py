"""One verdict on every backend for batches torch reads differently from their raw memory.

Lazy negation/conjugation bits, bool bytes other than 0/1, signed zeros in rules and dims past
2**31 with empty fields: each backend's report must equal the torch reference's, and the
reference's must equal the same batch materialized (as torch shows its values).
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from report_compare import comparable

import tritoncheck as tc
from tritoncheck._spec import spec_from_dict


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
