"""The plan: a spec lowered once into a small, frozen, backend-neutral list of checks.

`compile_plan` resolves every name in the spec (fields become `Ref`s, parameters become
constants, dims stay symbolic until a batch binds them) and gives each data check its
*iteration space*: the named axes it runs over. Axes are matched across fields by name, not by
position (`target_lengths` [N] against `targets` [N, S] lines up on N), and a fixed-size axis
gets a private name (`bbox.2`). Plans are hashable, so they key the Triton kernel cache.

Metadata checks (presence, dtype, rank, sizes, dims agreeing) need no data and run on the host
in `bind`, shared by both backends; value and cross-field checks are left to the backend.

A plan holds dtype names ("int64", "bfloat16"), never torch dtypes: compiling one needs no torch (importing it
costs over a second of CPU). Torch is imported where tensors are met: `bind` and its helpers, which a batch of
tensors reaches with torch loaded already; a tensor's dtype becomes its name there (`dtypes.name_of`).
"""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Union

from tritoncheck import expr as _expr
from tritoncheck.checks import (  # the node types are re-exported: every backend imports them from here
    DimCheck,
    FiniteCheck,
    MonotonicCheck,
    RangeCheck,
    RuleCheck,
    ValueSetCheck,
    describe,
    expr_axes,
    expr_dims,
    expr_fields,
    field_kinds,
    kind_of,
)
from tritoncheck.checks.registry import evaluate_scalar
from tritoncheck.dtypes import GROUPS, INT64_MAX, INT64_MIN, INT_RANGES, all_integer_names, name_of
from tritoncheck.expr import Arange, Binary, Const, Dim, Expr, ExprError, Present, RawIndex, Reduce, Ref, Sym, Unary
from tritoncheck.report import Violation
from tritoncheck.spec.schema import UNIT_TAIL, BatchSpec, SpecError, close_match, closest, number_error, split_where

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, slots=True)
class FieldPlan:
    """One field's metadata contract. `dtypes`: the accepted dtypes' names; `shape` holds ints and dim names;
    `axes` names every axis."""

    name: str
    dtypes: tuple[str, ...]
    shape: tuple[int | str, ...]
    shape_text: tuple[str, ...]
    axes: tuple[str, ...]
    optional: bool
    # the spec's last entry was '1?': the batch may add an axis of size 1 (labels [B, 1] for [B]),
    # which `bind` drops, so every check sees `shape`
    unit_tail: bool = False
    rank_severity: Severity = "error"  # `severity: {rank: warning}`: a wrong rank the model runs through
    kind: Literal["field"] = "field"


@dataclass(frozen=True, slots=True)
class IndexNeed:
    """A data check reads `field` at `index` along an axis sized by `dim`: it needs dim > index (or >= -index)."""

    field: str
    axis: int
    dim: str
    index: int
    text: str  # the indexed field as written back, `x[:, 1]`

    @property
    def min_size(self) -> int:
        return self.index + 1 if self.index >= 0 else -self.index


DataCheck = Union[RangeCheck, ValueSetCheck, FiniteCheck, RuleCheck, MonotonicCheck]


@dataclass(frozen=True, slots=True)
class Plan:
    spec_name: str
    batch_dim: str
    fields: tuple[FieldPlan, ...]
    checks: tuple[DataCheck, ...]
    dim_checks: tuple[DimCheck, ...]
    unexpected_fields: str
    options: frozenset[str] = frozenset()  # batch keys that are not tensors, let through unchecked
    kind: Literal["plan"] = "plan"
    # per data check: (fields it reads, dims it needs, indexes into dims it reads), so that `bind`
    # does not walk the expressions again for every batch; derived from `checks`, so left out of ==/hash
    needs: tuple[tuple[frozenset[str], frozenset[str], tuple[IndexNeed, ...]], ...] = field(
        default=(), compare=False, repr=False)

    def field(self, name: str) -> FieldPlan:
        return next(f for f in self.fields if f.name == name)

    def pretty(self) -> str:
        """The plan in words, one line per check, as users can print it."""
        lines = [f"plan for {self.spec_name} (batch dim {self.batch_dim})"]
        for f in self.fields:
            opt = " (optional)" if f.optional else ""
            dts = "|".join(f.dtypes)
            lines.append(f"  field {f.name}: {dts} [{', '.join(f.shape_text)}]{opt}")
        for c in self.dim_checks:
            lines.append(f"  host   {c.code:<20} {c.text}")
        for c in self.checks:
            lines.append(f"  data   {c.code:<20} {describe(c)}   over [{', '.join(c.axes)}]")
        return "\n".join(lines)


def referenced_fields(check: DataCheck | DimCheck) -> set[str]:
    """The fields a check reads (its kind's `reads`)."""
    return kind_of(check).reads(check)[0]



def compile_plan(spec: BatchSpec) -> Plan:
    """Lower a filled spec to its plan, once; the plan is cached on the spec."""
    plan = spec.cached_plan()
    if plan is not None:
        return plan
    spec.require_params()
    params = spec.params
    dims = spec.dim_names()
    mistakes = Mistakes(spec.name)
    fields = []
    for name, f in spec.fields.items():
        with mistakes:
            fields.append(_field_plan(spec, name, f, params, dims))
    mistakes.raise_any()  # the rules read the fields: a field that did not lower would make each rule over it a mistake
    by_name = {f.name: f for f in fields}
    scope = _Scope(by_name, params, dims, spec.name)

    checks: list[DataCheck] = []
    kinds = field_kinds()
    for fp, (name, f) in zip(fields, spec.fields.items(), strict=True):
        for kind in kinds:  # each field option lowered by the kind that declares it (min, max, values, ...)
            with mistakes:
                checks.extend(kind.lower(name, f, fp, scope))

    dim_checks: list[DimCheck] = []
    for i, r in enumerate(spec.rules):
        with mistakes:
            _lower_rule(scope, f"rules.{i}", r, fields, checks, dim_checks)
    mistakes.raise_any()

    if len(checks) > MAX_DATA_CHECKS:
        raise scope.error(None, f"{len(checks)} data checks (field bounds, value sets and rules over data); at most "
                                f"{MAX_DATA_CHECKS} fit one kernel (compiling one takes seconds per hundred checks, "
                                "growing faster than their number): split the contract into several specs")
    needs = tuple(_check_needs(c, by_name) for c in checks)
    plan = Plan(spec.name, spec.batch_dim, tuple(fields), tuple(checks), tuple(dim_checks), spec.unexpected_fields,
                frozenset(spec.options), needs=needs)
    spec._plan = plan
    return plan


def _field_plan(spec: BatchSpec, name: str, f: Any, params: Mapping[str, Any], dims: set[str]) -> FieldPlan:
    shape, axes = [], []
    unit_tail = bool(f.shape) and f.shape[-1] == UNIT_TAIL
    entries = f.shape[:-1] if unit_tail else f.shape
    for i, entry in enumerate(entries):
        size = _shape_entry(entry, params, dims, where=f"fields.{name}.shape")
        shape.append(size)
        axes.append(size if isinstance(size, str) else f"{name}.{i}")
    if len(set(axes)) != len(axes):
        raise SpecError(f"{spec.name}: fields.{name}.shape repeats a dim; each axis needs its own name")
    return FieldPlan(name, spec.field_dtype_names(name), tuple(shape), tuple(str(e) for e in entries), tuple(axes), f.optional,
                     unit_tail, f.severity.get("rank", "error"))


class Mistakes:
    """Every mistake of a spec found by lowering it, raised together (a file with four took four runs):
    `with mistakes:` keeps one part's SpecError and goes on; `raise_any()` raises them as one."""

    def __init__(self, spec_name: str):
        self.spec_name, self.found = spec_name, []

    def __enter__(self) -> Mistakes:
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if isinstance(exc, SpecError):
            self.found.append(exc)
            return True
        return False

    def raise_any(self) -> None:
        if len(self.found) == 1:
            raise self.found[0]
        if self.found:
            prefix = f"{self.spec_name}: "
            lines = [str(m).removeprefix(prefix) for m in self.found]
            raise SpecError(f"{self.spec_name}: {len(lines)} error(s) in spec\n" + "\n".join(f"  {m}" for m in lines))


def _lower_rule(scope: _Scope, where: str, r: Any, fields: list[FieldPlan], checks: list[DataCheck],
                dim_checks: list[DimCheck]) -> None:
    """One `rules:` entry lowered to a check over dims (on the host) or over data, or to nothing (always true)."""
    parts = split_where(r.rule)
    expr = scope.resolve(_expr.parse(parts[0]), where, presence=True)
    cond = scope.resolve(_expr.parse(parts[1]), where, presence=True) if len(parts) == 2 else None
    subject = expr.a if isinstance(expr, Binary) and expr.op in ("==", "!=", "<", "<=", ">", ">=") else expr
    refs = expr_fields(expr) | (expr_fields(cond) if cond is not None else set())
    when = None
    if refs and cond is not None and _expr.is_host(cond) and any(map(presence_field, expr_dims(cond))):
        when, cond = cond, None  # `x <= k where not present(y)`: bind decides whether it applies
    if refs and any(map(presence_field, expr_dims(expr) | expr_dims(cond))):
        raise scope.error(where, f"{r.rule!r}: present() may be used in rules over sizes and presence, and in "
                                 "the `where` of a rule over data when that `where` reads no field")
    if not refs:
        if _expr.has_arange(expr) or (cond is not None and _expr.has_arange(cond)):
            raise scope.error(where, f"{r.rule!r} reads no field, and arange() only has a meaning next to one; "
                                     "write a rule over sizes with the dim itself, as in L <= 512")
        if not expr_dims(expr) and (cond is None or not expr_dims(cond)):
            if (cond is None or bool(evaluate_scalar(cond, {}))) and not bool(evaluate_scalar(expr, {})):
                raise scope.error(where, f"{r.rule!r} is false for every batch (with these parameters)")
            return  # always true: nothing to check
        owner = r.field or _dim_owner(expr, fields)
        named = set().union(*(_expr.names(_expr.parse(part)) for part in parts))
        used = tuple((n, scope.params[n]) for n in sorted(named & set(scope.params)))
        dim_checks.append(DimCheck(owner, expr, subject, r.rule, r.code if r.code != "rule_failed" else "dim_bound",
                                   r.hint, cond, r.severity, params=used))
        return
    _bound_space(scope, where, r.rule, expr, cond)
    report_field = r.field or _first_ref(expr if expr_fields(expr) else cond)
    axes = _ordered_union(scope.axes(expr), scope.axes(cond) if cond is not None else ())
    if isinstance(cond, Const):  # `x > 0 where 0` applies nowhere; `where 1` everywhere
        if not bool(cond.value):
            return
        cond = None
    if isinstance(expr, Const):  # `0 where x > 0`: holds everywhere, or fails wherever `where` holds
        if bool(expr.value):
            return
        expr, cond = Unary("not", cond), None
    checks.append(RuleCheck(report_field, expr, cond, subject, r.rule, r.code, axes, r.hint, r.severity, when))


MAX_DATA_CHECKS = 256  # per spec: a C kernel of 300 checks took 16 s to compile here (100: 2.4 s)


def _shape_entry(entry: int | str, params: Mapping[str, Any], dims: set[str], where: str) -> int | str:
    if isinstance(entry, int):
        return entry
    expr = _expr.parse(entry)
    if isinstance(expr, Sym) and expr.name in dims:
        return expr.name
    unknown = _expr.names(expr) - set(params)
    if unknown:
        raise SpecError(f"{where}: {entry!r} mixes dims and parameters; a size is a dim name or a parameter expression")
    try:
        value = _expr.fold(_substitute_params(expr, params))
    except ExprError as exc:
        raise SpecError(f"{where}: {entry!r}: {exc}") from None
    if not isinstance(value, Const) or not isinstance(value.value, int) or isinstance(value.value, bool) or value.value < 0:
        raise SpecError(f"{where}: {entry!r} must give a non-negative integer, got {_expr.to_text(value)}")
    return value.value


def _substitute_params(expr: Expr, params: Mapping[str, Any]) -> Expr:
    if isinstance(expr, Sym) and expr.name in params:
        value = params[expr.name]
        if not isinstance(value, (int, float, bool)):
            raise SpecError(f"parameter {expr.name} is used as a number but is {value!r}")
        return Const(value)
    if isinstance(expr, Unary):
        return Unary(expr.op, _substitute_params(expr.x, params))
    if isinstance(expr, Binary):
        return Binary(expr.op, _substitute_params(expr.a, params), _substitute_params(expr.b, params))
    return expr


@dataclass
class _Scope:
    fields: dict[str, FieldPlan]
    params: Mapping[str, Any]
    dims: set[str]
    spec_name: str
    _cache: dict = field(default_factory=dict)

    def error(self, where: str | None, msg: str) -> SpecError:
        return SpecError(f"{self.spec_name}: {where}: {msg}" if where else f"{self.spec_name}: {msg}")

    def number_error(self, where: str, field: str, value: float, integers: bool) -> str | None:
        return number_error(where, field, value, integers)

    def resolve(self, expr: Expr, where: str, *, presence: bool = False) -> Expr:
        """The expression with its names resolved; `present(field)` only where `presence` (a rule)."""
        try:
            out = _expr.fold(self._resolve(expr, where))
            self.axes(out)  # validates reductions and indexing against the axes
        except ExprError as exc:
            raise self.error(where, str(exc)) from None
        if not presence and any(map(presence_field, expr_dims(out))):
            raise self.error(where, "present() may be used only in rules")
        return out

    def _resolve(self, expr: Expr, where: str) -> Expr:
        if isinstance(expr, Sym):
            if expr.name in self.fields:
                return Ref(expr.name, (None,) * len(self.fields[expr.name].shape))
            if expr.name in self.params:
                return _substitute_params(expr, self.params)
            if expr.name in self.dims:
                return Dim(expr.name)
            raise self.error(where, f"unknown name {expr.name!r}")
        if isinstance(expr, RawIndex):
            if expr.field not in self.fields:
                raise self.error(where, f"only fields can be indexed; {expr.field!r} is not a field")
            fp = self.fields[expr.field]
            index = _normalize_index(expr.items, len(fp.shape))
            for size, i in zip(fp.shape, index, strict=True):
                if isinstance(size, int) and i is not None and not -size <= i < size:
                    raise ExprError(f"index {i} is out of range for an axis of size {size} in {_expr.to_text(expr)}")
            return Ref(expr.field, index)
        if isinstance(expr, Arange):
            if expr.dim not in self.dims:
                raise self.error(where, f"arange() needs a dim name; {expr.dim!r} is not a dim")
            return expr
        if isinstance(expr, Present):
            if expr.field not in self.fields:
                raise self.error(where, f"present() needs a field name; {expr.field!r} is not a field")
            return Dim(presence_dim(expr.field))
        if isinstance(expr, Unary):
            return Unary(expr.op, self._resolve(expr.x, where))
        if isinstance(expr, Binary):
            return Binary(expr.op, self._resolve(expr.a, where), self._resolve(expr.b, where))
        if isinstance(expr, Reduce):
            x = self._resolve(expr.x, where)
            if expr.dims is None:
                return Reduce(expr.op, x, None)
            x_axes = self.axes(x)
            named = []
            for d in expr.dims:
                if isinstance(d, int):
                    if not -len(x_axes) <= d < len(x_axes):
                        raise ExprError(f"dim={d} is out of range for an expression over [{', '.join(x_axes)}]")
                    named.append(x_axes[d])
                elif d in x_axes:
                    named.append(d)
                else:
                    raise ExprError(f"dim {d!r} is not an axis of {_expr.to_text(x)} ([{', '.join(x_axes)}])")
            return Reduce(expr.op, x, tuple(named))
        return expr

    def axes(self, expr: Expr | None) -> tuple[str, ...]:
        """The named axes an expression spans, in order of first appearance."""
        return expr_axes(expr, lambda name: self.fields[name].axes)


def _loop_spaces(scope: _Scope, expr: Expr | None, outer: frozenset[str], out: list[frozenset[str]]) -> None:
    """The dims each loop nest of a rule walks: its own axes, and per reduction those plus the
    reduced ones (a kernel redoes a reduction at every outer position)."""
    if isinstance(expr, Reduce):
        inner = outer | {a for a in scope.axes(expr.x) if a in scope.dims}
        out.append(inner)
        _loop_spaces(scope, expr.x, inner, out)
    elif isinstance(expr, Unary):
        _loop_spaces(scope, expr.x, outer, out)
    elif isinstance(expr, Binary):
        _loop_spaces(scope, expr.a, outer, out)
        _loop_spaces(scope, expr.b, outer, out)


def _bound_space(scope: _Scope, where: str, text: str, expr: Expr, cond: Expr | None) -> None:
    """A rule's work must be linear in the batch: every loop nest it needs (its own axes; each
    reduction's axes at each outer position) must walk only the axes of one field of the spec, so
    it walks no more positions than that field holds (`arange(L) < y` walks x's [B, L]).
    `a + b < 100` over a [B, L] and b [B, T] would walk B * L * T positions (six such fields: 10**12
    positions for 2.4 KB of data), so it is refused here, at load, rather than at the first batch."""
    top = frozenset(a for a in _ordered_union(scope.axes(expr), scope.axes(cond)) if a in scope.dims)
    spaces = [top]
    _loop_spaces(scope, expr, top, spaces)
    _loop_spaces(scope, cond, top, spaces)
    fields = sorted(scope.fields)
    for space in spaces:
        if any(space <= set(scope.fields[f].axes) for f in fields):
            continue
        best = max(fields, key=lambda f: len(space & set(scope.fields[f].axes)))
        extra = sorted(space - set(scope.fields[best].axes))
        raise scope.error(where, f"{text!r} walks the dims {', '.join(sorted(space))} together, which no one field "
                                 f"spans ({best} lacks {', '.join(extra)}): its work would grow with their "
                                 "product, not with the data; compare fields over the dims they share")


def _normalize_index(items: tuple[object, ...], rank: int) -> tuple[int | None, ...]:
    if items.count(Ellipsis) > 1:
        raise ExprError("an index may hold at most one '...'")
    if Ellipsis in items:
        k = items.index(Ellipsis)
        fill = rank - (len(items) - 1)
        if fill < 0:
            raise ExprError(f"too many indices for a field of rank {rank}")
        items = items[:k] + (None,) * fill + items[k + 1 :]
    if len(items) > rank:
        raise ExprError(f"too many indices for a field of rank {rank}")
    return tuple(items) + (None,) * (rank - len(items))  # type: ignore[return-value]


def _ordered_union(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    return a + tuple(x for x in b if x not in a)


def _first_ref(expr: Expr) -> str:
    if isinstance(expr, Ref):
        return expr.field
    if isinstance(expr, Unary) or isinstance(expr, Reduce):
        return _first_ref(expr.x)
    if isinstance(expr, Binary):
        return _first_ref(expr.a) if expr_fields(expr.a) else _first_ref(expr.b)
    raise ExprError("rule refers to no field")


def _dim_owner(expr: Expr, fields: list[FieldPlan]) -> str:
    needed = expr_dims(expr)
    for f in fields:
        if needed & {*f.shape, presence_dim(f.name)}:
            return f.name
    return fields[0].name


def presence_dim(field: str) -> str:
    """The host value of `present(field)`: 1 when the batch holds the field, else 0.

    A dim by another name (no identifier has parentheses): `bind` sets it beside the sizes for
    the rules over sizes, which are the only rules that may use it.
    """
    return f"present({field})"


def presence_field(name: str) -> str | None:
    """The field whose presence dim `name` is, or None for a size."""
    return name[len("present("):-1] if name.startswith("present(") else None


def _index_needs(expr: Expr | None, fields: Mapping[str, FieldPlan]) -> tuple[IndexNeed, ...]:
    """Every integer index into an axis sized by a dim, which only a batch can tell is in range."""
    if isinstance(expr, Ref):
        shape = fields[expr.field].shape
        return tuple(IndexNeed(expr.field, axis, shape[axis], i, _expr.to_text(expr))
                     for axis, i in enumerate(expr.index or ()) if i is not None and isinstance(shape[axis], str))
    if isinstance(expr, (Unary, Reduce)):
        return _index_needs(expr.x, fields)
    if isinstance(expr, Binary):
        return _index_needs(expr.a, fields) + _index_needs(expr.b, fields)
    return ()


def _check_needs(c: DataCheck, fields: Mapping[str, FieldPlan]) -> tuple[frozenset[str], frozenset[str], tuple[IndexNeed, ...]]:
    index = _index_needs(c.expr, fields) + _index_needs(c.where, fields) if isinstance(c, RuleCheck) else ()
    return frozenset(referenced_fields(c)), frozenset(_check_dims(c)), index


# ---------------------------------------------------------------------------------------------
# Binding a batch: host-side metadata checks shared by both backends.


@dataclass
class Bound:
    """What `bind` learned from a batch: the tensors that passed, the dims, and the violations."""

    tensors: dict[str, torch.Tensor]
    dims: dict[str, tuple[int, str]]
    violations: list[Violation]
    skipped: list[str]
    runnable: list[DataCheck]
    # what a backend derives from this batch's signature (its compiled program), shared by every
    # batch of the same signature, so a warm check looks it up once instead of re-deriving it
    memo: dict[str, Any] = field(default_factory=dict)

    def dim_values(self) -> dict[str, int]:
        return {k: v for k, (v, _) in self.dims.items()}


NO_KEY = object()  # `bind`'s default key: none given, it computes one
MAX_SIGNATURES = 256  # per plan: dynamic padding makes one signature per distinct length
MAX_PLANS = 64  # plans whose signatures are kept (oldest dropped first): specs built in a loop must not pile up
_signatures: dict[int, tuple[Plan, dict[tuple, tuple]]] = {}
_signatures_lock = threading.Lock()


def bind(plan: Plan, batch: Any, key: Any = NO_KEY) -> Bound:
    """Run every metadata check of `plan` on `batch` and decide which data checks can run.

    Everything `bind` decides depends only on the batch's *signature* (its keys, and each field's
    dtype, shape, device and layout), so a batch of a signature seen before reuses that verdict:
    a steady-state check spends its time reading data, not re-deriving metadata. `key`: the
    signature's key where the caller has it from `seen`.
    """
    if key is NO_KEY:
        key = _signature(plan, batch)
    if key is None:
        return _bind(plan, batch)
    entry = _signatures.get(id(plan))
    if entry is None or entry[0] is not plan:
        with _signatures_lock:
            entry = _signatures[id(plan)] = (plan, {})
            while len(_signatures) > MAX_PLANS:
                _signatures.pop(next(iter(_signatures)))
    cache = entry[1]
    hit = cache.get(key)
    if hit is None:
        bound = _bind(plan, batch)
        unit = tuple(fp.name for fp in plan.fields if fp.unit_tail and fp.name in bound.tensors
                     and bound.tensors[fp.name].dim() < batch[fp.name].dim())
        with _signatures_lock:  # threads that miss together must not evict while another inserts
            if len(cache) >= MAX_SIGNATURES:
                cache.pop(next(iter(cache)), None)  # oldest first
            cache[key] = (tuple(bound.tensors), unit, bound.dims, tuple(bound.violations), tuple(bound.skipped),
                          tuple(bound.runnable), bound.memo)
        return bound
    names, unit, dims, violations, skipped, runnable, memo = hit
    tensors = {n: batch[n] for n in names}
    for n in unit:  # the optional size-1 axis `_bind` dropped
        tensors[n] = tensors[n][..., 0]
    return Bound(tensors, dict(dims), list(violations), list(skipped), list(runnable), memo)


def seen(plan: Plan, batch: Any) -> tuple[tuple | None, dict[str, Any] | None]:
    """The batch's signature key (for `bind`), and the memo of that signature where `bind` has bound a batch
    of it (what the backends prepared for it), else None."""
    key = _signature(plan, batch)
    entry = _signatures.get(id(plan))
    if key is None or entry is None or entry[0] is not plan:
        return key, None
    hit = entry[1].get(key)
    return key, None if hit is None else hit[-1]


def _signature(plan: Plan, batch: Any) -> tuple | None:
    """The batch's metadata as a hashable key, or None when only the full `_bind` can judge it."""
    global _TENSOR, _STRIDED
    if type(batch) is not dict:
        return None
    if _TENSOR is None:
        import torch

        _TENSOR, _STRIDED = torch.Tensor, torch.strided
    key: list[Any] = list(batch)
    for fp in plan.fields:
        value = batch.get(fp.name)
        if value is None:
            key.append(None)
            continue
        if type(value) is not _TENSOR or value.layout is not _STRIDED or value.is_nested or value.is_neg():
            return None  # numpy arrays, subclasses (FakeTensor), nested or sparse tensors, non-tensors; a lazy bit
        dtype = value.dtype
        if dtype.is_complex and value.is_conj():  # (only a complex tensor carries the conjugation bit)
            return None  # `_bind` resolves a lazy bit
        # the layout too (contiguous, else the strides): a compiled program depends on it; a CPU tensor's device
        # as True (cheaper to read), any other as its device
        key.append((dtype, value.shape, value.is_cpu or value.device, value.is_contiguous() or value.stride()))
    return tuple(key)


_TENSOR: Any = None  # torch.Tensor and torch.strided, set by the first `_signature`: a plan is compiled without torch
_STRIDED: Any = None


def signature_guard(plan: Plan, batch: Any, first: tuple[str, ...] = ()) -> Callable[[Any], tuple | None] | None:
    """`guard(batch)`: a batch's field tensors where it has the signature `bind` keyed for `batch`
    (`_signature`), else None; the tensors of the fields named in `first` come first, in that order.
    None (no guard) where `bind` keys no signature for `batch`, or a field of it is None.

    A warm check asks this instead of building the key: for the fields' tensors, torch's C++ guard
    (`TensorGuards`, what `torch.compile` guards its graphs with: exact type, dispatch keys (device,
    layout, negation and conjugation bits), dtype, device index, requires_grad, sizes and strides)
    takes under 0.1 us per tensor where the key takes 0.6; where this torch has no such guard, or it does
    not behave as `_guard_works` expects, the key itself is compared.
    """
    key = _signature(plan, batch)
    if key is None or any(batch.get(fp.name, 0) is None for fp in plan.fields):
        return None
    keys = tuple(batch)
    names = first + tuple(fp.name for fp in plan.fields if fp.name in batch and fp.name not in first)
    # a batch of the plan's fields alone (the common case) has them all, in any order, where it has as many keys
    count = len(keys) if set(keys) == set(names) else None
    tensors_of = _getter(names)
    tensors = tensors_of(batch)
    same = None
    if _guard_works():
        from torch._C._dynamo.guards import TensorGuards

        same = TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                            dynamic_dims_strides=[list(t.stride()) for t in tensors]).check

    def guard(batch: Any) -> tuple | None:
        if type(batch) is not dict or (len(batch) != count if count else tuple(batch) != keys):
            return None
        try:
            tensors = tensors_of(batch)
        except KeyError:  # as many keys, another one
            return None
        if same is None:
            return tensors if _signature(plan, batch) == key else None
        try:
            # (a nested tensor first: the guard reads its strides before its dispatch keys, which aborts the process)
            return tensors if not any(map(_IS_NESTED, tensors)) and same(*tensors) else None
        except AttributeError:  # a value that is not a tensor
            return None

    return guard


_IS_NESTED = operator.attrgetter("is_nested")


def _getter(names: tuple[str, ...]) -> Any:
    """`operator.itemgetter(*names)` that returns a tuple for one name too."""
    get = operator.itemgetter(*names)
    return get if len(names) != 1 else lambda batch: (get(batch),)


_guard_verdict: list[bool] = []


def _guard_works() -> bool:
    """Once per process: torch's tensor guard exists, tells apart what `_signature` tells apart, and reads
    strides only where they exist: it reads a tensor's strides before its dispatch keys, and where that
    throws, the process aborts. A nested tensor's throw (tested for before the guard, on every call); a
    sparse or mkldnn tensor's must not (here, in Python, where a throw is only an exception)."""
    if not _guard_verdict:
        try:
            import torch
            from torch._C._dynamo.guards import TensorGuards

            z = torch.zeros(2, 3, dtype=torch.complex64)
            x = z.imag  # strides (6, 2)
            odd = [x.to_sparse()] + ([x.to_mkldnn()] if torch.backends.mkldnn.is_available() else [])
            for t in odd:
                t.stride()  # raises where the guard would abort

            def guard(t: torch.Tensor) -> Any:
                return TensorGuards(t, dynamic_dims_sizes=[list(t.shape)], dynamic_dims_strides=[list(t.stride())]).check

            same = guard(x)(torch.ones(2, 3, dtype=torch.complex64).imag) and guard(z)(torch.ones(2, 3, dtype=torch.complex64))
            others = [z.conj().imag, x.contiguous(), x.double(), torch.zeros(2, 4, dtype=torch.complex64).imag,
                      torch.zeros(3, 2, dtype=torch.complex64).imag.t(), torch.nn.Parameter(x.clone()),
                      torch.empty_strided((2, 3), (6, 2), device="meta"), *odd]
            _guard_verdict.append(bool(same) and not guard(z)(z.conj()) and not any(guard(x)(t) for t in others))
        except Exception:  # noqa: BLE001 (a torch without the guard, or with another signature: compare keys)
            _guard_verdict.append(False)
    return _guard_verdict[0]


def _batches(plan: Plan, items: list[Mapping]) -> bool:
    """Whether a list of mappings holds batches (each field's tensor with the batch dim: the spec's rank),
    not samples (one axis fewer); fields whose rank may vary (a `1?` tail) say nothing."""
    ranks = [(len(fp.shape), getattr(item.get(fp.name), "ndim", None)) for item in items for fp in plan.fields
             if not fp.unit_tail and fp.name in item]
    return bool(ranks) and all(want == got for want, got in ranks)


def _bind(plan: Plan, batch: Any) -> Bound:
    violations: list[Violation] = []
    if not isinstance(batch, Mapping):
        hint = None
        if isinstance(batch, list) and batch and all(isinstance(x, Mapping) for x in batch) and _batches(plan, batch):
            hint = ("a list of batches, not a batch: check each one (tc.check(b, spec) for b in batches; "
                    "`tritoncheck check` takes one batch per file)")
        elif isinstance(batch, list) and batch and all(isinstance(x, Mapping) for x in batch):
            hint = ("a list of samples, not a batch: collate them first (torch.utils.data.default_collate(samples) "
                    "or your collator; tc.ValidatingCollate(spec) does this in a DataLoader)")
        elif isinstance(batch, (tuple, list)):
            hint = "pass a dict of field name to tensor, e.g. dict(zip(field_names, batch))"
        violations.append(
            Violation("<batch>", "not_a_mapping", f"a batch must be a mapping of field name to tensor, got {type(batch).__name__}", hint=hint)
        )
        return Bound({}, {}, violations, ["every check (the batch is not a mapping)"], [])

    known = {f.name for f in plan.fields}
    unexpected = [str(key) for key in batch if key not in known and key not in plan.options]
    if plan.unexpected_fields == "error":
        for key in unexpected:
            violations.append(
                Violation(key, "unexpected_field", f"{key!r} is not a field of {plan.spec_name}"
                          f"{closest(key, known | plan.options)} (fields: {', '.join(sorted(known))}"
                          f"{'; options: ' + ', '.join(sorted(plan.options)) if plan.options else ''})",
                          hint="drop it from the batch, or set unexpected_fields: ignore in the spec")
            )

    tensors: dict[str, torch.Tensor] = {}
    dims: dict[str, tuple[int, str]] = {}
    bad_fields: set[str] = set()
    device = None
    for fp in plan.fields:
        if fp.name not in batch or batch[fp.name] is None:
            if not fp.optional:
                near = close_match(fp.name, unexpected)
                violations.append(Violation(fp.name, "missing_field", f"required field {fp.name} is missing from the batch",
                                            hint=f"the batch has {near!r}: a misspelling of {fp.name}?" if near else None))
            bad_fields.add(fp.name)
            continue
        tensor, problem = as_tensor(batch[fp.name])
        if tensor is None:
            violations.append(Violation(fp.name, "not_a_tensor", problem, value=type(batch[fp.name]).__name__,
                                        hint=_tensor_hint(batch[fp.name])))
            bad_fields.add(fp.name)
            continue
        if device is None:
            device = tensor.device
        elif tensor.device != device:
            violations.append(Violation(fp.name, "device_mismatch", f"{fp.name} is on {tensor.device} but the batch is on {device}", value=str(tensor.device)))
            bad_fields.add(fp.name)
            continue
        if fp.unit_tail and tensor.dim() == len(fp.shape) + 1:
            if tensor.shape[-1] != 1:
                violations.append(Violation(fp.name, "shape", f"{fp.name} axis {len(fp.shape)} must be 1 (or left out), got "
                                            f"{tensor.shape[-1]} (shape {tuple(tensor.shape)})", index=(len(fp.shape),),
                                            value=tensor.shape[-1]))
                bad_fields.add(fp.name)
                continue
            tensor = tensor[..., 0]  # a view: every check sees the field without its optional axis
        problem = _check_meta(fp, tensor, dims, violations)
        if problem:
            bad_fields.add(fp.name)
            continue
        tensors[fp.name] = tensor

    if plan.batch_dim in dims and dims[plan.batch_dim][0] == 0:
        size, src = dims[plan.batch_dim]
        violations.append(Violation(src, "empty_batch", f"the batch is empty ({plan.batch_dim}=0 from {src})", value=0))

    dim_values: dict[str, Any] = {k: v for k, (v, _) in dims.items()}
    dim_values.update((presence_dim(fp.name), batch.get(fp.name) is not None) for fp in plan.fields)
    skipped: list[str] = []
    for c in plan.dim_checks:
        applies = True if c.where is None else holds(c.where, dim_values)
        if applies is False:
            continue
        if applies is None or not expr_dims(c.expr) <= dim_values.keys():
            skipped.append(c.text)
            continue
        if not bool(evaluate_scalar(c.expr, dim_values)):
            value = evaluate_scalar(c.subject, dim_values)
            needed = (expr_dims(c.expr) | expr_dims(c.where)) & dim_values.keys()
            ctx = ", ".join([f"{k}={dim_values[k]}" + (f" (from {dims[k][1]})" if k in dims else "") for k in sorted(needed)]
                            + [f"{k}={v!r}" for k, v in c.params])
            # report on a field the batch holds: T may be bound by labels when decoder_input_ids is absent
            sizes = sorted(needed & dims.keys())
            owner = c.field if c.field in tensors or not sizes else dims[sizes[0]][1]
            violations.append(Violation(owner, c.code, f"{c.text} fails with {ctx}", value=value, index=(), hint=c.hint,
                                        severity=c.severity))

    runnable: list[DataCheck] = []
    if any(v.code == "empty_batch" for v in violations):
        # nothing to read, and `any(labels != -100)` over no samples would report a second, bogus violation
        return Bound(tensors, dims, violations, [*skipped, *(describe(c) for c in plan.checks)], runnable)
    needs = plan.needs or tuple(_check_needs(c, {f.name: f for f in plan.fields}) for c in plan.checks)
    short: dict[tuple[str, int], IndexNeed] = {}  # per (field, axis): the largest index past its size
    for c, (fields_needed, dims_needed, index_needs) in zip(plan.checks, needs, strict=True):
        if isinstance(c, RuleCheck) and c.when is not None:
            applies = holds(c.when, dim_values)
            if not applies:  # the rule does not apply to this batch (`where not present(position_ids)`)
                if applies is None:  # or cannot tell: it needs a dim the batch does not bind
                    skipped.append(describe(c))
                continue
        if fields_needed & bad_fields or not dims_needed <= dim_values.keys():
            # an optional field passed as None reads as one left out (guard and checked drop None values too)
            absent_optional = all(plan.field(f).optional and batch.get(f) is None for f in fields_needed & bad_fields)
            if not absent_optional or not fields_needed & bad_fields:
                skipped.append(describe(c))
            continue
        past = [n for n in index_needs if tensors[n.field].shape[n.axis] < n.min_size]
        if past:  # never hand a backend an index past a tensor's end
            for n in past:
                key = (n.field, n.axis)
                if key not in short or n.min_size > short[key].min_size:
                    short[key] = n
            skipped.append(describe(c))
            continue
        runnable.append(c)
    for n in short.values():
        size, src = dims[n.dim]
        violations.append(Violation(n.field, "dim_bound", f"{n.text} needs {n.dim} >= {n.min_size}, got {n.dim}={size} (from {src})",
                                    value=size, index=()))
    refuse_logical_walks(plan, tensors, {k: v for k, (v, _) in dims.items()}, runnable)
    return Bound(tensors, dims, violations, skipped, runnable)


class UncheckableBatchError(ValueError):
    """A batch that no backend can check exactly at a cost bounded by what it stores (`refuse_logical_walks`)."""


UncheckableBatchError.__module__ = "tritoncheck"

WALK_LIMIT = 2**20  # positions a rule may walk beyond the values the batch stores (about 10 ms on torch)


def stored_elements(tensors: Mapping[str, torch.Tensor]) -> int:
    """The values the batch's tensors store: each expanded (zero-stride) axis counts once, an empty tensor 0."""
    return sum(compact(t).numel() for t in tensors.values())


def axis_sizes(plan: Plan, tensors: Mapping[str, torch.Tensor], dims: Mapping[str, int]) -> dict[str, int]:
    """Every axis's size, named dims and fixed axes (`bbox.2`) alike, as the batch's tensors give them."""
    sizes = dict(dims)
    for name, t in tensors.items():
        sizes.update(zip(plan.field(name).axes, t.shape, strict=True))
    return sizes


def rule_walk(plan: Plan, c: RuleCheck, tensors: Mapping[str, torch.Tensor], dims: Mapping[str, int]) -> dict[str, int]:
    """The axes along which the torch backend evaluates rule `c` at full size, with their sizes: those
    an operand varies along (a field that stores more than one value along it, unselected, or
    `arange` over it). Along every other axis its masks keep size 1, whatever the logical size.
    A rule over no positions (an axis of size 0: a rule over an empty field's elements) walks
    nothing, and a reduction over no positions walks nothing inside it, as materialized or not."""
    sizes = axis_sizes(plan, tensors, dims)

    def empty(axes: tuple[str, ...]) -> bool:
        return any(sizes.get(a) == 0 for a in axes)

    if empty(c.axes):
        return {}
    walk: dict[str, int] = {}
    todo = [e for e in (c.expr, c.where) if e is not None]
    while todo:
        n = todo.pop(0)  # (in the rule's order: the refusal names the walk's axes as the rule reads them)
        if isinstance(n, Reduce):
            if empty(expr_axes(n.x, lambda name: plan.field(name).axes)):
                continue  # (its body has no positions: the reduction's value is its identity)
            todo.insert(0, n.x)
        elif isinstance(n, Unary):
            todo.insert(0, n.x)
        elif isinstance(n, Binary):
            todo[:0] = [n.a, n.b]
        elif isinstance(n, Arange) and n.dim in dims:  # (a rule over an unbound dim never runs)
            walk[n.dim] = dims[n.dim]
        elif isinstance(n, Ref) and n.field in tensors:
            if tensors[n.field].numel() == 0:
                continue  # an empty field holds no value along any axis (the torch backend cuts it to size 1)
            walk.update(stored_axes(plan, n, tensors[n.field]))
    return walk


def stored_axes(plan: Plan, ref: Ref, t: torch.Tensor) -> dict[str, int]:
    """The axes along which `ref` (reading tensor `t`) takes more than one stored value, with their
    sizes: unselected, longer than 1 and not expanded (zero-stride)."""
    return {axis: size for axis, sel, size, stride in zip(plan.field(ref.field).axes, ref.index, t.shape, t.stride(), strict=True)
            if sel is None and size > 1 and stride != 0}


COMPARISONS = frozenset(("<", "<=", ">", ">=", "==", "!="))


@dataclass(frozen=True)
class PositionAxis:
    """A dim `dim` along which rule `c` varies through `arange(dim)` alone: every field is stored once
    along it (zero-stride, size 1, selected or empty), and `arange(dim)` enters only through
    `compares`, each comparing a monotone integer function of it (`arange(S) + 1`, `2 * arange(S)`,
    `arange(S) - offset` with offset int32: free of int64 overflow whatever the values) with a value
    constant along `dim`. Each such comparison changes at most
    once along `dim` per value (`==` and `!=` twice), so the rule is constant between those points,
    and is evaluated at the first position of each piece, at most `size` of them, each standing for
    its piece (the torch backend's `Context.representatives`). A sum over `dim` weights each piece
    by its length, for integer values only (a float sum's value depends on each term it adds)."""

    dim: str
    compares: tuple[Binary, ...]
    size: int  # at most this many pieces: 1 + per comparison, its points of change per value compared


def position_axis(plan: Plan, c: RuleCheck, tensors: Mapping[str, torch.Tensor], dims: Mapping[str, int]) -> PositionAxis | None:
    """The largest dim of rule `c` that it can be evaluated along piecewise (`PositionAxis`), or None."""
    aranges = {n.dim for e in (c.expr, c.where) for n in _expr.nodes(e) if isinstance(n, Arange) and n.dim in dims}
    for d in sorted(aranges, key=lambda d: -dims[d]):
        found = _position_axis(plan, c, tensors, dims, d)
        if found is not None:
            return found
    return None


def _position_axis(plan: Plan, c: RuleCheck, tensors: Mapping[str, torch.Tensor], dims: Mapping[str, int],
                   d: str) -> PositionAxis | None:
    roots = [e for e in (c.expr, c.where) if e is not None]
    for n in (n for e in roots for n in _expr.nodes(e)):
        if isinstance(n, Ref) and n.field in tensors and tensors[n.field].numel() and d in stored_axes(plan, n, tensors[n.field]):
            return None  # a field stores values along d

    def reads(e: Expr) -> bool:
        return any(isinstance(n, Arange) and n.dim == d for n in _expr.nodes(e))

    def interval(e: Expr) -> tuple[int, int] | None:
        """Bounds of a chain from arange(d) (a monotone integer function of it), None if it is not one."""
        if isinstance(e, Arange):
            return (0, max(dims[d] - 1, 0)) if e.dim == d else None
        if isinstance(e, Unary) and e.op == "neg":
            x = interval(e.x)
            return None if x is None else (-x[1], -x[0])
        if not isinstance(e, Binary) or e.op not in ("+", "-", "*"):
            return None
        (chain, other), left = ((e.a, e.b), True) if reads(e.a) else ((e.b, e.a), False)
        x, k = interval(chain), _integer_bounds(other, tensors, dims, scalar=e.op == "*")
        if x is None or k is None:
            return None
        if e.op == "*":
            ends = [x[0] * k[0], x[1] * k[0]]
        elif e.op == "+":
            ends = [x[0] + k[0], x[1] + k[1]]
        else:
            ends = [x[0] - k[1], x[1] - k[0]] if left else [k[0] - x[1], k[1] - x[0]]
        lo, hi = min(ends), max(ends)
        return (lo, hi) if INT64_MIN <= lo and hi <= INT64_MAX else None  # (a wrap would break monotony)

    compares: list[Binary] = []

    def fits(e: Expr, in_sum: bool) -> bool:
        if not reads(e):
            return True
        if isinstance(e, Binary) and e.op in COMPARISONS:
            for chain, other in ((e.a, e.b), (e.b, e.a)):
                if reads(chain) and not _expr.has_arange(other) and interval(chain) is not None and not in_sum:
                    compares.append(e)
                    return True
        if isinstance(e, Unary):
            return fits(e.x, in_sum)
        if isinstance(e, Binary):
            return fits(e.a, in_sum) and fits(e.b, in_sum)
        if isinstance(e, Reduce):  # (an any or all over d sees each piece once, as it must; an integer
            # sum over d weights each by its length, exactly in int64's wrapping; a float sum could not)
            over = e.dims is None or d in e.dims
            return fits(e.x, in_sum or (e.op == "sum" and over and not _integer_valued(e.x, tensors)))
        return False  # arange(d) outside a comparison

    if not all(fits(e, False) for e in roots):
        return None
    sizes = axis_sizes(plan, tensors, dims)
    size = 1
    for e in compares:
        own = set(expr_axes(e, lambda name: plan.field(name).axes)) - {d}
        varies: dict[str, int] = {}
        for n in _expr.nodes(e):
            if isinstance(n, Ref) and n.field in tensors:
                varies.update((axis, sizes[axis]) for axis in stored_axes(plan, n, tensors[n.field]) if axis in own)
        size += (2 if e.op in ("==", "!=") else 1) * math.prod(varies.values())
    return PositionAxis(d, tuple(compares), min(size, dims[d]))


def _integer_valued(e: Expr, tensors: Mapping[str, torch.Tensor]) -> bool:
    """Whether `e` evaluates to integers or bools (as torch's promotion gives them), from the dtypes alone."""
    if isinstance(e, Const):  # (an integer past int64 is evaluated as a float)
        return isinstance(e.value, int) and INT64_MIN <= e.value <= INT64_MAX
    if isinstance(e, (Dim, Arange)):
        return True
    if isinstance(e, Ref):
        return e.field in tensors and name_of(tensors[e.field].dtype) in INT_RANGES
    if isinstance(e, Unary):
        return e.op in ("not", "isfinite") or _integer_valued(e.x, tensors)
    if isinstance(e, Binary):
        return e.op in COMPARISONS or e.op in ("&", "|") or (_integer_valued(e.a, tensors) and _integer_valued(e.b, tensors))
    if isinstance(e, Reduce):
        return e.op != "sum" or _integer_valued(e.x, tensors)
    return False


def _integer_bounds(e: Expr, tensors: Mapping[str, torch.Tensor], dims: Mapping[str, int],
                    scalar: bool) -> tuple[int, int] | None:
    """Bounds of an integer constant, dim or (unless `scalar`) integer field added to a chain, or None.
    A field's are its dtype's, not its values': `bind` decides once per signature (shapes, strides
    and dtypes), and so must this."""
    if isinstance(e, Const) and isinstance(e.value, int) and INT64_MIN <= e.value <= INT64_MAX:
        return e.value, e.value
    if isinstance(e, Dim) and e.name in dims:
        return dims[e.name], dims[e.name]
    if scalar or not isinstance(e, Ref) or e.field not in tensors:
        return None
    return INT_RANGES.get(name_of(tensors[e.field].dtype))


def refuse_logical_walks(plan: Plan, tensors: Mapping[str, torch.Tensor], dims: Mapping[str, int],
                         runnable: list[DataCheck]) -> None:
    """Raise `UncheckableBatchError` where a rule's exact check would walk more than
    max(WALK_LIMIT, stored values) positions along named dims (fixed axes are the spec's constant
    factors): a rule reading positions (`arange`) along an expanded (zero-stride) dim that it
    cannot be evaluated piecewise along (`position_axis`), or pairing fields that each store a
    different axis of what it runs over.
    Every other check costs what the batch stores, whatever its logical size; such a rule's
    verdict would need its logical walk (2**34 positions of a view storing 2 values), so every
    backend refuses the batch alike, here, rather than take minutes (docs/security.md)."""
    stored = None
    for c in runnable:
        if not isinstance(c, RuleCheck):
            continue  # (a field's own checks read its stored values)
        walk = rule_walk(plan, c, tensors, dims)
        # along named dims only: a fixed axis (`bbox.2`) is the spec's constant, the same factor on a
        # materialized batch (a rule pairing [K, C, 17] with [2] walks K x C x 17 x 2 of 17 x K x C stored)
        named = math.prod(n for a, n in walk.items() if a in dims)
        if named <= WALK_LIMIT:
            continue
        stored = stored_elements(tensors) if stored is None else stored
        if named <= stored:
            continue
        along = position_axis(plan, c, tensors, dims)  # (evaluated piecewise along it, by the torch backend)
        pieces = None if along is None else named // walk.get(along.dim, 1) * min(along.size, walk.get(along.dim, 1))
        if pieces is None or pieces > max(WALK_LIMIT, stored):
            positions = math.prod(walk.values())
            sizes = " x ".join(f"{a}={n}" for a, n in walk.items())
            why = "" if along is None else (f" Evaluated piecewise along {along.dim} (where arange({along.dim}) crosses "
                                            f"the values it is compared with), it would still take {pieces:,}.")
            raise UncheckableBatchError(
                f"tritoncheck cannot check this batch of {plan.spec_name} at a cost bounded by what it stores: rule "
                f"{c.text!r} would walk {positions:,} positions ({sizes}) where the batch stores {stored:,} values. "
                "Fields are expanded (zero-stride) views along some of these dims, and the rule reads positions along "
                "them (arange) or pairs fields stored along different ones, so an exact verdict would take that walk "
                "(arange is evaluated piecewise where it reaches comparisons through +, - and constant factors, outside "
                f"a float sum over its dim) (the limit is max({WALK_LIMIT:,}, the stored values)).{why} Pass the fields "
                "materialized (.contiguous()) or check a smaller batch")


def _check_dims(c: DataCheck) -> set[str]:
    return kind_of(c).reads(c)[1]


def as_tensor(value: Any) -> tuple[torch.Tensor | None, str]:
    """A tensor view of `value` (numpy arrays without a copy), or None and the reason."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_nested:
            return None, "a nested tensor is not supported; pad it with torch.nested.to_padded_tensor(x, pad)"
        if value.layout != torch.strided:
            return None, f"a {value.layout} tensor is not supported; convert it with .to_dense()"
        # a FakeTensor is a subclass: a plain tensor skips the (costly) import-and-test
        if value.device.type == "meta" or (type(value) is not torch.Tensor and _is_fake(value)):
            return None, f"a {'meta' if value.device.type == 'meta' else 'fake'} tensor holds no data to check"
        return resolved(value), ""
    module = type(value).__module__
    if module == "numpy":
        try:
            return torch.from_numpy(value), ""
        except (TypeError, ValueError) as exc:
            return None, f"a numpy array of dtype {getattr(value, 'dtype', '?')} cannot be checked ({exc})"
    return None, f"expected a tensor or numpy array, got {type(value).__name__}"


def _tensor_hint(value: Any) -> str:
    """How to turn what `as_tensor` refused into a tensor it takes: each kind of tensor has its own way."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_nested:
            return "pad it in the collate function: torch.nested.to_padded_tensor(x, padding)"
        if value.layout != torch.strided:
            return "make it dense in the collate function: x.to_dense()"
        if value.device.type == "meta":
            return "a meta tensor has a shape but no values: build the batch on a real device (cpu or cuda)"
        return "check the real tensors, outside the fake mode (tc.validate inside torch.compile checks them)"
    return "convert it with torch.as_tensor(...) in the collate function"


def compact(t: torch.Tensor) -> torch.Tensor:
    """`t` with every expanded (zero-stride) axis cut to size 1: the same values, each read once."""
    stride = t.stride()
    if 0 not in stride:
        return t
    size = [1 if s == 0 and n > 1 else n for n, s in zip(t.shape, stride, strict=True)]
    return t.as_strided(size, stride, t.storage_offset())


def resolved(t: torch.Tensor) -> torch.Tensor:
    """`t` as torch reads it: a lazy negation or conjugation bit (`torch._neg_view(x)`,
    `z.conj().imag`; it survives torch.save) applied to the stored values.

    Every backend reads memory as stored, so the bit is resolved here, before any backend sees the
    tensor; only such tensors pay (a copy of their stored values, never of an expanded view's
    logical size).
    """
    if not (t.is_neg() or t.is_conj()):
        return t
    return compact(t).resolve_conj().resolve_neg().expand(t.shape)


def _is_fake(t: torch.Tensor) -> bool:
    """A FakeTensor (torch.compile tracing, FakeTensorMode) has shapes but no values to read."""
    try:
        from torch._subclasses.fake_tensor import is_fake
    except ImportError:  # a torch without fake tensors has none to pass us
        return False
    return is_fake(t)


def _check_meta(fp: FieldPlan, t: torch.Tensor, dims: dict[str, tuple[int, str]], out: list[Violation]) -> bool:
    """Dtype, rank and sizes of one field; binds dims it is first to name. True if a problem was found."""
    problem = False
    name = name_of(t.dtype)
    if name not in fp.dtypes:
        out.append(Violation(fp.name, "dtype", f"{fp.name} must have dtype {'|'.join(fp.dtypes)}, got {name}",
                             value=name, hint=_dtype_hint(fp, t.dtype)))
        problem = True
    if t.dim() != len(fp.shape):
        want = ", ".join(fp.shape_text)
        also = f" (or {len(fp.shape) + 1}, [{want}, 1])" if fp.unit_tail else ""
        out.append(Violation(fp.name, "rank", f"{fp.name} must have {len(fp.shape)} dim{'s' if len(fp.shape) != 1 else ''} [{want}]{also}, got shape {tuple(t.shape)}",
                             value=tuple(t.shape), hint=_rank_hint(fp, t), severity=fp.rank_severity))
        return True
    for axis, (entry, text) in enumerate(zip(fp.shape, fp.shape_text, strict=True)):
        size = t.shape[axis]
        if isinstance(entry, int):
            if size != entry:
                src = f" ({text})" if text != str(entry) else ""
                hint = None
                if entry in t.shape:
                    hint = f"axis {list(t.shape).index(entry)} has the expected size {entry}: the axes look transposed (channels-last input?)"
                out.append(Violation(fp.name, "shape", f"{fp.name} axis {axis} must be {entry}{src}, got {size} (shape {tuple(t.shape)})",
                                     index=(axis,), value=size, hint=hint))
                problem = True
        elif entry in dims:
            bound, src = dims[entry]
            if size != bound:
                out.append(Violation(fp.name, "dim_mismatch",
                                     f"{fp.name} axis {axis} is {entry}={size}, but {entry}={bound} (from {src}); shape {tuple(t.shape)}",
                                     index=(axis,), value=size))
                problem = True
        else:
            dims[entry] = (size, fp.name)
    return problem


def _dtype_hint(fp: FieldPlan, dtype: torch.dtype) -> str | None:
    if all_integer_names(fp.dtypes) and dtype.is_floating_point:
        return f"{fp.name} holds indices, which must be integers: cast with .long() where the batch is built"
    if name_of(dtype) == "int32" and "int64" in fp.dtypes:
        return "CUDA cross-entropy/nll_loss accept int64 targets only: cast with .long()"
    if dtype.is_complex:
        return f"{fp.name} cannot be complex: take its real part (.real) or build it as one of the dtypes above"
    if all(d in GROUPS["float"] for d in fp.dtypes) and not dtype.is_floating_point:
        return f"{fp.name} must be floating point: cast with .float()"
    return None


def _rank_hint(fp: FieldPlan, t: torch.Tensor) -> str | None:
    shape = list(t.shape)
    if t.dim() == len(fp.shape) + 1 and 1 in shape[1:]:
        return f"an extra size-1 axis, e.g. (N, 1) where (N,) is expected: squeeze it (.squeeze({shape.index(1, 1)}))"
    if t.dim() + 1 == len(fp.shape):
        return "one axis is missing, e.g. (N,) where (N, 1) or (B, C, L) is expected: unsqueeze or reshape"
    return None


def holds(cond: Expr, dims: Mapping[str, Any]) -> bool | None:
    """The truth of a condition over dims and presence, or None when it needs a dim `dims` lacks.

    `&` and `|` decide from one side when that side decides (`present(labels) & (T > 2)` is False
    without labels, though T is then unbound), as the rule reads.
    """
    if isinstance(cond, Binary) and cond.op in ("&", "|"):
        a, b = holds(cond.a, dims), holds(cond.b, dims)
        decisive = cond.op == "|"  # True decides `|`, False decides `&`
        if a is decisive or b is decisive:
            return decisive
        return None if a is None or b is None else not decisive
    if isinstance(cond, Unary) and cond.op == "not":
        x = holds(cond.x, dims)
        return None if x is None else not x
    if not expr_dims(cond) <= dims.keys():
        return None
    return bool(evaluate_scalar(cond, dims))
