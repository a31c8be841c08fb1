"""The torch backend: the plan's data checks as torch ops, on CPU or CUDA tensors.

It is the reference the Triton backend is tested against, and what DataLoader workers run.
On a valid batch each field is read about once: one `aminmax` per field settles its range,
value-set and finiteness checks together. Only when that summary cannot clear a check (a value
is out of range, a sentinel such as -100 is present, a NaN turned up) does a second pass build
the violation mask and locate the offenders.

An expanded view (`torch.tensor([1]).expand(2**40)`, zero strides) is checked on its stored
values only: every zero-stride axis is cut to size 1 (`compact`), masks keep size 1 along the
axes no operand varies on, and counts, first indices and samples are scaled back to the full
view, so nothing allocates in proportion to a view's logical size. An empty field is cut the same
way along every axis.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tritoncheck.checks import hint, kind_of, message, range_limit
from tritoncheck.dtypes import FLIPPED, INT64_MAX, INT64_MIN, comparable_values, compute_dtype, exact_comparison
from tritoncheck.expr import Arange, Binary, Const, Dim, Expr, Reduce, Ref, Unary
from tritoncheck.kernel import sums
from tritoncheck.kernel.ir import expr_axes, unravel
from tritoncheck.plan.lower import (
    WALK_LIMIT,
    Bound,
    DataCheck,
    Plan,
    PositionAxis,
    RangeCheck,
    RuleCheck,
    compact,
    evaluate_scalar,
    position_axis,
    rule_walk,
)
from tritoncheck.checks.registry import violation
from tritoncheck.report import SampleRange, SampleRuns, Violation

def run(plan: Plan, bound: Bound) -> list[Violation]:
    """Every data check of `plan` that `bind` found runnable, as violations."""
    ctx = Context(plan, bound)
    out = []
    for check in bound.runnable:
        if any(ctx.sizes[a] == 0 for a in check.axes):
            continue  # no positions (a rule over an empty field's elements): nothing can fail, nothing to build
        along = _position_axis(check, ctx)
        if along is not None:
            out.extend(_piecewise(check, ctx, along))
            continue
        axis = _window_axis(check, ctx)
        if axis is not None:
            out.extend(_windowed(check, ctx, axis))
            continue
        bad = ctx.bad_mask(check)
        if bad is None:
            continue
        count, samples, index = locate(bad, check.axes, plan.batch_dim, ctx.sizes)
        if count:
            out.append(make_violation(check, ctx, count, samples, index))
    return out


MAX_MASK = 2**22  # elements of a mask over positions (arange) built at once; longer dims go in windows


def _window_axis(check: DataCheck, ctx: Context) -> str | None:
    """The dim to walk in windows: one the rule reads positions along (`arange(S)`), that no
    reduction in it reduces over, where its mask would pass MAX_MASK elements. `arange(S)` over an
    expanded `targets` (S = 2**26) then costs a window's memory, not S's."""
    if not isinstance(check, RuleCheck) or math.prod(ctx.sizes[a] for a in check.axes) <= MAX_MASK:
        return None
    # a dim some reduction sums, ORs or ANDs over cannot be cut (one window would see part of it); a
    # reduction that only spans it (`all(x > 0, dim=L) | (arange(B) < 3)` over B) is evaluated per window
    reduced = set().union(*(set(r.dims) if r.dims is not None else set(expr_axes(ctx.plan, r.x))
                            for r in _reductions(check.expr) + _reductions(check.where)))
    for d in sorted(_aranges(check.expr) | _aranges(check.where), key=lambda d: -ctx.sizes[d]):
        if d in check.axes and d not in reduced:
            return d
    return None


def _windowed(check: RuleCheck, ctx: Context, axis: str) -> list[Violation]:
    """`check` evaluated over windows of `axis`: counts summed, samples joined, the first index the
    row-major least over windows, the value read in the window that holds it."""
    if kind_of(check).settle(check, ctx):
        return []
    n = ctx.sizes[axis]
    step = max(1, MAX_MASK // max(1, math.prod(ctx.sizes[a] for a in check.axes if a != axis)))
    pos = check.axes.index(axis)
    count, samples, first = 0, set(), None
    for start in range(0, n, step):
        with ctx.windowed(axis, start, min(n, start + step)):
            bad = kind_of(check).torch(check, ctx)
            if bad is None:
                continue
            c, s, index = locate(bad, check.axes, ctx.plan.batch_dim, ctx.sizes)
            if not c:
                continue
            count += c
            shift = start if axis == ctx.plan.batch_dim else 0
            samples.update(i + shift for i in s)
            index = index[:pos] + (index[pos] + start,) + index[pos + 1:]
            if first is None or index < first[0]:
                local = index[:pos] + (index[pos] - start,) + index[pos + 1:]
                first = (index, _python(_at(ctx.values(check.subject, check.axes), local)))
    if not count:
        return []
    return [violation(check, ctx.bound, count, tuple(sorted(samples)), first[0], first[1])]


# a rule whose walk passes this many positions is evaluated piecewise where it can be: past WALK_LIMIT,
# where `bind` would refuse it otherwise (the differential fuzz sets 0, comparing the pieces of every
# such rule with the kernels' walk and with the batch materialized)
PIECEWISE_FROM = WALK_LIMIT


def _position_axis(check: DataCheck, ctx: Context) -> PositionAxis | None:
    """The dim to evaluate `check` along piecewise (`plan.lower.PositionAxis`): where its walk passes
    PIECEWISE_FROM and it varies along the dim through `arange` alone."""
    if not isinstance(check, RuleCheck):
        return None
    # decided from the batch's signature (shapes, strides, dtypes), as `bind` decides what it refuses:
    # once per signature, kept in its memo
    known = ctx.bound.memo.setdefault("torch.position_axis", {})
    if id(check) not in known:
        along, dims = None, ctx.bound.dim_values()
        if (_aranges(check.expr) or _aranges(check.where)) and math.prod(
                n for a, n in rule_walk(ctx.plan, check, ctx.bound.tensors, dims).items() if a in dims) > PIECEWISE_FROM:
            along = position_axis(ctx.plan, check, ctx.bound.tensors, dims)
        known[id(check)] = along
    return known[id(check)]


def _piecewise(check: RuleCheck, ctx: Context, along: PositionAxis) -> list[Violation]:
    """`check` evaluated at the first position of each piece of `along.dim` (`Context.representatives`),
    each piece counted at its length: counts, samples, the first index and its value are those of the
    whole walk, in time and memory that grow with the pieces, not with the dim."""
    if kind_of(check).settle(check, ctx):
        return []
    starts = ctx.representatives(along)
    with ctx.positioned(along.dim, starts):
        bad = kind_of(check).torch(check, ctx)
        if bad is None:
            return []
        count, samples, index, local = locate_pieces(bad, check.axes, ctx.plan.batch_dim, ctx.sizes, along.dim, starts)
        if not count:
            return []
        value = _python(_at(ctx.values(check.subject, check.axes), local))
    return [violation(check, ctx.bound, count, samples, index, value)]


def _aranges(expr: Expr | None) -> set[str]:
    if isinstance(expr, Arange):
        return {expr.dim}
    if isinstance(expr, (Unary, Reduce)):
        return _aranges(expr.x)
    if isinstance(expr, Binary):
        return _aranges(expr.a) | _aranges(expr.b)
    return set()


def _reductions(expr: Expr | None) -> list[Reduce]:
    if isinstance(expr, Reduce):
        return [expr, *_reductions(expr.x)]
    if isinstance(expr, Unary):
        return _reductions(expr.x)
    if isinstance(expr, Binary):
        return _reductions(expr.a) + _reductions(expr.b)
    return []


@functools.lru_cache(maxsize=1024)
def _comparable(values: tuple[int | float, ...], dtype: torch.dtype) -> tuple[int | float, ...]:
    """`comparable_values`, once per check and dtype rather than once per batch."""
    return comparable_values(values, dtype)


class Context:
    """Tensors, dims and per-field summaries for one batch."""

    def __init__(self, plan: Plan, bound: Bound):
        self.plan = plan
        self.bound = bound
        self.dims = bound.dim_values()
        self.sizes: dict[str, int] = dict(self.dims)  # a dim bound by a field that failed its own checks counts too
        for name, t in bound.tensors.items():
            for axis, size in zip(plan.field(name).axes, t.shape, strict=True):
                self.sizes[axis] = size
        self._summary: dict[str, tuple[Any, Any] | None] = {}
        self._compact: dict[str, torch.Tensor] = {}
        self.windows: dict[str, tuple[int, int]] = {}  # dim -> (start, stop): evaluate only there
        # dim -> (positions, their axes): what `arange(dim)` evaluates to instead (`positioned`)
        self.positions: dict[str, tuple[torch.Tensor, tuple[str, ...]]] = {}
        self.fixed: dict[Expr, tuple[Any, tuple[str, ...]]] = {}  # values computed once, while positions change
        self.lengths: dict[str, torch.Tensor] = {}  # dim -> the length of the piece each of its positions starts
        # where a constant's tensor is made: once reshaped to a rank, a CPU one cannot meet a CUDA field
        self.device = next((t.device for t in bound.tensors.values()), None)

    @contextlib.contextmanager
    def windowed(self, axis: str, start: int, stop: int):
        """Evaluate over positions start..stop-1 of `axis` only (`arange` and fields narrowed); a
        window over another axis may be open around it."""
        size = self.sizes[axis]
        self.windows[axis], self.sizes[axis] = (start, stop), stop - start
        try:
            yield
        finally:
            del self.windows[axis]
            self.sizes[axis] = size

    @contextlib.contextmanager
    def positioned(self, dim: str, positions: torch.Tensor, axes: tuple[str, ...] | None = None):
        """Evaluate `arange(dim)` as `positions` (laid out over `axes`, (dim,) by default); the dim's
        size stays its logical one (a sum over it of values it does not vary along counts each N times)."""
        self.positions[dim] = (positions, axes or (dim,))
        if axes is None:  # (each position starts a piece up to the next: its length weights a sum over dim)
            self.lengths[dim] = torch.diff(positions, append=positions.new_tensor([self.sizes[dim]]))
        try:
            yield
        finally:
            del self.positions[dim]
            self.lengths.pop(dim, None)

    def representatives(self, along: PositionAxis) -> torch.Tensor:
        """The first position of each piece of `along.dim` on which the rule is constant, sorted: 0, and
        each position where one of `along.compares` changes for one of its values. A comparison of
        a monotone function of the position changes at most once per value (`==` and `!=` are
        `<=` and `>=` together), found by bisection in the dtype the rule evaluates it in."""
        n = self.sizes[along.dim]
        starts = [torch.zeros(min(n, 1), dtype=torch.int64, device=self.device)]
        for e in along.compares:
            for pred in ([e] if e.op not in ("==", "!=") else [Binary("<=", e.a, e.b), Binary(">=", e.a, e.b)]):
                starts.append(self._changes(pred, along.dim, n).flatten())
        return torch.unique(torch.cat(starts))

    def _changes(self, pred: Binary, dim: str, n: int) -> torch.Tensor:
        """Per value `pred` compares, the first position of `dim` where it differs from position 0
        (none where it never does); `pred` is monotone along `dim` (`PositionAxis`)."""
        other = pred.b if dim in _aranges(pred.a) else pred.a
        axes = (dim, *(a for a in expr_axes(self.plan, pred) if a != dim))
        self.fixed[other] = self._eval(other)  # (constant along dim: computed once, not per step)
        try:
            with self.positioned(dim, torch.zeros([1] * len(axes), dtype=torch.int64, device=self.device), axes):
                first = self.values(pred, axes)
            lo = torch.zeros(first.shape, dtype=torch.int64, device=self.device)
            hi = torch.full(first.shape, n, dtype=torch.int64, device=self.device)
            while bool((hi - lo > 1).any()):  # invariant: pred(lo) == pred(0); pred(hi) != pred(0), or hi == n
                mid = (lo + hi) // 2
                with self.positioned(dim, mid, axes):
                    same = self.values(pred, axes).expand(first.shape) == first
                lo, hi = torch.where(same, mid, lo), torch.where(same, hi, mid)
            return hi[hi < n]
        finally:
            del self.fixed[other]

    def stored(self, name: str) -> torch.Tensor:
        """The field with its expanded axes cut to size 1 (see `compact`); an empty field holds no
        value along any axis, so each of its axes is cut to size 1 too (its empty ones stay 0): a
        `[2**31 + 5, 0]` field must not make masks of 2**31 + 5 entries (C and Triton walk such
        dims at size 1 as well, `ir.loop_sizes`)."""
        if name not in self._compact:
            t = self.bound.tensors[name]
            if t.numel() == 0:
                self._compact[name] = t.new_empty([min(n, 1) for n in t.shape])
            else:
                self._compact[name] = compact(t)
        return self._compact[name]

    def tensor(self, name: str) -> torch.Tensor:
        """The field's stored values in the compute dtype (size 1 along expanded axes)."""
        t = self.stored(name)
        return t.to(compute_dtype(t.dtype))

    def summary(self, name: str) -> tuple[int | float, int | float] | None:
        """(min, max) of a field in one sweep, as Python numbers, or None if it is empty.

        Python numbers keep every later comparison off the dispatcher. They are exact (an int64 or
        a float32 fits a Python int or float), and comparing them with a Python bound is
        conservative: rounding to float32 is monotonic, so whatever the summary clears, the exact
        pass in the compute dtype would clear too.
        """
        if name not in self._summary:
            t = self.stored(name)
            if t.numel() == 0:
                self._summary[name] = None
            else:
                mn, mx = torch.aminmax(t.view(torch.uint8) if t.dtype == torch.bool else t)
                if t.dtype == torch.bool:  # a byte means its truth: 7 is 1, so the summary is of min(byte, 1)
                    self._summary[name] = (min(mn.item(), 1), min(mx.item(), 1))
                else:
                    self._summary[name] = (mn.item(), mx.item())
        return self._summary[name]

    def bound_value(self, check: RangeCheck) -> int | float:
        """The bound as the field's compute dtype compares it (see `range_limit`)."""
        return range_limit(check, self.dims, self.bound.tensors[check.field].dtype)

    def comparable(self, values: tuple[int | float, ...], name: str) -> tuple[int | float, ...]:
        """`values` as field `name` can hold them (`comparable_values`, cached per check and dtype)."""
        return _comparable(values, self.bound.tensors[name].dtype)

    def bad_mask(self, check: DataCheck) -> torch.Tensor | None:
        """A bool tensor over `check.axes`, True where the check fails; None when the fields'
        (min, max) summaries and the dims settle it (the kind's `settle`) or nothing fails."""
        kind = kind_of(check)
        if kind.settle(check, self):
            return None
        return kind.torch(check, self)

    def settled_by_summary(self, check: RuleCheck) -> bool:
        """`any(labels != -100)` holds when the field's min or max is not -100: no second pass."""
        e = check.expr
        if check.where is not None or not (isinstance(e, Reduce) and e.op == "any" and e.dims is None):
            return False
        x = e.x
        if not (isinstance(x, Binary) and x.op == "!=" and isinstance(x.a, Ref) and isinstance(x.b, Const)):
            return False
        if any(i is not None for i in x.a.index or ()):
            return False
        summary = self.summary(x.a.field)
        return summary is not None and (summary[0] != x.b.value or summary[1] != x.b.value)

    def interval(self, expr: Expr) -> tuple[Any, Any] | None:
        """Bounds (lo, hi) on every value of `expr` (bools as 0/1) from summaries and dims; None if unknown.

        Lets a rule that must hold skip its data pass: `sum(input_ids != pad, dim=L) <= 512` with L=512.
        Comparisons of Python numbers with a field's float32 min/max are conservative (rounding is
        monotonic); arithmetic is tracked for integers only.
        """
        if isinstance(expr, Const):
            return expr.value, expr.value
        if isinstance(expr, Dim):
            return self.dims[expr.name], self.dims[expr.name]
        if isinstance(expr, Ref):
            if expr.field not in self.bound.tensors:
                return None
            return self.summary(expr.field)  # a selection lies within the whole field's range
        if isinstance(expr, Arange):
            return 0, max(self.sizes[expr.dim] - 1, 0)
        if isinstance(expr, Reduce):
            x = self.interval(expr.x)
            if x is None:
                return None
            if expr.op in ("any", "all"):  # (over a non-empty field: an empty one has no summary)
                return (1, 1) if x[0] > 0 or x[1] < 0 else (0, 0) if x == (0, 0) else (0, 1)
            if expr.dims is None or any(d not in self.sizes for d in expr.dims) or any(isinstance(v, float) for v in x):
                return None  # (a float sum rounds: n * min is no bound on it)
            n = math.prod(self.sizes[d] for d in expr.dims)
            return n * x[0], n * x[1]
        if isinstance(expr, Binary):
            a, b = self.interval(expr.a), self.interval(expr.b)
            if a is None or b is None:
                return None
            op = expr.op
            if op in ("+", "-") and any(isinstance(v, float) for v in a + b):
                return None  # float sums round; only integer arithmetic is exact here
            if op == "+":
                return a[0] + b[0], a[1] + b[1]
            if op == "-":
                return a[0] - b[1], a[1] - b[0]
            if op == "&":
                return int(a[0] > 0 and b[0] > 0), int(a != (0, 0) and b != (0, 0))
            if op == "|":
                return int(a[0] > 0 or b[0] > 0), int(a != (0, 0) or b != (0, 0))
            true = {"<=": a[1] <= b[0], "<": a[1] < b[0], ">=": a[0] >= b[1], ">": a[0] > b[1],
                    "!=": a[1] < b[0] or a[0] > b[1], "==": a[0] == a[1] == b[0] == b[1]}.get(op)
            false = {"<=": a[0] > b[1], "<": a[0] >= b[1], ">=": a[1] < b[0], ">": a[1] <= b[0],
                     "!=": a[0] == a[1] == b[0] == b[1], "==": a[1] < b[0] or a[0] > b[1]}.get(op)
            if true is None:
                return None
            return (1, 1) if true else (0, 0) if false else (0, 1)
        return None

    def evaluate(self, expr: Expr, axes: tuple[str, ...]) -> torch.Tensor:
        """`expr` as a tensor laid out over `axes` (broadcast by axis name, expanded to full size)."""
        return self.values(expr, axes).expand([self.sizes[a] for a in axes])

    def values(self, expr: Expr, axes: tuple[str, ...]) -> torch.Tensor:
        """`expr` laid out over `axes`, of size 1 along every axis that no operand varies on."""
        value, own = self._eval(expr)
        if not isinstance(value, torch.Tensor):
            value = torch.tensor(_fit(value), device=self.device)
        return _align(value, own, axes, None)

    def _eval(self, expr: Expr) -> tuple[Any, tuple[str, ...]]:
        if self.fixed and expr in self.fixed:
            return self.fixed[expr]
        if isinstance(expr, Const):
            return expr.value, ()
        if isinstance(expr, Dim):
            return self.dims[expr.name], ()
        if isinstance(expr, Arange):
            if expr.dim in self.positions:
                return self.positions[expr.dim]
            if expr.dim in self.windows:
                return torch.arange(*self.windows[expr.dim], device=self.device), (expr.dim,)
            return torch.arange(self.sizes[expr.dim], device=self.device), (expr.dim,)
        if isinstance(expr, Ref):
            t = self.tensor(expr.field)
            axes = self.plan.field(expr.field).axes
            for axis, (start, stop) in self.windows.items():
                w = axes.index(axis) if axis in axes else None
                if w is not None and expr.index[w] is None and t.shape[w] != 1:  # (size 1: an expanded axis, one value)
                    t = t.narrow(w, start, stop - start)
            for axis in reversed(range(len(expr.index))):  # select from the back so positions stay valid
                if expr.index[axis] is not None:  # (in range: `bind` checked it; an expanded axis holds one value)
                    t = t.select(axis, expr.index[axis] if t.shape[axis] != 1 else 0)
            return t, tuple(a for a, i in zip(axes, expr.index, strict=True) if i is None)
        if isinstance(expr, Unary):
            x, axes = self._eval(expr.x)
            if not isinstance(x, torch.Tensor):
                return evaluate_scalar(Unary(expr.op, Const(x)), {}), ()
            if expr.op == "not":
                return ~x.to(torch.bool), axes
            if expr.op == "isfinite":
                return torch.isfinite(x), axes
            x = _number(x)
            return (-x if expr.op == "neg" else x.abs()), axes
        if isinstance(expr, Binary):
            a, a_axes = self._eval(expr.a)
            b, b_axes = self._eval(expr.b)
            if expr.op in _COMPARE_OPS and isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
                x, axes, c, op = (a, a_axes, expr.b, expr.op) if isinstance(a, torch.Tensor) else (b, b_axes, expr.a, FLIPPED[expr.op])
                if isinstance(c, Const):  # the exact comparison with the constant as written (docs/semantics.md)
                    return _exact_compare(x, op, c.value), axes
            if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
                return evaluate_scalar(Binary(expr.op, Const(a), Const(b)), {}), ()
            axes = a_axes + tuple(x for x in b_axes if x not in a_axes)
            # torch's type for the op, taken before aligning: a 0-d operand (`arange[0]`) does not
            # promote a dimensioned one, but once aligned (a size-1 axis) it would
            # (a Python number, possibly past int64, is left to `binary`)
            dtype = torch.result_type(a, b) if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) else None
            if isinstance(a, torch.Tensor):
                a = _align(a, a_axes, axes, None).to(dtype or a.dtype)
            if isinstance(b, torch.Tensor):
                b = _align(b, b_axes, axes, None).to(dtype or b.dtype)
            return binary(expr.op, a, b), axes
        if isinstance(expr, Reduce):
            axis = self._reduce_window_axis(expr)
            if axis is not None:
                return self._reduce_in_windows(expr, axis)
            x, axes = self._eval(expr.x)
            if not isinstance(x, torch.Tensor):
                x = torch.tensor(_fit(x), device=self.device)
            red = tuple(range(len(axes))) if expr.dims is None else tuple(axes.index(d) for d in expr.dims)
            keep = () if expr.dims is None else tuple(a for a in axes if a not in expr.dims)
            if expr.op == "sum":
                # an expanded axis: each stored value stands for `spread` equal ones
                spread = math.prod(self.sizes[axes[i]] for i in red if x.shape[i] == 1)
                # a piece of positions (`positioned`): its value stands for the piece's length (an
                # integer sum: `plan.lower.PositionAxis`)
                for i in red:
                    if axes[i] in self.lengths and x.shape[i] > 1:
                        x = _number(x) * _align(self.lengths[axes[i]], (axes[i],), axes, None)
                if x.is_floating_point():  # one value in any order (docs/semantics.md, "Sums")
                    out = sums.float_sum(x, red, spread)
                else:  # int64, wrapping
                    out = _number(x).sum(dim=red)
                    out = out * spread if spread != 1 else out
            elif expr.op == "any":
                out = (x != 0).any(dim=red) if red else x != 0
            else:
                out = (x != 0).all(dim=red) if red else x != 0
            return out, keep
        raise TypeError(f"cannot evaluate {expr!r}")

    def _reduce_window_axis(self, expr: Reduce) -> str | None:
        """A dim the reduction reduces over and reads positions along (`any(arange(S) > n, dim=S)`)
        whose body would pass MAX_MASK elements: the body is then evaluated in windows of it."""
        body = expr_axes(self.plan, expr.x)
        if math.prod(self.sizes[a] for a in body) <= MAX_MASK:
            return None
        reduced = body if expr.dims is None else expr.dims
        for d in sorted(_aranges(expr.x), key=lambda d: -self.sizes[d]):
            if d in reduced and d in body and d not in self.windows and d not in self.positions:
                return d
        return None

    def _reduce_in_windows(self, expr: Reduce, axis: str) -> tuple[Any, tuple[str, ...]]:
        """The reduction over windows of `axis`, combined: any as or, all as and, an integer sum as
        +; a float sum walks the windows twice, as `float_sum` walks a row (its row maxima first)."""
        n = self.sizes[axis]
        step = max(1, MAX_MASK // max(1, math.prod(self.sizes[a] for a in expr_axes(self.plan, expr.x) if a != axis)))
        windows = [(start, min(n, start + step)) for start in range(0, n, step)]
        if expr.op == "sum":
            with self.windowed(axis, *windows[0]):
                is_float = self._eval(expr.x)[0].is_floating_point()
            if is_float:
                return self._float_sum_in_windows(expr, axis, windows)
        out, keep = None, ()
        for start, stop in windows:
            with self.windowed(axis, start, stop):
                part, keep = self._eval(expr)
            out = part if out is None else out | part if expr.op == "any" else out & part if expr.op == "all" else out + part
        return out, keep

    def _sum_input(self, expr: Reduce) -> tuple[torch.Tensor, tuple[int, ...], tuple[str, ...], int]:
        """A float sum's body in the current window: (values as float64, reduced positions, kept axes, spread)."""
        x, axes = self._eval(expr.x)
        red = tuple(range(len(axes))) if expr.dims is None else tuple(axes.index(d) for d in expr.dims)
        keep = () if expr.dims is None else tuple(a for a in axes if a not in expr.dims)
        spread = math.prod(self.sizes[axes[i]] for i in red if x.shape[i] == 1)
        return x.to(torch.float64), red, keep, spread

    def _float_sum_in_windows(self, expr: Reduce, axis: str, windows: list) -> tuple[Any, tuple[str, ...]]:
        special = grid = None
        for start, stop in windows:  # pass 1: the non-finite values, and each row's grid (its largest exponent)
            with self.windowed(axis, start, stop):
                x, red, keep, spread = self._sum_input(expr)
            s, g, _ = sums.scan(x, red)
            special, grid = (s, g) if special is None else (special + s, torch.maximum(grid, g))
        exact = math.prod(self.sizes[d] for d in (expr.dims or expr_axes(self.plan, expr.x))) >= sums.MAX_TERMS
        total = None
        for start, stop in windows:  # pass 2: each row's folds, on the row's grid
            with self.windowed(axis, start, stop):
                x, red, keep, spread = self._sum_input(expr)
            finite = sums.scan(x, red)[2]  # (its NaN and infinities zeroed)
            part = sums.repeat(sums.fold_sums(finite, red, grid), spread, exact)
            total = part if total is None else sums.add(total, part)
        return sums.finish(special, grid, total).squeeze(red), keep


_COMPARE_OPS = frozenset(FLIPPED)


def _exact_compare(x: torch.Tensor, op: str, value: int | float | bool) -> torch.Tensor:
    """`x op value` as `exact_comparison` means it: one comparison in x's dtype, or its verdict."""
    kind = "d" if x.dtype == torch.float64 else "f" if x.is_floating_point() else "i"
    exact = exact_comparison(op, value, kind)
    if isinstance(exact, bool):
        return torch.full(x.shape, exact, dtype=torch.bool, device=x.device)
    return binary(exact[0], _number(x), exact[1])


def binary(op: str, a: Any, b: Any) -> torch.Tensor:
    """`a op b` on tensors or scalars, as every rule operator evaluates (the strategies use it too)."""
    if op in ("&", "|"):
        a = a.to(torch.bool) if isinstance(a, torch.Tensor) else bool(a)
        b = b.to(torch.bool) if isinstance(b, torch.Tensor) else bool(b)
        return (a & b) if op == "&" else (a | b)
    a, b = _fit(a), _fit(b)
    if op in ("+", "-", "*", "//", "%"):
        a, b = _number(a), _number(b)
    if op in ("//", "%"):
        return _div(op, a, b)
    return {
        "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
        "==": lambda: a == b, "!=": lambda: a != b, "<": lambda: a < b,
        "<=": lambda: a <= b, ">": lambda: a > b, ">=": lambda: a >= b,
    }[op]()


def _fit(x: Any) -> Any:
    """A Python int past int64 (a product of dims) as a float: torch would refuse it, or wrap it."""
    if isinstance(x, int) and not isinstance(x, bool) and not INT64_MIN <= x <= INT64_MAX:
        try:
            return float(x)
        except OverflowError:
            return math.inf if x > 0 else -math.inf
    return x


def _number(x: Any) -> Any:
    """Bools count as 0/1 in arithmetic, as int64 (torch would add them as logical or)."""
    if isinstance(x, torch.Tensor):
        return x.to(torch.int64) if x.dtype == torch.bool else x
    return int(x) if isinstance(x, bool) else x


def _div(op: str, a: Any, b: Any) -> torch.Tensor:
    """`a // b` or `a % b`; integer division by zero gives `a // 0 == 0` and `a % 0 == a`, floats IEEE."""
    device = (a if isinstance(a, torch.Tensor) else b).device
    a, b = (x if isinstance(x, torch.Tensor) else torch.tensor(x, device=device,
            dtype=torch.float64 if isinstance(x, float) else torch.int64) for x in (a, b))
    if a.is_floating_point() or b.is_floating_point():
        return torch.div(a, b, rounding_mode="floor") if op == "//" else _float_remainder(a, b)
    zero = b == 0
    safe = torch.where(zero, torch.ones_like(b), b)
    if op == "//":
        return torch.where(zero, 0, torch.div(a, safe, rounding_mode="floor"))
    return torch.where(zero, a, torch.remainder(a, safe))


def _float_remainder(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.remainder's meaning, `fmod` moved into the divisor's sign (C's `tc_mod`), from an exact
    `fmod` (`_fmod`): torch's own gave NaN or the exact value for one pair by where it sat in the tensor."""
    dtype = torch.result_type(a, b)
    a, b = a.to(dtype), b.to(dtype)
    r = _fmod(a, b)
    return torch.where((r != 0) & ((b < 0) != (r < 0)), r + b, r)


def _fmod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`fmod`, exact everywhere. torch's vectorized loop gives NaN where the quotient overflows
    (1e308 % 0.5 in float64, 3e38 % 1e-38 in float32), its scalar tail the exact value (the differential
    fuzz, seed 2167296241: a strided and a contiguous batch disagreed). There the pair is taken to float64
    (exact for every narrower float; a float32 quotient is under 2**280 there) and x first reduced modulo
    y * 2**k, which keeps its residue modulo y, with k such that each quotient stays under 2**901."""
    r = torch.fmod(a, b)
    over = torch.isnan(r) & torch.isfinite(a) & torch.isfinite(b) & (b != 0)
    if not bool(over.any()):
        return r
    # whole tensors through torch.where, no boolean indexing: the same ops on every device
    x, y = torch.broadcast_tensors(a.to(torch.float64), b.to(torch.float64))
    x, y = torch.where(over, x, 0.0), torch.where(over, y, 1.0)
    for _ in range(2):  # (exponents differ by at most 1024 + 1074 bits; each pass takes 900 off)
        k = (torch.frexp(x).exponent - torch.frexp(y).exponent - 900).clamp(min=0)
        big = y
        for part in (k // 3, k // 3, k - 2 * (k // 3)):  # (torch.ldexp makes 2**k, infinite past 2**1023)
            big = torch.ldexp(big, part)
        x = torch.fmod(x, big)
    return torch.where(over, torch.fmod(x, y).to(r.dtype), r)


def _align(t: torch.Tensor, own: tuple[str, ...], axes: tuple[str, ...], sizes: Mapping[str, int] | None) -> torch.Tensor:
    """Permute `t` (over `own`) into the order of `axes`, inserting size-1 axes; expand if sizes given."""
    if own == axes:
        return t  # already laid out (the common case): no view to build
    if own != tuple(a for a in axes if a in own):
        t = t.permute([own.index(a) for a in axes if a in own])
    shape = []
    it = iter(t.shape)
    for a in axes:
        shape.append(next(it) if a in own else 1)
    t = t.reshape(shape)
    if sizes is not None:
        t = t.expand([sizes[a] for a in axes])
    return t


def locate(bad: torch.Tensor, axes: tuple[str, ...], batch_dim: str,
           sizes: Mapping[str, int] | None = None) -> tuple[int, Sequence[int], tuple[int, ...]]:
    """Count the True entries, list the batch positions holding one, and find the first (row-major).

    `bad` may keep size 1 along an axis whose full size (`sizes`) is larger, where the values do
    not vary (an expanded view): each entry then counts for the whole axis, the first index is
    still the row-major first (position 0 along that axis), and along the batch axis every
    sample holds it (a `SampleRange`). Without `sizes`, `bad` is full size.
    """
    count = int(bad.sum())
    if count == 0:
        return 0, (), ()
    sizes = sizes or dict(zip(axes, bad.shape, strict=True))
    count *= math.prod(sizes[a] for a, n in zip(axes, bad.shape, strict=True) if n == 1)
    flat = bad.reshape(-1)
    first = int(torch.argmax(flat.to(torch.uint8)))
    index = unravel(first, bad.shape)
    samples: Sequence[int] = ()
    if batch_dim in axes:
        b = axes.index(batch_dim)
        if bad.shape[b] == 1:
            samples = SampleRange(sizes[batch_dim])  # every sample, listed in constant space
        else:
            per_sample = bad.transpose(0, b).reshape(bad.shape[b], -1).any(dim=1)
            samples = tuple(per_sample.nonzero().flatten().tolist())
    return count, samples, index


def locate_pieces(bad: torch.Tensor, axes: tuple[str, ...], batch_dim: str, sizes: Mapping[str, int], dim: str,
                  starts: torch.Tensor) -> tuple[int, Sequence[int], tuple[int, ...], tuple[int, ...]]:
    """`locate` for a mask whose entries along `dim` stand for pieces beginning at `starts` (the last
    one ending at the dim's size): each entry counts for its piece's length, and the first offending
    index is its piece's first position (the pieces are in order). Also returns that index in `bad`."""
    k = axes.index(dim) if dim in axes else None
    if k is None or bad.shape[k] == 1:  # (constant along dim: each entry stands for the whole dim)
        count, samples, index = locate(bad, axes, batch_dim, sizes)
        return count, samples, index, index
    n = sizes[dim]
    lengths = torch.diff(starts, append=torch.tensor([n], device=starts.device)).tolist()
    per_piece = bad.movedim(k, 0).reshape(bad.shape[k], -1).sum(dim=1).tolist()
    count = sum(c * m for c, m in zip(per_piece, lengths, strict=True))
    if count == 0:
        return 0, (), (), ()
    count *= math.prod(sizes[a] for a, m in zip(axes, bad.shape, strict=True) if m == 1)
    first = int(torch.argmax(bad.reshape(-1).to(torch.uint8)))
    local = unravel(first, bad.shape)
    index = local[:k] + (int(starts[local[k]]),) + local[k + 1:]
    samples: Sequence[int] = ()
    if batch_dim == dim:
        firsts = [*starts.tolist(), n]
        runs: list[tuple[int, int]] = []  # the bad pieces, adjacent ones joined
        for i, c in enumerate(per_piece):
            if c and runs and runs[-1][1] == firsts[i]:
                runs[-1] = (runs[-1][0], firsts[i + 1])
            elif c:
                runs.append((firsts[i], firsts[i + 1]))
        total = sum(stop - start for start, stop in runs)
        samples = (SampleRange(n) if runs == [(0, n)] else SampleRuns(runs) if total > 2**16
                   else tuple(i for start, stop in runs for i in range(start, stop)))
    elif batch_dim in axes:
        samples = locate(bad, axes, batch_dim, sizes)[1]
    return count, samples, index, local


def make_violation(check: DataCheck, ctx: Context, count: int, samples: Sequence[int], index: tuple[int, ...]) -> Violation:
    """The violation for a failing check, with the value at its first offending index."""
    if isinstance(check, RuleCheck):
        value = _python(_at(ctx.values(check.subject, check.axes), index))
    else:
        stored = _at(ctx.stored(check.field), index)
        value = _python(stored.to(compute_dtype(stored.dtype)))
    return violation(check, ctx.bound, count, samples, index, value)


def _at(t: torch.Tensor, index: tuple[int, ...]) -> torch.Tensor:
    """`t[index]`, where an axis of size 1 stands for the whole axis (an expanded view, or a broadcast)."""
    return t[tuple(0 if n == 1 else i for i, n in zip(index, t.shape, strict=True))]


def _python(value: Any) -> Any:
    return value.item() if isinstance(value, torch.Tensor) else value


def refuse_capture() -> None:
    """Raise a clear error inside CUDA graph capture (for a check of CUDA tensors, on any backend).

    A check reads its verdict on the host after the kernel: a graph replay would run the kernel
    but never that read, and the capture itself fails on the first sync or allocation.
    """
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            "tritoncheck cannot check a batch inside CUDA graph capture: the verdict is read on the host, which a "
            "replay of the graph would skip. Validate the batch before the captured region (before torch.cuda.graph "
            "or make_graphed_callables); under torch.compile, tc.validate is a custom op marked cudagraph_unsafe, which "
            "mode='reduce-overhead' keeps out of its CUDA graphs.")
