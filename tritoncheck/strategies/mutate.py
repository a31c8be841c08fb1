"""Mutations: breaking one check (its kind's registered mutation) or one field's metadata."""

from __future__ import annotations

import random
from typing import Any

import torch

from tritoncheck.dtypes import torch_dtypes
from tritoncheck.plan.lower import FieldPlan, kind_of
from tritoncheck.strategies.draw import Draw


def _mutate_field(fp: FieldPlan, ctx: Draw, rng: random.Random):
    options = ["missing_field"] if not fp.optional and fp.name in ctx.batch else []
    if fp.name in ctx.batch:
        options += ["dtype", "rank"]
        if any(isinstance(s, int) for s in fp.shape):
            options.append("shape")
        if _dim_binder(ctx, fp) is not None:
            options.append("dim_mismatch")
    rng.shuffle(options)
    for code in options:
        out = _FIELD_MUTATIONS[code](fp, ctx, rng)
        if out is not None:
            return out[0], fp.name, code, ()
    return None


def _dim_binder(ctx: Draw, fp: FieldPlan) -> int | None:
    """An axis of `fp` whose dim an earlier present field binds (so a wrong size there is a mismatch)."""
    for axis, s in enumerate(fp.shape):
        if not isinstance(s, str):
            continue
        for other in ctx.plan.fields:
            if other.name == fp.name:
                break
            if other.name in ctx.batch and s in other.shape:
                return axis
    return None


def _field_missing(fp: FieldPlan, ctx: Draw, rng: random.Random):
    del ctx.batch[fp.name]
    return (f"removed required field {fp.name}",)


def _field_dtype(fp: FieldPlan, ctx: Draw, rng: random.Random):
    wrong = [d for name, d in torch_dtypes().items() if name not in fp.dtypes]
    if not wrong:
        return None
    d = rng.choice(wrong)
    ctx.batch[fp.name] = ctx.batch[fp.name].to(d)
    return (f"cast {fp.name} to {d}",)


def _field_rank(fp: FieldPlan, ctx: Draw, rng: random.Random):
    if fp.unit_tail:  # one size-1 axis is allowed there: two are not
        ctx.batch[fp.name] = ctx.batch[fp.name][..., None, None]
        return (f"added two size-1 axes to {fp.name}",)
    ctx.batch[fp.name] = ctx.batch[fp.name].unsqueeze(-1)
    return (f"added a size-1 axis to {fp.name}",)


def _grow(t: torch.Tensor, axis: int) -> torch.Tensor:
    return torch.cat([t, t.narrow(axis, 0, 1) if t.shape[axis] else torch.zeros_like(t.narrow(axis, 0, 0)).sum(axis, keepdim=True)], axis)


def _field_shape(fp: FieldPlan, ctx: Draw, rng: random.Random):
    axis = next(i for i, s in enumerate(fp.shape) if isinstance(s, int))
    ctx.batch[fp.name] = _grow(ctx.batch[fp.name], axis)
    return (f"grew fixed axis {axis} of {fp.name} to {fp.shape[axis] + 1}",)


def _field_dim_mismatch(fp: FieldPlan, ctx: Draw, rng: random.Random):
    axis = _dim_binder(ctx, fp)
    ctx.batch[fp.name] = _grow(ctx.batch[fp.name], axis)
    return (f"{fp.name} axis {axis} ({fp.shape[axis]}) one longer than the other fields",)


_FIELD_MUTATIONS = {
    "missing_field": _field_missing,
    "dtype": _field_dtype,
    "rank": _field_rank,
    "shape": _field_shape,
    "dim_mismatch": _field_dim_mismatch,
}



def mutate(target: Any, ctx: Draw, rng: random.Random):
    """Break `target` (a plan check, dim rule or field) in `ctx.batch`: its kind's registered mutation,
    or for a field a metadata mutation; `(description, field, code, samples)` or None."""
    if isinstance(target, FieldPlan):
        return _mutate_field(target, ctx, rng)
    return kind_of(target).mutate(target, ctx, rng)

