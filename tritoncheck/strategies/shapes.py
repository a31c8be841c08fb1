"""Rule shapes recognised structurally: how each keeps its rule true in valid data (narrow a
domain, repair drawn values in place) and how it breaks it (one mutation). They reach the batch
through the draw context (`draw.Draw`)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from tritoncheck.backends import torch as _torch_backend
from tritoncheck.checks.registry import expr_fields
from tritoncheck.expr import Binary, Const, Expr, Reduce, Ref, has_arange, is_host
from tritoncheck.plan.lower import RuleCheck, bind
from tritoncheck.strategies.domains import MAX_TRIES, Infeasible, admitted, pick, representable

if TYPE_CHECKING:
    from tritoncheck.strategies.draw import Draw

FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
CMP = ("<", "<=", ">", ">=", "==", "!=")


def _full_ref(e: Expr) -> bool:
    return isinstance(e, Ref) and all(i is None for i in e.index)


def _as_field_cmp(e: Expr) -> tuple[Ref, str, Expr] | None:
    """`field[...] <op> scalar` (either side), as (ref, op, scalar)."""
    if isinstance(e, Binary) and e.op in CMP:
        if isinstance(e.a, Ref) and is_host(e.b):
            return e.a, e.op, e.b
        if isinstance(e.b, Ref) and is_host(e.a):
            return e.b, FLIP[e.op], e.a
    return None


def _as_any(e: Expr) -> tuple[Ref, str, Expr, tuple[str, ...] | None, Expr | None] | None:
    """`any(field <op> scalar, dim=...)` or `any(field, dim=...)`, optionally `& positions` where
    `positions` is over `arange` only (`any((labels != -100) & (arange(L) > 0))`), as
    (ref, op, scalar, dims, positions or None)."""
    if not (isinstance(e, Reduce) and e.op == "any"):
        return None
    x, positions = e.x, None
    if isinstance(x, Binary) and x.op == "&":
        for inner, other in ((x.a, x.b), (x.b, x.a)):
            if not expr_fields(other) and has_arange(other):
                x, positions = inner, other
                break
    if _full_ref(x):
        return x, "!=", Const(0), e.dims, positions
    cmp = _as_field_cmp(x)
    if cmp and _full_ref(cmp[0]):
        return cmp[0], cmp[1], cmp[2], e.dims, positions
    return None


def _as_count_bound(e: Expr) -> tuple[Ref, Expr, tuple[str, ...], Expr, str] | None:
    """`sum(field != pad, dim=L) <= K`, as (ref, pad, dims, K, op)."""
    if isinstance(e, Binary) and e.op in ("<=", "<") and isinstance(e.a, Reduce) and e.a.op == "sum" and e.a.dims:
        inner = _as_field_cmp(e.a.x)
        if inner and inner[1] == "!=" and _full_ref(inner[0]) and is_host(e.b):
            return inner[0], inner[2], e.a.dims, e.b, e.op
    return None


def _as_pair(e: Expr) -> tuple[Ref, str, Ref] | None:
    """`a <op> b` over two field refs (`bbox[..., 0] <= bbox[..., 2]`, `target_lengths <= input_lengths`)."""
    if isinstance(e, Binary) and e.op in ("<", "<=", ">", ">=") and isinstance(e.a, Ref) and isinstance(e.b, Ref):
        return e.a, e.op, e.b
    return None


@dataclass(frozen=True)
class RuleShape:
    """One recognised rule shape: how to keep it true in valid data, and how to break it."""

    name: str
    match: Callable[[RuleCheck], Any]
    constrain: Callable[[RuleCheck, Any, Draw], None] | None  # narrows domains before values are drawn
    repair: Callable[[RuleCheck, Any, Draw], None] | None  # fixes drawn values in place
    mutate: Callable[[RuleCheck, Any, Draw, random.Random], Any]  # -> (description, samples) or None


def rule_shape(check: RuleCheck) -> tuple[RuleShape, Any] | None:
    """The first registered shape matching a rule, with what its matcher extracted."""
    for shape in RULE_SHAPES:
        m = shape.match(check)
        if m is not None:
            return shape, m
    return None


def _cmp_holds(op: str, a: float, b: float) -> bool:
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op]


def _breaking_values(op: str, k: float) -> list[float]:
    return {"<": [k, k + 1], "<=": [k + 1], ">": [k, k - 1], ">=": [k - 1], "==": [k + 1, k - 1], "!=": [k]}[op]


def _field_cmp_constrain(c: RuleCheck, m, ctx: Draw) -> None:
    ref, op, k = m
    if _full_ref(ref):  # a selection (`ids[:, 0] == cls`) is set by the repair: the rest keeps its range
        ctx.domains[ref.field].narrow(op, ctx.scalar(k))


def pins_selection(c: Any) -> bool:
    """A rule `field[index] <op> scalar` on a selection of its field (set by `_field_cmp_repair`)."""
    m = _as_field_cmp(c.expr) if isinstance(c, RuleCheck) else None
    return m is not None and not _full_ref(m[0])


def _field_cmp_repair(c: RuleCheck, m, ctx: Draw) -> None:
    ref, op, k = m
    if _full_ref(ref):
        return
    kv, view = ctx.scalar(k), ctx.view(ref)
    v = pick(ctx.domains[ref.field], view.dtype, lambda x: _cmp_holds(op, x, kv))
    if v is None:
        raise Infeasible(f"no value of {ref.field} satisfies {c.text!r}")
    view[~_torch_backend.binary(op, view, kv)] = v


def _field_cmp_mutate(c: RuleCheck, m, ctx: Draw, rng: random.Random):
    ref, op, k = m
    kv = ctx.scalar(k)
    view = ctx.view(ref)
    axes = ctx.ref_axes(ref)
    bctx = _torch_backend.Context(ctx.plan, bind(ctx.plan, ctx.batch))
    where = bctx.evaluate(c.where, axes).to(torch.bool) if c.where is not None else torch.ones(view.shape, dtype=torch.bool)
    if tuple(where.shape) != tuple(view.shape) or not bool(where.any()):
        return None
    spots = where.nonzero().tolist()
    for v in _breaking_values(op, kv):
        if not representable(v, view.dtype) or ctx.own_codes(ref.field, v):
            continue
        for _ in range(MAX_TRIES):
            pos = tuple(rng.choice(spots))
            old = view[pos].clone()
            view[pos] = v
            if ctx.others_hold(c):
                sample = (pos[axes.index(ctx.plan.batch_dim)],) if ctx.plan.batch_dim in axes else ()
                return f"broke {c.text}: {ref.field} = {v} at {list(pos)}", sample
            view[pos] = old
    return None


def _positions(ctx: Draw, ref: Ref, positions: Expr | None) -> torch.Tensor:
    """Where along the field an `any` rule looks: everywhere, or where its `arange` condition holds."""
    t = ctx.batch[ref.field]
    if positions is None:
        return torch.ones(t.shape, dtype=torch.bool)
    bctx = _torch_backend.Context(ctx.plan, bind(ctx.plan, ctx.batch))
    return bctx.evaluate(positions, ctx.axes(ref)).to(torch.bool).expand(t.shape)


def _any_repair(c: RuleCheck, m, ctx: Draw) -> None:
    ref, op, k, dims, positions = m
    kv = ctx.scalar(k)
    t = ctx.batch[ref.field]
    axes = ctx.axes(ref)
    red = list(range(t.dim())) if dims is None else [axes.index(d) for d in dims]
    if t.numel() == 0:
        return
    v = pick(ctx.domains[ref.field], t.dtype, lambda x: _cmp_holds(op, x, kv))
    if v is None:
        raise Infeasible(f"no value of {ref.field} satisfies {c.text!r}")
    keep = [i for i in range(t.dim()) if i not in red]
    order = keep + red
    moved = t.permute(order).reshape(*[t.shape[i] for i in keep], -1)
    where = _positions(ctx, ref, positions).permute(order).reshape(moved.shape)
    if not bool(where.any(dim=-1).all()):
        raise Infeasible(f"{c.text!r} has no position to hold at these sizes")
    ok = (_torch_backend.binary(op, moved, kv) & where).any(dim=-1, keepdim=True)
    first = where.int().argmax(dim=-1, keepdim=True)  # the first position the rule looks at
    moved.scatter_(-1, first, torch.where(ok, moved.gather(-1, first), torch.tensor(v, dtype=t.dtype)))
    inverse = [0] * t.dim()
    for new, old in enumerate(order):
        inverse[old] = new
    ctx.batch[ref.field] = moved.reshape([t.shape[i] for i in order]).permute(inverse).contiguous()


def _any_mutate(c: RuleCheck, m, ctx: Draw, rng: random.Random):
    ref, op, k, dims, positions = m
    kv = ctx.scalar(k)
    t = ctx.batch[ref.field]
    v = pick(ctx.domains[ref.field], t.dtype, lambda x: not _cmp_holds(op, x, kv)) if kv not in ctx.domains[ref.field].allow else kv
    if v is None and c.severity == "error":  # past the field's bounds, where those are only warnings
        v = next((x for x in _breaking_values(op, kv) if representable(x, t.dtype)
                  and not ctx.own_codes(ref.field, x, "error")), None)
    if v is None or ctx.own_codes(ref.field, v, "error") or t.numel() == 0:
        return None
    where = _positions(ctx, ref, positions)
    if dims is None:
        t[where] = v
        return f"made every {ref.field} {v}: {c.text}", ()
    axes = ctx.axes(ref)
    keep = [a for a in axes if a not in dims]
    index = [slice(None)] * t.dim()
    chosen = {}
    for a in keep:
        chosen[a] = rng.randrange(t.shape[axes.index(a)])
        index[axes.index(a)] = chosen[a]
    row = t[tuple(index)]
    row[where[tuple(index)]] = v
    sample = (chosen[ctx.plan.batch_dim],) if ctx.plan.batch_dim in chosen else ()
    return f"set {ref.field} at {chosen} to {v} along {list(dims)}: {c.text}", sample


def _count_repair(c: RuleCheck, m, ctx: Draw) -> None:
    ref, pad, dims, k, op = m
    padv, limit = ctx.scalar(pad), ctx.scalar(k) - (1 if op == "<" else 0)
    t = ctx.batch[ref.field]
    if not ctx.domains[ref.field].admits(padv) or not representable(padv, t.dtype):
        raise Infeasible(f"{ref.field} cannot hold the pad value {padv} needed by {c.text!r}")
    axes = ctx.axes(ref)
    red = [axes.index(d) for d in dims]
    keep = [i for i in range(t.dim()) if i not in red]
    moved = t.permute(keep + red).reshape(*[t.shape[i] for i in keep], -1).clone()
    real = moved != padv
    moved[real & (real.cumsum(-1) > limit)] = padv  # keep the first `limit` real tokens, pad the tail
    inverse = [0] * t.dim()
    for new, old in enumerate(keep + red):
        inverse[old] = new
    ctx.batch[ref.field] = moved.reshape([t.shape[i] for i in keep + red]).permute(inverse).contiguous()


def _count_mutate(c: RuleCheck, m, ctx: Draw, rng: random.Random):
    ref, pad, dims, k, op = m
    padv, limit = ctx.scalar(pad), ctx.scalar(k) - (1 if op == "<" else 0)
    t = ctx.batch[ref.field]
    axes = ctx.axes(ref)
    if len(dims) != 1 or t.dim() != 2 or axes.index(dims[0]) != 1 or t.shape[1] <= limit:
        return None
    v = pick(ctx.domains[ref.field], t.dtype, lambda x: x != padv)
    if v is None:
        return None
    b = rng.randrange(t.shape[0])
    t[b] = torch.where(t[b] == padv, torch.tensor(v, dtype=t.dtype), t[b])
    sample = (b,) if axes[0] == ctx.plan.batch_dim else ()
    return f"filled row {b} of {ref.field} with non-pad tokens: {c.text}", sample


def _pair_same_shape(ctx: Draw, a: Ref, b: Ref) -> bool:
    return ctx.ref_axes(a) == ctx.ref_axes(b)


def _pair_repair(c: RuleCheck, m, ctx: Draw) -> None:
    a, op, b = m
    if not _pair_same_shape(ctx, a, b):
        return
    va, vb = ctx.view(a), ctx.view(b)
    if a.field == b.field:  # corners of one field: sort each pair
        lo, hi = torch.minimum(va, vb), torch.maximum(va, vb)
        first, second = (lo, hi) if op in ("<", "<=") else (hi, lo)
        va.copy_(first.clone())
        vb.copy_(second.clone())
        if op in ("<", ">"):
            ok = _torch_backend.binary(op, va, vb)
            if not bool(ok.all()):
                raise Infeasible(f"equal values break the strict rule {c.text!r}")
        return
    shift = {"<": -1, "<=": 0, ">": 1, ">=": 0}[op]
    clip, unclip = (torch.minimum, torch.maximum) if op in ("<", "<=") else (torch.maximum, torch.minimum)
    moved = clip(va, vb + shift).to(va.dtype)
    inside = admitted(ctx.domains[a.field], moved)
    # where a cannot move (its own bound), move b the other way instead
    vb.copy_(torch.where(inside, vb, unclip(vb, va - shift).to(vb.dtype)))
    va.copy_(torch.where(inside, moved, va))




def _pair_mutate(c: RuleCheck, m, ctx: Draw, rng: random.Random):
    a, op, b = m
    if not _pair_same_shape(ctx, a, b):
        return None
    va, vb = ctx.view(a), ctx.view(b)
    axes = ctx.ref_axes(a)
    if va.numel() == 0:
        return None
    for _ in range(MAX_TRIES):
        pos = tuple(rng.randrange(s) for s in va.shape)
        old_a, old_b = va[pos].clone(), vb[pos].clone()
        y = float(vb[pos])
        new_a = {"<": y, "<=": y + 1, ">": y, ">=": y - 1}[op]
        if a.field != b.field or not ctx.domains[a.field].admits(new_a):
            # move b away instead when a cannot go there (e.g. both at the top of the range)
            x = float(va[pos])
            new_b = {"<": x, "<=": x - 1, ">": x, ">=": x + 1}[op]
            cand = [(va, new_a, a.field), (vb, new_b, b.field)]
        else:
            cand = [(va, new_a, a.field)]
        for view, v, name in cand:
            if representable(v, view.dtype) and not ctx.own_codes(name, v) and ctx.domains[name].admits(v):
                view[pos] = v
                if ctx.others_hold(c):
                    sample = (pos[axes.index(ctx.plan.batch_dim)],) if ctx.plan.batch_dim in axes else ()
                    return f"broke {c.text} at {list(pos)} ({name} = {v})", sample
                va[pos], vb[pos] = old_a, old_b
    return None


RULE_SHAPES: tuple[RuleShape, ...] = (
    RuleShape("field_cmp_scalar", lambda c: _as_field_cmp(c.expr), _field_cmp_constrain, _field_cmp_repair,
              _field_cmp_mutate),
    RuleShape("any_along", lambda c: _as_any(c.expr) if c.where is None else None, None, _any_repair, _any_mutate),
    RuleShape("count_bound", lambda c: _as_count_bound(c.expr) if c.where is None else None, None, _count_repair,
              _count_mutate),
    RuleShape("pair_order", lambda c: _as_pair(c.expr) if c.where is None else None, None, _pair_repair, _pair_mutate),
)
