"""finite: no NaN or Inf."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tritoncheck.checks.registry import (
    CheckKind,
    Option,
    Severity,
    always_per_sample,
    break_with,
    register,
)

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, slots=True)
class FiniteCheck:
    field: str
    axes: tuple[str, ...]
    hint: str | None
    kind: Literal["finite"] = "finite"
    code: str = "non_finite"
    severity: Severity = "error"


def _lower(name: str, f: Any, fp: Any, scope: Any) -> tuple:
    if not f.finite:
        return ()
    return (FiniteCheck(name, fp.axes, f.hints.get("non_finite"), severity=f.severity.get("non_finite", "error")),)


def _describe(c: FiniteCheck) -> str:
    return f"{c.field} is finite (no NaN or Inf)"


def _settle(c: FiniteCheck, ctx: Any) -> bool:
    summary = ctx.summary(c.field)
    return summary is None or (math.isfinite(summary[0]) and math.isfinite(summary[1]))


def _torch(c: FiniteCheck, ctx: Any) -> torch.Tensor:
    return ~ctx.tensor(c.field).isfinite()


def _ir(c: FiniteCheck, lw: Any) -> Any:
    if lw.fields[c.field].kind == "i":
        return lw.const(False, "b")  # an integer is always finite: nothing to read
    return lw.emit("not_", (lw.emit("isfinite", (lw.full_load(c.field),), "b"),), "b")


def _fails(c: FiniteCheck, v: float, ctx: Any) -> bool:
    return not math.isfinite(v)


def _constrain(c: FiniteCheck, ctx: Any) -> None:
    ctx.domains[c.field].finite = True  # drawn values are always finite; recorded for mutations


def _mutate(c: FiniteCheck, ctx: Any, rng: random.Random):
    """One NaN or +-Inf."""
    if c.field not in ctx.batch or not ctx.batch[c.field].dtype.is_floating_point:
        return None
    return break_with(c, ctx, rng, rng.sample([math.nan, math.inf, -math.inf], 3), "non-finite")


register(CheckKind(
    kind="finite", node=FiniteCheck, code="non_finite", doc="docs/errors.md#non_finite", order=40,
    option=Option("finite", None, "declared on FieldSpec"), lower=_lower,
    describe=_describe, settle=_settle, torch=_torch, ir=_ir, value_fails=_fails, per_sample=always_per_sample,
    constrain=_constrain, mutate=_mutate,
))
