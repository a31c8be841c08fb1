"""`%` on floats is torch.remainder's meaning (fmod moved into the divisor's sign) with an exact fmod, on
every backend and in every layout (issue 27; found by the differential fuzz, seed 2167296241).

torch's vectorized float64 fmod and remainder give NaN where the quotient overflows (1e308 % 0.5), its
scalar loop (a tensor's tail, a strided layout) the exact value, so the same values got two verdicts.
"""

from __future__ import annotations

import math

import torch
from report_compare import comparable

import tritoncheck as tc
from tritoncheck.backends.torch import binary
from tritoncheck.spec.schema import spec_from_dict

SPEC = spec_from_dict({"name": "r", "fields": {"x": {"dtype": "float64", "shape": ["B"]},
                                               "y": {"dtype": "float64", "shape": ["B"]}},
                       "rules": ["x % y == 0", "x % y == x % y"]}, "r.yaml")


def test_a_remainder_with_an_overflowing_quotient_is_exact_in_every_layout(backend):
    """1e308 and the largest float64 are multiples of 0.5 and of the smallest subnormal: `x % y == 0`
    holds at each of the 41 positions, contiguous (32 vectorized, 9 in the tail) or strided; and no
    remainder is NaN where x and y are finite and y nonzero."""
    x = torch.tensor([1e308] * 20 + [-1.7976931348623157e308] * 21, dtype=torch.float64)
    y = torch.tensor([0.5] * 10 + [-0.5] * 10 + [5e-324] * 11 + [-5e-324] * 10, dtype=torch.float64)
    contiguous = tc.check({"x": x, "y": y}, SPEC, backend=backend)
    strided = tc.check({"x": torch.stack([x, x], 1)[:, 0], "y": torch.stack([y, y], 1)[:, 0]}, SPEC, backend=backend)
    assert contiguous.ok, str(contiguous)
    assert comparable(strided.to_dict() | {"backend": "-"}) == comparable(contiguous.to_dict() | {"backend": "-"})


def test_the_torch_remainder_is_fmod_in_the_divisors_sign():
    """Against Python's math.fmod, for pairs across the whole float64 range (subnormals included)."""
    values = [5e-324, 1e-310, 2.2250738585072014e-308, 1e-300, 0.1, 0.5, 3.0, 1e20, 2.0**60, 1e300,
              1.7976931348623157e308]
    values += [-v for v in values]
    a = torch.tensor([v for v in values for _ in values], dtype=torch.float64)
    b = torch.tensor(values * len(values), dtype=torch.float64)
    for x, y, r in zip(a.tolist(), b.tolist(), binary("%", a, b).tolist(), strict=True):
        m = math.fmod(x, y)
        want = m + y if m != 0 and (m < 0) != (y < 0) else m
        assert r == want and math.copysign(1, r) == math.copysign(1, want), (x, y, r, want)


def test_a_float32_remainder_with_an_overflowing_quotient_is_exact_in_a_long_run():
    """float32's quotient overflows at 2**128 (3e38 % 1e-38), where no multiple of a power of two can
    bring it back in float32: the pair is reduced in float64. 1,000 such pairs (all vectorized; the
    remainder loop on them alone had no way out), against Python's math.fmod."""
    x = torch.tensor([3e38, -1.5e38, 2e30] * 334, dtype=torch.float32)[:1000]
    y = torch.tensor([1e-38, 7e-39, -1e-45] * 334, dtype=torch.float32)[:1000]
    for a, b, r in zip(x.tolist(), y.tolist(), binary("%", x, y).tolist(), strict=True):
        m = math.fmod(a, b)
        want = torch.tensor(m + b if m != 0 and (m < 0) != (b < 0) else m, dtype=torch.float32).item()
        assert r == want, (a, b, r, want)
