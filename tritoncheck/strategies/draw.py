"""Drawing one valid batch: dims inside intervals the dim rules narrow, presence, dtypes, then
values from one seeded generator; and the draw context the check kinds' strategy parts use."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

from tritoncheck.backends import torch as _torch_backend
from tritoncheck.dtypes import torch_dtypes
from tritoncheck.expr import Binary, Const, Dim, Expr, Ref
from tritoncheck.plan.lower import (
    DimCheck,
    FieldPlan,
    Plan,
    RuleCheck,
    bind,
    evaluate_scalar,
    expr_dims,
    holds,
    kind_of,
    presence_dim,
    presence_field,
    referenced_fields,
)
from tritoncheck.spec.schema import BatchSpec
from tritoncheck.strategies.domains import MAX_TRIES, Domain, Infeasible, fill, pick, representable
from tritoncheck.strategies.shapes import CMP, FLIP, pins_selection, rule_shape

DEFAULT_BATCH = (1, 4)
DEFAULT_DIM = (1, 8)


class UnsatisfiableSpecError(ValueError):
    """The strategies cannot build data for a spec: an empty domain or a rule they cannot satisfy."""


UnsatisfiableSpecError.__module__ = "tritoncheck"


@dataclass
class Draw:
    plan: Plan
    dims: dict[str, int]
    dtypes: dict[str, torch.dtype]
    domains: dict[str, Domain]
    batch: dict[str, torch.Tensor]
    gen: torch.Generator
    redraw: Callable[..., Draw] | None = None  # a fresh draw with dims overridden (dim_bound mutations)

    def axes(self, ref: Ref) -> tuple[str, ...]:
        return self.plan.field(ref.field).axes

    def shape(self, fp: FieldPlan) -> tuple[int, ...]:
        return tuple(s if isinstance(s, int) else self.dims[s] for s in fp.shape)

    def view(self, ref: Ref) -> torch.Tensor:
        """The field's tensor selected by the ref's index (a view: writes go through)."""
        t = self.batch[ref.field]
        for axis in reversed(range(len(ref.index))):
            if ref.index[axis] is not None:
                t = t.select(axis, ref.index[axis])
        return t

    def ref_axes(self, ref: Ref) -> tuple[str, ...]:
        return tuple(a for a, i in zip(self.axes(ref), ref.index, strict=True) if i is None)

    def scalar(self, e: Expr) -> Any:
        return evaluate_scalar(e, self.dims)

    # -- what a check kind's strategy parts (tritoncheck.checks) may use -----------------------------------
    def set_breaking(self, c: Any, v: float, rng: random.Random, what: str):
        """Write `v` at one position of `c.field` where it breaks `c` and nothing else:
        `(description, field, code, samples)`, or None when no such write exists."""
        if not representable(v, self.batch[c.field].dtype) or own_codes(self, c.field, v) != {c.code}:
            return None
        pos = set_one(self, c.field, v, rng, lambda: others_hold(self, c))
        if pos is None:
            return None
        return f"{what}: {c.field}{list(pos)} = {v}", c.field, c.code, self.sample_of(c.field, pos)

    def sample_of(self, name: str, pos: tuple[int, ...]) -> tuple[int, ...]:
        """The batch position of element `pos` of field `name` (empty if it has no batch axis)."""
        axes = self.plan.field(name).axes
        return (pos[axes.index(self.plan.batch_dim)],) if self.plan.batch_dim in axes else ()

    def own_codes(self, name: str, v: float, severity: str | None = None) -> set[str]:
        """The codes `v` in field `name` causes among the field's element-wise checks (see `own_codes`)."""
        return own_codes(self, name, v, severity)

    def others_hold(self, target: Any) -> bool:
        """Every check except `target` passes on the batch (a mutation breaks exactly one)."""
        return others_hold(self, target)

    def constrain_rule(self, c: RuleCheck) -> None:
        found = rule_shape(c)
        if found and found[0].constrain:
            found[0].constrain(c, found[1], self)

    def repair_rule(self, c: RuleCheck) -> None:
        found = rule_shape(c)
        if found and found[0].repair:
            found[0].repair(c, found[1], self)

    def mutate_rule(self, c: RuleCheck, rng: random.Random):
        return mutate_rule(c, self, rng)

    def break_dim_rule(self, c: DimCheck, rng: random.Random):
        return mutate_dim_bound(c, self, rng)


def dim_intervals(plan: Plan, spec: BatchSpec, dim_bounds: dict[str, tuple[int, int]]) -> dict[str, list[int]]:
    names = []
    for fp in plan.fields:
        names += [s for s in fp.shape if isinstance(s, str) and s not in names]
    unknown = set(dim_bounds) - set(names)
    if unknown:
        raise ValueError(f"{plan.spec_name}: {sorted(unknown)} are not dims of the spec; its dims are {names}")
    out = {}
    for n in names:
        default = DEFAULT_BATCH if n == plan.batch_dim else DEFAULT_DIM
        lo, hi = dim_bounds.get(n, default)
        out[n] = [int(lo), int(hi)]
    for c in plan.dim_checks:  # valid-data constraint of dim_bound: narrow the interval
        for d, op, k in _linear_dim_terms(c.expr):
            iv = out[d]
            k_int = math.floor(k) if op in ("<", "<=") else math.ceil(k)
            if op == "<=":
                iv[1] = min(iv[1], k_int)
            elif op == "<":
                iv[1] = min(iv[1], k_int - 1 if k_int == k else k_int)
            elif op == ">=":
                iv[0] = max(iv[0], k_int)
            elif op == ">":
                iv[0] = max(iv[0], k_int + 1 if k_int == k else k_int)
            elif op == "==":
                iv[0], iv[1] = max(iv[0], k_int), min(iv[1], k_int)
    for n, iv in out.items():  # raise a dim's floor past sizes that leave some field no value (C=1 with blank=0)
        while iv[0] < iv[1] and not _domains_nonempty(plan, {m: (iv[0] if m == n else jv[1]) for m, jv in out.items()}):
            iv[0] += 1
    for n, (lo, hi) in out.items():
        if lo > hi or hi < 0:
            raise UnsatisfiableSpecError(
                f"{plan.spec_name}: dim {n} has no allowed size in [{lo}, {hi}] after the spec's dim rules; "
                f"widen it with {n}=(lo, hi)"
            )
    return out


def _domains_nonempty(plan: Plan, dims: dict[str, int]) -> bool:
    ctx = Draw(plan, dims, {}, {}, {}, torch.Generator())
    try:
        doms = _domains(ctx)
        table = torch_dtypes()
        return all(any(pick(doms[fp.name], table[d]) is not None for d in fp.dtypes) for fp in plan.fields)
    except (Infeasible, KeyError, ArithmeticError):
        return False


def _linear_dim_terms(e: Expr) -> Iterable[tuple[str, str, float]]:
    """`D <op> const` terms of a conjunction (`(0 >= 0) & (0 < C)` gives C > 0)."""
    if isinstance(e, Binary) and e.op == "&":
        yield from _linear_dim_terms(e.a)
        yield from _linear_dim_terms(e.b)
    elif isinstance(e, Binary) and e.op in CMP:
        if isinstance(e.a, Dim) and isinstance(e.b, Const):
            yield e.a.name, e.op, e.b.value
        elif isinstance(e.b, Dim) and isinstance(e.a, Const):
            yield e.b.name, FLIP[e.op], e.a.value


def draw_batch(draw, plan: Plan, intervals: dict[str, list[int]], overrides: dict[str, int] | None = None,
                force_present: set[str] = frozenset(), breaking: DimCheck | None = None,
                force_absent: set[str] = frozenset()) -> Draw:
    """Draw dims, presence and dtypes from hypothesis, then values from one seeded generator."""
    dims = {n: draw(st.integers(lo, hi), label=n) for n, (lo, hi) in intervals.items()}
    dims.update(overrides or {})
    present = [fp for fp in plan.fields if not fp.optional or fp.name in force_present
               or (fp.name not in force_absent and draw(st.booleans(), label=f"has {fp.name}"))]
    present = _presence_holds(plan, dims, present, breaking)
    table = torch_dtypes()
    dtypes = {fp.name: draw(st.sampled_from([table[d] for d in fp.dtypes]), label=f"{fp.name}.dtype") for fp in present}
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    edge = draw(st.sampled_from([0.0, 0.1, 0.5]), label="edge rate")
    sentinel = draw(st.sampled_from([0.0, 0.2, 1.0]), label="sentinel rate")
    g = torch.Generator().manual_seed(seed)
    ctx = Draw(plan, dims, dtypes, {}, {}, g)
    ctx.domains = _domains(ctx)
    for fp in present:
        ctx.batch[fp.name] = fill(ctx.domains[fp.name], dtypes[fp.name], ctx.shape(fp), g, edge, sentinel)
    # each kind's repair (rule shapes, a monotonic field's sort), in plan order but a rule on a selection
    # first (`ids[:, 0] == cls`): a token budget then pads past the pinned token, not over it
    for c in sorted(plan.checks, key=lambda c: not pins_selection(c)):
        repair = kind_of(c).repair
        if repair is not None and referenced_fields(c) <= ctx.batch.keys():
            repair(c, ctx)
    return ctx


def _presence_holds(plan: Plan, dims: dict[str, int], present: list[FieldPlan], breaking: DimCheck | None) -> list[FieldPlan]:
    """`present` with the optional fields added that a failing rule over presence names
    (`present(labels) | present(decoder_input_ids)`); raises `Infeasible` when the dims still
    break a rule over sizes."""
    names = {fp.name for fp in present}
    for c in plan.dim_checks:
        if c is breaking:
            continue
        host = dims | {presence_dim(fp.name): fp.name in names for fp in plan.fields}  # what bind sees
        if (c.where is not None and not holds(c.where, host)) or not expr_dims(c.expr) <= host.keys():
            continue  # (as bind: a rule whose `where` fails or needs an unbound dim is not checked)
        if not evaluate_scalar(c.expr, host):
            named = {fp.name for fp in plan.fields if presence_dim(fp.name) in expr_dims(c.expr)} - names
            host.update((presence_dim(n), True) for n in named)
            if not named or not evaluate_scalar(c.expr, host):
                raise Infeasible(f"dims {dims} and the fields drawn break {c.text!r}")
            names |= named
    return [fp for fp in plan.fields if fp.name in names]


def _domains(ctx: Draw) -> dict[str, Domain]:
    """Every field's domain: the `constrain` hook of each check kind, applied in plan order."""
    doms = {fp.name: Domain(fp.name) for fp in ctx.plan.fields}
    ctx.domains = doms
    for c in ctx.plan.checks:
        kind_of(c).constrain(c, ctx)
    return doms


# ---------------------------------------------------------------------------------------------
# Helpers for the check kinds' strategy parts (`tritoncheck.checks`)


def own_codes(ctx: Draw, name: str, v: float, severity: str | None = None) -> set[str]:
    """The codes a single value `v` in field `name` causes among the field's element-wise checks
    (of that severity only, if given)."""
    return {c.code for c in ctx.plan.checks
            if getattr(c, "field", None) == name and severity in (None, c.severity)
            and (fails := kind_of(c).value_fails) is not None and fails(c, v, ctx)}


def set_one(ctx: Draw, name: str, v: float, rng: random.Random, avoid: Callable | None = None) -> tuple[int, ...] | None:
    """Write `v` at a random position of field `name` that keeps every other check true."""
    t = ctx.batch[name]
    if t.numel() == 0 or not representable(v, t.dtype):
        return None
    for _ in range(MAX_TRIES):
        pos = tuple(rng.randrange(s) for s in t.shape)
        old = t[pos].clone()
        t[pos] = v
        if avoid is None or avoid():
            return pos
        t[pos] = old
    return None


def mutate_rule(c: RuleCheck, ctx: Draw, rng: random.Random):
    if not referenced_fields(c) <= ctx.batch.keys():
        return None
    found = rule_shape(c)
    if found is None:
        return None
    out = found[0].mutate(c, found[1], ctx, rng)
    if out is None or not others_hold(ctx, c):
        return None
    what, samples = out
    return what, c.field, c.code, samples


def applies(target: Any, ctx: Draw) -> bool:
    """False for a rule whose `when` (sizes and presence) leaves this batch out: breaking it shows nothing."""
    when = getattr(target, "when", None)  # (only rules over data have one)
    if when is None:
        return True
    host = ctx.dims | {presence_dim(fp.name): fp.name in ctx.batch for fp in ctx.plan.fields}
    return holds(when, host) is True  # (bind skips a rule whose `when` needs a dim the batch lacks)


def _absent_for(c: DimCheck, dims: dict[str, int]) -> set[str]:
    """The optional fields a rule's `where` needs left out (`L <= 512 where not present(pixel_values)`)."""
    named = {f for n in expr_dims(c.where) if (f := presence_field(n)) is not None}
    host = dims | {presence_dim(n): False for n in named}
    return named if named and holds(c.where, host) else set()


def mutate_dim_bound(c: DimCheck, ctx: Draw, rng: random.Random):
    """Redraw the whole batch with one dim just outside its `D <op> const` bound; all else valid."""
    terms = list(_linear_dim_terms(c.expr))
    if not terms or ctx.redraw is None:
        return None
    d, op, k = rng.choice(terms)
    bad = {"<=": math.floor(k) + 1, "<": math.ceil(k), ">=": math.ceil(k) - 1, ">": math.floor(k)}.get(op)
    if bad is None or bad < 1 or bad > 4096 or (d == ctx.plan.batch_dim and bad > 64):
        return None
    present = {fp.name for fp in ctx.plan.fields if d in fp.shape}
    absent = _absent_for(c, ctx.dims | {d: bad})
    try:
        fresh = ctx.redraw({d: bad}, present - absent, c, absent)
    except Infeasible:
        return None
    if not others_hold(fresh, c) or not any(v.code == c.code and v.rule.startswith(c.text) for v in bind(fresh.plan, fresh.batch).violations):
        return None  # (a rule's `where` may not hold in the fresh batch: `... where not present(pixel_values)`)
    ctx.batch = fresh.batch
    return f"{d} = {bad} breaks {c.text}", c.field, c.code, ()


def others_hold(ctx: Draw, target: Any) -> bool:
    """Every check except `target` passes on `ctx.batch` (a mutation must break exactly one check).

    Warnings count too, on the target's own field as well: a report of the mutated batch holds one
    violation (`(v,) = tc.check(batch, spec).violations`). A check that no batch breaks alone (every
    start position past the sequence, all ignored, is past its bound too) is never mutated.
    """
    bound = bind(ctx.plan, ctx.batch)
    if any(not (isinstance(target, DimCheck) and v.code == target.code and v.rule.startswith(target.text)) for v in bound.violations):
        return False
    bctx = _torch_backend.Context(ctx.plan, bound)
    for c in bound.runnable:
        if c is target:
            continue
        bad = bctx.bad_mask(c)
        if bad is not None and bool(bad.any()):
            return False
    return True
