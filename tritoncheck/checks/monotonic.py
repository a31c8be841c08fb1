"""monotonic: `monotonic: L` -- non-decreasing along a named axis (position_ids along L)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tritoncheck.checks.registry import CheckKind, Option, Severity, no_constraint, register

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, slots=True)
class MonotonicCheck:
    """`field` never decreases along `axis`: position i (>= 1) fails where x[i] < x[i-1]."""

    field: str
    axis: str
    axes: tuple[str, ...]
    hint: str | None
    kind: Literal["monotonic"] = "monotonic"
    code: str = "not_monotonic"
    severity: Severity = "error"


def _lower(name: str, f: Any, fp: Any, scope: Any) -> tuple:
    axis = getattr(f, "monotonic", None)
    if axis is None:
        return ()
    if axis not in fp.shape:  # a dim name of this field; fixed axes have no name to give
        named = [a for a in fp.shape if isinstance(a, str)]
        raise scope.error(f"fields.{name}.monotonic",
                          f"{axis!r} is not a named axis of {name} (its named axes: {', '.join(named) or 'none'})")
    return (MonotonicCheck(name, axis, fp.axes, f.hints.get("not_monotonic"),
                           severity=f.severity.get("not_monotonic", "error")),)


def _describe(c: MonotonicCheck) -> str:
    return f"{c.field} is non-decreasing along {c.axis}"


def _settle(c: MonotonicCheck, ctx: Any) -> bool:
    summary = ctx.summary(c.field)
    return summary is None or summary[0] == summary[1]  # a constant field never decreases


def _torch(c: MonotonicCheck, ctx: Any) -> torch.Tensor | None:
    x = ctx.tensor(c.field)  # size 1 along an expanded axis, where nothing can decrease
    a = c.axes.index(c.axis)
    n = x.shape[a]
    if n < 2:
        return None
    import torch  # (loaded: the batch holds tensors)

    bad = torch.zeros(x.shape, dtype=torch.bool, device=x.device)  # position 0 has no predecessor
    bad.narrow(a, 1, n - 1).copy_(x.narrow(a, 1, n - 1) < x.narrow(a, 0, n - 1))
    return bad


def _ir(c: MonotonicCheck, lw: Any) -> Any:
    # read 2 elements per position (x[i], x[i-1]; the second hits the cache): x[0] is its own predecessor
    return lw.emit("lt", (lw.full_load(c.field), lw.load_prev(c.field, c.axis)), "b")


def _per_sample(c: MonotonicCheck, own: Callable[[Any], bool], batch_dim: str) -> bool:
    return c.axis != batch_dim  # along the batch dim, each sample is compared with the one before


def _repair(c: MonotonicCheck, ctx: Any) -> None:
    """Sort along the axis: the same values, so every element-wise check still holds."""
    if c.field in ctx.batch:
        t = ctx.batch[c.field]
        t.copy_(t.sort(dim=c.axes.index(c.axis)).values)


def _mutate(c: MonotonicCheck, ctx: Any, rng: random.Random):
    """Swap one strictly increasing adjacent pair: exactly one position then decreases."""
    if c.field not in ctx.batch:
        return None
    t = ctx.batch[c.field]
    a = c.axes.index(c.axis)
    n = t.shape[a]
    if n < 2:
        return None
    rising = (t.narrow(a, 1, n - 1) > t.narrow(a, 0, n - 1)).nonzero()
    if len(rising) == 0:
        return None
    pos = [int(i) for i in rising[rng.randrange(len(rising))]]
    after = list(pos)
    after[a] += 1
    lo, hi = t[tuple(pos)].clone(), t[tuple(after)].clone()
    t[tuple(pos)], t[tuple(after)] = hi, lo
    if not ctx.others_hold(c):
        return None
    return f"not monotonic: {c.field}{after} < {c.field}{pos}", c.field, c.code, ctx.sample_of(c.field, tuple(after))


register(CheckKind(
    kind="monotonic", node=MonotonicCheck, code="not_monotonic", doc="docs/errors.md#not_monotonic", order=50,
    option=Option("monotonic", str | None, "A dim name: values never decrease along that axis (position_ids along L)."),
    lower=_lower, describe=_describe, settle=_settle, torch=_torch, ir=_ir, value_fails=None, per_sample=_per_sample,
    constrain=no_constraint, repair=_repair, mutate=_mutate,
))
