"""values: `field in [..]`; values in `allow` are exempt."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tritoncheck.checks.registry import (
    CheckKind,
    Option,
    Severity,
    allow_text,
    always_per_sample,
    break_with,
    except_allowed,
    register,
)

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, slots=True)
class ValueSetCheck:
    field: str
    values: tuple[int | float, ...]
    allow: tuple[int | float, ...]
    axes: tuple[str, ...]
    hint: str | None
    kind: Literal["values"] = "values"
    code: str = "not_in_set"
    severity: Severity = "error"


def _lower(name: str, f: Any, fp: Any, scope: Any) -> tuple:
    if f.values is None:
        return ()
    return (ValueSetCheck(name, tuple(f.values), tuple(f.allow), fp.axes, f.hints.get("not_in_set"),
                          severity=f.severity.get("not_in_set", "error")),)


def _describe(c: ValueSetCheck) -> str:
    return f"{c.field} in {list(c.values)}{allow_text(c.allow)}"


def covers(lo: int | float, hi: int | float, values: tuple[int | float, ...]) -> bool:
    """True if every integer in [lo, hi] is one of `values` (comparable values of an integer field)."""
    if isinstance(lo, float) or isinstance(hi, float):
        return False
    lo, hi = int(lo), int(hi)
    return hi - lo < 4096 and set(range(lo, hi + 1)) <= set(values)


def _settle(c: ValueSetCheck, ctx: Any) -> bool:
    summary = ctx.summary(c.field)
    return summary is None or covers(*summary, ctx.comparable(c.values, c.field) + ctx.comparable(c.allow, c.field))


def _torch(c: ValueSetCheck, ctx: Any) -> torch.Tensor:
    import torch  # (loaded: the batch holds tensors)

    x = ctx.tensor(c.field)  # no value of the set that the field can equal: every value fails
    bad = ~torch.isin(x, torch.tensor(ctx.comparable(c.values, c.field), dtype=x.dtype, device=x.device))
    return except_allowed(bad, x, ctx.comparable(c.allow, c.field))


def _ir(c: ValueSetCheck, lw: Any) -> Any:
    x = lw.full_load(c.field)
    nes = [lw.emit("ne", (x, lw.const(v, x.kind)), "b") for v in lw.comparable(c.values, c.field)]
    bad = nes[0] if nes else lw.const(True, "b")  # no comparable value: every element fails
    for ne in nes[1:]:
        bad = lw.emit("and_", (bad, ne), "b")
    return lw.allowed(bad, x, c.field, c.allow)


def _fails(c: ValueSetCheck, v: float, ctx: Any) -> bool:
    return v not in c.allow and not math.isnan(v) and v not in c.values


def _constrain(c: ValueSetCheck, ctx: Any) -> None:
    d = ctx.domains[c.field]
    d.allow = c.allow
    d.values = [v for v in c.values if d.values is None or v in d.values]


def _mutate(c: ValueSetCheck, ctx: Any, rng: random.Random):
    """One element outside the set (e.g. a mask value 2)."""
    if c.field not in ctx.batch:
        return None
    known = [*c.values, *c.allow]
    tries = (max(known) + 1, min(known) - 1, (c.values[0] + 0.5) if len(c.values) else 0.5)
    return break_with(c, ctx, rng, tries, "value outside the set")


register(CheckKind(
    kind="values", node=ValueSetCheck, code="not_in_set", doc="docs/errors.md#not_in_set", order=30,
    option=Option("values", None, "declared on FieldSpec"), lower=_lower,
    describe=_describe, settle=_settle, torch=_torch, ir=_ir, value_fails=_fails, per_sample=always_per_sample,
    constrain=_constrain, mutate=_mutate,
))
