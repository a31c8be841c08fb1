"""Hypothesis strategies built from a spec: valid batches, and batches with exactly one violation.

Values are *constructed* to satisfy the contract, never filtered: each field gets a value domain
narrowed by its checks (min/max with their `allow` sentinels, value sets, and rules of the form
`field <op> scalar`), dims are drawn inside intervals narrowed by the host dim rules, and a few
rule shapes recognised structurally are repaired in place (sort box corners, force one attended
position, pad the tail past a token budget, clip a length to another). Large tensors are filled
from one drawn seed with a torch generator, so a 1M-element batch costs one draw.

Each check kind's valid-data constraint, repair and mutation are registered with the kind itself
(`tritoncheck._checks.REGISTRY`), and reach this module's machinery through the draw context;
`RULE_SHAPES` does the same for rule shapes. A test walks every
built-in plan and asserts nothing is missing.

    from hypothesis import given
    import tritoncheck as tc

    @given(tc.strategies.valid_batches(spec, B=(1, 4), L=(1, 32)))
    def test_forward(batch):
        model(**batch)
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

try:
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("tritoncheck.strategies needs hypothesis: pip install 'tritoncheck[strategies]'") from exc

from . import _torch_backend
from ._checks import expr_fields, range_limit
from ._dtypes import DTYPES, compute_dtype
from ._expr import Binary, Const, Dim, Expr, Reduce, Ref, has_arange, is_host
from ._plan import (
    DimCheck,
    FieldPlan,
    Plan,
    RangeCheck,
    RuleCheck,
    bind,
    compile_plan,
    evaluate_scalar,
    expr_dims,
    holds,
    kind_of,
    presence_dim,
    presence_field,
    referenced_fields,
)
from ._spec import BatchSpec

__all__ = ["Expected", "UnsatisfiableSpecError", "malformed_batches", "valid_batches"]

DEFAULT_BATCH = (1, 4)
DEFAULT_DIM = (1, 8)
DEFAULT_SPAN = 50  # an unbounded int field draws from [lo, lo + 50]; floats from a span of 8
MAX_TRIES = 8
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_CMP = ("<", "<=", ">", ">=", "==", "!=")


class UnsatisfiableSpecError(ValueError):
    """The strategies cannot build data for a spec: an empty domain or a rule they cannot satisfy."""


UnsatisfiableSpecError.__module__ = "tritoncheck"


class _Infeasible(Exception):
    """This draw (dims, dtype) left a domain empty; another draw may work."""


@dataclass(frozen=True)
class Expected:
    """What a malformed batch must be reported for: exactly one violation of `code` on `field`
    (for an error, warnings on the same field may come with it: see `report.errors`).

    Attributes:
        field: the field the violation is reported on.
        code: the violation code the mutation causes.
        samples: the batch positions it must name (empty for batch-level and metadata violations).
        mutation: what was done, in words, for failure messages.
    """

    field: str
    code: str
    samples: tuple[int, ...]
    mutation: str


# ---------------------------------------------------------------------------------------------
# Value domains


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
        return [v for v in dom.values if dom.admits(v) and v not in dom.allow and _representable(v, dtype)]
    if dtype.is_floating_point:
        return None
    lo, hi = _int_range(dom, dtype)
    if hi - lo > limit:
        return None
    return [v for v in range(lo, hi + 1) if v not in dom.exclude]


def _representable(v: float, dtype: torch.dtype) -> bool:
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
        if dom.admits(v) and pred(v) and _representable(v, dtype):
            return v
    return None


def _fill(dom: Domain, dtype: torch.dtype, shape: tuple[int, ...], g: torch.Generator, edge: float, sentinel: float) -> torch.Tensor:
    """A tensor of `shape` with every element in `dom`; `edge` and `sentinel` are mixing rates."""
    n = math.prod(shape)
    cands = _candidates(dom, dtype)
    if cands is not None:
        if not cands:
            raise _Infeasible(f"{dom.name}: no allowed value for dtype {dtype}")
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
            raise _Infeasible(f"{dom.name}: empty range [{lo}, {hi}] for dtype {dtype}")
        flat = torch.randint(lo, hi + 1, (n,), generator=g, dtype=torch.int64).to(torch.float64)
        ends = torch.tensor([lo, hi], dtype=torch.float64)
        if dom.exclude:  # rare in a wide range: move those to a value that is allowed
            spare = pick(dom, dtype)
            if spare is None:
                raise _Infeasible(f"{dom.name}: every value in [{lo}, {hi}] is excluded")
            flat[torch.isin(flat, torch.tensor(sorted(dom.exclude), dtype=torch.float64))] = float(spare)
    if edge and n:
        at = torch.rand(n, generator=g) < edge
        flat[at] = ends[torch.randint(2, (int(at.sum()),), generator=g)]
    sentinels = [a for a in dom.allow if _representable(a, dtype)]
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
        raise _Infeasible(f"{name}: no {dtype} value lies in the allowed range")
    return rounded(lo), rounded(hi)


# ---------------------------------------------------------------------------------------------
# Rule shapes recognised structurally


def _full_ref(e: Expr) -> bool:
    return isinstance(e, Ref) and all(i is None for i in e.index)


def _as_field_cmp(e: Expr) -> tuple[Ref, str, Expr] | None:
    """`field[...] <op> scalar` (either side), as (ref, op, scalar)."""
    if isinstance(e, Binary) and e.op in _CMP:
        if isinstance(e.a, Ref) and is_host(e.b):
            return e.a, e.op, e.b
        if isinstance(e.b, Ref) and is_host(e.a):
            return e.b, _FLIP[e.op], e.a
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
    constrain: Callable[[RuleCheck, Any, _Draw], None] | None  # narrows domains before values are drawn
    repair: Callable[[RuleCheck, Any, _Draw], None] | None  # fixes drawn values in place
    mutate: Callable[[RuleCheck, Any, _Draw, random.Random], Any]  # -> (description, samples) or None


def rule_shape(check: RuleCheck) -> tuple[RuleShape, Any] | None:
    """The first registered shape matching a rule, with what its matcher extracted."""
    for shape in RULE_SHAPES:
        m = shape.match(check)
        if m is not None:
            return shape, m
    return None


# ---------------------------------------------------------------------------------------------
# Drawing one batch


@dataclass
class _Draw:
    plan: Plan
    dims: dict[str, int]
    dtypes: dict[str, torch.dtype]
    domains: dict[str, Domain]
    batch: dict[str, torch.Tensor]
    gen: torch.Generator
    redraw: Callable[..., _Draw] | None = None  # a fresh draw with dims overridden (dim_bound mutations)

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

    # -- what a check kind's strategy parts (tritoncheck._checks) may use -----------------------
    def limit(self, c: RangeCheck) -> int | float:
        """A range check's bound as the backends compare it (rounded for an integer field)."""
        return range_limit(c, self.dims, self.batch[c.field].dtype)

    def set_breaking(self, c: Any, v: float, rng: random.Random, what: str):
        """Write `v` at one position of `c.field` where it breaks `c` and nothing else:
        `(description, field, code, samples)`, or None when no such write exists."""
        if not _representable(v, self.batch[c.field].dtype) or _own_codes(self, c.field, v) != {c.code}:
            return None
        pos = _set_one(self, c.field, v, rng, lambda: _others_hold(self, c))
        if pos is None:
            return None
        return f"{what}: {c.field}{list(pos)} = {v}", c.field, c.code, self.sample_of(c.field, pos)

    def sample_of(self, name: str, pos: tuple[int, ...]) -> tuple[int, ...]:
        """The batch position of element `pos` of field `name` (empty if it has no batch axis)."""
        axes = self.plan.field(name).axes
        return (pos[axes.index(self.plan.batch_dim)],) if self.plan.batch_dim in axes else ()

    def others_hold(self, target: Any) -> bool:
        """Every check except `target` passes on the batch (a mutation breaks exactly one)."""
        return _others_hold(self, target)

    def constrain_rule(self, c: RuleCheck) -> None:
        found = rule_shape(c)
        if found and found[0].constrain:
            found[0].constrain(c, found[1], self)

    def repair_rule(self, c: RuleCheck) -> None:
        found = rule_shape(c)
        if found and found[0].repair:
            found[0].repair(c, found[1], self)

    def mutate_rule(self, c: RuleCheck, rng: random.Random):
        return _mutate_rule(c, self, rng)

    def break_dim_rule(self, c: DimCheck, rng: random.Random):
        return _mutate_dim_bound(c, self, rng)


def _dim_intervals(plan: Plan, spec: BatchSpec, dim_bounds: dict[str, tuple[int, int]]) -> dict[str, list[int]]:
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
    ctx = _Draw(plan, dims, {}, {}, {}, torch.Generator())
    try:
        doms = _domains(ctx)
        return all(any(pick(doms[fp.name], d) is not None for d in fp.dtypes) for fp in plan.fields)
    except (_Infeasible, KeyError, ArithmeticError):
        return False


def _linear_dim_terms(e: Expr) -> Iterable[tuple[str, str, float]]:
    """`D <op> const` terms of a conjunction (`(0 >= 0) & (0 < C)` gives C > 0)."""
    if isinstance(e, Binary) and e.op == "&":
        yield from _linear_dim_terms(e.a)
        yield from _linear_dim_terms(e.b)
    elif isinstance(e, Binary) and e.op in _CMP:
        if isinstance(e.a, Dim) and isinstance(e.b, Const):
            yield e.a.name, e.op, e.b.value
        elif isinstance(e.b, Dim) and isinstance(e.a, Const):
            yield e.b.name, _FLIP[e.op], e.a.value


def _draw_batch(draw, plan: Plan, intervals: dict[str, list[int]], overrides: dict[str, int] | None = None,
                force_present: set[str] = frozenset(), breaking: DimCheck | None = None,
                force_absent: set[str] = frozenset()) -> _Draw:
    """Draw dims, presence and dtypes from hypothesis, then values from one seeded generator."""
    dims = {n: draw(st.integers(lo, hi), label=n) for n, (lo, hi) in intervals.items()}
    dims.update(overrides or {})
    present = [fp for fp in plan.fields if not fp.optional or fp.name in force_present
               or (fp.name not in force_absent and draw(st.booleans(), label=f"has {fp.name}"))]
    present = _presence_holds(plan, dims, present, breaking)
    dtypes = {fp.name: draw(st.sampled_from(fp.dtypes), label=f"{fp.name}.dtype") for fp in present}
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    edge = draw(st.sampled_from([0.0, 0.1, 0.5]), label="edge rate")
    sentinel = draw(st.sampled_from([0.0, 0.2, 1.0]), label="sentinel rate")
    g = torch.Generator().manual_seed(seed)
    ctx = _Draw(plan, dims, dtypes, {}, {}, g)
    ctx.domains = _domains(ctx)
    for fp in present:
        ctx.batch[fp.name] = _fill(ctx.domains[fp.name], dtypes[fp.name], ctx.shape(fp), g, edge, sentinel)
    # each kind's repair (rule shapes, a monotonic field's sort), in plan order but a rule on a selection
    # first (`ids[:, 0] == cls`): a token budget then pads past the pinned token, not over it
    for c in sorted(plan.checks, key=lambda c: not _pins_selection(c)):
        repair = kind_of(c).repair
        if repair is not None and referenced_fields(c) <= ctx.batch.keys():
            repair(c, ctx)
    return ctx


def _presence_holds(plan: Plan, dims: dict[str, int], present: list[FieldPlan], breaking: DimCheck | None) -> list[FieldPlan]:
    """`present` with the optional fields added that a failing rule over presence names
    (`present(labels) | present(decoder_input_ids)`); raises `_Infeasible` when the dims still
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
                raise _Infeasible(f"dims {dims} and the fields drawn break {c.text!r}")
            names |= named
    return [fp for fp in plan.fields if fp.name in names]


def _domains(ctx: _Draw) -> dict[str, Domain]:
    """Every field's domain: the `constrain` hook of each check kind, applied in plan order."""
    doms = {fp.name: Domain(fp.name) for fp in ctx.plan.fields}
    ctx.domains = doms
    for c in ctx.plan.checks:
        kind_of(c).constrain(c, ctx)
    return doms


# ---------------------------------------------------------------------------------------------
# Helpers for the check kinds' strategy parts (`tritoncheck._checks`)


def _own_codes(ctx: _Draw, name: str, v: float, severity: str | None = None) -> set[str]:
    """The codes a single value `v` in field `name` causes among the field's element-wise checks
    (of that severity only, if given)."""
    return {c.code for c in ctx.plan.checks
            if getattr(c, "field", None) == name and severity in (None, c.severity)
            and (fails := kind_of(c).value_fails) is not None and fails(c, v, ctx)}


def _set_one(ctx: _Draw, name: str, v: float, rng: random.Random, avoid: Callable | None = None) -> tuple[int, ...] | None:
    """Write `v` at a random position of field `name` that keeps every other check true."""
    t = ctx.batch[name]
    if t.numel() == 0 or not _representable(v, t.dtype):
        return None
    for _ in range(MAX_TRIES):
        pos = tuple(rng.randrange(s) for s in t.shape)
        old = t[pos].clone()
        t[pos] = v
        if avoid is None or avoid():
            return pos
        t[pos] = old
    return None


def _mutate_rule(c: RuleCheck, ctx: _Draw, rng: random.Random):
    if not referenced_fields(c) <= ctx.batch.keys():
        return None
    found = rule_shape(c)
    if found is None:
        return None
    out = found[0].mutate(c, found[1], ctx, rng)
    if out is None or not _others_hold(ctx, c):
        return None
    what, samples = out
    return what, c.field, c.code, samples


def _applies(target: Any, ctx: _Draw) -> bool:
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


def _mutate_dim_bound(c: DimCheck, ctx: _Draw, rng: random.Random):
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
    except _Infeasible:
        return None
    if not _others_hold(fresh, c) or not any(v.code == c.code and v.rule.startswith(c.text) for v in bind(fresh.plan, fresh.batch).violations):
        return None  # (a rule's `where` may not hold in the fresh batch: `... where not present(pixel_values)`)
    ctx.batch = fresh.batch
    return f"{d} = {bad} breaks {c.text}", c.field, c.code, ()


# ---------------------------------------------------------------------------------------------
# Rule shapes


def _cmp_holds(op: str, a: float, b: float) -> bool:
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op]


def _breaking_values(op: str, k: float) -> list[float]:
    return {"<": [k, k + 1], "<=": [k + 1], ">": [k, k - 1], ">=": [k - 1], "==": [k + 1, k - 1], "!=": [k]}[op]


def _field_cmp_constrain(c: RuleCheck, m, ctx: _Draw) -> None:
    ref, op, k = m
    if _full_ref(ref):  # a selection (`ids[:, 0] == cls`) is set by the repair: the rest keeps its range
        ctx.domains[ref.field].narrow(op, ctx.scalar(k))


def _pins_selection(c: Any) -> bool:
    """A rule `field[index] <op> scalar` on a selection of its field (set by `_field_cmp_repair`)."""
    m = _as_field_cmp(c.expr) if isinstance(c, RuleCheck) else None
    return m is not None and not _full_ref(m[0])


def _field_cmp_repair(c: RuleCheck, m, ctx: _Draw) -> None:
    ref, op, k = m
    if _full_ref(ref):
        return
    kv, view = ctx.scalar(k), ctx.view(ref)
    v = pick(ctx.domains[ref.field], view.dtype, lambda x: _cmp_holds(op, x, kv))
    if v is None:
        raise _Infeasible(f"no value of {ref.field} satisfies {c.text!r}")
    view[~_torch_backend.binary(op, view, kv)] = v


def _field_cmp_mutate(c: RuleCheck, m, ctx: _Draw, rng: random.Random):
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
        if not _representable(v, view.dtype) or _own_codes(ctx, ref.field, v):
            continue
        for _ in range(MAX_TRIES):
            pos = tuple(rng.choice(spots))
            old = view[pos].clone()
            view[pos] = v
            if _others_hold(ctx, c):
                sample = (pos[axes.index(ctx.plan.batch_dim)],) if ctx.plan.batch_dim in axes else ()
                return f"broke {c.text}: {ref.field} = {v} at {list(pos)}", sample
            view[pos] = old
    return None


def _positions(ctx: _Draw, ref: Ref, positions: Expr | None) -> torch.Tensor:
    """Where along the field an `any` rule looks: everywhere, or where its `arange` condition holds."""
    t = ctx.batch[ref.field]
    if positions is None:
        return torch.ones(t.shape, dtype=torch.bool)
    bctx = _torch_backend.Context(ctx.plan, bind(ctx.plan, ctx.batch))
    return bctx.evaluate(positions, ctx.axes(ref)).to(torch.bool).expand(t.shape)


def _any_repair(c: RuleCheck, m, ctx: _Draw) -> None:
    ref, op, k, dims, positions = m
    kv = ctx.scalar(k)
    t = ctx.batch[ref.field]
    axes = ctx.axes(ref)
    red = list(range(t.dim())) if dims is None else [axes.index(d) for d in dims]
    if t.numel() == 0:
        return
    v = pick(ctx.domains[ref.field], t.dtype, lambda x: _cmp_holds(op, x, kv))
    if v is None:
        raise _Infeasible(f"no value of {ref.field} satisfies {c.text!r}")
    keep = [i for i in range(t.dim()) if i not in red]
    order = keep + red
    moved = t.permute(order).reshape(*[t.shape[i] for i in keep], -1)
    where = _positions(ctx, ref, positions).permute(order).reshape(moved.shape)
    if not bool(where.any(dim=-1).all()):
        raise _Infeasible(f"{c.text!r} has no position to hold at these sizes")
    ok = (_torch_backend.binary(op, moved, kv) & where).any(dim=-1, keepdim=True)
    first = where.int().argmax(dim=-1, keepdim=True)  # the first position the rule looks at
    moved.scatter_(-1, first, torch.where(ok, moved.gather(-1, first), torch.tensor(v, dtype=t.dtype)))
    inverse = [0] * t.dim()
    for new, old in enumerate(order):
        inverse[old] = new
    ctx.batch[ref.field] = moved.reshape([t.shape[i] for i in order]).permute(inverse).contiguous()


def _any_mutate(c: RuleCheck, m, ctx: _Draw, rng: random.Random):
    ref, op, k, dims, positions = m
    kv = ctx.scalar(k)
    t = ctx.batch[ref.field]
    v = pick(ctx.domains[ref.field], t.dtype, lambda x: not _cmp_holds(op, x, kv)) if kv not in ctx.domains[ref.field].allow else kv
    if v is None and c.severity == "error":  # past the field's bounds, where those are only warnings
        v = next((x for x in _breaking_values(op, kv) if _representable(x, t.dtype)
                  and not _own_codes(ctx, ref.field, x, "error")), None)
    if v is None or _own_codes(ctx, ref.field, v, "error") or t.numel() == 0:
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


def _count_repair(c: RuleCheck, m, ctx: _Draw) -> None:
    ref, pad, dims, k, op = m
    padv, limit = ctx.scalar(pad), ctx.scalar(k) - (1 if op == "<" else 0)
    t = ctx.batch[ref.field]
    if not ctx.domains[ref.field].admits(padv) or not _representable(padv, t.dtype):
        raise _Infeasible(f"{ref.field} cannot hold the pad value {padv} needed by {c.text!r}")
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


def _count_mutate(c: RuleCheck, m, ctx: _Draw, rng: random.Random):
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


def _pair_same_shape(ctx: _Draw, a: Ref, b: Ref) -> bool:
    return ctx.ref_axes(a) == ctx.ref_axes(b)


def _pair_repair(c: RuleCheck, m, ctx: _Draw) -> None:
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
                raise _Infeasible(f"equal values break the strict rule {c.text!r}")
        return
    shift = {"<": -1, "<=": 0, ">": 1, ">=": 0}[op]
    clip, unclip = (torch.minimum, torch.maximum) if op in ("<", "<=") else (torch.maximum, torch.minimum)
    moved = clip(va, vb + shift).to(va.dtype)
    inside = _admitted(ctx.domains[a.field], moved)
    # where a cannot move (its own bound), move b the other way instead
    vb.copy_(torch.where(inside, vb, unclip(vb, va - shift).to(vb.dtype)))
    va.copy_(torch.where(inside, moved, va))


def _admitted(dom: Domain, t: torch.Tensor) -> torch.Tensor:
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


def _pair_mutate(c: RuleCheck, m, ctx: _Draw, rng: random.Random):
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
            if _representable(v, view.dtype) and not _own_codes(ctx, name, v) and ctx.domains[name].admits(v):
                view[pos] = v
                if _others_hold(ctx, c):
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


# ---------------------------------------------------------------------------------------------
# Field metadata mutations


def _mutate_field(fp: FieldPlan, ctx: _Draw, rng: random.Random):
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


def _dim_binder(ctx: _Draw, fp: FieldPlan) -> int | None:
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


def _field_missing(fp: FieldPlan, ctx: _Draw, rng: random.Random):
    del ctx.batch[fp.name]
    return (f"removed required field {fp.name}",)


def _field_dtype(fp: FieldPlan, ctx: _Draw, rng: random.Random):
    wrong = [d for d in DTYPES.values() if d not in fp.dtypes]
    if not wrong:
        return None
    d = rng.choice(wrong)
    ctx.batch[fp.name] = ctx.batch[fp.name].to(d)
    return (f"cast {fp.name} to {d}",)


def _field_rank(fp: FieldPlan, ctx: _Draw, rng: random.Random):
    if fp.unit_tail:  # one size-1 axis is allowed there: two are not
        ctx.batch[fp.name] = ctx.batch[fp.name][..., None, None]
        return (f"added two size-1 axes to {fp.name}",)
    ctx.batch[fp.name] = ctx.batch[fp.name].unsqueeze(-1)
    return (f"added a size-1 axis to {fp.name}",)


def _grow(t: torch.Tensor, axis: int) -> torch.Tensor:
    return torch.cat([t, t.narrow(axis, 0, 1) if t.shape[axis] else torch.zeros_like(t.narrow(axis, 0, 0)).sum(axis, keepdim=True)], axis)


def _field_shape(fp: FieldPlan, ctx: _Draw, rng: random.Random):
    axis = next(i for i, s in enumerate(fp.shape) if isinstance(s, int))
    ctx.batch[fp.name] = _grow(ctx.batch[fp.name], axis)
    return (f"grew fixed axis {axis} of {fp.name} to {fp.shape[axis] + 1}",)


def _field_dim_mismatch(fp: FieldPlan, ctx: _Draw, rng: random.Random):
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


# ---------------------------------------------------------------------------------------------
# Public strategies


def _check_spec(spec: BatchSpec) -> Plan:
    if not isinstance(spec, BatchSpec):
        raise TypeError(f"spec must be a BatchSpec (from tc.load_spec), got {type(spec).__name__}")
    return compile_plan(spec)


def _parse_bounds(plan: Plan, dim_bounds: dict[str, Any]) -> dict[str, tuple[int, int]]:
    out = {}
    for name, b in dim_bounds.items():
        if isinstance(b, int):
            b = (b, b)
        if not (isinstance(b, tuple) and len(b) == 2 and all(isinstance(x, int) for x in b) and 0 <= b[0] <= b[1]):
            raise ValueError(f"{name}={b!r}: a dim bound is an int or a (lo, hi) tuple with 0 <= lo <= hi")
        out[name] = b
    return out


def _valid(draw, spec: BatchSpec, plan: Plan, intervals, overrides=None, force_present=frozenset()) -> _Draw:
    """A valid batch; retries a few fresh draws for rules no shape covers, then gives up loudly."""
    from ._api import check

    problem = ""
    unknown = [c.text for c in plan.checks if isinstance(c, RuleCheck) and rule_shape(c) is None]
    for _ in range(MAX_TRIES):
        try:
            ctx = _draw_batch(draw, plan, intervals, overrides, force_present)
        except _Infeasible as exc:
            problem = str(exc)
            continue
        report = check(ctx.batch, spec, backend="torch")
        if not report.violations:  # valid means clean: no error and no warning either
            return ctx
        problem = "; ".join(f"{v.code} on {v.field}: {v.rule}" for v in report.violations)
        if not all(any(v.rule.startswith(t) for t in unknown) for v in report.violations):
            raise UnsatisfiableSpecError(f"{plan.spec_name}: built a batch that breaks the contract ({problem}); "
                                         "this is a bug in tritoncheck.strategies")
    raise UnsatisfiableSpecError(f"{plan.spec_name}: could not build a valid batch in {MAX_TRIES} tries: {problem}")


def valid_batches(spec: BatchSpec, *, require: Iterable[str] = (),
                  **dim_bounds: int | tuple[int, int]) -> st.SearchStrategy[dict[str, torch.Tensor]]:
    """Batches (field name -> tensor) that satisfy every rule of `spec`.

    Args:
        spec: a filled `BatchSpec` (built-in or your own YAML, via `tc.load_spec`).
        require: optional fields to always include (e.g. `("labels",)` when your forward computes a loss).
        **dim_bounds: sizes for named dims, as `(lo, hi)` or an int, e.g. `B=(1, 4), L=(1, 32)`.
            Defaults: the batch dim in [1, 4], every other dim in [1, 8]; the spec's dim rules
            (`L <= max_position_embeddings`) narrow them further.

    Each dim is drawn once and shared by every field naming it; optional fields are sometimes
    left out; dtypes are drawn from each field's list. Raises `UnsatisfiableSpecError` (naming
    the rule) when a rule cannot be satisfied, rather than filtering forever.
    """
    plan = _check_spec(spec)
    intervals = _dim_intervals(plan, spec, _parse_bounds(plan, dim_bounds))
    required = set(require) if not isinstance(require, str) else {require}
    unknown = required - {fp.name for fp in plan.fields}
    if unknown:
        raise ValueError(f"{plan.spec_name}: require names {sorted(unknown)}, which are not fields of the spec")

    @st.composite
    def build(draw):
        batch = _valid(draw, spec, plan, intervals, force_present=required).batch
        _unit_tails(draw, plan, batch)
        return batch

    return build()


def _unit_tails(draw: Any, plan: Plan, batch: dict[str, torch.Tensor], keep: str | None = None) -> None:
    """A field whose shape ends in '1?' comes both ways: [B] and [B, 1] (but `keep`, whose metadata a mutation broke)."""
    for fp in plan.fields:
        t = batch.get(fp.name)
        if fp.unit_tail and fp.name != keep and t is not None and t.dim() == len(fp.shape) \
                and draw(st.booleans(), label=f"{fp.name} with its size-1 axis"):
            batch[fp.name] = t.unsqueeze(-1)


def malformed_batches(spec: BatchSpec, *, codes: Iterable[str] | None = None,
                      **dim_bounds: int | tuple[int, int]) -> st.SearchStrategy[tuple[dict[str, torch.Tensor], Expected]]:
    """`(batch, expected)`: a valid batch with exactly one registered mutation applied.

    Args:
        spec: a filled `BatchSpec`.
        codes: only mutations causing one of these codes (default: any check of the spec).
        **dim_bounds: as for `valid_batches`.

    `expected` (an `Expected`) names the field, code and samples the report must show: checking
    the batch gives violations of that one code on that one field, and nothing else.
    """
    plan = _check_spec(spec)
    intervals = _dim_intervals(plan, spec, _parse_bounds(plan, dim_bounds))
    wanted = None if codes is None else set(codes)
    targets: list[Any] = [*plan.checks, *plan.dim_checks, *plan.fields]
    if wanted is not None:
        targets = [t for t in targets if isinstance(t, FieldPlan) or t.code in wanted]

    @st.composite
    def build(draw):
        rng = draw(st.randoms(use_true_random=False))
        order = list(targets)
        rng.shuffle(order)
        ctx = _valid(draw, spec, plan, intervals)
        ctx.redraw = lambda overrides, present, breaking, absent=frozenset(): _draw_batch(
            draw, plan, {n: iv for n, iv in intervals.items() if n not in overrides}, overrides, present, breaking, absent)
        for target in order:
            if not _applies(target, ctx):
                continue
            snapshot = {k: v.clone() for k, v in ctx.batch.items()}
            out = mutate(target, ctx, rng)
            if out is not None and (wanted is None or out[2] in wanted):
                what, name, code, samples = out
                _unit_tails(draw, plan, ctx.batch, keep=target.name if isinstance(target, FieldPlan) else None)
                return ctx.batch, Expected(name, code, samples, what)
            ctx.batch = snapshot
        from hypothesis import reject

        reject()  # no mutation applies to this draw (e.g. every field it could break is absent)

    return build()


def mutate(target: Any, ctx: _Draw, rng: random.Random):
    """Break `target` (a plan check, dim rule or field) in `ctx.batch`: its kind's registered mutation,
    or for a field a metadata mutation; `(description, field, code, samples)` or None."""
    if isinstance(target, FieldPlan):
        return _mutate_field(target, ctx, rng)
    return kind_of(target).mutate(target, ctx, rng)


def _others_hold(ctx: _Draw, target: Any) -> bool:
    """Every check except `target` passes on `ctx.batch` (a mutation must break exactly one check).

    A warning on the target's own field may come with an error: moving every start position past
    the sequence (all ignored: an error) puts each past its bound too (a warning).
    """
    bound = bind(ctx.plan, ctx.batch)
    if any(not (isinstance(target, DimCheck) and v.code == target.code and v.rule.startswith(target.text)) for v in bound.violations):
        return False
    bctx = _torch_backend.Context(ctx.plan, bound)
    for c in bound.runnable:
        if c is target or (c.severity == "warning" and getattr(target, "severity", "error") == "error" and c.field == target.field):
            continue
        bad = bctx.bad_mask(c)
        if bad is not None and bool(bad.any()):
            return False
    return True
