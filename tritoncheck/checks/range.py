"""min / max: `field >= bound`, `field <= bound`; values in `allow` are exempt."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tritoncheck import expr as _expr
from tritoncheck.checks.registry import (
    CheckKind,
    Option,
    Severity,
    allow_text,
    evaluate_scalar,
    except_allowed,
    expr_dims,
    register,
)
from tritoncheck.dtypes import all_integer_names, as_double, int_limit
from tritoncheck.expr import Const, Expr

if TYPE_CHECKING:
    import torch

MINUS_ONE_HINT = "-1 where -100 was meant? -100 is the ignore index of PyTorch's cross-entropy and Hugging Face models"


@dataclass(frozen=True, slots=True)
class RangeCheck:
    """`field >= bound` (kind min) or `field <= bound` (kind max); values in `allow` are exempt."""

    kind: Literal["min", "max"]
    field: str
    bound: Expr  # constant or over dims, e.g. Dim('C') - 1
    bound_text: str
    allow: tuple[int | float, ...]
    axes: tuple[str, ...]
    hint: str | None
    severity: Severity = "error"

    @property
    def code(self) -> str:
        return "below_min" if self.kind == "min" else "above_max"


def _lowering(side: str) -> Callable[..., tuple]:
    code = "below_min" if side == "min" else "above_max"

    def lower(name: str, f: Any, fp: Any, scope: Any) -> tuple:
        bound = getattr(f, side)
        if bound is None:
            return ()
        where = f"fields.{name}.{side}"
        expr = scope.resolve(_expr.parse(bound) if isinstance(bound, str) else Const(bound), where)
        if isinstance(expr, Const):  # a parameter expression: the same rule as a number in the file
            problem = scope.number_error(where, name, expr.value, all_integer_names(fp.dtypes))
            if problem:
                raise scope.error(None, f"{problem} ({bound} = {expr.value!r})")
        text = _expr.to_text(expr) if not isinstance(bound, str) else bound
        if isinstance(expr, Const) and str(expr.value) != text:
            text = f"{text} = {expr.value}"
        return (RangeCheck(side, name, expr, text, tuple(f.allow), fp.axes, f.hints.get(code),
                           f.severity.get(code, "error")),)

    return lower


def _describe(c: RangeCheck) -> str:
    return f"{c.field} {'>=' if c.kind == 'min' else '<='} {c.bound_text}{allow_text(c.allow)}"


def _reads(c: RangeCheck) -> tuple[set[str], set[str]]:
    return {c.field}, expr_dims(c.bound)


def range_limit(c: RangeCheck, dims: Any, dtype: torch.dtype) -> int | float:
    """The bound a range check compares with, as every backend and the report have it: an int64
    for an integer field (`int_limit`; +-inf where every or no value fails), a double otherwise."""
    value = evaluate_scalar(c.bound, dims)
    if not dtype.is_floating_point:
        limit = int_limit(value, c.kind)
        if isinstance(limit, str):
            return math.inf if (limit == "always") == (c.kind == "min") else -math.inf
        return limit
    return as_double(value)


def _message(c: RangeCheck, bound: Any) -> str:
    rule = _describe(c)
    dtype = bound.tensors[c.field].dtype
    limit = range_limit(c, bound.dim_values(), dtype)
    if isinstance(limit, float) and math.isinf(limit) and not dtype.is_floating_point:
        limit = evaluate_scalar(c.bound, bound.dim_values())  # past int64: show the bound, not how it compares
    if c.bound_text.split(" = ")[-1] != str(limit):
        rule += f" = {limit}"
    dims = sorted(expr_dims(c.bound))
    if dims:
        rule += " (" + ", ".join(f"{d}={bound.dims[d][0]} from {bound.dims[d][1]}" for d in dims) + ")"
    return rule


def _settle(c: RangeCheck, ctx: Any) -> bool:
    summary = ctx.summary(c.field)
    if summary is None:
        return True
    limit = ctx.bound_value(c)
    return summary[0] >= limit if c.kind == "min" else summary[1] <= limit  # NaN: False, so the exact pass runs


def _torch(c: RangeCheck, ctx: Any) -> torch.Tensor:
    x, limit = ctx.tensor(c.field), ctx.bound_value(c)
    return except_allowed(x < limit if c.kind == "min" else x > limit, x, ctx.comparable(c.allow, c.field))


def _ir(c: RangeCheck, lw: Any) -> Any:
    x = lw.full_load(c.field)
    cmp = "lt" if c.kind == "min" else "gt"
    if x.kind != "i":  # a float field compares with the bound as a double rounded to its kind
        bound = lw.const(as_double(c.bound.value), x.kind) if isinstance(c.bound, Const) else \
            lw.host_scalar(c.bound, "float", x.kind)
        bad = lw.emit(cmp, (x, bound), "b")
    elif isinstance(c.bound, Const):
        limit = int_limit(c.bound.value, c.kind)
        if isinstance(limit, str):  # no int64 bound: every value fails, or none does
            bad = lw.const(limit == "always", "b")
        else:
            bad = lw.emit(cmp, (x, lw.const(limit, "i")), "b")
    else:  # over dims: the host computes the int64 bound, and whether none can express it
        limit = lw.host_scalar(c.bound, "int", "i", side=c.kind)
        always = lw.host_scalar(c.bound, "int", "b", side=c.kind, part="always")
        bad = lw.emit("or_", (lw.emit(cmp, (x, limit), "b"), always), "b")
    return lw.allowed(bad, x, c.field, c.allow)


def _hint(c: RangeCheck, value: Any) -> str | None:
    if c.kind == "min" and value == -1 and -100 in c.allow:
        return MINUS_ONE_HINT
    return c.hint


def _drawn_limit(c: RangeCheck, ctx: Any) -> int | float:
    """The bound as the backends compare it, for a batch the strategies drew (`ctx`: their draw context)."""
    return range_limit(c, ctx.dims, ctx.batch[c.field].dtype)


def _fails(c: RangeCheck, v: float, ctx: Any) -> bool:
    limit = _drawn_limit(c, ctx)
    return v not in c.allow and ((c.kind == "min" and v < limit) or (c.kind == "max" and v > limit))


def _per_sample(c: RangeCheck, own: Callable[[Any], bool], batch_dim: str) -> bool:
    return own(c.bound)  # (a bound over the batch size compares each sample with all of them)


def _constrain(c: RangeCheck, ctx: Any) -> None:
    d = ctx.domains[c.field]
    d.allow = c.allow
    d.narrow(">=" if c.kind == "min" else "<=", ctx.scalar(c.bound))


def _mutate(c: RangeCheck, ctx: Any, rng: random.Random):
    """One element just outside the bound (skipping `allow`, so -1 where -100 is allowed)."""
    if c.field not in ctx.batch:
        return None
    limit = _drawn_limit(c, ctx)
    step = -1 if c.kind == "min" else 1
    v = limit + step
    while v in c.allow:
        v += step
    if ctx.batch[c.field].dtype.is_floating_point:
        v = float(limit + step * max(1.0, abs(limit)))
    what = "sentinel misuse" if c.allow and c.kind == "min" else c.code
    return ctx.set_breaking(c, v, rng, what)


for _order, _side in ((10, "min"), (20, "max")):
    register(CheckKind(
        kind=_side, node=RangeCheck, code="below_min" if _side == "min" else "above_max",
        doc=f"docs/errors.md#{'below_min' if _side == 'min' else 'above_max'}", order=_order,
        option=Option(_side, None, "declared on FieldSpec"), lower=_lowering(_side),
        describe=_describe, message=_message, settle=_settle, torch=_torch, ir=_ir,
        reads=_reads, hint=_hint, value_fails=_fails, per_sample=_per_sample, constrain=_constrain, mutate=_mutate,
    ))
