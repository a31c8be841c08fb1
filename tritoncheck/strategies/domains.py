"""Value domains: the values a field may hold, narrowed by its checks, and filling a tensor from one."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from tritoncheck.dtypes import compute_dtype

DEFAULT_SPAN = 50  # an unbounded int field draws from [lo, lo + 50]; floats from a span of 8
MAX_TRIES = 8  # tries at one write that breaks nothing else, or at one valid draw


class Infeasible(Exception):
    """This draw (dims, dtype) left a domain empty; another draw may work."""


@dataclass
class Domain:
    """The values a field may hold: [lo, hi] (or `values`), minus `exclude`, plus sentinels in `allow`."""

    name: str
    lo: float | None = None
    hi: float | None = None
    values: list[int | float] | None = None
    allow: tuple[int | float, ...] = ()
    exclude: set[int | float] = field(default_factory=set)
    finite: bool = False

    def narrow(self, op: str, k: float) -> None:
        """Intersect with `x <op> k` (the valid-data constraint of a range or a simple rule)."""
        if op in (">=", ">"):
            self.lo = k if self.lo is None else max(self.lo, k)
            if op == ">":
                self.exclude.add(k)
        elif op in ("<=", "<"):
            self.hi = k if self.hi is None else min(self.hi, k)
            if op == "<":
                self.exclude.add(k)
        elif op == "!=":
            self.exclude.add(k)
        elif op == "==":
            self.values = [v for v in (self.values if self.values is not None else [k]) if v == k]

    def admits(self, v: float) -> bool:
        """True if `v` satisfies the field's own checks (sentinels count as allowed)."""
        if v in self.allow:
            return True
        if isinstance(v, float) and not math.isfinite(v):
            return False
        return (
            (self.lo is None or v >= self.lo)
            and (self.hi is None or v <= self.hi)
            and (self.values is None or v in self.values)
            and v not in self.exclude
        )


def _int_range(dom: Domain, dtype: torch.dtype) -> tuple[int, int]:
    info = torch.iinfo(dtype) if dtype != torch.bool else None
    dlo, dhi = (0, 1) if info is None else (info.min, info.max)
    lo = math.ceil(dom.lo) if dom.lo is not None else None
    hi = math.floor(dom.hi) if dom.hi is not None else None
    if lo is None and hi is None:
        lo = 0
    lo = (0 if hi >= 0 else hi - DEFAULT_SPAN) if lo is None else lo
    hi = lo + DEFAULT_SPAN if hi is None else hi
    return max(lo, dlo), min(hi, dhi)


def _float_range(dom: Domain) -> tuple[float, float]:
    lo, hi = dom.lo, dom.hi
    if lo is None and hi is None:
        lo, hi = -4.0, 4.0
    lo = hi - 8.0 if lo is None else lo
    hi = lo + 8.0 if hi is None else hi
    return float(lo), float(hi)


def _candidates(dom: Domain, dtype: torch.dtype, limit: int = 4096) -> list[int | float] | None:
    """The explicit list of allowed (non-sentinel) values, or None when it is a wide interval."""
    if dom.values is not None:
        return [v for v in dom.values if dom.admits(v) and v not in dom.allow and representable(v, dtype)]
    if dtype.is_floating_point:
        return None
    lo, hi = _int_range(dom, dtype)
    if hi - lo > limit:
        return None
    return [v for v in range(lo, hi + 1) if v not in dom.exclude]


def representable(v: float, dtype: torch.dtype) -> bool:
    if isinstance(v, float) and not math.isfinite(v):
        return dtype.is_floating_point
    if dtype == torch.bool:
        return v in (0, 1)
    if dtype.is_floating_point:
        return float(torch.tensor(v, dtype=torch.float64).to(dtype).to(torch.float64)) == v
    info = torch.iinfo(dtype)
    return float(v).is_integer() and info.min <= v <= info.max


def pick(dom: Domain, dtype: torch.dtype, pred: Callable[[float], bool] = lambda v: True) -> int | float | None:
    """One allowed, representable value satisfying `pred`, or None."""
    cands = _candidates(dom, dtype, limit=1 << 16)
    if cands is None:
        lo, hi = _float_range(dom) if dtype.is_floating_point else _int_range(dom, dtype)
        cands = [lo, hi, (lo + hi) / 2 if dtype.is_floating_point else (lo + hi) // 2]
    for v in cands:
        if dom.admits(v) and pred(v) and representable(v, dtype):
            return v
    return None


def fill(dom: Domain, dtype: torch.dtype, shape: tuple[int, ...], g: torch.Generator, edge: float, sentinel: float) -> torch.Tensor:
    """A tensor of `shape` with every element in `dom`; `edge` and `sentinel` are mixing rates."""
    n = math.prod(shape)
    cands = _candidates(dom, dtype)
    if cands is not None:
        if not cands:
            raise Infeasible(f"{dom.name}: no allowed value for dtype {dtype}")
        pool = torch.tensor(cands, dtype=torch.float64)
        flat = pool[torch.randint(len(cands), (n,), generator=g)]
        ends = pool[[0, -1]]
    elif dtype.is_floating_point:
        lo, hi = _representable_range(*_float_range(dom), dtype, dom.name)
        flat = torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo) + lo
        ends = torch.tensor([lo, hi], dtype=torch.float64)
    else:  # a wide int interval
        lo, hi = _int_range(dom, dtype)
        if lo > hi:
            raise Infeasible(f"{dom.name}: empty range [{lo}, {hi}] for dtype {dtype}")
        flat = torch.randint(lo, hi + 1, (n,), generator=g, dtype=torch.int64).to(torch.float64)
        ends = torch.tensor([lo, hi], dtype=torch.float64)
        if dom.exclude:  # rare in a wide range: move those to a value that is allowed
            spare = pick(dom, dtype)
            if spare is None:
                raise Infeasible(f"{dom.name}: every value in [{lo}, {hi}] is excluded")
            flat[torch.isin(flat, torch.tensor(sorted(dom.exclude), dtype=torch.float64))] = float(spare)
    if edge and n:
        at = torch.rand(n, generator=g) < edge
        flat[at] = ends[torch.randint(2, (int(at.sum()),), generator=g)]
    sentinels = [a for a in dom.allow if representable(a, dtype)]
    if sentinel and sentinels and n:
        at = torch.rand(n, generator=g) < sentinel
        flat[at] = torch.tensor(sentinels, dtype=torch.float64)[torch.randint(len(sentinels), (int(at.sum()),), generator=g)]
    out = flat.to(dtype) if dtype != torch.bool else flat != 0
    if dtype.is_floating_point and dtype not in (torch.float64,) and dom.lo is not None and dom.hi is not None:
        # rounding to a narrow float may step just outside a bound such as 0.1; compare in compute dtype
        c = out.to(compute_dtype(dtype))
        lo, hi = _representable_range(dom.lo, dom.hi, dtype, dom.name)
        out = torch.where((c < dom.lo) | (c > dom.hi), torch.tensor(lo, dtype=dtype), out)
    return out.reshape(shape)


def _representable_range(lo: float, hi: float, dtype: torch.dtype, name: str) -> tuple[float, float]:
    """[lo, hi] shrunk to values that stay inside after rounding to `dtype` (and its compute dtype)."""
    cd = compute_dtype(dtype)

    def rounded(v: float) -> float:
        return float(torch.tensor(v, dtype=torch.float64).to(dtype).to(cd))

    step = torch.finfo(dtype).eps
    for _ in range(64):
        if rounded(lo) >= lo or lo > hi:
            break
        lo = lo + max(abs(lo) * step, torch.finfo(dtype).tiny)
    for _ in range(64):
        if rounded(hi) <= hi or lo > hi:
            break
        hi = hi - max(abs(hi) * step, torch.finfo(dtype).tiny)
    if lo > hi or rounded(lo) < lo or rounded(hi) > hi:
        raise Infeasible(f"{name}: no {dtype} value lies in the allowed range")
    return rounded(lo), rounded(hi)


def admitted(dom: Domain, t: torch.Tensor) -> torch.Tensor:
    ok = torch.ones(t.shape, dtype=torch.bool)
    if dom.lo is not None:
        ok &= t >= dom.lo
    if dom.hi is not None:
        ok &= t <= dom.hi
    for v in dom.exclude:
        ok &= t != v
    if dom.values is not None:
        ok &= torch.isin(t, torch.tensor(dom.values, dtype=t.dtype))
    return ok
