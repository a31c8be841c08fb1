"""Float sums in torch: one value whatever the order (docs/semantics.md, "Sums").

The largest biased exponent E among a row's finite values fixes a grid 2**g, g = max(E - 1082,
-1074); each value cut towards zero to a multiple of 2**g is an integer t, |t| < 2**60, split
into two 30-bit folds that add up in int64 (exact, so in any order); the total is rounded to
float64 once. The torch backend sums with `float_sum` (and with its steps over windows of a long
row), and so does the decoder for the values a kernel's report shows; the C and Triton code
generators emit the same steps (`codegen/c.py`: `tc_fsum`; `codegen/triton.py`: `float_sum`), so
every backend gives the same bits.

Torch is imported by the functions that compute with it, not here: the kernel IR imports this module for its
constants (`MAX_TERMS`) without torch.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

FOLD = 30  # bits of a fold: t = hi * 2**30 + lo, lo in [0, 2**30)
MAX_TERMS = 2**33  # a row of fewer values cannot wrap its int64 folds (from it on: Python integers)


def float_sum(x: torch.Tensor, red: tuple[int, ...], count: int = 1) -> torch.Tensor:
    """The float64 sum over positions `red` of `x` (any float dtype), each stored value counted
    `count` times (an expanded axis): the same bits as the C and Triton kernels, in any order."""
    import torch

    if not red:  # one value: itself (+0.0 for -0.0)
        return x.to(torch.float64) + 0.0
    if count == 0 or any(x.shape[d] == 0 for d in red):  # no values
        return torch.zeros_like(x.sum(dim=red, dtype=torch.float64))
    special, grid, x = scan(x, red)
    long = math.prod(x.shape[d] for d in red) * count >= MAX_TERMS
    return finish(special, grid, repeat(fold_sums(x, red, grid), count, long)).squeeze(red)


def scan(x: torch.Tensor, red: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pass 1, per row (kept dims): the sum of its non-finite values, which IEEE adds alike in any
    order (NaN for a NaN or both infinities, else the infinity, else 0); its grid exponent g; and
    `x` with the non-finite values zeroed (float16 and bfloat16 as float32, exactly)."""
    import torch

    if x.dtype not in (torch.float32, torch.float64):
        x = x.to(torch.float32)
    top = torch.maximum(x.amax(dim=red, keepdim=True), -x.amin(dim=red, keepdim=True))  # (NaN if any)
    special = torch.zeros(top.shape, dtype=torch.float64, device=top.device)
    largest = torch.finfo(x.dtype).max
    if not bool((top <= largest).all()):  # a NaN or an infinity somewhere
        finite = x.abs() <= largest
        special = torch.where(finite, 0.0, x).sum(dim=red, keepdim=True, dtype=torch.float64)
        x = torch.where(finite, x, 0.0)
        top = x.abs().amax(dim=red, keepdim=True)
    # g from the largest finite |value|: its biased exponent E, so |value| < 2**(E - 1022) = 2**(g + 60)
    return special, ((top.to(torch.float64).view(torch.int64) >> 52) - 1082).clamp(min=-1074), x


def _pow2(k: torch.Tensor) -> torch.Tensor:
    """2.0**k, exactly, for int64 k in [-1022, 1023] (the exponent bits)."""
    import torch

    return ((k + 1023) << 52).view(torch.float64)


CHUNK = 2**15  # values a CPU pass 2 takes at once: its int64 temporaries stay in cache


def fold_sums(x: torch.Tensor, red: tuple[int, ...], grid: torch.Tensor) -> list:
    """Pass 2, on finite float32 or float64 values: t = trunc(x / 2**g), |t| < 2**60, by exact
    power-of-two scaling (in x's dtype where 2**-g is a normal number of it, else in float64 in two
    steps) and a truncating conversion; the row sums of its folds hi = t >> 30 and t - hi * 2**30.
    On the CPU, a long row goes in chunks along its longest reduced axis (integers add exactly).
    A row of MAX_TERMS values or more (its int64 folds could wrap) goes in runs of fewer, each
    row's total kept as one Python integer (`repeat`'s exact form)."""
    d = max(red, key=lambda i: x.shape[i])
    n = math.prod(x.shape[i] for i in red)
    if n >= MAX_TERMS:
        run = max(1, (MAX_TERMS // 2) // (n // x.shape[d]))  # positions along d per run: under 2**32 values
        total: list[int] | None = None
        for part in x.split(run, dim=d):
            ints = exact(fold_sums(part, red, grid))
            total = ints if total is None else [a + b for a, b in zip(total, ints, strict=True)]
        return [total]
    step = max(1, CHUNK * x.shape[d] // max(1, x.numel()))
    if x.device.type == "cpu" and step < x.shape[d]:
        parts = [_fold_sums(part, red, grid) for part in x.split(step, dim=d)]
        return [sum(p[0] for p in parts), sum(p[1] for p in parts)]
    return _fold_sums(x, red, grid)


def _fold_sums(x: torch.Tensor, red: tuple[int, ...], grid: torch.Tensor) -> list[torch.Tensor]:
    import torch

    h = -grid
    low, high = (-126, 127) if x.dtype == torch.float32 else (-1022, 1023)
    if bool(((h >= low) & (h <= high)).all()):  # (a product below x's normal range is under 1: t = 0)
        t = (x * _pow2(h).to(x.dtype)).to(torch.int64)
    else:
        t = (x.to(torch.float64) * _pow2(h >> 1) * _pow2(h - (h >> 1))).to(torch.int64)
    hi = (t >> FOLD).sum(dim=red, keepdim=True)
    # the sum of t wraps in int64, but the sum of lo = t - hi * 2**30 is in [0, 2**63): exact, wrapped back
    return [hi, t.sum(dim=red, keepdim=True) - (hi << FOLD)]


def exact(parts: list) -> list[int]:
    """Each row's total t as one Python integer, from its folds (or as given, if already so)."""
    if len(parts) == 1:
        return parts[0]
    hi, lo = (q.flatten().tolist() for q in parts)
    return [(a << FOLD) + b for a, b in zip(hi, lo, strict=True)]


def repeat(parts: list, count: int, exact_form: bool) -> list:
    """The folds of `count` copies of each value; for a row of MAX_TERMS values or more (an
    expanded view, or a long materialized row), each row's total as one Python integer instead."""
    if not exact_form and len(parts) == 2:
        return [q * count for q in parts] if count != 1 else parts
    return [[t * count for t in exact(parts)]]


def add(a: list, b: list) -> list:
    """Two rows' folds (or Python totals) added, exactly."""
    if len(a) == 1 or len(b) == 1:
        return [[x + y for x, y in zip(exact(a), exact(b), strict=True)]]
    return [a[0] + b[0], a[1] + b[1]]


def finish(special: torch.Tensor, grid: torch.Tensor, parts: list) -> torch.Tensor:
    """The row's total, rounded to float64 once: lo's carry moves into hi, hi splits into its
    float64 rounding and an int64 rest that joins lo exactly, one float64 addition rounds the
    exact total, and two power-of-two scalings place it (exact, or IEEE's overflow)."""
    import torch

    if len(parts) == 1:  # Python integers (`repeat`)
        totals = [_exact_float(t, g) for t, g in zip(parts[0], grid.flatten().tolist(), strict=True)]
        out = torch.tensor(totals, dtype=torch.float64, device=grid.device).reshape(grid.shape)
        return torch.where(special != 0, special, out)
    hi, lo = parts
    hi = hi + (lo >> FOLD)
    lo = lo & ((1 << FOLD) - 1)
    rounded = hi.to(torch.float64)
    rest = (hi - rounded.to(torch.int64)) * 2**FOLD + lo  # |rest| < 2**40
    total = rounded * 2.0**FOLD + rest.to(torch.float64)
    out = total * _pow2(grid >> 1) * _pow2(grid - (grid >> 1))
    return torch.where(special != 0, special, out)  # (NaN != 0)


def _exact_float(t: int, g: int) -> float:
    """t * 2**g rounded to float64 once (an overflow is an infinity, as IEEE rounds it)."""
    try:
        return float(Fraction(t) * Fraction(2) ** g)
    except OverflowError:
        return math.copysign(math.inf, t)
