"""rule / dim_bound: the spec's `rules:` (lowered by `plan.lower.compile_plan`, which knows the scope)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tritoncheck.checks.registry import CheckKind, Severity, expr_dims, expr_fields, no_constraint, register
from tritoncheck.expr import Expr

if TYPE_CHECKING:
    import torch


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
    ok = ctx.values(c.expr, c.axes).bool()
    if c.where is None:
        return None if bool(ok.all()) else ~ok  # one reduction + read instead of ~ok and a count
    bad = ~ok & ctx.values(c.where, c.axes).bool()
    return bad if bool(bad.any()) else None


def _rule_ir(c: RuleCheck, lw: Any) -> Any:
    bad = lw.emit("not_", (lw.truth(lw.expr(c.expr)),), "b")
    if c.where is not None:
        bad = lw.emit("and_", (bad, lw.truth(lw.expr(c.where))), "b")
    return bad


def _rule_per_sample(c: RuleCheck, own: Callable[[Any], bool], batch_dim: str) -> bool:
    return all(own(e) for e in (c.expr, c.where, c.subject, c.when) if e is not None)


def _rule_constrain(c: RuleCheck, ctx: Any) -> None:
    ctx.constrain_rule(c)


def _rule_repair(c: RuleCheck, ctx: Any) -> None:
    ctx.repair_rule(c)


def _rule_mutate(c: RuleCheck, ctx: Any, rng: random.Random):
    """By the rule's shape (tritoncheck.strategies.shapes.RULE_SHAPES)."""
    return ctx.mutate_rule(c, rng)


def _dim_mutate(c: DimCheck, ctx: Any, rng: random.Random):
    """Redraw the batch with one dim just outside its bound."""
    return ctx.break_dim_rule(c, rng)


register(CheckKind(
    kind="dim_bound", node=DimCheck, code="dim_bound", doc="docs/errors.md#dim_bound", order=70,
    option=None, lower=None,
    describe=_text, settle=None, torch=None, ir=None, reads=_dim_reads, value_fails=None, per_sample=None,
    constrain=no_constraint, mutate=_dim_mutate,
))
register(CheckKind(
    kind="rule", node=RuleCheck, code="rule_failed", doc="docs/errors.md#rule_failed", order=80,
    option=None, lower=None,
    describe=_text, settle=_rule_settle, torch=_rule_torch, ir=_rule_ir, reads=_rule_reads, value_fails=None,
    per_sample=_rule_per_sample, constrain=_rule_constrain, repair=_rule_repair, mutate=_rule_mutate,
))
