"""Check kinds, each registered once with all its parts (pandera's `register_builtin_check`).

A `CheckKind` binds, for one plan-node `kind`:

- `node`: its plan-node type (frozen, hashable, with `kind`, `code`, `field`, `axes`, `hint`);
- `option`: the field option that declares it (`min: 0`), or None for rules (`rules:` list);
- `lower`: spec -> plan nodes (`lower(name, field_spec, field_plan, scope)`);
- `describe`: the rule in words; `message`: the rule with the batch's values resolved (a bound
  over dims); `reads`: the fields and dims it needs; `hint`: the hint shown;
- `settle`: True when the fields' (min, max) summaries and the dims prove it holds, so no
  backend reads data for it; `torch`: its evaluation as torch ops (a bool mask over its axes,
  True where it fails, or None); `ir`: its lowering to kernel-IR ops (the op true where it
  fails), from which the C and Triton generators emit code. Host kinds (`dim_bound`, checked
  by `bind` from sizes alone) have none of these three;
- `value_fails`: for element-wise kinds, whether one value breaks it (None: not element-wise);
- `constrain`, `repair`, `mutate`: its valid-data constraint and the mutation that breaks it,
  for `tritoncheck.strategies` (they use only the draw context passed in, so this module needs
  no hypothesis);
- `code` and `doc`: the violation code it reports and its entry in docs/errors.md.

`kind_of(check)` is the one dispatch: an unknown kind raises, never falls through.
`tests/test_registry.py` walks `REGISTRY` and fails when a kind lacks a part or a docs entry.

Adding a kind is one section of this module (see `monotonic` at the end) plus its docs and tests.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from tritoncheck import expr as _expr
from tritoncheck.dtypes import all_integer, as_double, int_limit
from tritoncheck.expr import Arange, Binary, Const, Dim, Expr, Reduce, Ref, Unary

# "error": the model will crash or its loss is garbage; "warning": almost surely a data bug, but the
# step runs. Every plan node carries one; a spec sets it per rule and per field code.
Severity = Literal["error", "warning"]
SEVERITIES: tuple[str, ...] = ("error", "warning")

MINUS_ONE_HINT = "-1 where -100 was meant? -100 is the ignore index of PyTorch's cross-entropy and Hugging Face models"


class UnknownCheckKind(TypeError):
    """A plan node whose kind no `CheckKind` is registered for (a bug, never user input)."""


@dataclass(frozen=True)
class Option:
    """A field option that declares a check kind in a spec (`monotonic: L`)."""

    name: str
    annotation: Any
    description: str


@dataclass(frozen=True)
class CheckKind:
    """Every part of one check kind; see the module docstring."""

    kind: str
    node: type
    code: str
    doc: str
    option: Option | None
    lower: Callable[..., tuple] | None
    describe: Callable[[Any], str]
    message: Callable[[Any, Any], str]
    settle: Callable[[Any, Any], bool] | None
    torch: Callable[[Any, Any], Any] | None
    ir: Callable[[Any, Any], Any] | None
    reads: Callable[[Any], tuple[set[str], set[str]]]
    hint: Callable[[Any, Any], str | None]
    value_fails: Callable[[Any, float, Any], bool] | None
    constrain: Callable[[Any, Any], None]
    repair: Callable[[Any, Any], None] | None
    mutate: Callable[[Any, Any, random.Random], Any]


REGISTRY: dict[str, CheckKind] = {}


def register(kind: CheckKind) -> CheckKind:
    """Add a check kind; a kind registered twice is a bug."""
    if kind.kind in REGISTRY:
        raise ValueError(f"check kind {kind.kind!r} is already registered")
    REGISTRY[kind.kind] = kind
    return kind


def kind_of(check: Any) -> CheckKind:
    """The registered kind of a plan node; raises `UnknownCheckKind` for any other object."""
    entry = REGISTRY.get(getattr(check, "kind", None))
    if entry is None or not isinstance(check, entry.node):
        raise UnknownCheckKind(f"no check kind is registered for {type(check).__name__} "
                               f"(kind {getattr(check, 'kind', None)!r})")
    return entry


def field_kinds() -> list[CheckKind]:
    """Kinds declared by a field option, in registration order (the order of a field's checks)."""
    return [k for k in REGISTRY.values() if k.option is not None]


def field_codes() -> tuple[str, ...]:
    """The codes a field's own options report (below_min, above_max, ...): what `severity:` may name."""
    return tuple(k.code for k in field_kinds())


def options() -> dict[str, Option]:
    """Every field option a registered kind declares, by name."""
    return {k.option.name: k.option for k in field_kinds()}


def describe(check: Any) -> str:
    """A check's rule in words (without runtime values)."""
    return kind_of(check).describe(check)


def message(check: Any, bound: Any) -> str:
    """The rule a failing check reports, with its bound resolved against the batch (`bound`: a `Bound`)."""
    return kind_of(check).message(check, bound)


def hint(check: Any, value: Any) -> str | None:
    """The hint shown for a failing check whose first offending value is `value`."""
    return kind_of(check).hint(check, value)


# ---------------------------------------------------------------------------------------------
# Expression walkers the kinds share.


def expr_fields(expr: Expr | None) -> set[str]:
    """Fields an expression reads."""
    if isinstance(expr, Ref):
        return {expr.field}
    if isinstance(expr, (Unary, Reduce)):
        return expr_fields(expr.x)
    if isinstance(expr, Binary):
        return expr_fields(expr.a) | expr_fields(expr.b)
    return set()


def expr_dims(expr: Expr | None) -> set[str]:
    """Dims an expression needs bound (as values or arange sizes)."""
    if isinstance(expr, Dim):
        return {expr.name}
    if isinstance(expr, Arange):
        return {expr.dim}
    if isinstance(expr, (Unary, Reduce)):
        return expr_dims(expr.x)
    if isinstance(expr, Binary):
        return expr_dims(expr.a) | expr_dims(expr.b)
    return set()


def _own_field(check: Any) -> tuple[set[str], set[str]]:
    return {check.field}, set()


def _spec_hint(check: Any, value: Any) -> str | None:
    return check.hint


def _no_constraint(check: Any, ctx: Any) -> None:
    """Nothing to narrow before values are drawn."""


def _allow_text(allow: tuple) -> str:
    return f" or one of {list(allow)}" if allow else ""


def _described(check: Any, bound: Any) -> str:
    return kind_of(check).describe(check)


def _except_allowed(bad: torch.Tensor, x: torch.Tensor, allow: tuple) -> torch.Tensor:
    for a in allow:  # a sentinel or two (-100): one compare each, where isin sorts
        bad &= x != a
    return bad


# ---------------------------------------------------------------------------------------------
# min / max: `field >= bound`, `field <= bound`


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


def _range_lowering(side: str) -> Callable[..., tuple]:
    code = "below_min" if side == "min" else "above_max"

    def lower(name: str, f: Any, fp: Any, scope: Any) -> tuple:
        bound = getattr(f, side)
        if bound is None:
            return ()
        where = f"fields.{name}.{side}"
        expr = scope.resolve(_expr.parse(bound) if isinstance(bound, str) else Const(bound), where)
        if isinstance(expr, Const):  # a parameter expression: the same rule as a number in the file
            problem = scope.number_error(where, name, expr.value, all_integer(fp.dtypes))
            if problem:
                raise scope.error(None, f"{problem} ({bound} = {expr.value!r})")
        text = _expr.to_text(expr) if not isinstance(bound, str) else bound
        if isinstance(expr, Const) and str(expr.value) != text:
            text = f"{text} = {expr.value}"
        return (RangeCheck(side, name, expr, text, tuple(f.allow), fp.axes, f.hints.get(code), f.severity.get(code, "error")),)

    return lower


def _range_describe(c: RangeCheck) -> str:
    return f"{c.field} {'>=' if c.kind == 'min' else '<='} {c.bound_text}{_allow_text(c.allow)}"


def _range_reads(c: RangeCheck) -> tuple[set[str], set[str]]:
    return {c.field}, expr_dims(c.bound)


def range_limit(c: RangeCheck, dims: Any, dtype: torch.dtype) -> int | float:
    """The bound a range check compares with, as every backend and the report have it: an int64
    for an integer field (`int_limit`; +-inf where every or no value fails), a double otherwise."""
    from tritoncheck.plan.lower import evaluate_scalar  # the plan imports this module

    value = evaluate_scalar(c.bound, dims)
    if not dtype.is_floating_point:
        limit = int_limit(value, c.kind)
        if isinstance(limit, str):
            return math.inf if (limit == "always") == (c.kind == "min") else -math.inf
        return limit
    return as_double(value)


def _range_message(c: RangeCheck, bound: Any) -> str:
    from tritoncheck.plan.lower import evaluate_scalar

    rule = _range_describe(c)
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


def _range_settle(c: RangeCheck, ctx: Any) -> bool:
    summary = ctx.summary(c.field)
    if summary is None:
        return True
    limit = ctx.bound_value(c)
    return summary[0] >= limit if c.kind == "min" else summary[1] <= limit  # NaN: False, so the exact pass runs


def _range_torch(c: RangeCheck, ctx: Any) -> torch.Tensor:
    x, limit = ctx.tensor(c.field), ctx.bound_value(c)
    return _except_allowed(x < limit if c.kind == "min" else x > limit, x, ctx.comparable(c.allow, c.field))


def _range_ir(c: RangeCheck, lw: Any) -> Any:
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


def _range_hint(c: RangeCheck, value: Any) -> str | None:
    if c.kind == "min" and value == -1 and -100 in c.allow:
        return MINUS_ONE_HINT
    return c.hint


def _range_fails(c: RangeCheck, v: float, ctx: Any) -> bool:
    limit = ctx.limit(c)
    return v not in c.allow and ((c.kind == "min" and v < limit) or (c.kind == "max" and v > limit))


def _range_constrain(c: RangeCheck, ctx: Any) -> None:
    d = ctx.domains[c.field]
    d.allow = c.allow
    d.narrow(">=" if c.kind == "min" else "<=", ctx.scalar(c.bound))


def _range_mutate(c: RangeCheck, ctx: Any, rng: random.Random):
    """One element just outside the bound (skipping `allow`, so -1 where -100 is allowed)."""
    if c.field not in ctx.batch:
        return None
    limit = ctx.limit(c)
    step = -1 if c.kind == "min" else 1
    v = limit + step
    while v in c.allow:
        v += step
    if ctx.batch[c.field].dtype.is_floating_point:
        v = float(limit + step * max(1.0, abs(limit)))
    what = "sentinel misuse" if c.allow and c.kind == "min" else c.code
    return ctx.set_breaking(c, v, rng, what)


for _side in ("min", "max"):
    register(CheckKind(
        kind=_side, node=RangeCheck, code="below_min" if _side == "min" else "above_max",
        doc=f"docs/errors.md#{'below_min' if _side == 'min' else 'above_max'}",
        option=Option(_side, None, "declared on FieldSpec"), lower=_range_lowering(_side),
        describe=_range_describe, message=_range_message, settle=_range_settle, torch=_range_torch, ir=_range_ir,
        reads=_range_reads, hint=_range_hint, value_fails=_range_fails,
        constrain=_range_constrain, repair=None, mutate=_range_mutate,
    ))


# ---------------------------------------------------------------------------------------------
# values: `field in [..]`


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


def _values_lower(name: str, f: Any, fp: Any, scope: Any) -> tuple:
    if f.values is None:
        return ()
    return (ValueSetCheck(name, tuple(f.values), tuple(f.allow), fp.axes, f.hints.get("not_in_set"),
                          severity=f.severity.get("not_in_set", "error")),)


def _values_describe(c: ValueSetCheck) -> str:
    return f"{c.field} in {list(c.values)}{_allow_text(c.allow)}"


def covers(lo: int | float, hi: int | float, values: tuple[int | float, ...]) -> bool:
    """True if every integer in [lo, hi] is one of `values` (comparable values of an integer field)."""
    if isinstance(lo, float) or isinstance(hi, float):
        return False
    lo, hi = int(lo), int(hi)
    return hi - lo < 4096 and set(range(lo, hi + 1)) <= set(values)


def _values_settle(c: ValueSetCheck, ctx: Any) -> bool:
    summary = ctx.summary(c.field)
    return summary is None or covers(*summary, ctx.comparable(c.values, c.field) + ctx.comparable(c.allow, c.field))


def _values_torch(c: ValueSetCheck, ctx: Any) -> torch.Tensor:
    x = ctx.tensor(c.field)  # no value of the set that the field can equal: every value fails
    bad = ~torch.isin(x, torch.tensor(ctx.comparable(c.values, c.field), dtype=x.dtype, device=x.device))
    return _except_allowed(bad, x, ctx.comparable(c.allow, c.field))


def _values_ir(c: ValueSetCheck, lw: Any) -> Any:
    x = lw.full_load(c.field)
    nes = [lw.emit("ne", (x, lw.const(v, x.kind)), "b") for v in lw.comparable(c.values, c.field)]
    bad = nes[0] if nes else lw.const(True, "b")  # no comparable value: every element fails
    for ne in nes[1:]:
        bad = lw.emit("and_", (bad, ne), "b")
    return lw.allowed(bad, x, c.field, c.allow)


def _values_fails(c: ValueSetCheck, v: float, ctx: Any) -> bool:
    return v not in c.allow and not math.isnan(v) and v not in c.values


def _values_constrain(c: ValueSetCheck, ctx: Any) -> None:
    d = ctx.domains[c.field]
    d.allow = c.allow
    d.values = [v for v in c.values if d.values is None or v in d.values]


def _values_mutate(c: ValueSetCheck, ctx: Any, rng: random.Random):
    """One element outside the set (e.g. a mask value 2)."""
    if c.field not in ctx.batch:
        return None
    known = [*c.values, *c.allow]
    for v in (max(known) + 1, min(known) - 1, (c.values[0] + 0.5) if len(c.values) else 0.5):
        out = ctx.set_breaking(c, v, rng, "value outside the set")
        if out is not None:
            return out
    return None


register(CheckKind(
    kind="values", node=ValueSetCheck, code="not_in_set", doc="docs/errors.md#not_in_set",
    option=Option("values", None, "declared on FieldSpec"), lower=_values_lower,
    describe=_values_describe, message=_described, settle=_values_settle, torch=_values_torch, ir=_values_ir,
    reads=_own_field, hint=_spec_hint, value_fails=_values_fails,
    constrain=_values_constrain, repair=None, mutate=_values_mutate,
))


# ---------------------------------------------------------------------------------------------
# finite: no NaN or Inf


@dataclass(frozen=True, slots=True)
class FiniteCheck:
    field: str
    axes: tuple[str, ...]
    hint: str | None
    kind: Literal["finite"] = "finite"
    code: str = "non_finite"
    severity: Severity = "error"


def _finite_lower(name: str, f: Any, fp: Any, scope: Any) -> tuple:
    if not f.finite:
        return ()
    return (FiniteCheck(name, fp.axes, f.hints.get("non_finite"), severity=f.severity.get("non_finite", "error")),)


def _finite_describe(c: FiniteCheck) -> str:
    return f"{c.field} is finite (no NaN or Inf)"


def _finite_settle(c: FiniteCheck, ctx: Any) -> bool:
    summary = ctx.summary(c.field)
    return summary is None or (math.isfinite(summary[0]) and math.isfinite(summary[1]))


def _finite_torch(c: FiniteCheck, ctx: Any) -> torch.Tensor:
    return ~torch.isfinite(ctx.tensor(c.field))


def _finite_ir(c: FiniteCheck, lw: Any) -> Any:
    if lw.fields[c.field].kind == "i":
        return lw.const(False, "b")  # an integer is always finite: nothing to read
    return lw.emit("not_", (lw.emit("isfinite", (lw.full_load(c.field),), "b"),), "b")


def _finite_fails(c: FiniteCheck, v: float, ctx: Any) -> bool:
    return not math.isfinite(v)


def _finite_constrain(c: FiniteCheck, ctx: Any) -> None:
    ctx.domains[c.field].finite = True  # drawn values are always finite; recorded for mutations


def _finite_mutate(c: FiniteCheck, ctx: Any, rng: random.Random):
    """One NaN or +-Inf."""
    if c.field not in ctx.batch or not ctx.batch[c.field].dtype.is_floating_point:
        return None
    for v in rng.sample([math.nan, math.inf, -math.inf], 3):
        out = ctx.set_breaking(c, v, rng, "non-finite")
        if out is not None:
            return out
    return None


register(CheckKind(
    kind="finite", node=FiniteCheck, code="non_finite", doc="docs/errors.md#non_finite",
    option=Option("finite", None, "declared on FieldSpec"), lower=_finite_lower,
    describe=_finite_describe, message=_described, settle=_finite_settle, torch=_finite_torch, ir=_finite_ir,
    reads=_own_field, hint=_spec_hint, value_fails=_finite_fails,
    constrain=_finite_constrain, repair=None, mutate=_finite_mutate,
))


# ---------------------------------------------------------------------------------------------
# rule / dim_bound: the spec's `rules:` (lowered by `_plan.compile_plan`, which knows the scope)


@dataclass(frozen=True, slots=True)
class RuleCheck:
    """A rule over field data: `expr` must hold wherever `where` holds. `subject` gives the value shown."""

    field: str
    expr: Expr
    where: Expr | None
    subject: Expr
    text: str
    code: str
    axes: tuple[str, ...]
    hint: str | None
    severity: Severity = "error"
    # a `where` over sizes and presence only (`... where not present(position_ids)`): `bind` decides
    # from it whether the rule applies to a batch at all, so no kernel ever sees a presence flag
    when: Expr | None = None
    kind: Literal["rule"] = "rule"


@dataclass(frozen=True, slots=True)
class DimCheck:
    """A rule over dims and parameters only (`L <= max_position_embeddings`): checked on the host."""

    field: str
    expr: Expr
    subject: Expr
    text: str
    code: str
    hint: str | None
    where: Expr | None = None  # checked only where this holds (also over dims only)
    severity: Severity = "error"
    kind: Literal["dim_bound"] = "dim_bound"
    params: tuple[tuple[str, Any], ...] = ()  # the spec parameters the rule names, with their values, for its message


def _text(c: Any) -> str:
    return c.text


def _rule_reads(c: RuleCheck) -> tuple[set[str], set[str]]:
    return expr_fields(c.expr) | expr_fields(c.where), expr_dims(c.expr) | expr_dims(c.where)


def _dim_reads(c: DimCheck) -> tuple[set[str], set[str]]:
    return set(), expr_dims(c.expr) | expr_dims(c.where)


def _rule_settle(c: RuleCheck, ctx: Any) -> bool:
    """Settled by the fields' (min, max) and the dims, without touching data."""
    return ctx.settled_by_summary(c) or ctx.interval(c.expr) == (1, 1)


def _rule_torch(c: RuleCheck, ctx: Any) -> torch.Tensor | None:
    ok = ctx.values(c.expr, c.axes).to(torch.bool)
    if c.where is None:
        return None if bool(ok.all()) else ~ok  # one reduction + read instead of ~ok and a count
    bad = ~ok & ctx.values(c.where, c.axes).to(torch.bool)
    return bad if bool(bad.any()) else None


def _rule_ir(c: RuleCheck, lw: Any) -> Any:
    bad = lw.emit("not_", (lw.truth(lw.expr(c.expr)),), "b")
    if c.where is not None:
        bad = lw.emit("and_", (bad, lw.truth(lw.expr(c.where))), "b")
    return bad


def _rule_constrain(c: RuleCheck, ctx: Any) -> None:
    ctx.constrain_rule(c)


def _rule_repair(c: RuleCheck, ctx: Any) -> None:
    ctx.repair_rule(c)


def _rule_mutate(c: RuleCheck, ctx: Any, rng: random.Random):
    """By the rule's shape (tritoncheck.strategies.RULE_SHAPES)."""
    return ctx.mutate_rule(c, rng)


def _dim_mutate(c: DimCheck, ctx: Any, rng: random.Random):
    """Redraw the batch with one dim just outside its bound."""
    return ctx.break_dim_rule(c, rng)


register(CheckKind(
    kind="rule", node=RuleCheck, code="rule_failed", doc="docs/errors.md#rule_failed", option=None, lower=None,
    describe=_text, message=_described, settle=_rule_settle, torch=_rule_torch, ir=_rule_ir, reads=_rule_reads, hint=_spec_hint, value_fails=None,
    constrain=_rule_constrain, repair=_rule_repair, mutate=_rule_mutate,
))
register(CheckKind(
    kind="dim_bound", node=DimCheck, code="dim_bound", doc="docs/errors.md#dim_bound", option=None, lower=None,
    describe=_text, message=_described, settle=None, torch=None, ir=None, reads=_dim_reads, hint=_spec_hint, value_fails=None,
    constrain=_no_constraint, repair=None, mutate=_dim_mutate,
))


# ---------------------------------------------------------------------------------------------
# monotonic: `monotonic: L` -- non-decreasing along a named axis (position_ids along L)


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


def _monotonic_lower(name: str, f: Any, fp: Any, scope: Any) -> tuple:
    axis = getattr(f, "monotonic", None)
    if axis is None:
        return ()
    if axis not in fp.shape:  # a dim name of this field; fixed axes have no name to give
        named = [a for a in fp.shape if isinstance(a, str)]
        raise scope.error(f"fields.{name}.monotonic",
                          f"{axis!r} is not a named axis of {name} (its named axes: {', '.join(named) or 'none'})")
    return (MonotonicCheck(name, axis, fp.axes, f.hints.get("not_monotonic"), severity=f.severity.get("not_monotonic", "error")),)


def _monotonic_describe(c: MonotonicCheck) -> str:
    return f"{c.field} is non-decreasing along {c.axis}"


def _monotonic_settle(c: MonotonicCheck, ctx: Any) -> bool:
    summary = ctx.summary(c.field)
    return summary is None or summary[0] == summary[1]  # a constant field never decreases


def _monotonic_torch(c: MonotonicCheck, ctx: Any) -> torch.Tensor | None:
    x = ctx.tensor(c.field)  # size 1 along an expanded axis, where nothing can decrease
    a = c.axes.index(c.axis)
    n = x.shape[a]
    if n < 2:
        return None
    bad = torch.zeros(x.shape, dtype=torch.bool, device=x.device)  # position 0 has no predecessor
    bad.narrow(a, 1, n - 1).copy_(x.narrow(a, 1, n - 1) < x.narrow(a, 0, n - 1))
    return bad


def _monotonic_ir(c: MonotonicCheck, lw: Any) -> Any:
    # read 2 elements per position (x[i], x[i-1]; the second hits the cache): x[0] is its own predecessor
    return lw.emit("lt", (lw.full_load(c.field), lw.load_prev(c.field, c.axis)), "b")


def _monotonic_repair(c: MonotonicCheck, ctx: Any) -> None:
    """Sort along the axis: the same values, so every element-wise check still holds."""
    if c.field in ctx.batch:
        t = ctx.batch[c.field]
        t.copy_(t.sort(dim=c.axes.index(c.axis)).values)


def _monotonic_mutate(c: MonotonicCheck, ctx: Any, rng: random.Random):
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
    kind="monotonic", node=MonotonicCheck, code="not_monotonic", doc="docs/errors.md#not_monotonic",
    option=Option("monotonic", str | None, "A dim name: values never decrease along that axis (position_ids along L)."),
    lower=_monotonic_lower, describe=_monotonic_describe, message=_described, settle=_monotonic_settle,
    torch=_monotonic_torch, ir=_monotonic_ir, reads=_own_field, hint=_spec_hint, value_fails=None,
    constrain=_no_constraint, repair=_monotonic_repair, mutate=_monotonic_mutate,
))
